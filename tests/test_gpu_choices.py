"""The choices a GPU run makes, each checked on a CPU: attention kernel, precision, optimiser, host waits, padding."""

from __future__ import annotations

import importlib.machinery
import importlib.util

import numpy as np
import pytest
import torch
from helpers_fake import CORRIDOR_ID

from gigpo_gym.algos.policies import decode
from gigpo_gym.algos.policies.base import SamplingParams, TokenBatch
from gigpo_gym.algos.policies.hf import HFPolicy, attention_kernel, sdpa_backends
from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny
from gigpo_gym.algos.training.config import ConfigError, load_config
from gigpo_gym.algos.training.rollout import collect
from gigpo_gym.algos.training.trainer import (
    Trainer, configure_matmul, micro_batches, optimizer_options, padding_share,
)
from gigpo_gym.core.env import derive_seed

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
CORPUS = ["You are in room 1. The exit is east.", "<action>go east</action>", "<action>wait</action>"] * 4
SPEC = TinySpec(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
SMALL = [
    f"env.id={CORRIDOR_ID}", "env.num_groups=2", "env.group_size=4", "env.eval_episodes=0", "prompt.history_length=1",
    "sampling.max_new_tokens=6", "model.device=cpu", "model.tiny.corpus_episodes=3", "model.tiny.vocab_size=300",
    "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "optim.mini_batch_size=64", "progress=false",
]


@pytest.fixture(scope="module")
def tiny_path():
    return build_tiny(CORPUS, SPEC, name="gpu-choices")


def trainer(tmp_path, *extra) -> Trainer:
    return Trainer(load_config(None, [*SMALL, f"run_dir={tmp_path / 'run'}", *extra]))


# -- the attention kernel --------------------------------------------------------------
def test_auto_attention_is_flash_attention_only_on_a_gpu_in_16_bits_with_flash_attn(monkeypatch):
    assert attention_kernel("auto", CPU, "bfloat16") == "sdpa"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    assert attention_kernel("auto", CUDA, "bfloat16") == "sdpa"  # no flash_attn package
    present = importlib.machinery.ModuleSpec("flash_attn", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: present if name == "flash_attn" else real(name, *a))
    assert attention_kernel("auto", CUDA, "bfloat16") == "flash_attention_2"
    assert attention_kernel("auto", CUDA, "float32") == "sdpa"  # flash attention computes in 16 bits only
    assert attention_kernel("eager", CUDA, "bfloat16") == "eager"  # asked for by name: as asked
    with pytest.raises(ValueError, match="attention must be one of auto, sdpa"):
        attention_kernel("flash", CPU, "float32")


def test_sdpa_never_takes_cudnn_s_attention_on_a_gpu():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with sdpa_backends(CUDA):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with sdpa_backends(CPU):  # a CPU's kernels are left to torch
        assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_a_policy_loads_with_the_kernel_the_config_names(tiny_path, tmp_path):
    assert HFPolicy.from_pretrained(tiny_path, device="cpu").model.config._attn_implementation == "sdpa"
    eager = HFPolicy.from_pretrained(tiny_path, device="cpu", attention="eager")
    assert eager.model.config._attn_implementation == "eager"
    with pytest.raises(ConfigError, match="model.attention must be one of"):
        load_config(None, ["model.attention=flash"])


# -- bf16 autocast over float32 master weights, TF32 --------------------------------------
def test_generation_computes_in_the_compute_dtype_over_float32_weights(tiny_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype="bfloat16")
    seen = []
    policy.model.register_forward_hook(
        lambda module, args, out: seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
                                               out.logits.dtype)))
    policy.generate(["You are in room 1."], SamplingParams(max_new_tokens=3, seed=0))
    assert seen and all(s == (True, torch.bfloat16, torch.bfloat16) for s in seen)
    assert {p.dtype for p in policy.parameters()} == {torch.float32}  # the master weights stay float32
    plain = HFPolicy.from_pretrained(tiny_path, device="cpu")
    seen.clear()
    plain.model.register_forward_hook(lambda module, args, out: seen.append(torch.is_autocast_enabled("cpu")))
    plain.generate(["You are in room 1."], SamplingParams(max_new_tokens=3, seed=0))
    assert seen and not any(seen)  # no compute_dtype: the weights' own precision, as before


def test_tf32_is_switched_on_for_cuda_and_left_alone_on_a_cpu():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        configure_matmul(CPU, True)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        configure_matmul(CUDA, True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        configure_matmul(CUDA, False)  # model.tf32: false
        assert not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


# -- the optimiser ----------------------------------------------------------------------
def test_cuda_gets_the_fused_adamw_which_steps_as_the_default_one():
    assert optimizer_options(CUDA) == {"fused": True} and optimizer_options(CPU) == {}
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(17, 5, generator=gen), torch.randn(5, generator=gen)]
    grads = [[torch.randn(p.shape, generator=gen) for p in start] for _ in range(3)]
    finals = []
    for options in ({}, {"fused": True}):  # torch runs the fused kernel on a CPU too
        params = [p.clone().requires_grad_() for p in start]
        opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, **options)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.clone()
            opt.step()
        finals.append(params)
    for a, b in zip(*finals):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_a_cpu_trainer_keeps_torch_s_default_adamw(tmp_path):
    t = trainer(tmp_path)
    try:
        assert not t.optimizer.defaults.get("fused")
    finally:
        t.close()


