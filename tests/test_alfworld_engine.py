"""The native engine speaks ALFWorld's grammar: every command's feedback, the
admissible list, the "Nothing happens." rule and the quirks of TextWorld's facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gigpo_gym.envs.alfworld.engine import HELP, NOTHING, Engine, display_list
from gigpo_gym.envs.alfworld.pddl import load_game_file
from gigpo_gym.envs.alfworld.world import demangled_names

FIXTURES = Path(__file__).parent / "fixtures" / "alfworld" / "json_2.1.1"
CLEAN_GAME = FIXTURES / "train/pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-1/trial_T20000101_000001/game.tw-pddl"
LOOK_GAME = FIXTURES / "valid_seen/look_at_obj_in_light-Book-None-DeskLamp-301/trial_T20000101_000002/game.tw-pddl"


@pytest.fixture
def kitchen() -> Engine:
    engine = Engine(load_game_file(CLEAN_GAME))
    engine.reset()
    return engine


def play(engine: Engine, *commands: str) -> str:
    text = ""
    for cmd in commands:
        text, valid = engine.step(cmd)
        assert valid, (cmd, text)
    return text


def test_names_follow_alfworlds_demangler():
    ids = ["cabinet_bar__plus_01", "cabinet_bar__minus_02", "sink_bar__plus_00_bar_sinkbasin", "agent1"]
    assert demangled_names(ids) == {
        "agent1": "agent1",
        "cabinet_bar__minus_02": "cabinet 2",  # first in sorted order gets the highest number
        "cabinet_bar__plus_01": "cabinet 1",
        "sink_bar__plus_00_bar_sinkbasin": "sinkbasin 1",
    }


def test_display_list_uses_textworlds_separators():
    assert display_list([]) == "nothing"
    assert display_list(["a mug 1"]) == "a mug 1"
    assert display_list(["a mug 1", "a cup 1"]) == "a mug 1, and a cup 1"
    assert display_list(["a", "b", "c"]) == "a, b, and c"


def test_intro_lists_every_receptacle_in_id_order(kitchen: Engine):
    assert kitchen.reset() == (
        "-= Welcome to TextWorld, ALFRED! =-\n\n"
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 2, a cabinet 1, "
        "a coffeemachine 1, a countertop 1, a drawer 2, a drawer 1, a fridge 1, a microwave 1, and a sinkbasin 1.\n\n"
        "Your task is to: put a clean mug in coffeemachine."
    )


def test_admissible_commands_are_sorted_unique_and_local(kitchen: Engine):
    start = kitchen.admissible_commands()
    assert start == sorted(set(start))
    assert start == [
        "go to cabinet 1", "go to cabinet 2", "go to coffeemachine 1", "go to countertop 1",
        "go to drawer 1", "go to drawer 2", "go to fridge 1", "go to microwave 1", "go to sinkbasin 1",
        "help", "inventory", "look",
    ]
    play(kitchen, "go to countertop 1")
    here = kitchen.admissible_commands()
    assert "go to countertop 1" not in here  # going where you stand is no action
    assert {"examine countertop 1", "take mug 2 from countertop 1", "take knife 1 from countertop 1"} <= set(here)
    # TextWorld lists ``examine`` for an object only while it is held.
    assert "examine mug 2" not in here
    play(kitchen, "take mug 2 from countertop 1")
    assert "examine mug 2" in kitchen.admissible_commands()


def test_navigation_open_close_and_look_texts(kitchen: Engine):
    assert play(kitchen, "look") == "You are in the middle of a room. Looking quickly around you, you see nothing."
    assert play(kitchen, "go to cabinet 1") == "You arrive at cabinet 1. The cabinet 1 is closed."
    assert "take mug 1 from cabinet 1" not in kitchen.admissible_commands()  # closed: contents unseen
    assert play(kitchen, "open cabinet 1") == "You open the cabinet 1. The cabinet 1 is open. In it, you see a mug 1."
    assert play(kitchen, "examine cabinet 1") == "The cabinet 1 is open. In it, you see a mug 1."
    assert play(kitchen, "close cabinet 1") == "You close the cabinet 1."
    assert play(kitchen, "look") == "You are facing the cabinet 1. Next to it, you see nothing."
    assert play(kitchen, "go to sinkbasin 1") == "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."


def test_take_move_inventory_and_examine_texts(kitchen: Engine):
    assert play(kitchen, "inventory") == "You are not carrying anything."
    play(kitchen, "go to countertop 1")
    assert play(kitchen, "take mug 2 from countertop 1") == "You pick up the mug 2 from the countertop 1."
    assert play(kitchen, "inventory") == "You are carrying: a mug 2."
    assert not any(c.startswith("take ") for c in kitchen.admissible_commands())  # one hand
    assert play(kitchen, "examine mug 2") == "This is a normal mug 2. In it, you see nothing."
    assert play(kitchen, "move mug 2 to countertop 1") == "You move the mug 2 to the countertop 1."
    assert play(kitchen, "examine countertop 1") == "On the countertop 1, you see a apple 1, a knife 1, and a mug 2."


def test_heat_clean_cool_slice_and_examine_object_states(kitchen: Engine):
    play(kitchen, "go to countertop 1", "take apple 1 from countertop 1")
    assert play(kitchen, "examine apple 1") == "There's nothing special about apple 1."
    assert play(kitchen, "go to sinkbasin 1", "clean apple 1 with sinkbasin 1") == "You clean the apple 1 using the sinkbasin 1."
    assert play(kitchen, "examine apple 1") == "This is a clean apple 1."
    assert "heat apple 1 with sinkbasin 1" not in kitchen.admissible_commands()
    # Heating and cooling need no open door (the domain has no such precondition).
    assert play(kitchen, "go to microwave 1", "heat apple 1 with microwave 1") == "You heat the apple 1 using the microwave 1."
    assert play(kitchen, "examine apple 1") == "This is a hot and clean apple 1."
    assert play(kitchen, "go to fridge 1", "cool apple 1 with fridge 1") == "You cool the apple 1 using the fridge 1."
    assert play(kitchen, "examine apple 1") == "This is a cool and clean apple 1."  # cooling removes hot
    play(kitchen, "go to countertop 1", "move apple 1 to countertop 1", "take knife 1 from countertop 1")
    assert play(kitchen, "slice apple 1 with knife 1") == "You sliced the apple 1 with the knife 1."
    play(kitchen, "move knife 1 to countertop 1", "take apple 1 from countertop 1")
    assert play(kitchen, "examine apple 1") == "This is a cool and clean sliced apple 1."


def test_cold_and_hot_alone():
    engine = Engine(load_game_file(CLEAN_GAME))
    engine.reset()
    play(engine, "go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "cool apple 1 with fridge 1")
    assert play(engine, "examine apple 1") == "This is a cold apple 1."
    play(engine, "go to microwave 1", "heat apple 1 with microwave 1")
    assert play(engine, "examine apple 1") == "This is a hot apple 1."
    play(engine, "go to countertop 1", "move apple 1 to countertop 1", "take mug 2 from countertop 1", "go to microwave 1")
    assert play(engine, "heat mug 2 with microwave 1") == "You heat the mug 2 using the microwave 1."
    assert play(engine, "examine mug 2") == "This is a normal mug 2. In it, you see nothing."  # receptacle objects first


def test_use_lamp_always_says_turn_on():
    engine = Engine(load_game_file(LOOK_GAME))
    engine.reset()
    play(engine, "go to desk 1")
    assert play(engine, "use desklamp 1") == "You turn on the desklamp 1."
    assert play(engine, "use desklamp 1") == "You turn on the desklamp 1."  # isToggled is never deleted
    assert engine.step("examine desklamp 1") == (NOTHING, False)  # not held, so not examinable


def test_receptacles_sharing_a_location(kitchen: Engine):
    play(kitchen, "go to drawer 2")
    assert kitchen.step("go to drawer 1") == (NOTHING, False)  # same location: not a move
    assert play(kitchen, "look") == "You are facing the drawer 2, and drawer 1. Next to it, you see nothing."
    play(kitchen, "open drawer 1", "take fork 1 from drawer 1", "open drawer 2", "move fork 1 to drawer 2")
    # TextWorld keeps not_inreceptacle(fork, drawer 1) and lists the fork "next to" the drawers.
    assert play(kitchen, "look") == "You are facing the drawer 2, and drawer 1. Next to it, you see a fork 1."


def test_invalid_commands_change_nothing(kitchen: Engine):
    before = kitchen.state_key()
    for bad in ["", "fly", "go to toaster 1", "take mug 1 from cabinet 1", "Go to cabinet 1", "go to  cabinet 1"]:
        assert kitchen.step(bad) == (NOTHING, False)
    assert kitchen.state_key() == before
    assert kitchen.step("  look  ")[1]  # the command is stripped, as TextWorld does


def test_help_text(kitchen: Engine):
    text = play(kitchen, "help")
    assert text == HELP and text.startswith("Available commands:\n  look:")


def test_goal_reached_sets_won(kitchen: Engine):
    assert not kitchen.won
    play(kitchen, "go to countertop 1", "take mug 2 from countertop 1", "go to coffeemachine 1", "move mug 2 to coffeemachine 1")
    assert not kitchen.won  # not clean yet
    play(kitchen, "take mug 2 from coffeemachine 1", "go to sinkbasin 1", "clean mug 2 with sinkbasin 1", "go to coffeemachine 1")
    play(kitchen, "move mug 2 to coffeemachine 1")
    assert kitchen.won
