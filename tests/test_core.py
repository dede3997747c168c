"""The env contract, the string space and anchor digests."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Literal

import gymnasium as gym
import pytest
from fake_envs import COUNTER, CounterEnv

from gigpo_gym.core import INFO_KEYS, String, canonical_json, digest, typed
from gigpo_gym.registration import ENV_SPECS


def test_string_space_admits_any_text_up_to_its_bound():
    space = String(21)
    assert space.contains("go to cabinet 1, now!")  # 21 characters, punctuation and spaces
    assert not space.contains("go to cabinet 1, now!!")
    assert space.contains("café — ünïcode ✓")
    assert not space.contains(b"bytes") and not space.contains(None)
    assert all(space.contains(space.sample()) for _ in range(50))
    with pytest.raises(ValueError, match="max_length must be a positive int"):
        String(0)


def test_digest_is_canonical():
    assert digest({"a": 1, "b": [1, 2]}) == digest({"b": [1, 2], "a": 1})
    assert digest({"x", "y", "z"}) == digest({"z", "y", "x"})
    assert digest([1, 2]) != digest([2, 1])
    assert digest("1") != digest(1)
    assert len(digest("state")) == 16 and int(digest("state"), 16) >= 0
    assert canonical_json({"b": (1, 2), "a": {"y", "x"}}) == '{"a":["x","y"],"b":[1,2]}'
    with pytest.raises(TypeError, match="cannot build an anchor from a object"):
        digest(object())


def test_digest_is_the_same_in_any_process():
    code = "from gigpo_gym.core import digest; print(digest({'room': 'kitchen', 'held': ['mug 1'], 'ids': {3, 1, 2}}))"
    outputs = set()
    for hashseed in ("0", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        outputs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert len(outputs) == 1
    assert outputs.pop().strip() == digest({"ids": [1, 2, 3], "held": ["mug 1"], "room": "kitchen"})


def test_text_env_checks_caller_input():
    env = gym.make(COUNTER)
    with pytest.raises(RuntimeError, match="call reset"):
        CounterEnv().step("inc")
    obs, info = env.reset(seed=4)
    assert set(INFO_KEYS) <= set(info)
    with pytest.raises(TypeError, match="action must be a str, got int"):
        env.step(3)
    with pytest.raises(ValueError, match="max_action_length=64"):
        env.step("x" * 65)
    obs, reward, terminated, truncated, info = env.step("")  # empty: invalid, not an error
    assert (obs, info["action_valid"], terminated) == ("Nothing happens.", False, False)
    obs, *_ = env.step("inc")
    assert obs == "value 2"


def test_lone_surrogates_reach_the_env_as_replacement_characters():
    class Echo(CounterEnv):
        def _step(self, action):
            return action, 0.0, False, self._info(action_valid=False)

    env = Echo()
    env.reset(seed=0)
    obs, *_, info = env.step("in\udc00c \ud83d\ude00 \U0001f600")
    assert obs == "in\ufffdc \ufffd\ufffd \U0001f600" and obs.encode("utf-8") and info["action_valid"] is False


@pytest.mark.parametrize("env_id", [
    pytest.param(s.id, marks=[pytest.mark.slow, pytest.mark.alfworld_engine]) if s.extra == "alfworld" else s.id
    for s in ENV_SPECS if s.available and s.extra != "browser"  # the browser env: test_webshop_browser.py
])  # fmt: skip
def test_a_refused_seed_leaves_the_env_usable(env_id):
    env = gym.make(env_id)
    with pytest.raises(gym.error.Error, match="Seed must be greater or equal to zero"):
        env.reset(seed=-1)
    obs, info = env.reset(seed=0)
    action = info["admissible_actions"][0] if info["admissible_actions"] else "look"
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and set(INFO_KEYS) <= set(info)
    assert env.reset(seed=2**64 + 3)[1]["task_id"]  # seeds past 64 bits are fine too
    env.close()


def test_text_env_refuses_steps_after_the_episode_ends():
    env = CounterEnv()
    env.reset(seed=0)
    env.step("stop")
    with pytest.raises(RuntimeError, match="episode has ended"):
        env.step("inc")


def test_bad_render_mode_names_the_accepted_ones():
    with pytest.raises(ValueError, match=r"render_mode must be one of \['ansi'\]"):
        CounterEnv(render_mode="human")
    env = CounterEnv(render_mode="ansi")
    obs, _ = env.reset(seed=1)
    assert env.render() == obs


def test_unknown_env_id_suggests_the_closest(capsys):
    from gigpo_gym.registration import env_spec

    with pytest.raises(gym.error.UnregisteredEnv, match="Did you mean 'gigpo_gym/SearchQA-v0'"):
        env_spec("gigpo_gym/SearchQa-v0")


def test_servers_warn_before_binding_beyond_loopback(capsys):
    from gigpo_gym.core.net import warn_if_public

    warn_if_public("127.0.0.1", "shop")
    assert capsys.readouterr().err == ""
    warn_if_public("0.0.0.0", "shop")
    assert "binding 0.0.0.0 exposes the shop beyond this machine" in capsys.readouterr().err
    warn_if_public("example.internal", "retriever")
    assert "use 127.0.0.1 to keep the retriever private" in capsys.readouterr().err


def test_atomic_writes_keep_the_old_file_on_failure_and_use_normal_permissions(tmp_path):
    from gigpo_gym.core.data import replacing, write_atomically

    target = tmp_path / "result.json"
    write_atomically(target, "old")
    umask = os.umask(0o022)
    try:
        write_atomically(target, "new ✓")
    finally:
        os.umask(umask)
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert target.stat().st_mode & 0o777 == 0o644  # readable by others, like any written file
    with pytest.raises(RuntimeError):
        with replacing(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer died")
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary file left


@dataclasses.dataclass
class _Inner:
    mode: Literal["a", "b"] = "a"
    sizes: list[int] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        typed.check_fields(self)
        if len(self.sizes) > 2:
            raise ValueError(f"sizes must hold at most 2, got {len(self.sizes)}")


@dataclasses.dataclass
class _Outer:
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    rate: float = 1.0

    def __post_init__(self):
        typed.check_fields(self)


def test_one_type_checker_for_every_dataclass():
    """``core.typed``: its examples run, and a nested mapping's error names the whole key path."""
    import doctest

    result = doctest.testmod(typed)
    assert result.attempted > 0 and result.failed == 0
    assert typed.from_mapping(_Outer, {"inner": {"sizes": [1]}, "rate": 2}) == _Outer(_Inner("a", [1]), 2.0)
    for data, message in [({"inner": {"sizes": [1, "x"]}}, r"inner\.sizes\[1\] must be an integer, got 'x'"),
                          ({"inner": {"sizes": [1, 2, 3]}}, r"inner\.sizes must hold at most 2, got 3"),
                          ({"inner": {"mod": "a"}}, r"unknown key 'inner\.mod' \(did you mean 'inner\.mode'\?\)"),
                          ({"rate": float("nan")}, r"rate must be finite, got nan"),
                          ({"rate": True}, r"rate must be a number, got True")]:
        with pytest.raises(typed.FieldError, match=message):
            typed.from_mapping(_Outer, data)
    with pytest.raises(ValueError, match=r"mode must be one of \['a', 'b'\], got 3"):  # made in code: it checks itself
        _Inner(mode=3)
