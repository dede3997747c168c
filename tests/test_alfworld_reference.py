"""Differential test: the native engine against the reference one, step by step.

``gigpo_gym/ALFWorld-v0`` (native) and ``gigpo_gym/ALFWorld-TextWorld-v0``
(TextWorld's ``PddlEnv`` + fast-downward + ALFWorld's demangler) play the same
tasks with the same commands: 60 generated games (10 of each task type, from the
three splits; ``GIGPO_ALFWORLD_REFERENCE_FULL=1`` plays 204, 34 of each, of which
the 60 are the first seeds of each split) and the playable fixture games.  Each episode starts with a walk of
random admissible commands, the native expert's commands and invalid or noisy
ones, then hands over to TextWorld's planner (``policy_commands``, fast-downward)
and plays its plan, which must win.  Every step compares the observation text, the
admissible list, reward, won/terminated, action_valid and the anchor (computed
from TextWorld's facts, so equal anchors mean equal states).  The agreement rates
are printed on the terminal.

Known, justified deviations of the engines: none.  (The test found one: ``use``
left the native engine's ``isOn`` flag set where TextWorld clears it; fixed in
``engine.py``.)  One deviation of the check itself: a planner call is bounded
(``PLANNER_BUDGET``) and the few tasks past it (pick-two tasks in big kitchens,
where fast-downward's optimal search takes minutes) are finished by the native
expert on both engines, still compared step by step and still won on TextWorld;
they are listed on the terminal.

Needs the ``[alfworld]`` extra; skipped, with the install command, without it.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from gigpo_gym.envs.alfworld.textworld_env import reference_engine

try:
    reference_engine()
except ImportError as e:
    pytest.skip(str(e), allow_module_level=True)

from gigpo_gym.envs.alfworld.catalog import TASK_TYPES  # noqa: E402
from gigpo_gym.envs.alfworld.env import ALFWorldEnv  # noqa: E402
from gigpo_gym.envs.alfworld.gamefile_writer import alfworld_logic_files  # noqa: E402
from gigpo_gym.envs.alfworld.pddl import grammar_goal_text  # noqa: E402
from gigpo_gym.envs.alfworld.textworld_env import ALFWorldTextWorldEnv  # noqa: E402

pytestmark = [pytest.mark.alfworld_engine, pytest.mark.slow]

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "alfworld"
#: Generated games per task type and split: 10 per type, 60 in all, a regression guard that
#: keeps ``make test`` short (about 2 minutes of CPU on each of 2 cores); the full set
#: (34 per type, 204) on demand, after any change to the native engine.
PER_TYPE = {"train": 6, "valid_seen": 2, "valid_unseen": 2}
if os.environ.get("GIGPO_ALFWORLD_REFERENCE_FULL", "") not in ("", "0"):
    PER_TYPE = {"train": 22, "valid_seen": 6, "valid_unseen": 6}
#: Fixture episodes per playable fixture game (different walks).
FIXTURE_EPISODES = 6
WALK = 6  # commands before the planner takes over
NOISE = ["", "Look", "  look  ", "go to nowhere 1", "take apple 1 from fridge 1", "open", "go to", "inventory please"]
FIELDS = ("obs", "admissible", "reward", "won", "terminated", "valid", "anchor")
COUNTS = ("episodes", "steps", "won", "walk_won", "planner_runs", "planner_won")
#: Seconds one planner call may take.  TextWorld's planner (fast-downward, a fixed
#: optimal search) solves most tasks in well under a second but can take minutes
#: on a pick-two task in a big kitchen; those are finished by the native expert and
#: listed.  Set GIGPO_ALFWORLD_PLANNER_BUDGET=0 for no bound (a full planner proof).
PLANNER_BUDGET = float(os.environ.get("GIGPO_ALFWORLD_PLANNER_BUDGET", "8"))


def plan_within(reference: ALFWorldTextWorldEnv, seconds: float) -> list[str] | None:
    """The planner's ``policy_commands`` from the current state, or None past ``seconds``.

    It runs in a forked copy of this process (fast-downward cannot be interrupted).
    """
    if seconds <= 0:
        return reference.expert_plan()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: plan, send, exit without running any cleanup
        try:
            os.close(read)
            os.write(write, json.dumps(reference.expert_plan()).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], seconds)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            return None
        chunks = []
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
        return json.loads(b"".join(chunks))
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def with_reference_logic(src: Path, dst: Path) -> Path:
    """Copy the fixture tree, giving each game ALFWorld's real domain and grammar.

    The fixture files carry shortened ones (the native engine reads only the
    problem and the goal sentence); TextWorld interprets them, so it needs the real.
    """
    domain, grammar = alfworld_logic_files()
    shutil.copytree(src, dst)
    for game in dst.rglob("game.tw-pddl"):
        data = json.loads(game.read_text())
        if "pddl_problem" in data and "grammar" in data:
            data["pddl_domain"] = domain
            data["grammar"] = grammar.replace("UNKNOWN GOAL", grammar_goal_text(data["grammar"]))
            game.write_text(json.dumps(data))
    return dst


def _command(rng: random.Random, native: ALFWorldEnv, admissible: list[str]) -> str:
    roll = rng.random()
    if roll < 0.2:
        return rng.choice(NOISE + [rng.choice(admissible).upper(), rng.choice(admissible) + " now"])
    if roll < 0.45:
        return native.expert_action()
    return rng.choice(admissible)


def play_pair(kwargs: dict, seeds: list[int], walk_seed: int) -> dict:
    """Play episodes on both envs in lock-step; count steps and differences."""
    native, reference = ALFWorldEnv(**kwargs), ALFWorldTextWorldEnv(**kwargs)
    rng = random.Random(walk_seed)
    stats = {key: 0 for key in COUNTS} | {"diffs": {f: 0 for f in FIELDS}, "examples": [], "task_types": {},
                                          "over_budget": []}

    def compare(where: str, a: tuple, b: tuple) -> None:
        stats["steps"] += 1
        for field, x, y in zip(FIELDS, a, b):
            if x != y:
                stats["diffs"][field] += 1
                if len(stats["examples"]) < 10:
                    stats["examples"].append({"where": where, "field": field, "native": x, "reference": y})

    def view(obs: str, reward: float, terminated: bool, info: dict) -> tuple:
        return (obs, info["admissible_actions"], reward, info["won"], terminated, info["action_valid"], info["anchor"])

    for seed in seeds:
        obs_n, info_n = native.reset(seed=seed)
        obs_r, info_r = reference.reset(seed=seed)
        assert info_n["task_id"] == info_r["task_id"]
        task = info_r["task_id"]
        stats["episodes"] += 1
        stats["task_types"][info_r["task_type"]] = stats["task_types"].get(info_r["task_type"], 0) + 1
        compare(f"{task} reset", view(obs_n, 0.0, False, info_n), view(obs_r, 0.0, False, info_r))
        history: list[str] = []
        admissible = info_r["admissible_actions"]

        def both(cmd: str) -> bool:
            nonlocal admissible
            history.append(cmd)
            obs_n, rew_n, done_n, _, info_n = native.step(cmd)
            obs_r, rew_r, done_r, _, info_r = reference.step(cmd)
            compare(f"{task} after {history}", view(obs_n, rew_n, done_n, info_n), view(obs_r, rew_r, done_r, info_r))
            stats["won"] += bool(done_r and info_r["won"])
            admissible = info_r["admissible_actions"]
            return done_r or done_n

        done = False
        for _ in range(WALK):
            if done := both(_command(rng, native, admissible)):
                stats["walk_won"] += 1
                break
        if not done:
            plan = plan_within(reference, PLANNER_BUDGET)
            if plan is None:
                stats["over_budget"].append(task)
            else:
                stats["planner_runs"] += 1
            for cmd in plan or []:
                if done := both(cmd):
                    stats["planner_won"] += plan is not None
                    break
            while not done and len(history) < 60:  # the planner over budget: the native expert finishes
                done = both(native.expert_action())
    reference.close()
    return stats


def _jobs(fixture_root: Path) -> list[tuple[dict, list[int], int]]:
    """Small jobs, slowest first (pick-two plans take longest), so two workers finish together."""
    jobs = []
    for t in ["pick2"] + [t for t in TASK_TYPES if t != "pick2"]:
        for split, n in PER_TYPE.items():
            for start in range(0, n, 6):
                jobs.append(({"split": split, "task_types": [t]}, list(range(start, min(n, start + 6))), len(jobs)))
    for split in ("train", "valid_seen"):
        kwargs = {"split": split, "data_dir": str(fixture_root)}
        jobs.append((kwargs, list(range(FIXTURE_EPISODES * ALFWorldEnv(**kwargs).num_tasks)), len(jobs)))
    return jobs


def _merge(parts: list[dict]) -> dict:
    total = {key: 0 for key in COUNTS} | {"diffs": {}, "examples": [], "task_types": {}, "over_budget": []}
    for p in parts:
        for key in COUNTS:
            total[key] += p[key]
        total["over_budget"] += p["over_budget"]
        for key in ("diffs", "task_types"):
            for k, v in p[key].items():
                total[key][k] = total[key].get(k, 0) + v
        total["examples"] += p["examples"]
    return total


@pytest.mark.timeout(1800)  # a few minutes on 2 free cores; more on a shared machine
def test_native_engine_matches_textworld_step_by_step(tmp_path, request):
    fixture_root = with_reference_logic(FIXTURE_DATA, tmp_path / "fixtures")
    jobs = _jobs(fixture_root)
    workers = min(2, os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
        parts = list(pool.map(play_pair, *zip(*jobs)))
    total = _merge(parts)
    steps = total["steps"]
    rates = {f: 1 - total["diffs"].get(f, 0) / steps for f in FIELDS}
    report = (
        f"ALFWorld native vs TextWorld: {total['episodes']} episodes, {steps} compared steps, "
        f"task types {dict(sorted(total['task_types'].items()))}; agreement: "
        + ", ".join(f"{f} {100 * r:.2f}%" for f, r in rates.items())
        + f"; won {total['won']}/{total['episodes']} ({total['walk_won']} during the walk, "
        f"{total['planner_won']} by the planner's policy_commands in {total['planner_runs']} runs, "
        f"{len(total['over_budget'])} finished by the native expert: planner over {PLANNER_BUDGET:g} s)"
    )
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # past pytest's output capture, with or without -s
            reporter.write_line("")
            reporter.write_line(report)
            if total["over_budget"]:
                reporter.write_line("planner over budget on: " + ", ".join(total["over_budget"]))
    generated = sum(PER_TYPE.values()) * len(TASK_TYPES)
    examples = "\nfirst differences: " + json.dumps(total["examples"], indent=1)
    assert total["episodes"] >= generated + 2 and set(total["task_types"]) == set(TASK_TYPES), report
    assert not any(total["diffs"].values()), report + examples
    assert total["won"] == total["episodes"], report + examples
    assert total["planner_won"] == total["planner_runs"], report + examples  # every plan it gave won
    # The bound exists for CI time only: most tasks must be solved by the planner itself
    # (over budget on a shared 2-core machine at load 6-12: 14 of 216; the bound is loose
    # because a busy machine slows the planner).
    assert total["planner_runs"] >= 0.5 * (total["episodes"] - total["walk_won"]), report
