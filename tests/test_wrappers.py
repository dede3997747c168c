"""AnchorKey, HistoryPrompt and ActionParser on a scripted env (suite-wide checks: test_suite.py)."""

from __future__ import annotations

import doctest

import gymnasium as gym
import pytest
from fake_envs import COUNTER

from gigpo_gym.core import digest
from gigpo_gym.wrappers import ActionParser, AnchorKey, HistoryPrompt, action, anchor, prompt, stack, wrap_for_llm


def test_anchor_state_mode_keeps_the_env_key():
    env = AnchorKey(gym.make(COUNTER))
    obs, info = env.reset(seed=1)
    assert info["anchor"] == info["state_anchor"] == digest([1, 1])
    assert info["anchor_text"] == obs == "value 1"


def test_anchor_observation_mode_aliases_equal_text_within_a_task_only():
    env = AnchorKey(gym.make(COUNTER), mode="observation")
    _, first = env.reset(seed=0)
    _, *_, invalid = env.step("bogus")  # "Nothing happens." twice from two states: same text key
    env.step("inc")
    _, *_, invalid_again = env.step("bogus")
    assert invalid["anchor"] == invalid_again["anchor"]
    assert invalid["state_anchor"] != invalid_again["state_anchor"]
    _, other_task = env.reset(seed=1)
    assert other_task["anchor"] != first["anchor"]  # scoped by task id
    with pytest.raises(ValueError, match=r"mode must be one of \('state', 'observation'\)"):
        AnchorKey(gym.make(COUNTER), mode="text")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("<think>count</think><action>inc</action>", "inc"),
        ("<ACTION>  go   to\ncabinet 1 </ACTION>", "go to cabinet 1"),
        ("<action>inc</action><action>stop</action>", "inc"),
        ("<action>inc", None),
        ("<action></action>", None),
        ("inc", None),
    ],
)
def test_action_parser_extracts_the_first_well_formed_tag(text, parsed):
    assert ActionParser(gym.make(COUNTER)).parse(text) == parsed


def test_action_parser_marks_untagged_text_invalid_and_goes_on():
    env = ActionParser(gym.make(COUNTER))
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("I would increment")
    assert (obs, info["action_valid"], info["parsed_action"], terminated) == ("Nothing happens.", False, None, False)
    obs, *_, info = env.step("<action>inc</action>")
    assert obs == "value 1" and info["action_valid"] and info["parsed_action"] == "inc"
    with pytest.raises(TypeError, match="action must be a str"):
        env.step(["inc"])
    assert ActionParser(gym.make(COUNTER), require_tags=False).parse("inc") == "inc"


def test_history_prompt_shows_the_last_k_steps_and_admissible_actions():
    env = HistoryPrompt(gym.make(COUNTER), history_length=2)
    text, info = env.reset(seed=0)
    assert "value 0" in text and "Admissible actions: inc | stop" in text
    assert info["observation"] == "value 0"
    for _ in range(3):
        text, *_, info = env.step("inc")
    assert "You have taken 3 step(s)" in text
    assert "[Step 2 observation] value 1\n[Step 2 action] inc" in text
    assert "[Step 3 observation] value 2" in text and "[Step 1 observation]" not in text
    assert text.index("Your task:\nvalue 0") < text.index("Current observation (step 4):\nvalue 3")
    assert env.observation_space.contains(text)
    with pytest.raises(ValueError, match="history_length must be an int >= 0"):
        HistoryPrompt(gym.make(COUNTER), history_length=-1)


def test_full_stack_records_invalid_steps_in_history():
    env = wrap_for_llm(gym.make(COUNTER), history_length=1)
    env.reset(seed=0)
    text, *_, info = env.step("no tags at all")
    assert "[Step 1 action] (no valid action)" in text and not info["action_valid"]
    assert info["anchor_text"] == "Nothing happens."


@pytest.mark.parametrize("module", [action, anchor, prompt, stack])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_history_prompt_can_show_an_info_key_as_the_task():
    env = HistoryPrompt(gym.make("gigpo_gym/ALFWorld-v0"), history_length=1, task_key="goal")
    first, info = env.reset(seed=0)
    assert "Welcome to TextWorld" in first  # step 1 still shows the whole room
    text, *_ = env.step(info["admissible_actions"][0])
    assert f"Your task:\n{info['goal']}\n" in text and text.count("Welcome to TextWorld") == 1  # the history's step 1
    text, *_ = env.step("look")
    assert f"Your task:\n{info['goal']}\n" in text and "Welcome to TextWorld" not in text
    with pytest.raises(KeyError, match="task_key 'nope' is not in the env's info"):
        HistoryPrompt(gym.make(COUNTER), task_key="nope").reset(seed=0)


def test_history_prompt_can_leave_the_admissible_actions_to_the_policy():
    env = HistoryPrompt(gym.make(COUNTER), history_length=1, list_actions=False)
    text, info = env.reset(seed=0)
    assert "Admissible actions" not in text and info["admissible_actions"] == ["inc", "stop"]
    text, *_, info = env.step("inc")
    assert "Admissible actions" not in text and "[Step 1 action] inc" in text
