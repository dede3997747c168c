"""Precision and memory at scale: float32 master weights under bf16 autocast, chunked logits, checkpointing."""

from __future__ import annotations

import pytest
import torch
from helpers_fake import CORRIDOR_ID

from gigpo_gym.algos.policies.base import TokenBatch
from gigpo_gym.algos.training.config import ConfigError, load_config
from gigpo_gym.algos.training.rollout import collect
from gigpo_gym.algos.training.trainer import Trainer
from gigpo_gym.core.env import derive_seed

SMALL = [
    f"env.id={CORRIDOR_ID}", "env.num_groups=1", "env.group_size=2", "env.eval_episodes=0", "prompt.history_length=1",
    "env.kwargs={max_episode_steps: 3}", "sampling.max_new_tokens=4", "model.device=cpu", "model.tiny.corpus_episodes=3", "model.tiny.vocab_size=300",
    "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "optim.lr=1e-6", "optim.micro_batch_size=4",
    "optim.mini_batch_size=4096", "iterations=1", "progress=false", "eval_before=false",
]


def share_changed_by_one_update(tmp_path, *extra) -> float:
    cfg = load_config(None, [*SMALL, f"run_dir={tmp_path / 'run'}", *extra])
    trainer = Trainer(cfg)
    try:
        trainer.freeze_reference()
        before = [p.detach().clone() for p in trainer.policy.parameters()]
        rollout = collect(trainer.policy, trainer.envs, trainer.sampling(1), seed=derive_seed(cfg.seed, 1),
                          shaping=trainer.shaping)
        trainer.update(rollout, 1)
        changed = sum(int((p.detach() != b).sum()) for p, b in zip(trainer.policy.parameters(), before))
        return changed / sum(b.numel() for b in before)
    finally:
        trainer.close()


def test_float32_weights_under_bf16_autocast_keep_small_updates(tmp_path):
    assert share_changed_by_one_update(tmp_path, "model.compute_dtype=bfloat16") >= 0.99


def test_bf16_weights_lose_small_updates_and_say_so(tmp_path):
    """The failure the float32 master weights avoid: lr 1e-6 is below bf16's resolution of most weights."""
    with pytest.warns(UserWarning, match="model.compute_dtype: bfloat16 instead"):
        share = share_changed_by_one_update(tmp_path, "model.dtype=bfloat16")
    assert share < 0.5


def test_bad_dtypes_are_config_errors():
    with pytest.raises(ConfigError, match=r"model.compute_dtype must be one of .* got 'bf16'"):
        load_config(None, ["model.compute_dtype=bf16"])
    with pytest.raises(ConfigError, match="did you mean 'float16'"):
        load_config(None, ["model.dtype=float61"])


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory):
    from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny

    corpus = ["go to the kitchen and take the mug", "<action>go north</action>", "open the fridge 1"] * 4
    return build_tiny(corpus, TinySpec(vocab_size=200, hidden_size=32, intermediate_size=64, num_layers=2))


def scores_and_grads(policy, batch):
    policy.zero_grad(set_to_none=True)
    scores = policy(batch, with_entropy=True)
    (scores.log_probs.sum() + scores.entropy.sum()).backward()
    return scores, {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}


def test_chunked_logits_and_gradient_checkpointing_change_nothing(policy_path):
    from gigpo_gym.algos.policies.hf import HFPolicy

    batch = TokenBatch([[5, 6, 7, 8], [9, 10], [11]], [[12, 13, 14], [15], [16, 17, 18, 19, 20]])
    plain = scores_and_grads(HFPolicy.from_pretrained(policy_path, device="cpu"), batch)
    for kwargs in ({"logits_chunk": 2}, {"gradient_checkpointing": True}):
        other = scores_and_grads(HFPolicy.from_pretrained(policy_path, device="cpu", **kwargs), batch)
        torch.testing.assert_close(other[0].log_probs, plain[0].log_probs)
        torch.testing.assert_close(other[0].entropy, plain[0].entropy)
        assert other[1].keys() == plain[1].keys()
        for name, grad in plain[1].items():
            torch.testing.assert_close(other[1][name], grad, msg=lambda m, n=name, k=kwargs: f"{k} {n}: {m}")


def test_scoring_keeps_no_kv_cache(policy_path):
    """A scoring pass (the update's, the reference's) has no later token to cache keys and values for."""
    from gigpo_gym.algos.policies.base import ChoiceBatch
    from gigpo_gym.algos.policies.hf import HFPolicy

    policy = HFPolicy.from_pretrained(policy_path, device="cpu")
    caches = []
    hook = policy.model.get_decoder().register_forward_hook(lambda m, a, out: caches.append(out.past_key_values))
    policy(TokenBatch([[5, 6], [7]], [[8, 9], [10]]))
    policy(ChoiceBatch([[5, 6]], [[8, 9]], options=[[[8, 9], [10]]], choices=[0]))
    hook.remove()
    assert caches == [None, None]


def test_chunks_never_hold_more_logits_than_asked(policy_path):
    from gigpo_gym.algos.policies.hf import HFPolicy

    policy = HFPolicy.from_pretrained(policy_path, device="cpu", logits_chunk=3)
    seen = []
    hook = policy.model.get_output_embeddings().register_forward_hook(lambda m, a, out: seen.append(out.shape[0]))
    batch = TokenBatch([[5, 6], [7]], [[8, 9, 10, 11], [12, 13, 14]])
    policy(batch).log_probs.sum().backward()
    hook.remove()
    assert seen and max(seen) <= 3 and sum(seen[: len(seen) // 2]) == 7  # forward chunks, then their recomputation
