"""The code blocks of README.md and docs/ run as shown.

Conventions for every fenced block of README.md, CONTRIBUTING.md and docs/**/*.md:

- Every block names its language.  ``text``, ``mermaid``, ``ini``, ``yaml`` and
  ``json`` blocks are shown only (diagrams, file layouts, config snippets).
- ``python`` blocks run; ``pycon`` blocks (``>>>`` prompts) run and must print what
  they show (``...`` in the shown output matches anything).  The python and pycon
  blocks of one file run in order in one interpreter, as a reader works down the page.
- ``console`` blocks (``$ `` prompts) run each command with bash and must print what
  they show; ``bash`` blocks run as a script and must exit 0.
- A block whose first line is a comment starting with ``# illustrative`` (followed
  by why: a GPU, a hub download, minutes of training, a server that runs until
  stopped) is shown only.  The comment stays visible to readers.

Blocks run in a scratch folder, with the session's ``GIGPO_GYM_CACHE`` and a scratch
copy of ``benchmarks/`` (so leaderboard commands write nothing into the checkout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import RUN, blocks, matches

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
DOCS = sorted([p for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md") if p.is_file()] + list((ROOT / "docs").rglob("*.md")))
SHOWN = ("text", "mermaid", "ini", "yaml", "json")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A folder to run in and the environment: the venv's commands first on PATH."""
    work = tmp_path_factory.mktemp("docs")
    bench = work / "_benchmarks"
    for part in ("specs", "leaderboard"):
        shutil.copytree(ROOT / "benchmarks" / part, bench / part)
    (bench / "results").mkdir()
    env = {**os.environ, "GIGPO_GYM_BENCHMARKS": str(bench), "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return work, env


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_block_names_its_language(doc):
    unnamed = [b.where for b in blocks(doc) if b.lang not in (*RUN, *SHOWN)]
    assert not unnamed, f"blocks without a known language (one of {RUN + SHOWN}): {unnamed}"


@pytest.mark.slow
@pytest.mark.parametrize("doc", [d for d in DOCS if any(b.lang in ("python", "pycon") for b in blocks(d))], ids=_id)
def test_python_blocks_run_and_print_what_they_show(doc, scratch):
    work, env = scratch
    out = subprocess.run([sys.executable, str(HERE / "doc_blocks.py"), str(doc)], cwd=work, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    failures = json.loads(out.stdout.strip().splitlines()[-1])
    assert not failures, "\n\n".join(f"{f['where']}:\n{f['problem']}" for f in failures)


def _shell_blocks(doc: Path):
    return [b for b in blocks(doc) if b.lang in ("console", "bash") and not b.illustrative]


@pytest.mark.slow
@pytest.mark.parametrize("doc", [d for d in DOCS if _shell_blocks(d)], ids=_id)
def test_shell_blocks_run_and_print_what_they_show(doc, scratch):
    work, env = scratch
    for block in _shell_blocks(doc):
        if block.lang == "bash":
            out = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=work, env=env,
                                 capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, f"{block.where}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
            continue
        for command, want in _console_steps(block.text):
            out = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=600)
            got = out.stdout + out.stderr
            assert matches(want, got), f"{block.where}: $ {command}\nexpected:\n{want}\ngot:\n{got}"


def _console_steps(text: str) -> list[tuple[str, str]]:
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return [(cmd, "\n".join(out).strip("\n")) for cmd, out in steps]


def _commands(text: str):
    """Each simple command of a shell block as tokens, continuation lines joined and ``$ `` prompts dropped."""
    import re
    import shlex

    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = line.removeprefix("$ ").split(" #")[0]
        for part in re.split(r"&&|\|\||;|\|", "" if line.lstrip().startswith("#") else line):
            try:
                tokens = shlex.split(part)
            except ValueError:  # an output line of a console block
                continue
            while tokens and re.match(r"^[A-Z_]+=", tokens[0]):  # VAR=value before the command
                tokens = tokens[1:]
            if tokens:
                yield tokens


def _subcommand_parser(parser, tokens):
    """The parser of ``gigpo-gym``'s sub-command that ``tokens`` name (``leaderboard run`` -> its own)."""
    for token in tokens:
        choices = parser._subparsers._group_actions[0].choices if parser._subparsers else {}
        if token in choices:
            parser = choices[token]
    return parser


def _script_parser(script: Path):
    """The parser a benchmark script builds, caught as it starts parsing (nothing of the script runs after)."""
    import argparse
    import runpy

    class Caught(Exception):
        pass

    def catch(self, *args, **kwargs):
        raise Caught(self)

    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, sys.argv
    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = catch
    sys.argv = [str(script)]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except Caught as caught:
        return caught.args[0]
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, sys.argv = saved
    raise AssertionError(f"{script} parsed no command line")


def test_documented_commands_name_only_options_that_exist():
    """Every ``gigpo-gym`` and ``python benchmarks/*.py`` command of the docs, illustrative ones too (which no test
    runs), names each ``--option`` as its parser spells it: the commands take no shortened or stale option."""
    import re

    from gigpo_gym.cli import build_parser

    top, scripts, wrong, checked = build_parser(), {}, [], 0
    for doc in DOCS:
        for block in blocks(doc):
            if block.lang not in ("console", "bash"):
                continue
            for tokens in _commands(block.text):
                if tokens[0] == "gigpo-gym":
                    parser = _subcommand_parser(top, tokens[1:])
                elif re.search(r"python3?$", tokens[0]) and len(tokens) > 1 and re.match(r"benchmarks/\w+\.py$", tokens[1]):
                    if tokens[1] not in scripts:
                        scripts[tokens[1]] = _script_parser(ROOT / tokens[1])
                    parser = scripts[tokens[1]]
                else:
                    continue
                checked += 1
                wrong += [f"{block.where}: {' '.join(tokens[:2])} {t}" for t in tokens
                          if t.startswith("--") and t.split("=")[0] not in parser._option_string_actions]
    assert checked > 100, f"only {checked} commands found: has the docs' command syntax changed?"
    assert not wrong, "options the commands do not take as written:\n" + "\n".join(wrong)
