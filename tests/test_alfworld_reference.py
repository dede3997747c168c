"""The native engine against the reference one (TextWorld's PddlEnv + ALFWorld's
demangler): same observations, admissible lists and ``won`` step by step.

Needs the ``[alfworld]`` extra (textworld, fast-downward-textworld, alfworld);
skipped otherwise.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

textworld = pytest.importorskip("textworld")
pytest.importorskip("fast_downward")
misc = pytest.importorskip("alfworld.agents.utils.misc")

from textworld.envs.pddl import PddlEnv  # noqa: E402

from gigpo_gym.envs.alfworld.engine import Engine  # noqa: E402
from gigpo_gym.envs.alfworld.expert import expert_action  # noqa: E402
from gigpo_gym.envs.alfworld.gamefile_writer import alfworld_logic_files, write_game_file  # noqa: E402
from gigpo_gym.envs.alfworld.generator import generate_task  # noqa: E402
from gigpo_gym.envs.alfworld.pddl import grammar_goal_text, load_game_file  # noqa: E402

pytestmark = [pytest.mark.alfworld_engine, pytest.mark.slow]
FIXTURES = sorted((Path(__file__).parent / "fixtures" / "alfworld" / "json_2.1.1").glob("*/*/*1/game.tw-pddl"))
FIXTURES += sorted((Path(__file__).parent / "fixtures" / "alfworld" / "json_2.1.1").glob("*/*/*2/game.tw-pddl"))


class _Demangled(textworld.core.Wrapper):
    """ALFWorld's AlfredDemangler(shuffle=False), without its heavy imports."""

    def load(self, *args, **kwargs):
        super().load(*args, **kwargs)
        demangler = misc.Demangler(game_infos=self._entity_infos, shuffle=False)
        for info in self._entity_infos.values():
            info.name = demangler.demangle_alfred_name(info.id)


def _games(tmp_path: Path) -> list[Path]:
    domain, grammar = alfworld_logic_files()
    games = []
    for i, fixture in enumerate(FIXTURES):  # hand-written games, with ALFWorld's real domain and grammar
        data = json.loads(fixture.read_text())
        data["pddl_domain"], data["grammar"] = domain, grammar.replace("UNKNOWN GOAL", grammar_goal_text(data["grammar"]))
        path = tmp_path / f"fixture{i}" / "game.tw-pddl"
        path.parent.mkdir()
        path.write_text(json.dumps(data))
        games += [path, path]
    for split in ("train", "valid_unseen"):
        for i in range(6):
            games.append(write_game_file(generate_task(0, split, i), tmp_path / split / str(i) / "game.tw-pddl", domain, grammar))
    return games


def test_native_engine_matches_textworld_step_by_step(tmp_path):
    rng = random.Random(0)
    for path in _games(tmp_path):
        reference = _Demangled(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)))
        reference.load(str(path))
        state = reference.reset()
        engine = Engine(load_game_file(path))
        assert engine.reset() == state.feedback
        assert engine.admissible_commands() == state.admissible_commands
        for _ in range(40):
            roll = rng.random()
            if roll < 0.05:
                cmd = rng.choice(["go to nowhere 1", "Look", "take apple 1 from fridge 1"])
            elif roll < 0.4:
                cmd = expert_action(engine)
            else:
                cmd = rng.choice(state.admissible_commands)
            state, _, done = reference.step(cmd)
            text, _ = engine.step(cmd)
            assert text == state.feedback, (path, cmd)
            assert engine.admissible_commands() == state.admissible_commands, (path, cmd)
            assert engine.won == bool(state["won"]), (path, cmd)
            if done:
                break
