"""The GiGPO paper's prompts (``--prompt paper``): the texts, how their slots are filled, the parse rule."""

from __future__ import annotations

import gymnasium as gym
import pytest
from fake_envs import CounterEnv

import gigpo_gym  # noqa: F401  (registers the ids)
from gigpo_gym.algos.leaderboard.policies import resolve_policy
from gigpo_gym.algos.leaderboard.runner import LeaderboardError
from gigpo_gym.wrappers import PaperPrompt, paper_stack
from gigpo_gym.envs.alfworld.prompts import NO_HISTORY as ALFWORLD_TEMPLATE_NO_HIS
from gigpo_gym.envs.alfworld.prompts import WITH_HISTORY as ALFWORLD_TEMPLATE
from gigpo_gym.envs.searchqa.prompts import SEARCH_R1_TEMPLATE
from gigpo_gym.envs.webshop.prompts import HISTORY_CHARS as WEBSHOP_HISTORY_CHARS
from gigpo_gym.envs.webshop.prompts import NO_HISTORY as WEBSHOP_TEMPLATE_NO_HIS


def _reply(action: str) -> str:
    return f"<think>I should act.</think><action>{action}</action>"


def test_alfworld_prompts_fill_the_papers_text_with_the_last_k_steps():
    env = paper_stack(gym.make("gigpo_gym/ALFWorld-v0", split="valid_seen"), history_length=2)
    first, info = env.reset(seed=3)
    assert "help" in info["admissible_actions"]  # the paper lists every admissible action but 'help'
    listed = "\n ".join(f"'{a}'" for a in info["admissible_actions"] if a != "help")
    assert first == ALFWORLD_TEMPLATE_NO_HIS.format(current_observation=info["observation"], admissible_actions=listed)
    task = info["observation"].split("Your task is to: ")[1].strip()
    seen, actions = [info["observation"]], []
    for valid in (True, False, True):  # the invalid reply shows as an empty action, as the paper's history has it
        actions.append(env.unwrapped.expert_action() if valid else "")
        prompt, _, terminated, _, info = env.step(_reply(actions[-1]) if valid else "I will look around first.")
        seen.append(info["observation"])
    assert not terminated and info["action_valid"]
    listed = "\n ".join(f"'{a}'" for a in info["admissible_actions"] if a != "help")
    history = f"[Observation 2: '{seen[1]}', Action 2: '']\n[Observation 3: '{seen[2]}', Action 3: '{actions[2]}']"
    assert prompt == ALFWORLD_TEMPLATE.format(task_description=task, step_count=3, history_length=2,
                                              action_history=history, current_step=4, current_observation=seen[3],
                                              admissible_actions=listed)


def test_the_first_action_block_is_the_action_and_none_is_an_invalid_step():
    env = paper_stack(gym.make("gigpo_gym/ALFWorld-v0", split="valid_seen"))
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step("<think>hmm</think> no tags at all")
    assert not (terminated or truncated) and info["action_valid"] is False and info["parsed_action"] is None
    _, _, _, _, info = env.step("<ACTION>look</ACTION><action>inventory</action>")
    assert info["parsed_action"] == "look" and info["action_valid"]


def test_webshop_prompts_show_the_page_after_the_instruction_and_cut_a_long_history():
    env = paper_stack(gym.make("gigpo_gym/WebShop-v0"), history_length=8)
    first, info = env.reset(seed=0)
    instruction = info["instruction"]
    assert first == WEBSHOP_TEMPLATE_NO_HIS.format(task_description=instruction, current_observation="'Search'",
                                                   available_actions="'search[<your query>]',")
    prompt, *_ = env.step(_reply(env.unwrapped.expert_action()))
    assert "'Back to Search' [SEP] 'Page 1" in prompt and "\n'click[back to search]',\n" in prompt
    assert f"Your task is to: {instruction}.\nPrior to this step, you have already taken 1 step(s)." in prompt
    for _ in range(6):  # results pages are long: the history is cut to its last characters, as the paper's is
        prompt, *_ = env.step(_reply("click[next >]"))
    history = prompt.split("corresponding actions you took: ")[1].split("\nYou are now at step")[0]
    assert history.startswith("... ") and len(history) == WEBSHOP_HISTORY_CHARS + 4


def test_searchqa_gets_search_r1s_prompt_and_its_transcript():
    env = paper_stack(gym.make("gigpo_gym/SearchQA-v0"), history_length=1)
    first, info = env.reset(seed=0)
    assert first == SEARCH_R1_TEMPLATE.format(question=info["observation"])
    prompt, _, _, _, info = env.step("<think>who?</think><search>Thaeltrusk Bilu</search> and then I answer")
    assert prompt == first + "<think>who?</think><search>Thaeltrusk Bilu</search>" + info["observation"]
    assert info["observation"].startswith("\n\n<information>Doc 1")
    prompt, _, _, _, info = env.step("no tags")  # history_length=1: only the last turn is shown
    assert prompt == first + "no tags" + info["observation"] and "My previous action is invalid" in prompt


def test_an_env_without_paper_prompts_is_refused():
    with pytest.raises(ValueError, match=r"the paper's prompts are the env's own \(metadata\['paper_prompt'\]: ALFWorld, "
                                         r"WebShop and SearchQA have them\); CounterEnv has none"):
        PaperPrompt(CounterEnv())


def test_the_texts_come_from_the_env_s_metadata_and_no_wrapper_names_an_env():
    """A new env brings its own paper prompt: the wrapper fills whatever ``metadata["paper_prompt"]`` renders."""

    class Texts:
        def task(self, obs, info):
            return "count"

        def shown(self, obs, task):
            return obs.upper()

        def turn(self, shown, reply, parsed, obs):
            return shown, parsed or ""

        def render(self, *, task, obs, actions, steps, history_length, turns, history):
            return f"{task} | {obs} | {history}"

    env = CounterEnv()
    env.metadata = {**env.metadata, "paper_prompt": Texts()}
    wrapped = paper_stack(env, history_length=1)
    first, _ = wrapped.reset(seed=0)
    assert first.startswith("count | ") and first.endswith(" | ")
    prompt, *_ = wrapped.step("<action>up</action>")
    assert prompt.split(" | ")[2] == f"[Observation 1: '{first.split(' | ')[1]}', Action 1: 'up']"


def test_the_leaderboard_takes_the_template_for_llm_policies_only():
    with pytest.raises(LeaderboardError, match=r"--prompt paper is for LLM policies; 'random' is not one \(its kind: random\)"):
        resolve_policy("random", "gigpo_gym/ALFWorld-v0", template="paper")
    with pytest.raises(LeaderboardError, match=r"prompt template 'papr' is not one of \['default', 'paper', 'tools'\]; "
                                               r"did you mean 'paper'\?"):
        resolve_policy("expert", "gigpo_gym/ALFWorld-v0", template="papr")


def test_the_docstring_example_runs():
    import doctest

    from gigpo_gym.wrappers import templates

    result = doctest.testmod(templates, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
