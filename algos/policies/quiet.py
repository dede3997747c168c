"""Third-party output that says nothing about a run, silenced where the package calls those libraries.

- DeepSpeed, imported by transformers when a model is saved, warns on every machine
  without a GPU that it "set the accelerator to CPU": on such a machine the accelerator
  is set to ``cpu`` (``DS_ACCELERATOR``) before DeepSpeed looks, which it then takes
  without a word.  A machine with a GPU, or a ``DS_ACCELERATOR`` already set, is left alone.
- transformers draws a progress bar for every model it writes or loads ("Writing model
  shards", "Loading weights"); a run prints its own lines.
"""

from __future__ import annotations

import os


def quiet_libraries() -> None:
    """Apply the above (idempotent; call it before transformers saves or loads a model)."""
    if "DS_ACCELERATOR" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
