"""Grouped envs survive a dead worker: SIGKILL mid-rollout, for the async and the Ray backends."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from fake_envs import COUNTER

import gigpo_gym


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # wait until the process is gone (a zombie at most)
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1].startswith(("Z", "X")):
                    return
        except (FileNotFoundError, ProcessLookupError):  # reaped between open() and read()
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} survived SIGKILL")


def _kill_mid_rollout(envs, victim: int, cause: str) -> None:
    """Step, kill chunk ``victim``'s worker, then check that only its episodes end, as worker failures."""
    held = list(envs._ranges[victim])
    others = [i for i in range(envs.num_envs) if i not in held]
    obs, info = envs.reset(seed=4)
    obs, *_ = envs.step(["inc"] * envs.num_envs)
    pid = envs._chunks[victim].pid
    _kill(pid)
    with pytest.warns(RuntimeWarning, match=rf"{pid} \(envs {held[0]}\.\.{held[-1]}\) {cause}"):
        after, reward, terminated, truncated, info = envs.step(["inc"] * envs.num_envs)
    assert truncated[held].all() and not terminated[held].any() and reward[held].tolist() == [0.0] * len(held)
    assert [after[i] for i in held] == [obs[i] for i in held]  # their last observation
    assert info["worker_failed"][held].all() and not info["_worker_failed"][others].any()
    assert not (terminated | truncated)[others].any()  # the other episodes go on
    assert [after[i] for i in others] == [f"value {int(obs[i].split()[1]) + 1}" for i in others]
    assert envs.active.tolist() == [i in others for i in range(envs.num_envs)]
    obs, reward, terminated, *_ = envs.step(["stop"] * envs.num_envs)
    assert terminated[others].all() and not envs.active.any()
    assert envs._chunks[victim].pid != pid and envs.worker_restarts == 1
    obs, info = envs.reset(seed=4)  # the restarted worker plays the next round like the others
    assert envs.active.all() and envs.call("spec")[held[0]].id == "tests/Counter-v0"


def test_async_worker_killed_mid_rollout_ends_only_its_episodes():
    envs = gigpo_gym.make_grouped(COUNTER, num_groups=2, group_size=3, seed=1, backend="async", num_workers=2)
    try:
        _kill_mid_rollout(envs, victim=0, cause="was killed by signal SIGKILL")
    finally:
        envs.close()


def test_async_worker_killed_between_steps_is_seen_by_call_and_reset():
    envs = gigpo_gym.make_grouped(COUNTER, num_groups=2, group_size=2, seed=1, backend="async", num_workers=2)
    try:
        envs.reset()
        _kill(envs._chunks[1].pid)
        with pytest.warns(RuntimeWarning, match="envs 2..3"):
            assert [s.id for s in envs.call("spec")] == ["tests/Counter-v0"] * 4  # asked again after the restart
        obs, reward, terminated, truncated, info = envs.step(["inc"] * 4)
        assert truncated.tolist() == [False, False, True, True] and info["worker_failed"][2:].all()
        _kill(envs._chunks[0].pid)
        with pytest.warns(RuntimeWarning, match="envs 0..1"):
            obs, info = envs.reset(seed=9)  # the replacement answers this reset
        assert envs.active.all() and "worker_failed" not in info
        assert obs == gigpo_gym.make_grouped(COUNTER, num_groups=2, group_size=2).reset(seed=9)[0]
    finally:
        envs.close()


def test_autoreset_goes_on_after_a_worker_dies():
    envs = gigpo_gym.make_grouped(COUNTER, num_groups=2, group_size=2, seed=3, backend="async", num_workers=2,
                                  autoreset=True)  # fmt: skip
    try:
        envs.reset()
        _kill(envs._chunks[0].pid)
        with pytest.warns(RuntimeWarning):
            obs, reward, terminated, truncated, info = envs.step(["inc"] * 4)
        assert truncated.tolist() == [True, True, False, False]
        obs, reward, terminated, truncated, info = envs.step(["inc"] * 4)  # envs 0, 1 start their next episode
        assert not (terminated | truncated).any() and "worker_failed" not in info
        assert obs[0] == obs[1] == f"value {gigpo_gym.core.derive_seed(3, 0, 1) % 3}"
    finally:
        envs.close()


def test_too_many_restarts_raise_naming_the_cause():
    envs = gigpo_gym.make_grouped(COUNTER, num_groups=2, group_size=1, backend="async", num_workers=2,
                                  max_worker_restarts=1)  # fmt: skip
    envs.reset()
    _kill(envs._chunks[0].pid)
    with pytest.warns(RuntimeWarning):
        envs.step(["inc", "inc"])
    envs.reset()
    pid = envs._chunks[0].pid
    _kill(pid)
    with pytest.raises(RuntimeError, match=rf"worker process {pid} \(envs 0..0\) was killed by signal SIGKILL; "
                                           r"giving up after 1 worker restarts \(max_worker_restarts=1\)"):
        envs.step(["inc", "inc"])
    assert envs.closed and all(not c.process.is_alive() for c in envs._chunks)


def test_a_hung_worker_is_killed_after_worker_timeout():
    envs = gigpo_gym.make_grouped(COUNTER, num_groups=2, group_size=1, backend="async", num_workers=2,
                                  worker_timeout=5.0)  # fmt: skip  (room for a busy machine to start the workers)
    try:
        envs.reset()
        os.kill(envs._chunks[1].pid, signal.SIGSTOP)  # alive, but answers nothing
        start = time.monotonic()
        with pytest.warns(RuntimeWarning, match="did not answer within worker_timeout=5.0 s"):
            obs, reward, terminated, truncated, info = envs.step(["inc", "inc"])
        assert time.monotonic() - start < 15 and truncated.tolist() == [False, True]
    finally:
        envs.close()


def test_a_script_without_the_main_guard_is_told_how_to_fix_it(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "rollout.py"
    script.write_text("import gigpo_gym\n"
                      "envs = gigpo_gym.make_grouped('gigpo_gym/ALFWorld-v0', num_groups=2, group_size=1, "
                      "backend='async', num_workers=2)\n")  # fmt: skip
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode != 0 and 'needs `if __name__ == "__main__":`' in run.stderr, run.stderr[-2000:]


@pytest.mark.slow
def test_ray_actor_killed_mid_rollout_ends_only_its_episodes():
    ray = pytest.importorskip("ray", reason='the ray backend needs pip install ".[ray]"')
    tests_dir = str(Path(__file__).resolve().parent)  # actors import fake_envs from here
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": tests_dir}})  # fmt: skip
    try:
        envs = gigpo_gym.make_grouped(COUNTER, num_groups=2, group_size=2, seed=1, backend="ray", num_workers=2,
                                      worker_timeout=60)  # fmt: skip
        try:
            _kill_mid_rollout(envs, victim=1, cause="died")
        finally:
            envs.close()
    finally:
        ray.shutdown()
