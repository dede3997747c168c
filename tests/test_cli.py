"""The gigpo-gym command: list and play."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gigpo_gym.cli import main


def test_list_shows_every_env(capsys):
    assert main(["list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"gigpo_gym/SearchQA-v0", "gigpo_gym/ALFWorld-v0", "gigpo_gym/WebShop-v0"} <= {r["id"] for r in rows}
    assert all(r["data"] == "embedded default" for r in rows if r["id"] == "gigpo_gym/SearchQA-v0")
    assert main(["list"]) == 0
    assert "MAX_STEPS" in capsys.readouterr().out


def test_play_by_numbers_in_a_real_terminal_session():
    """The console script, fed by a person's keystrokes on stdin."""
    script = [sys.executable, "-m", "gigpo_gym.cli", "play", "gigpo_gym/ALFWorld-v0", "--seed", "2"]
    out = subprocess.run(script, input="1\nlook\nquit\n", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "  1. " in out.stdout and "anchor" in out.stdout
    assert out.stdout.count("reward 0") == 2


def test_play_rejects_unknown_ids_with_a_suggestion(capsys):
    assert main(["play", "gigpo_gym/Webshop-v0"]) == 2
    assert "Did you mean 'gigpo_gym/WebShop-v0'" in capsys.readouterr().err


def test_help_explains_each_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "list" in text and "play" in text
