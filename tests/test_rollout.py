"""The episode player over the grouped vector env (scripted fake env, scripted policies)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_fake import CORRIDOR_ID

import gigpo_gym
from gigpo_gym.algos.policies.base import Generation, Policy, SamplingParams
from gigpo_gym.algos.policies.reference import ExpertPolicy, RandomAdmissiblePolicy
from gigpo_gym.algos.estimators.registry import get_algorithm
from gigpo_gym.algos.training.metrics import rollout_metrics
from gigpo_gym.algos.training.rollout import RewardShaping, collect
from gigpo_gym.wrappers import PromptConfig, llm_stack


class ScriptedPolicy(Policy):
    """Answers by a rule on the prompt; records how many prompts each call got."""

    def __init__(self, rule):
        self.rule, self.calls = rule, []

    def generate(self, prompts, sampling):
        self.calls.append(len(prompts))
        return [Generation(self.rule(p), [1, 2], [3, 4, 5], [-0.1, -0.2, -0.3]) for p in prompts]


def make_envs(groups=2, size=3, seed=0):
    return gigpo_gym.make_grouped(CORRIDOR_ID, groups, size, seed=seed, wrappers=(llm_stack(PromptConfig(history_length=1)),))


def test_expert_rounds_win_and_rows_follow_the_contract():
    envs = make_envs()
    out = collect(ExpertPolicy(), envs, SamplingParams(), seed=5)
    assert all(e.won for e in out.episodes) and len(out.episodes) == 6
    assert len(out) == sum(e.length for e in out.episodes)
    for e in out.episodes:  # reward 10 on the winning step only
        rows = [i for i, t in enumerate(out.traj_ids) if t == e.traj_id]
        assert [out.step_ids[i] for i in rows] == list(range(e.length))
        assert [out.rewards[i] for i in rows] == [0.0] * (e.length - 1) + [10.0]
        assert {out.group_ids[i] for i in rows} == {e.traj_id // 3}
    # copies of a group play the same task: same anchors step by step
    by_traj = {t: [a for a, tt in zip(out.anchors, out.traj_ids) if tt == t] for t in range(6)}
    assert by_traj[0] == by_traj[1] == by_traj[2]
    assert out.success_by_task_type()["all"] == 1.0
    envs.close()


def test_invalid_actions_are_penalised_and_the_time_limit_ends_episodes():
    envs = make_envs(1, 2)
    out = collect(ScriptedPolicy(lambda p: "no tags at all"), envs, SamplingParams(), seed=0,
                  shaping=RewardShaping(scale=10.0, invalid_action_penalty=0.25))
    assert [e.length for e in out.episodes] == [8, 8]  # the registered max_episode_steps
    assert out.rewards == [-0.25] * 16 and not any(out.action_valid)
    assert out.generated_tokens == 16 * 3
    envs.close()


def test_steps_back_into_a_state_already_seen_pay_the_revisit_penalty():
    envs = make_envs(1, 2)
    pacer = ScriptedPolicy(lambda p: "<action>go east</action>" if "in room 0." in p.split("Current observation")[-1]
                           else "<action>go west</action>")
    out = collect(pacer, envs, SamplingParams(), seed=0, shaping=RewardShaping(scale=10.0, revisit_penalty=0.5))
    # rows step by step, both episodes: room 0 -> 1 is new; every later step walks back into a room seen before
    assert out.rewards == [0.0, 0.0] + [-0.5] * 14
    assert out.penalties == [0.0, 0.0] + [0.5] * 14
    # the expert never goes back, and its winning step (which stays in the last room) is no revisit
    expert = collect(ExpertPolicy(), envs, SamplingParams(), seed=0, shaping=RewardShaping(revisit_penalty=0.5))
    assert all(p == 0.0 for p in expert.penalties) and sum(expert.rewards) == 10.0 * len(expert.episodes)
    for bad in ({"revisit_penalty": -1.0}, {"invalid_action_penalty": -1.0}):
        with pytest.raises(ValueError, match="must be >= 0"):
            RewardShaping(**bad)
    envs.close()


def test_each_step_samples_with_a_seed_of_its_own_so_a_seeded_policy_does_not_repeat_its_draws():
    class Recording(RandomAdmissiblePolicy):
        def generate(self, prompts, sampling, contexts=None):
            seeds.append(sampling.seed)
            gens = super().generate(prompts, sampling, contexts)
            actions.append([g.text for g in gens])
            return gens

    envs = make_envs(1, 4)
    runs = []
    for _ in range(2):
        seeds, actions = [], []
        collect(Recording(), envs, SamplingParams(seed=7), seed=0)
        runs.append((seeds, actions))
    seeds, actions = runs[0]
    assert len(seeds) == len(set(seeds)) > 3 and seeds == [SamplingParams(seed=7).for_call(k).seed for k in range(len(seeds))]
    assert runs[0] == runs[1]  # same seed, same transcript
    # one seed for every step would give each row the same draw, and so the same action, at every step
    assert all(len({step[row] for step in actions}) > 1 for row in range(4))
    envs.close()


def test_the_metrics_say_whether_episodes_ran_out_of_steps_and_walked_in_circles():
    envs = make_envs(1, 2)
    walker = rollout_metrics(collect(ExpertPolicy(), envs, SamplingParams(), seed=0), prefix="eval")
    assert walker["eval/truncated"] == 0.0 and walker["eval/revisited_states"] == 0.0
    # waiting in the first room: every step after the first is in a state seen before, until the step limit
    waiter = rollout_metrics(collect(ScriptedPolicy(lambda p: "<action>wait</action>"), envs, SamplingParams(), seed=0))
    assert waiter["rollout/truncated"] == 1.0
    assert waiter["rollout/revisited_states"] == pytest.approx(7 / 8)
    envs.close()


def test_finished_envs_stop_consuming_generation():
    # tasks of different lengths finish at different steps; a finished env gets no prompt
    envs = make_envs(8, 1, seed=1)
    policy = ScriptedPolicy(lambda p: "<action>go east</action>")
    out = collect(policy, envs, SamplingParams(), seed=1)
    lengths = sorted(e.length for e in out.episodes)
    assert len(set(lengths)) > 1
    assert policy.calls == [sum(l > k for l in lengths) for k in range(max(lengths))]
    assert sum(policy.calls) == len(out)
    envs.close()


def test_rows_feed_the_advantage_estimators():
    envs = make_envs()
    flip = iter(np.random.default_rng(0).integers(0, 2, size=1000))
    policy = ScriptedPolicy(lambda p: "<action>go east</action>" if next(flip) else "<action>wait</action>")
    out = collect(policy, envs, SamplingParams(), seed=2)
    batch = out.to_step_batch()
    assert len(batch) == len(out) and batch.anchor_texts is not None
    adv = get_algorithm("gigpo").advantages(batch)
    assert adv.shape == (len(out),) and np.isfinite(adv).all() and np.abs(adv).sum() > 0
    envs.close()


def test_reward_shaping_rejects_unknown_source_and_says_what_it_pays():
    with pytest.raises(ValueError, match=r"source must be one of \['won', 'env'\], got 'score'"):
        RewardShaping(source="score")
    assert RewardShaping(scale=1.0, source="env", invalid_action_penalty=0.0).describe() == "pays 1 x the env's reward"
    assert RewardShaping(revisit_penalty=0.5).describe() == ("pays 10 x success (1 on the winning step), - 0.1 per "
                                                            "invalid action, - 0.5 per step back into a state already seen")


def test_a_policy_gets_the_context_it_asks_for_in_training_as_on_the_leaderboard():
    """Any info key a policy names comes with its prompt (it used to reach leaderboard policies only)."""

    class Asking(Policy):
        needs_context = ("admissible_actions", "task_type", "task", "episode")

        def generate(self, prompts, sampling, contexts=None):
            seen.extend(contexts)
            return [Generation("<action>go east</action>", [], [], []) for _ in prompts]

    seen: list[dict] = []
    envs = make_envs(1, 2)
    collect(Asking(), envs, SamplingParams(), seed=3)
    envs.close()
    assert seen and all(c["task_type"].startswith("len") and c["admissible_actions"] == ["go east", "go west", "wait"]
                        for c in seen)
    assert {c["episode"] for c in seen} == {0, 1} and all("You are in room 0" in c["task"] for c in seen)


def test_an_object_with_generate_only_still_plays_and_is_told_to_subclass_policy():
    class Bare:
        def generate(self, prompts, sampling):
            return [Generation("<action>go east</action>", [], [], []) for _ in prompts]

    envs = make_envs(1, 2)
    with pytest.warns(DeprecationWarning, match="subclass gigpo_gym.algos.Policy"):
        out = collect(Bare(), envs, SamplingParams(), seed=0)
    envs.close()
    assert all(e.won for e in out.episodes)


def test_rows_keep_the_prompt_the_reply_and_the_parsed_action_and_episodes_how_they_ended():
    envs = make_envs(1, 2)
    out = collect(ScriptedPolicy(lambda p: "no tags" if "(step" in p else "<action>go east</action>"), envs,
                  SamplingParams(), seed=0)
    envs.close()
    first = [i for i, step in enumerate(out.step_ids) if step == 0]
    assert all("You are in room 0" in out.prompts[i] and out.actions[i] == "go east" for i in first)
    assert all(out.actions[i] is None for i, step in enumerate(out.step_ids) if step > 0)  # "no tags": nothing parsed
    assert {e.status for e in out.episodes} == {"truncated"} and all(not e.won for e in out.episodes)
    assert all(e.env_return == 0.0 and e.length == 8 for e in out.episodes)


def test_a_generation_with_an_error_ends_only_its_episode():
    class Failing(Policy):
        needs_context = ("episode",)

        def generate(self, prompts, sampling, contexts=None):
            return [Generation("", [], [], [], error="the server gave up", error_status="truncated")
                    if c["episode"] == 0 else Generation("<action>go east</action>", [], [], []) for c in contexts]

    envs = make_envs(1, 2)
    ended = []
    out = collect(Failing(), envs, SamplingParams(), seed=0, final_keys=("score",), on_episode_end=ended.append)
    envs.close()
    first, second = out.episodes
    assert (first.status, first.error, first.length, first.final) == ("truncated", "policy: the server gave up", 0,
                                                                      {"score": 0.0})
    assert second.won and second.status == "terminated" and [e.index for e in ended] == [0, 1]


def test_each_env_can_reset_with_options_of_its_own():
    envs = make_envs(1, 3)
    with pytest.raises(ValueError, match=r"env_options must hold one mapping per env \(3\), got 1"):
        envs.reset(seed=0, options={"env_options": [{}]})
    seen = []
    env0 = envs._chunks[0].envs[0].unwrapped
    reset = type(env0)._reset
    type(env0)._reset = lambda self, seed, options: (seen.append(options), reset(self, seed, options))[1]
    try:
        envs.reset(seed=0, options={"shared": 1, "env_options": [{"task_id": "a"}, {"task_id": "b"}, {}]})
    finally:
        type(env0)._reset = reset
    envs.close()
    assert seen == [{"shared": 1, "task_id": "a"}, {"shared": 1, "task_id": "b"}, {"shared": 1}]
