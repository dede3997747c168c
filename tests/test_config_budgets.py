"""Every shipped config's prompt, token budget and answer format agree: the expert's transcript, rendered in the
config's prompts, parses as valid actions and fits the config's budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

import gigpo_gym
from gigpo_gym.algos.policies.base import SamplingParams
from gigpo_gym.algos.policies.reference import ExpertPolicy
from gigpo_gym.algos.training.config import load_config
from gigpo_gym.algos.training.rollout import Rollout, collect

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
#: New tokens a prompt that asks the model to reason first must leave it (the paper's configs give 512).
REASONING_TOKENS = 256


def expert_transcript(config: str, episodes: int = 3) -> tuple[object, Rollout]:
    """The config and its expert's rows on a few training tasks, through the config's own prompt stack."""
    cfg = load_config(config, ["env.backend=sync"])
    envs = gigpo_gym.make_grouped(cfg.env.id, episodes, 1, seed=0, env_kwargs=cfg.env_kwargs("train"),
                                  wrappers=(cfg.wrapper(),))
    try:
        rollout = collect(ExpertPolicy(), envs, SamplingParams(max_new_tokens=1), seed=0,
                          expert_kwargs=cfg.sft.expert_kwargs)
    finally:
        envs.close()
    return cfg, rollout


@pytest.mark.parametrize("config", CONFIGS)
def test_the_expert_s_replies_parse_as_valid_actions_and_the_prompt_asks_for_what_fits(config):
    cfg, rollout = expert_transcript(config)
    assert len(rollout) > 0 and all(rollout.action_valid) and None not in rollout.actions
    prefix = cfg.prompt.response_prefix
    assert all(reply.startswith(prefix) for reply in rollout.replies)  # what the policy is given, it need not write
    if any("step by step" in prompt for prompt in rollout.prompts):  # no reasoning asked for within a short budget
        assert cfg.sampling.max_new_tokens >= REASONING_TOKENS, (config, cfg.sampling.max_new_tokens)


def _tokenizer(cfg):
    """The config's own tokenizer (the tiny model's is built from the env's text; SmolLM2's is offline); a model
    folder that is not here (the Qwen2.5 configs) gets SmolLM2's, whose smaller vocabulary counts more tokens."""
    from gigpo_gym.algos.policies.hf import load_tokenizer
    from gigpo_gym.algos.policies.smollm import smollm2_path
    from gigpo_gym.algos.training.models import build_policy

    if cfg.model.name == "tiny":
        return build_policy(cfg).tokenizer
    return load_tokenizer(str(smollm2_path()))  # smollm2 itself, or the stand-in


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_the_expert_s_transcript_fits_the_config_s_token_budget(config):
    cfg, rollout = expert_transcript(config)
    tokenizer = _tokenizer(cfg)
    fmt = cfg.prompt.input_format()
    chat = fmt.uses_chat(bool(getattr(tokenizer, "chat_template", None)))
    longest = max(len(tokenizer(fmt.model_text(p, tokenizer), add_special_tokens=not chat)["input_ids"])
                  for p in rollout.prompts)
    assert longest <= cfg.model.max_prompt_tokens, f"{config}: a prompt of {longest} tokens would be cut"
    if not cfg.model.choose_admissible:  # a reply it writes (a chosen one is scored whole, whatever its length)
        reply = max(len(tokenizer(r.removeprefix(fmt.response_prefix), add_special_tokens=False)["input_ids"])
                    for r in rollout.replies)
        assert reply <= cfg.sampling.max_new_tokens, f"{config}: the expert's reply takes {reply} tokens"
