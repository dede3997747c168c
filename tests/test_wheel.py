"""The wheel is complete: built from the source tree, installed non-editable into a fresh
venv without torch, it runs a third-party ``gym.make`` script, ``gigpo-gym list``, an
expert leaderboard run and ``render`` from a folder outside the source tree; with the
``[api]`` extra's closure added, a leaderboard run of a served model (against a small
OpenAI-compatible server on loopback).

The fresh venv gets no index access: its dependencies are exactly the closure of the
wheel's own ``Requires-Dist`` (no extras, then ``[api]``), linked from this
interpreter's site-packages into one folder on its path.  torch is not in either
closure, and the test checks it cannot be imported there, so every command that
succeeds ran without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from chat_server import MODEL, FakeChatServer
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

THIRD_PARTY = """
import sys
import gymnasium as gym
import gigpo_gym

for env_id in ("gigpo_gym/SearchQA-v0", "gigpo_gym/ALFWorld-v0", "gigpo_gym/WebShop-v0"):
    env = gym.make(env_id)
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.unwrapped.expert_action())
    assert isinstance(obs, str) and info["action_valid"], (env_id, obs)
    env.close()
try:
    gym.make("gigpo_gym/ALFWorld-TextWorld-v0")
except ImportError as e:
    assert 'pip install ".[alfworld]" in your gigpo-gym clone' in str(e), e
else:
    raise AssertionError("made without its extra")
assert "torch" not in sys.modules
print(gigpo_gym.__file__)
"""


def _dependency_closure(wheel: Path, extra: str = "") -> dict[str, metadata.Distribution]:
    """The installed distributions the wheel needs (with ``extra``'s), found by name."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [line.split(":", 1)[1].strip() for line in z.read(meta).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    todo = [r for r in map(Requirement, requires) if r.marker is None or r.marker.evaluate({"extra": extra})]
    found: dict[str, metadata.Distribution] = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name not in found:
            found[name] = metadata.distribution(req.name)
            deeper = map(Requirement, found[name].requires or [])
            todo += [r for r in deeper if r.marker is None or r.marker.evaluate({"extra": ""})]
    return found


def _link_distributions(dists: dict[str, metadata.Distribution], into: Path) -> None:
    """Symlink each distribution's top-level files and folders (and its dist-info) into ``into``."""
    into.mkdir(exist_ok=True)
    for dist in dists.values():
        site = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if (site / top).exists() and not (into / top).exists():
                (into / top).symlink_to(site / top)


def _run(cmd: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env=env, **kw)


@pytest.mark.slow
def test_the_wheel_installs_and_runs_without_torch_outside_the_source_tree(tmp_path):
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                  str(tmp_path / "dist"), str(src)], cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("gigpo_gym-*.whl"))
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for name in ("gigpo_gym/configs/demo.yaml", "gigpo_gym/benchmarks/specs/searchqa-test.json",
                 "gigpo_gym/benchmarks/leaderboard/result_schema.json", "gigpo_gym/benchmarks/leaderboard/paper_gigpo.json"):
        assert name in shipped, name

    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path).returncode == 0
    python, scripts = venv / "bin" / "python", venv / "bin"
    deps = tmp_path / "deps"
    _link_distributions(_dependency_closure(wheel), deps)
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        cwd=tmp_path).stdout.strip())
    (purelib / "deps.pth").write_text(f"{deps}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    installed = _run([*pip, "install", "--no-deps", "--no-index", "-q", str(wheel)], cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]
    check = _run([*pip, "check"], cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr  # the closure satisfies every requirement

    work = tmp_path / "elsewhere"
    work.mkdir()
    no_torch = _run([str(python), "-c", "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('yaml'))"],
                    cwd=work)
    assert no_torch.stdout.split() == ["None", "None"], no_torch.stdout + no_torch.stderr

    script = work / "third_party.py"
    script.write_text(THIRD_PARTY)
    made = _run([str(python), str(script)], cwd=work)
    assert made.returncode == 0, made.stderr[-3000:]
    assert made.stdout.strip().startswith(str(purelib))  # the installed copy, not the source tree

    listed = _run([str(scripts / "gigpo-gym"), "list", "--json"], cwd=work)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert {r["id"] for r in json.loads(listed.stdout)} >= {"gigpo_gym/SearchQA-v0", "gigpo_gym/WebShop-v0"}

    board = _run([str(scripts / "gigpo-gym"), "leaderboard", "--policy", "expert", "--envs", "searchqa-test",
                  "--episodes", "3", "--no-progress"], cwd=work)
    assert board.returncode == 0, board.stderr[-3000:]
    result = json.loads((work / "searchqa-test__expert__upper_bound.json").read_text())  # results go to the cwd
    assert result["metrics"]["success"]["mean"] == 1.0 and result["counts"]["episodes"] == 3
    rendered = _run([str(scripts / "gigpo-gym"), "leaderboard", "render"], cwd=work)
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    assert "reported by the paper" in (work / "LEADERBOARD.md").read_text()  # the paper rows ship too
    assert not list(Path(purelib, "gigpo_gym").rglob("*__*.json"))  # nothing written into the install

    train = _run([str(scripts / "gigpo-gym"), "train", "--config", "demo"], cwd=work)
    assert train.returncode == 2
    assert train.stderr == ('error: gigpo-gym train needs the optional dependencies of the [train] extra: '
                            'pip install ".[train]" in your gigpo-gym clone (pip install "gigpo-gym[train]" once it '
                            'is on PyPI) (torch is not installed)\n')

    # `pip install ".[api]"`: a served model on the leaderboard, still without torch
    _link_distributions(_dependency_closure(wheel, "api"), deps)
    assert _run([*pip, "check"], cwd=tmp_path).returncode == 0
    with FakeChatServer(lambda prompt: "<think>sure</think><answer>Zathrur</answer>") as server:
        served = _run([str(scripts / "gigpo-gym"), "leaderboard", "--policy", f"openai:{MODEL}", "--base-url",
                       server.url, "--prompt", "paper", "--envs", "searchqa-test", "--episodes", "2", "--no-progress"],
                      cwd=work)
    assert served.returncode == 0, served.stderr[-3000:]
    result = json.loads(next(work.glob("searchqa-test__fake_chat-1*.json")).read_text())
    assert result["policy"]["kind"] == "api" and result["usage"]["requests"] == 2
    probe = "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('openai') is not None)"
    no_torch = _run([str(python), "-c", probe], cwd=work)
    assert no_torch.stdout.split() == ["None", "True"], no_torch.stdout + no_torch.stderr
