"""Real game files: the json_2.1.1 tree, the reference's skip rules, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import gigpo_gym  # noqa: F401  (registers the ids)
from gigpo_gym.envs.alfworld.env import ALFWorldEnv
from gigpo_gym.envs.alfworld.pddl import GameFileError, load_game_file, parse_sexpr
from gigpo_gym.envs.alfworld.tasks import collect_game_files

DATA = Path(__file__).parent / "fixtures" / "alfworld"
CLEAN_ID = "train/pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-1/trial_T20000101_000001"
LOOK_ID = "valid_seen/look_at_obj_in_light-Book-None-DeskLamp-301/trial_T20000101_000002"


def test_skip_rules_match_the_reference():
    # Unsolvable, "movable" and "Sliced" games are skipped before they are parsed
    # (their fixture files hold a broken pddl_problem that would fail to load).
    games = collect_game_files(str(DATA), "train", ("pick", "look", "clean", "heat", "cool", "pick2"))
    assert [task_id for _, task_id, _ in games] == [CLEAN_ID]
    assert collect_game_files(str(DATA), "train", ("pick",)) == ()
    games = collect_game_files(str(DATA / "json_2.1.1"), "valid_seen", ("look",))
    assert [(task_id, tt) for _, task_id, tt in games] == [(LOOK_ID, "look")]


def test_env_plays_real_game_files_with_the_expert():
    for split, task_id in (("train", CLEAN_ID), ("eval_in_distribution", LOOK_ID)):
        env = ALFWorldEnv(split=split, data_dir=str(DATA))
        obs, info = env.reset(seed=123)
        assert info["task_id"] == task_id and info["gamefile"].endswith("game.tw-pddl")
        assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-\n\n")
        for _ in range(20):
            obs, reward, terminated, _, info = env.step(env.expert_action())
            if terminated:
                break
        assert terminated and reward == 1.0 and info["won"]


def test_data_dir_from_environment_variable(monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(DATA))
    env = gym.make("gigpo_gym/ALFWorld-v0", split="valid_seen")
    _, info = env.reset(seed=0)
    assert info["task_id"] == LOOK_ID and info["task_type"] == "look"


def test_missing_split_and_empty_selection_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="valid_unseen does not exist"):
        ALFWorldEnv(split="valid_unseen", data_dir=str(DATA))
    with pytest.raises(FileNotFoundError, match="no playable games of types"):
        ALFWorldEnv(split="train", data_dir=str(DATA), task_types=["heat"])
    with pytest.raises(FileNotFoundError, match="not a directory"):
        ALFWorldEnv(data_dir=str(tmp_path / "nope"))


def _game(tmp_path: Path, **fields) -> Path:
    data = json.loads((DATA / "json_2.1.1" / LOOK_ID / "game.tw-pddl").read_text())
    data.update(fields)
    path = tmp_path / "game.tw-pddl"
    path.write_text(json.dumps(data))
    return path


def test_bad_game_files_name_the_file_and_field(tmp_path):
    bad_json = tmp_path / "broken.tw-pddl"
    bad_json.write_text("{not json")
    with pytest.raises(GameFileError, match=r"broken\.tw-pddl: not a readable JSON game file"):
        load_game_file(bad_json)
    with pytest.raises(GameFileError, match=r"game\.tw-pddl: field 'pddl_problem' is missing"):
        load_game_file(_game(tmp_path, pddl_problem=None))
    grammar = json.loads((DATA / "json_2.1.1" / LOOK_ID / "game.tw-pddl").read_text())["grammar"]
    with pytest.raises(GameFileError, match="field 'grammar': .*UNKNOWN GOAL"):
        load_game_file(_game(tmp_path, grammar=grammar.replace("examine the book with the desklamp", "UNKNOWN GOAL")))
    with pytest.raises(GameFileError, match="field 'pddl_problem': unbalanced"):
        load_game_file(_game(tmp_path, pddl_problem="(define (problem p) (:objects"))
    with pytest.raises(GameFileError, match=r"field 'pddl_problem': .*lacks the :goal section"):
        load_game_file(_game(tmp_path, pddl_problem="(define (problem p) (:objects) (:init (atLocation agent1 l)))"))


def test_older_put_template_is_read_from_the_grammar(tmp_path):
    grammar = json.loads((DATA / "json_2.1.1" / LOOK_ID / "game.tw-pddl").read_text())["grammar"]
    world = load_game_file(_game(tmp_path, grammar=grammar.replace("move {o} to {r}", "put {o} in/on {r}")))
    from gigpo_gym.envs.alfworld.engine import Engine

    engine = Engine(world)
    engine.reset()
    engine.step("go to bed 1")
    engine.step("take book 1 from bed 1")
    assert "put book 1 in/on bed 1" in engine.admissible_commands()
    assert engine.step("put book 1 in/on bed 1") == ("You move the book 1 to the bed 1.", True)


def test_sexpr_parser_lowercases_and_drops_comments():
    assert parse_sexpr("(and (inReceptacle ?o ?r) ; comment\n (isClean ?o))") == [
        ["and", ["inreceptacle", "?o", "?r"], ["isclean", "?o"]]
    ]


def test_generated_tasks_round_trip_through_game_files(tmp_path):
    from gigpo_gym.envs.alfworld.engine import Engine
    from gigpo_gym.envs.alfworld.expert import expert_plan
    from gigpo_gym.envs.alfworld.gamefile_writer import write_game_file
    from gigpo_gym.envs.alfworld.generator import generate_task

    grammar = json.loads((DATA / "json_2.1.1" / LOOK_ID / "game.tw-pddl").read_text())["grammar"]
    grammar = grammar.replace("examine the book with the desklamp", "UNKNOWN GOAL")
    for i in range(12):
        world = generate_task(0, "train", i)
        loaded = load_game_file(write_game_file(world, tmp_path / f"{i}" / "game.tw-pddl", "(define (domain alfred))", grammar))
        assert (loaded.receptacles, loaded.objects, loaded.init) == (world.receptacles, world.objects, world.init)
        assert (loaded.task_type, loaded.goal_text) == (world.task_type, world.goal_text)
        a, b = Engine(world), Engine(loaded)
        assert a.reset() == b.reset()
        for cmd in expert_plan(Engine(world)):
            assert a.admissible_commands() == b.admissible_commands()
            assert a.step(cmd) == b.step(cmd)
        assert a.won and b.won
