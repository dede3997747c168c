"""The gigpo-gym command: list, play, serve, and what its help says."""

from __future__ import annotations

import argparse
import configparser
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
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
    """Every command and sub-command has a line in its parent's listing and a description of its own, and every
    option with a default says what it is."""
    from gigpo_gym.cli import build_parser

    with pytest.raises(SystemExit):
        main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {"list", "play", "serve", "alfworld", "train", "prompt", "leaderboard"} <= set(commands.choices)
    for choice in commands._choices_actions:  # each command, then its line of help
        assert f"{choice.dest} {' '.join(choice.help.split()[:4])}" in listing, choice.dest
    for path, parser in _parsers(build_parser()):
        assert parser.description, f"{path} --help has no description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions if choice.help}
                assert set(action.choices) <= helped, f"{path}: {sorted(set(action.choices) - helped)} have no help line"
            elif action.option_strings and action.default not in (None, False, argparse.SUPPRESS, []):
                assert "default" in action.help.lower(), f"{path} {action.option_strings[0]}: the help omits the default"


@pytest.mark.parametrize("argv", [
    ["prompt", "--config", "demo", "--env", "3"],  # argparse alone reads it as --env-seed 3
    ["play", "gigpo_gym/ALFWorld-v0", "--see", "1"],  # ... as --seed 1
    ["leaderboard", "run", "--polic", "random"],  # a sub-command's sub-command
])
def test_a_shortened_option_is_refused_not_guessed(argv, capsys):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert f"unrecognized arguments: {argv[-2]} {argv[-1]}" in capsys.readouterr().err


def test_the_launchers_command_refuses_a_shortened_option_too(capsys):
    """``python -m gigpo_gym.algos.cli train`` (what accelerate and DeepSpeed start in each process) parses alone."""
    from gigpo_gym.algos.cli import main as launched_main

    with pytest.raises(SystemExit):
        launched_main(["train", "--conf", "demo"])
    assert "unrecognized arguments: --conf demo" in capsys.readouterr().err


def _parsers(parser: argparse.ArgumentParser, path: str = "gigpo-gym"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_command_and_option_has_plain_help():
    """argparse prints a description as written: no reStructuredText markup, no option without a word of help."""
    from gigpo_gym.cli import build_parser

    for path, parser in _parsers(build_parser()):
        assert "``" not in parser.format_help(), f"{path} --help shows RST markup"
        bare = [a.option_strings[0] for a in parser._actions if a.option_strings and a.help is None]
        assert bare == [], f"{path}: {bare} have no help"


def test_the_readme_names_every_extra():
    root = Path(__file__).resolve().parents[1]
    setup = configparser.ConfigParser()
    setup.read(root / "setup.cfg")
    readme = (root / "README.md").read_text()
    paragraph = readme[readme.index("Extras: "):].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`", paragraph))
    assert set(setup["options.extras_require"]) <= named, sorted(set(setup["options.extras_require"]) - named)


def test_each_integration_checks_the_range_its_extra_declares():
    from gigpo_gym.integrations import SUPPORTED

    setup = configparser.ConfigParser()
    setup.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    for distribution, (extra, low, high) in SUPPORTED.items():
        declared = setup["options.extras_require"][extra].split()
        assert f"{distribution}>={low},<{high}" in declared, (distribution, extra, declared)


def _first_url(stream) -> str:
    """The first http://127.0.0.1:PORT/ a server prints (its "serving on" line)."""
    for line in stream:
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        if found:
            return found.group(0)
    raise AssertionError("the server ended without saying where it serves")


def _request(server: str, url: str) -> httpx.Response:
    """The server's main request, retried while uvicorn is still starting (the line comes first)."""
    for _ in range(100):
        try:
            if server == "retriever":
                return httpx.post(url + "retrieve", json={"queries": ["poet"], "topk": 1}, timeout=10)
            return httpx.get(url, timeout=10)
        except httpx.ConnectError:
            time.sleep(0.1)
    raise AssertionError(f"nothing answers at {url}")


@pytest.mark.parametrize("server", ["retriever", "webshop"])
def test_serve_on_any_free_port_says_where_and_answers_there(server):
    """``--port 0`` binds a free port; the line the user reads names the port that answers."""
    command = [sys.executable, "-m", "gigpo_gym.cli", "serve", server, "--port", "0"]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True) as proc:
        try:
            url = _first_url(proc.stderr)
            assert not url.endswith(":0/")
            reply = _request(server, url)
            assert reply.status_code == 200, reply.text
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(20)