# -- no host wait per micro-batch ---------------------------------------------------------
def host_reads_in_one_update(tmp_path, micro_batch_size: int, monkeypatch) -> int:
    """How often the update reads a floating-point tensor back to the host (a GPU would wait for its queue there).

    No reference and old log-probs from the rollout itself (temperature 1), so every
    micro-batch's work is the loss loop's.
    """
    t = trainer(tmp_path / str(micro_batch_size), f"optim.micro_batch_size={micro_batch_size}", "optim.kl_coef=0")
    try:
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        reads = [0]

        def counting(name):
            original = getattr(torch.Tensor, name)

            def read(self, *args, **kwargs):
                if self.is_floating_point():
                    reads[0] += 1
                return original(self, *args, **kwargs)
            return read

        with monkeypatch.context() as m:
            for name in ("item", "tolist", "__float__", "numpy", "cpu", "__bool__"):
                m.setattr(torch.Tensor, name, counting(name))
            t.update(rollout, 1)
        return reads[0], len(rollout)
    finally:
        t.close()


def test_the_loss_loop_reads_nothing_back_per_micro_batch(tmp_path, monkeypatch):
    few, rows = host_reads_in_one_update(tmp_path, 8, monkeypatch)
    many, same_rows = host_reads_in_one_update(tmp_path, 1, monkeypatch)
    assert rows == same_rows and rows >= 8  # one micro-batch against eight or more
    assert many == few  # reading the stats once per update, not once per micro-batch


# -- micro-batches of similar length ------------------------------------------------------
def test_micro_batches_group_rows_of_similar_length():
    lengths = np.random.default_rng(0).integers(40, 900, size=256)
    rows = np.random.default_rng(1).permutation(256)
    batches = micro_batches(rows, lengths, 8)
    assert sorted(np.concatenate(batches).tolist()) == list(range(256)) and {len(b) for b in batches} == {8}
    arrival = [rows[a : a + 8] for a in range(0, 256, 8)]  # rows cut as they come
    assert padding_share(batches, lengths) < 0.05 < 0.3 < padding_share(arrival, lengths)
    assert padding_share([np.array([0, 1])], np.array([5, 5])) == 0.0


def test_the_update_logs_its_padding_share_and_phase_times(tmp_path):
    t = trainer(tmp_path, "optim.micro_batch_size=2")
    try:
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        m = t.update(rollout, 1)
    finally:
        t.close()
    total = np.array([len(p) + len(r) for p, r in zip(rollout.prompt_ids, rollout.response_ids)])
    assert 0 <= m["train/padding_share"] <= padding_share(micro_batches(np.arange(len(total)), total, 2), total) + 1e-9
    assert 0 <= m["time/step_seconds"] <= m["time/optimize_seconds"] and m["time/advantage_seconds"] >= 0


# -- the two decoders -----------------------------------------------------------------------
@pytest.mark.slow
def test_continuous_batching_replies_in_prompt_order_with_log_probs_that_scoring_reproduces(tiny_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="continuous")
    prompts = ["You are in room 1.", "The exit is east.", "You are in room 1. The exit is east.", "Go."]
    sampling = SamplingParams(max_new_tokens=6, seed=5, stop=("</action>",))
    gens = policy.generate(prompts, sampling)
    assert [g.prompt_ids for g in gens] == [policy.encode_prompt(p) for p in prompts]
    assert [g.response_ids for g in policy.generate(prompts, sampling)] == [g.response_ids for g in gens]  # seeded
    scores = policy.log_probs(TokenBatch.from_generations(gens))
    for g, row in zip(gens, scores.log_probs):
        assert 1 <= len(g.response_ids) == len(g.log_probs) <= 6
        assert g.finished == (len(g.response_ids) < 6 or g.text.endswith("</action>") or g.response_ids[-1] in policy.eos_ids)
        torch.testing.assert_close(row[: len(g.log_probs)], torch.tensor(g.log_probs), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="decoder must be one of auto, loop, continuous"):
        HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="paged")


def test_a_reply_ends_at_eos_or_at_the_token_that_completes_a_stop_string(tiny_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu")
    eos = next(iter(policy.eos_ids))
    tokens = policy.tokenizer("<action>go east</action> more", add_special_tokens=False)["input_ids"]
    stop = tokens.index(policy.tokenizer.convert_tokens_to_ids("</action>"))
    assert decode._end(policy, tokens, ("</action>",)) == (stop + 1, True)
    assert decode._end(policy, tokens, ()) == (len(tokens), False)
    assert decode._end(policy, [tokens[0], eos, tokens[1]], ()) == (2, True)
