"""Every env id of the suite through the real ``skyrl_gym.make``."""

from __future__ import annotations

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs the [skyrl] extra")

from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402

import gigpo_gym.integrations.skyrl  # noqa: E402, F401  (registers the ids)
from gigpo_gym.registration import ENV_SPECS  # noqa: E402

SEARCHQA = "gigpo_gym/SearchQA-v0"


def expert_episode(env) -> list[dict]:
    """Play the env's expert through skyrl_gym's API; the step outputs."""
    outputs = []
    while not outputs or not outputs[-1]["done"]:
        outputs.append(env.step(f"<think>plan</think> {env._env.unwrapped.expert_action()}"))
    return outputs


def test_every_id_is_registered_under_its_own_name():
    for spec in ENV_SPECS:
        assert spec.id in skyrl_gym.registry
    env = skyrl_gym.make(SEARCHQA, env_config={}, extras={"seed": 0})
    assert isinstance(env, BaseTextEnv)


def test_the_extras_name_the_task_and_an_expert_episode_scores():
    env = skyrl_gym.make(SEARCHQA, env_config={"split": "test"}, extras={"seed": 3})
    conversation, info = env.init([{"role": "system", "content": "Be brief."}])
    assert conversation[0] == {"role": "system", "content": "Be brief."} and conversation[1]["role"] == "user"
    assert set(info) >= {"anchor", "action_valid", "won", "truncated", "task_id", "admissible_actions"}
    outputs = expert_episode(env)
    assert outputs[-1]["reward"] == 1.0 and outputs[-1]["metadata"]["won"] is True
    assert outputs[0]["metadata"]["anchor"] != info["anchor"] and outputs[0]["observations"][0]["role"] == "user"
    assert env.get_metrics() == {"won": 1.0, "turns": len(outputs), "return": 1.0, "invalid_turns": 0}
    by_id = skyrl_gym.make(SEARCHQA, env_config={"split": "test"}, extras={"task_id": info["task_id"]})
    again, again_info = by_id.init([{"role": "user", "content": "Answer."}])
    assert again[-1]["content"].endswith(conversation[-1]["content"]) and again_info == info


def test_the_same_extras_give_the_same_transcript():
    def transcript():
        env = skyrl_gym.make(SEARCHQA, env_config={}, extras={"seed": 11})
        start, _ = env.init(None)
        replies = ["<search>Voltiak</search>", "no tags", "<answer>Voltiak</answer>"]
        return start, [env.step(reply) for reply in replies]

    assert transcript() == transcript()


def test_invalid_replies_and_the_step_limit_are_in_the_metadata():
    env = skyrl_gym.make(SEARCHQA, env_config={"anchor_mode": "observation"}, extras={"seed": 1})
    _, info = env.init([])
    assert info["anchor"] != info["state_anchor"]  # the observation's digest, the paper's anchor
    outputs = [env.step("I do not know the format") for _ in range(4)]
    assert [o["metadata"]["action_valid"] for o in outputs] == [False] * 4
    assert outputs[-1]["done"] and outputs[-1]["metadata"]["truncated"] is True and not outputs[-2]["done"]
    with pytest.raises(RuntimeError, match="the episode is over"):
        env.step("<answer>x</answer>")


@pytest.mark.parametrize("env_id", ["gigpo_gym/ALFWorld-v0", "gigpo_gym/WebShop-v0"])
def test_alfworld_and_webshop_take_tagged_or_plain_commands(env_id):
    env = skyrl_gym.make(env_id, env_config={}, extras={"seed": 2})
    _, info = env.init([])
    assert info["admissible_actions"]
    expert = env._env.unwrapped.expert_action()
    tagged = env.step(f"<think>hmm</think><action>{expert}</action>")
    assert tagged["metadata"]["action_valid"] and tagged["postprocessed_action"] == expert


def test_bad_configs_name_what_is_wrong():
    with pytest.raises(ValueError, match="needs extras with 'seed' or 'task_id'"):
        skyrl_gym.make(SEARCHQA, env_config={}, extras={})
    with pytest.raises(ValueError, match="needs extras with 'seed' or 'task_id'"):
        skyrl_gym.make(SEARCHQA, env_config={}, extras={"seed": 1, "colour": "red"})
    with pytest.raises(TypeError, match="did you mean 'split'"):
        skyrl_gym.make(SEARCHQA, env_config={"splitt": "test"}, extras={"seed": 1})
    with pytest.raises(ValueError, match="anchor_mode must be one of"):
        skyrl_gym.make(SEARCHQA, env_config={"anchor_mode": "text"}, extras={"seed": 1})
