"""What every command line of the package shares."""

from __future__ import annotations

import argparse


class ExactOptionsParser(argparse.ArgumentParser):
    """Takes options only as spelled. argparse's prefix matching would read ``gigpo-gym prompt --env 3`` as
    ``--env-seed 3`` and ``play --see 1`` as ``--seed 1`` without a word; a sub-command's parser is of this class too
    (``add_subparsers`` makes its parsers of the parent's class)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
