"""Mistakes a new user makes get one clear line: what was wrong, what is accepted, the fix."""

from __future__ import annotations

import builtins
import re
import socket
import sys

import gymnasium as gym
import pytest

import gigpo_gym  # noqa: F401
from gigpo_gym.cli import main
from gigpo_gym.registration import ENV_SPECS


@pytest.mark.parametrize("env_id", [s.id for s in ENV_SPECS if s.available])
def test_a_misspelled_make_kwarg_lists_the_accepted_ones_and_the_closest(env_id):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'splitt' \(did you mean 'split'\?\); "
                                        r"accepted: split, data_dir, .*render_mode"):
        gym.make(env_id, splitt="test")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv", [["--model", "/no/such/path"], ["--set", "model.name=/no/such/path"]])
def test_a_missing_model_path_is_one_line(capsys, argv):
    code, _, err = _run(capsys, "train", *argv)
    assert code == 2
    assert err == ("error: model.name '/no/such/path' is not a folder and not a hub id cached offline (nothing "
                   "downloads at run time); use 'tiny', 'smollm2', a model folder or a cached hub id (org/name)\n")


def test_an_uncached_hub_id_names_the_download_command(capsys):
    code, _, err = _run(capsys, "train", "--model", "nobody-here/no-such-model")
    assert code == 2 and err.endswith("fetch it first with: huggingface-cli download nobody-here/no-such-model\n")


def test_configs_are_found_by_name_and_a_wrong_name_gets_the_closest(capsys, tmp_path, monkeypatch):
    from gigpo_gym.algos.cli import CONFIGS_DIR, resolve_config

    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    assert resolve_config("demo") == resolve_config("configs/demo.yaml") == CONFIGS_DIR / "demo.yaml"
    (tmp_path / "mine.yaml").write_text("iterations: 1\n")
    assert resolve_config("mine.yaml") == tmp_path.joinpath("mine.yaml").relative_to(tmp_path)
    code, _, err = _run(capsys, "train", "--config", "demoo")
    assert code == 2
    shipped = ", ".join(sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml")))
    assert "alfworld_paper, " in shipped
    assert err == f"error: --config 'demoo' is neither a file nor a shipped config (did you mean 'demo'?); shipped: {shipped}\n"


def test_a_command_without_its_extra_names_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # as on an install without [train]
    code, _, err = _run(capsys, "train", "--config", "demo")
    assert code == 2
    assert err == ('error: gigpo-gym train needs the optional dependencies of the [train] extra: '
                   'pip install ".[train]" in your gigpo-gym clone (pip install "gigpo-gym[train]" once it is on PyPI) '
                   '(yaml is not installed)\n')


def test_every_missing_extra_names_the_command_that_works_from_a_clone():
    """The package is on no index yet: the install hint a user copies must work from a clone."""
    from gigpo_gym.core.extras import MissingExtra, install_command, missing_extra_error

    error = missing_extra_error("dense", "the dense retriever")
    assert isinstance(error, MissingExtra) and isinstance(error, ImportError)
    assert str(error) == ('the dense retriever needs the optional dependencies of the [dense] extra: '
                          f'{install_command("dense")}')
    assert install_command("dense").startswith('pip install ".[dense]" in your gigpo-gym clone')
    import doctest

    from gigpo_gym.core import extras

    result = doctest.testmod(extras)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("answer", ["q", "quit", "exit", EOFError, KeyboardInterrupt])
def test_play_ends_cleanly_on_q_quit_eof_and_ctrl_c(capsys, monkeypatch, answer):
    def fake_input(prompt=""):
        if isinstance(answer, str):
            return answer
        raise answer

    monkeypatch.setattr(builtins, "input", fake_input)
    code, out, _ = _run(capsys, "play", "gigpo_gym/SearchQA-v0")
    assert code == 0
    assert out.rstrip().endswith("session ended after 0 steps, return 0")  # nothing was sent as an action


def test_play_with_a_bad_kwarg_is_one_line(capsys):
    code, _, err = _run(capsys, "play", "gigpo_gym/SearchQA-v0", "--kwarg", "topk=0")
    assert code == 2 and err.startswith("error: topk must be an int in [1, 100], got 0") and err.count("\n") == 1


@pytest.mark.parametrize("command", ["demos", "export"])
@pytest.mark.parametrize("argv,message", [
    (["--split", "trian"], "error: unknown split 'trian'; expected one of ['train', 'valid_seen', 'valid_unseen', "
                           "'eval_in_distribution', 'eval_out_of_distribution']. Did you mean 'train'?"),
    (["--task-types", "pick", "hat"], "error: unknown task type 'hat'; expected some of ['pick', 'look', 'clean', "
                                      "'heat', 'cool', 'pick2']. Did you mean 'heat'?"),
])
def test_alfworld_tools_with_a_bad_split_or_task_type_are_one_line(capsys, tmp_path, command, argv, message):
    out = tmp_path / "out"
    code, _, err = _run(capsys, "alfworld", command, *argv, "--out", str(out))
    assert (code, err) == (2, message + "\n")
    assert not out.exists()


def test_alfworld_demos_with_a_missing_data_dir_is_one_line(capsys, tmp_path):
    missing = tmp_path / "nowhere"
    code, _, err = _run(capsys, "alfworld", "demos", "--data-dir", str(missing), "--out", str(tmp_path / "d.jsonl"))
    assert (code, err) == (2, f"error: data_dir names '{missing}', which is not a directory\n")


@pytest.mark.parametrize("server", ["retriever", "webshop"])
def test_serve_on_a_port_in_use_is_one_line_naming_port(capsys, server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = _run(capsys, "serve", server, "--port", str(port))
    assert (code, out) == (2, "")
    assert err == f"error: port {port} on 127.0.0.1 is already in use: choose another with --port\n"


@pytest.mark.parametrize("setting, message", [
    ("env.kwargs={split: tets}", r"env.kwargs \(the train envs of gigpo_gym/ALFWorld-v0\): unknown split 'tets'; "
                                 r"expected one of \['train', 'valid_seen', 'valid_unseen'"),
    ("env.kwargs={task_types: [pik]}", r"env.kwargs \(the train envs of gigpo_gym/ALFWorld-v0\): unknown task type "
                                       r"'pik'; expected some of .* Did you mean 'pick'\?"),
    ("env.eval_kwargs={data_dir: /no/such/folder}", r"env.eval_kwargs \(the eval envs of gigpo_gym/ALFWorld-v0\): "
                                                     r"data_dir names '/no/such/folder', which is not a directory"),
    ("env.id=gigpo_gym/ALFWorlds-v0", r"env.id: .*Did you mean: `ALFWorld`\?"),
])
def test_a_bad_env_setting_is_one_line_before_any_run_folder(capsys, tmp_path, setting, message):
    run = tmp_path / "run"
    code, out, err = _run(capsys, "train", "--set", setting, "--run-dir", str(run))
    assert code == 2 and not run.exists() and out == ""
    assert len(err.strip().splitlines()) == 1 and re.match("error: " + message, err), err


def test_load_config_takes_the_names_the_command_line_takes():
    from gigpo_gym.algos.training.config import ConfigError, load_config, resolve_config

    assert load_config("demo") == load_config("configs/demo.yaml") == load_config(resolve_config("demo.yaml"))
    with pytest.raises(ConfigError, match=r"config 'dem' is neither a file nor a shipped config \(did you mean "
                                          r"'demo'\?\); shipped: alfworld_paper, "):
        load_config("dem")
