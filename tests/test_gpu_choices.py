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
from gigpo_gym.algos.policies.vocab_scores import forward_scores, vocab_scores
from gigpo_gym.algos.training.config import ConfigError, load_config
from gigpo_gym.algos.training.rollout import collect
from gigpo_gym.algos.training.trainer import (
    Trainer, configure_determinism, configure_matmul, micro_batches, optimizer_options, padding_share,
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


def test_loaded_and_saved_policies_never_swap_in_hub_kernels(tiny_path, tmp_path):
    # transformers' default with the kernels package installed: kernelise at every train()/eval() on a GPU,
    # fetching kernels from the Hub (offline, a failure at the first update)
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(str(tiny_path)).use_kernels
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu")
    policy.save(tmp_path / "saved")
    for model in (policy.model, HFPolicy.load(tmp_path / "saved", device="cpu").model):
        model.train()
        assert not model.use_kernels


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


def test_deterministic_cuda_kernels_skip_filling_every_new_tensor(monkeypatch):
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.utils.deterministic.fill_uninitialized_memory, torch.backends.cudnn.benchmark,
              torch.backends.cudnn.deterministic)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    try:
        torch.utils.deterministic.fill_uninitialized_memory = True
        configure_determinism(True)
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert not torch.utils.deterministic.fill_uninitialized_memory  # torch's default in this mode is to fill
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        (torch.utils.deterministic.fill_uninitialized_memory, torch.backends.cudnn.benchmark,
         torch.backends.cudnn.deterministic) = before[2:]


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
def host_reads_in_one_update(tmp_path, monkeypatch, *settings) -> int:
    """How often the update reads a floating-point tensor back to the host, or asks any tensor for its truth (a GPU
    would wait for its queue there; index and length tensors, read as ints, stay on the host).

    Not counted: the optimiser's own step.  torch's default AdamW, a CPU's, reads its step
    counters there; the fused AdamW a GPU gets keeps them on the device.
    """
    t = trainer(tmp_path / "_".join(settings).replace("=", "-"), *settings)
    try:
        t.freeze_reference()
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        reads, in_step = [0], [False]

        def counting(name):
            original = getattr(torch.Tensor, name)

            def read(self, *args, **kwargs):
                if (self.is_floating_point() or name == "__bool__") and not in_step[0]:
                    reads[0] += 1
                return original(self, *args, **kwargs)
            return read

        optimizer_step = t.optimizer.step

        def step(*args, **kwargs):
            in_step[0] = True
            try:
                return optimizer_step(*args, **kwargs)
            finally:
                in_step[0] = False

        with monkeypatch.context() as m:
            m.setattr(t.optimizer, "step", step)
            for name in ("item", "tolist", "__float__", "numpy", "cpu", "__bool__"):
                m.setattr(torch.Tensor, name, counting(name))
            t.update(rollout, 1)
        return reads[0], len(rollout)
    finally:
        t.close()


@pytest.mark.parametrize("extra", [("optim.kl_coef=0",), ("sampling.temperature=0.7",)],
                         ids=["loss loop", "with the old and reference scoring pass"])
def test_the_update_reads_nothing_back_per_micro_batch_or_optimiser_step(tmp_path, monkeypatch, extra):
    once, rows = host_reads_in_one_update(tmp_path, monkeypatch, "optim.micro_batch_size=8", *extra)
    each_row, same_rows = host_reads_in_one_update(tmp_path, monkeypatch, "optim.micro_batch_size=1",
                                                   "optim.mini_batch_size=1", *extra)
    assert rows == same_rows and rows >= 8  # one optimiser step of one or more micro-batches, against one a row
    # the stats, gradient norms and steps' times are read once per update, not per micro-batch or step
    assert each_row == once


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
    with pytest.raises(ValueError, match="decoder must be one of auto, loop, static, continuous"):
        HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="paged")


def test_a_reply_ends_at_eos_or_at_the_token_that_completes_a_stop_string(tiny_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu")
    eos = next(iter(policy.eos_ids))
    tokens = policy.tokenizer("<action>go east</action> more", add_special_tokens=False)["input_ids"]
    stop = tokens.index(policy.tokenizer.convert_tokens_to_ids("</action>"))
    assert decode._end(policy, tokens, ("</action>",)) == (stop + 1, True)
    assert decode._end(policy, tokens, ()) == (len(tokens), False)
    assert decode._end(policy, [tokens[0], eos, tokens[1]], ()) == (2, True)


def test_continuous_batching_is_configured_in_the_installed_transformers_names():
    from transformers import ContinuousBatchingConfig

    v5_17 = {"self", "block_size", "num_blocks", "max_batch_tokens", "return_logprobs", "seed", "use_cuda_graph"}
    v5_24 = v5_17 | {"page_size"}  # block_size stays, deprecated
    sizes = {"page": 256, "blocks": 9, "max_batch_tokens": 512, "seed": 3}
    assert decode.batching_kwargs(v5_17, **sizes) == {"return_logprobs": True, "block_size": 256, "num_blocks": 9,
                                                      "max_batch_tokens": 512, "seed": 3}
    assert decode.batching_kwargs(v5_24, **sizes)["page_size"] == 256 and "block_size" not in decode.batching_kwargs(
        v5_24, **sizes)
    assert "seed" not in decode.batching_kwargs(v5_17 - {"seed"}, **sizes)
    with pytest.raises(RuntimeError, match=r"takes none of \['block_size'\].*use model.decoder: loop or static"):
        decode.batching_kwargs(v5_17 - {"block_size"}, **sizes)
    import inspect

    installed = set(inspect.signature(ContinuousBatchingConfig.__init__).parameters)
    assert ContinuousBatchingConfig(**decode.batching_kwargs(installed, **sizes)).num_blocks == 9


# -- the static-cache decoder --------------------------------------------------------------
PROMPTS = ["You are in room 1.", "The exit is east.", "You are in room 1. The exit is east. go", "Go.", "wait"]
SAMPLINGS = [SamplingParams(max_new_tokens=10, seed=5), SamplingParams(max_new_tokens=10, temperature=0),
             SamplingParams(max_new_tokens=12, seed=3, top_p=0.8), SamplingParams(max_new_tokens=8, seed=1, temperature=1.5),
             SamplingParams(max_new_tokens=10, seed=2, stop=("o", " ")), SamplingParams(max_new_tokens=10, seed=4,
                                                                                        stop=("e", "a", "t")),
             SamplingParams(max_new_tokens=10, temperature=0, stop=("o", "t"))]


def same_replies(first, second, tolerance: float = 1e-5) -> None:
    """The same tokens, text and ends; log-probs within rounding noise (the kernels see caches of other sizes)."""
    for a, b in zip(first, second, strict=True):
        assert (a.response_ids, a.text, a.finished) == (b.response_ids, b.text, b.finished)
        torch.testing.assert_close(torch.tensor(a.log_probs), torch.tensor(b.log_probs), atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("compute_dtype", [None, "bfloat16"])  # bfloat16: float32 weights under autocast
def test_the_static_cache_decoder_gives_the_loop_s_replies_for_a_seed(tiny_path, compute_dtype):
    loop = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="loop", compute_dtype=compute_dtype)
    if not decode.static_cache_fits(torch.float32, compute_dtype and torch.bfloat16):
        pytest.skip("this transformers' static cache keeps keys and values in one dtype (before 5.24)")
    static = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="static", compute_dtype=compute_dtype)
    ended_early = 0
    for sampling in SAMPLINGS:
        replies = loop.generate(PROMPTS, sampling)
        same_replies(replies, static.generate(PROMPTS, sampling), 1e-5 if compute_dtype is None else 1e-2)
        ended_early += sum(g.finished and len(g.response_ids) < sampling.max_new_tokens for g in replies)
    assert ended_early >= 5  # rows left both decoders' batches early, on stop strings and eos


def test_the_static_decoder_s_prefill_attends_over_the_prompt_not_the_whole_cache(tiny_path, monkeypatch):
    from gigpo_gym.algos.policies import attention

    sdpa, calls = attention._sdpa(), []

    def recorded(module, query, key, *args, **kwargs):
        calls.append((query.shape[2], key.shape[2]))  # (query tokens, keys attended)
        return sdpa(module, query, key, *args, **kwargs)

    monkeypatch.setattr(attention, "_sdpa", lambda: recorded)
    static = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="static")
    static.generate(PROMPTS, SamplingParams(max_new_tokens=7, temperature=0))
    prefills = {keys for queries, keys in calls if queries > 1}
    assert prefills and all(queries == keys for queries, keys in calls if queries > 1)
    assert {keys for queries, keys in calls if queries == 1} <= {width + 7 for width in prefills}  # the steps: all


def test_a_model_keeping_its_own_attention_decodes_over_the_whole_static_cache(tiny_path):
    loop = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="loop", attention="eager")
    static = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="static", attention="eager")
    for sampling in SAMPLINGS[:3]:
        same_replies(loop.generate(PROMPTS, sampling), static.generate(PROMPTS, sampling))
    assert static.model.config._attn_implementation == "eager"


def test_one_token_attention_by_matmuls_is_sdpa_s_over_a_masked_cache():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from gigpo_gym.algos.policies.attention import one_token_attention

    gen = torch.Generator().manual_seed(0)
    rows, heads, kv_heads, dim, cache = 3, 6, 2, 8, 11  # 3 query heads share each key/value head
    query = torch.randn(rows, heads, 1, dim, generator=gen)
    key, value = (torch.randn(rows, kv_heads, cache, dim, generator=gen) for _ in range(2))
    mask = torch.zeros(rows, 1, 1, cache)
    mask[0, ..., :4] = mask[1, ..., -3:] = torch.finfo(torch.float32).min  # left padding; positions not written yet
    layer = torch.nn.Module()
    layer.num_key_value_groups, layer.is_causal = heads // kv_heads, True
    mine, _ = one_token_attention(layer, query, key, value, mask, scaling=0.3)
    torch.testing.assert_close(mine, sdpa_attention_forward(layer, query, key, value, mask, scaling=0.3)[0],
                               rtol=1e-6, atol=1e-6)
    half = [t.bfloat16() for t in (query, key, value)]  # scores round to bf16 before the float32 softmax
    torch.testing.assert_close(one_token_attention(layer, *half, mask.bfloat16(), scaling=0.3)[0].float(),
                               mine, rtol=3e-2, atol=3e-2)
    prefill = torch.randn(rows, heads, cache, dim, generator=gen)  # longer queries: transformers' SDPA call itself
    causal = torch.zeros(rows, 1, cache, cache).masked_fill(torch.ones(cache, cache).triu(1).bool(), -torch.inf)
    assert torch.equal(one_token_attention(layer, prefill, key, value, causal)[0],
                       sdpa_attention_forward(layer, prefill, key, value, causal)[0])


@pytest.mark.parametrize("compute_dtype", [None, "bfloat16"])  # bfloat16: float32 weights under autocast
def test_decoding_steps_attending_by_matmuls_give_the_loop_s_replies_for_a_seed(tiny_path, compute_dtype,
                                                                                  monkeypatch):
    from gigpo_gym.algos.policies import attention

    if not decode.static_cache_fits(torch.float32, compute_dtype and torch.bfloat16):
        pytest.skip("this transformers' static cache keeps keys and values in one dtype (before 5.24)")
    steps, one_token_attention = [], attention.one_token_attention

    def counted(module, query, *args, **kwargs):
        steps.append(query.shape[2] == 1)
        return one_token_attention(module, query, *args, **kwargs)

    monkeypatch.setattr(attention, "one_token_attention", counted)
    loop = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="loop", compute_dtype=compute_dtype)
    static = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="static", compute_dtype=compute_dtype)
    static.matmul_decoding = True
    for sampling in SAMPLINGS:
        same_replies(loop.generate(PROMPTS, sampling), static.generate(PROMPTS, sampling),
                     1e-5 if compute_dtype is None else 1e-2)
    assert sum(steps) > 10 and not all(steps)  # the steps attended by matmuls; the prefills through SDPA
    assert static.model.config._attn_implementation == "sdpa"  # switched for the passes only
    steps.clear()
    static.matmul_decoding = False
    static.generate(PROMPTS, SAMPLINGS[0])
    assert not steps


def test_reading_tokens_every_few_steps_ends_rows_where_every_step_does(tiny_path, monkeypatch):
    """A GPU reads the tokens every ``STOP_CHECK_EVERY`` steps; a greedy reply does not depend on when."""
    static = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="static")
    greedy = [s for s in SAMPLINGS if s.temperature == 0]
    every_step = [static.generate(PROMPTS, s) for s in greedy]
    monkeypatch.setattr(decode, "stop_check_every", lambda device: 4)
    for s, expected in zip(greedy, every_step):
        same_replies(expected, static.generate(PROMPTS, s))


#: Operators that wait for the device's queue (a value read back, or an output whose size depends on values).
WAITING_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::_unique2",
               "aten::unique_consecutive", "aten::unique_dim"}


def device_waits(policy: HFPolicy, steps: int, monkeypatch) -> int:
    """How often one ``generate`` call would wait for a GPU's queue, with the stop check every 64 tokens.

    Counted from torch's profiler: the waiting operators, except inside ``_assert_async``
    (a check that runs on the device there) and inside ``_Ends.read`` (host tensors)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    read = decode._Ends.read

    def on_host(ends, *args):
        with record_function("host"):
            return read(ends, *args)

    with monkeypatch.context() as m:
        m.setattr(decode, "stop_check_every", lambda device: 64)
        m.setattr(decode._Ends, "read", on_host)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            policy.generate(PROMPTS, SamplingParams(max_new_tokens=steps, seed=3, top_p=0.8, stop=("o",)))

    def excused(event) -> bool:
        while event is not None:
            if event.name in ("host", "aten::_assert_async"):
                return True
            event = event.cpu_parent
        return False
    return sum(e.name in WAITING_OPS and not excused(e.cpu_parent) for e in prof.events())


def test_the_static_decoder_waits_for_the_device_per_call_not_per_token(tiny_path, monkeypatch):
    """Sampling, top-p and the step itself queue without a read back; only the stop check (every 16 tokens on a GPU)
    reads.  The plain loop, which drops ended rows, waits at every token: the count sees it."""
    static = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="static")
    assert device_waits(static, 6, monkeypatch) == device_waits(static, 12, monkeypatch)
    loop = HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="loop")
    assert device_waits(loop, 12, monkeypatch) >= device_waits(loop, 6, monkeypatch) + 6


def test_auto_decodes_with_the_static_cache_on_cuda_and_the_loop_on_a_cpu():
    from gigpo_gym.algos.policies.hf import decoder_for

    assert decoder_for("auto", CUDA) == "static" and decoder_for("auto", CPU) == "loop"
    assert decoder_for("continuous", CUDA) == "continuous"
    assert decode.stop_check_every(CUDA) == decode.STOP_CHECK_EVERY and decode.stop_check_every(CPU) == 1
    calls = []
    assert decode.replayed(lambda: calls.append(1), CPU)() is None and calls == [1]  # no graph off a GPU


def test_a_static_cache_that_cannot_hold_autocast_s_two_dtypes_is_refused_or_left_to_the_loop(tiny_path, monkeypatch):
    """Transformers before 5.24 stores a static cache's keys and values in one dtype; autocast writes two."""
    assert decode.static_cache_fits(torch.bfloat16, torch.bfloat16) and decode.static_cache_fits(torch.float32, None)
    monkeypatch.setattr(decode, "static_cache_fits", lambda weights, autocast: autocast is None)
    with pytest.raises(ValueError, match=r"static cannot sample with torch.float32 weights under bfloat16 autocast.*"
                                         r"model.rollout_dtype: bfloat16"):
        HFPolicy.from_pretrained(tiny_path, device="cpu", decoder="static", compute_dtype="bfloat16")
    auto = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype="bfloat16")
    auto.device = CUDA  # what "auto" resolves to on a GPU (nothing runs there)
    assert auto.resolved_decoder() == "loop"
    auto.rollout_dtype = "bfloat16"  # a copy in the compute dtype samples: no autocast, the static cache fits
    assert auto.resolved_decoder() == "static"


# -- rollout weights in the compute dtype ----------------------------------------------------
def test_rollout_weights_are_a_copy_in_the_compute_dtype_on_cuda_only():
    from gigpo_gym.algos.policies.hf import rollout_weights_dtype

    assert rollout_weights_dtype("auto", CUDA, "float32", "bfloat16") == "bfloat16"
    assert rollout_weights_dtype("auto", CPU, "float32", "bfloat16") is None  # a CPU run samples as it always did
    assert rollout_weights_dtype("auto", CUDA, "bfloat16", "bfloat16") is None  # the weights are in it already
    assert rollout_weights_dtype("auto", CUDA, "float32", None) is None
    assert rollout_weights_dtype("float16", CPU, "float32", None) == "float16" and rollout_weights_dtype(None, CUDA,
                                                                                                        "float32", "bfloat16") is None
    with pytest.raises(ValueError, match=r"rollout_dtype must be one of \['auto', 'bfloat16'.*got 'bf16'"):
        rollout_weights_dtype("bf16", CPU, "float32", None)


@pytest.mark.parametrize("fused", [False, True])
def test_the_rollout_copy_follows_every_change_of_the_trained_weights(tiny_path, fused):
    import copy

    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", rollout_dtype="bfloat16")
    assert policy.rollout_dtype == "bfloat16"
    gens = policy.generate(PROMPTS[:2], SamplingParams(max_new_tokens=4, seed=0))
    copy_ = policy.rollout_model()
    assert copy_ is not policy.model and {p.dtype for p in copy_.parameters()} == {torch.bfloat16}
    assert all(len(g.log_probs) == len(g.response_ids) for g in gens)
    rotary = [b for name, b in copy_.named_buffers() if "inv_freq" in name]
    assert rotary and all(b.dtype == torch.float32 for b in rotary)  # buffers keep their precision
    assert not any("rollout" in k for k in policy.state_dict())  # never saved
    opt = torch.optim.AdamW(policy.parameters(), lr=0.1, fused=fused)
    policy(TokenBatch([[5, 6, 7]], [[8, 9]])).log_probs.sum().backward()
    opt.step()
    assert policy.rollout_model() is copy_  # refreshed in place
    for trained, rollout in zip(policy.model.parameters(), copy_.parameters()):
        assert torch.equal(trained.detach().to(torch.bfloat16), rollout)
    assert copy.deepcopy(policy)._rollout.model is None  # the KL reference carries no copy


# -- the update's data path --------------------------------------------------------------------
def test_rows_cut_on_the_device_score_as_the_same_rows_as_lists(tiny_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu")
    batch = TokenBatch([[5, 6, 7, 8], [9, 10], [11], [12, 13]], [[14, 15], [16], [17, 18, 19, 20], []])
    rows = policy.token_rows(batch)
    for index in ([0, 2], [3, 1], [1]):
        a = policy(batch.select(index), with_entropy=True)
        b = policy(rows.select(np.array(index)), with_entropy=True)
        assert torch.equal(a.log_probs, b.log_probs) and torch.equal(a.entropy, b.entropy)
        assert torch.equal(a.mask, b.mask)


def test_token_micro_batches_hold_each_row_once_within_the_budget():
    from gigpo_gym.algos.training.compute import token_micro_batches

    lengths = np.random.default_rng(0).integers(40, 900, size=200)
    rows = np.random.default_rng(1).permutation(200)
    batches = token_micro_batches(rows, lengths, 4000)
    assert sorted(np.concatenate(batches).tolist()) == list(range(200))
    assert all(len(b) * lengths[b].max() <= 4000 for b in batches)
    assert np.all(np.diff(lengths[np.concatenate(batches)]) >= 0)  # by length
    assert [b.tolist() for b in token_micro_batches(np.array([0, 1]), np.array([50, 10]), 20)] == [[1], [0]]


def test_the_card_s_memory_sets_the_token_budget_and_checkpointing():
    from gigpo_gym.algos.training.compute import plan_update_memory

    gib = 2**30
    hidden, layers, longest = 1536, 28, 2048 + 512  # the 1.5B recipe
    tokens, checkpointing = plan_update_memory(141 * gib, 36 * gib, hidden, layers, longest, None)  # an H200
    assert not checkpointing and 4 * longest <= tokens <= 0.75 * 105 * gib / (96 * hidden * layers) + 1
    tokens, checkpointing = plan_update_memory(80 * gib, 36 * gib, hidden, layers, longest, None)  # an H100
    assert checkpointing and tokens == int(0.75 * 44 * gib) // (24 * hidden * layers)
    assert plan_update_memory(80 * gib, 36 * gib, hidden, layers, longest, False)[1] is False  # as configured
    # the LM head's kept bf16 logits (151,936 entries a position) count against the budget without checkpointing only
    kept = 2 * 151_936
    plain = plan_update_memory(141 * gib, 36 * gib, hidden, layers, longest, None)[0]
    with_logits, checkpointing = plan_update_memory(141 * gib, 36 * gib, hidden, layers, longest, None, kept)
    assert not checkpointing and with_logits == int(0.75 * 105 * gib) // (96 * hidden * layers + kept) < plain
    assert plan_update_memory(80 * gib, 36 * gib, hidden, layers, longest, None, kept) == (tokens, True)
    with pytest.raises(ValueError, match="needs 90.0 GiB resident on a card of 80.0 GiB"):
        plan_update_memory(80 * gib, 90 * gib, hidden, layers, longest, None)


def test_auto_keeps_row_micro_batches_and_no_checkpointing_on_a_cpu(tmp_path):
    t = trainer(tmp_path, "model.gradient_checkpointing=auto")
    try:
        t.prepare()
        assert t.micro_batch_tokens is None and not t.policy.gradient_checkpointing
    finally:
        t.close()
    with pytest.raises(ConfigError, match="micro_batch_tokens must be >= 1, 'auto' or null, got 0"):
        load_config(None, ["optim.micro_batch_tokens=0"])


def one_update(tmp_path, *extra):
    """The gradients of each optimiser step and the metrics of one update on iteration 1's rollout; the trainer."""
    t = trainer(tmp_path, "optim.micro_batch_size=2", "optim.mini_batch_size=16", *extra)
    grads, step = [], t.parallel.step

    def recording(engine, optimizer, params, max_norm):
        grads.append([q.grad.clone() for q in params])
        return step(engine, optimizer, params, max_norm)

    try:
        t.parallel.step = recording
        t.freeze_reference()
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        return grads, t.update(rollout, 1), t
    finally:
        t.close()


def test_token_budget_micro_batches_give_the_row_count_loss_and_gradients(tmp_path):
    rows_g, rows_m, _ = one_update(tmp_path / "rows")
    tokens_g, tokens_m, t = one_update(tmp_path / "tokens", "optim.micro_batch_tokens=150")
    assert t.micro_batch_tokens == 150 and len(rows_g) == len(tokens_g) >= 2
    for by_rows, by_tokens in zip(rows_g, tokens_g):
        for a, b in zip(by_rows, by_tokens):
            torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)
    for key in ("train/pg_loss", "train/kl_ref", "train/entropy", "train/grad_norm", "train/approx_kl_old"):
        assert tokens_m[key] == pytest.approx(rows_m[key], rel=1e-5, abs=1e-7), key
    assert tokens_m["train/padding_share"] != rows_m["train/padding_share"]  # the micro-batches were cut otherwise


def test_old_and_reference_log_probs_come_from_one_pass(tmp_path):
    t = trainer(tmp_path, "sampling.temperature=0.7", "optim.micro_batch_size=3")
    try:
        t.freeze_reference()
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        assert t.recomputes_old_log_probs()  # sampled at 0.7: the rollout's log-probs are not the policy's
        rows = t.policy.token_rows(rollout.tokens)
        wanted = np.array([0, 2, 3, 5, 6, 7])
        old, ref, models = t.score_old_and_reference(rows, wanted, True)
        assert models == ["old", "reference"]
        with torch.no_grad():
            for name, policy, scored in (("old", t.policy, old), ("reference", t.reference, ref)):
                alone = policy.log_probs(rollout.tokens.select(wanted.tolist())).log_probs
                torch.testing.assert_close(scored[wanted, : alone.shape[1]], alone, atol=1e-6, rtol=1e-5)
                assert scored[[1, 4]].abs().sum() == 0, name  # rows not asked for stay zero
    finally:
        t.close()


def test_a_rollout_copy_in_another_dtype_makes_the_trainer_recompute_old_log_probs(tmp_path):
    t = trainer(tmp_path, "model.rollout_dtype=bfloat16")
    try:
        assert t.policy.rollout_dtype == "bfloat16" and t.recomputes_old_log_probs()
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        m = t.update(rollout, 1)
        assert m["train/rows_used"] == len(rollout) and np.isfinite(m["train/pg_loss"])
        assert t.advantages is not None and t.advantages.keep.sum() == len(rollout)
    finally:
        t.close()
    plain = trainer(tmp_path / "plain")
    try:
        assert plain.policy.rollout_dtype is None and not plain.recomputes_old_log_probs()  # auto on a CPU: no copy
    finally:
        plain.close()


def test_the_kl_reference_computes_in_16_bits_on_cuda_only(tmp_path, monkeypatch):
    t = trainer(tmp_path, "model.compute_dtype=bfloat16")
    try:
        assert t.reference_dtype() is None  # a CPU: an exact copy of the trained weights, as before
        t.device = CUDA  # the rule alone: float32 weights under bf16 autocast
        assert t.reference_dtype() == torch.bfloat16
        t.device = CPU
        monkeypatch.setattr(Trainer, "reference_dtype", lambda self: torch.bfloat16)  # what CUDA gets, run here
        t.freeze_reference()
        weights = {n: p.detach().to(torch.bfloat16) for n, p in t.policy.named_parameters()}
        assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in t.reference.parameters())
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        m = t.update(rollout, 1)
        assert np.isfinite(m["train/kl_ref"]) and m["train/kl_ref"] > 0  # the update moved the policy off it
        t.freeze_reference()  # a reset copies the trained weights into the 16-bit reference
        assert all(p.dtype == torch.bfloat16 for p in t.reference.parameters())
        moved = {n: p.detach().clone() for n, p in t.reference.named_parameters()}
        assert any(not torch.equal(moved[n], w) for n, w in weights.items())
        t.run.save_reference(t.reference, 0)
        with torch.no_grad():
            for p in t.reference.parameters():
                p.zero_()
        t.run.load_reference(t.reference, 0, 0)
        assert all(torch.equal(p, moved[n]) for n, p in t.reference.named_parameters())
    finally:
        t.close()


# -- training on the rollout copy (bf16 compute weights, float32 master weights) ---------------------------
def test_training_on_the_copy_adds_its_16_bit_gradients_into_the_float32_weights(tiny_path):
    import copy

    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype="bfloat16", rollout_dtype="bfloat16",
                                      logits_chunk=3)
    assert not policy.train_on_copy  # set by the trainer (model.train_on_copy)
    policy.train_on_copy = True
    # the same computation written out: the weights in bf16 (buffers as they are), scored without autocast
    twin = HFPolicy(copy.deepcopy(policy.model), policy.tokenizer, device="cpu", logits_chunk=3)
    for p in twin.parameters():
        p.data = p.data.to(torch.bfloat16)
    halves = [TokenBatch([[5, 6, 7, 8, 9], [9, 10]], [[14, 15, 3], [16]]),
              TokenBatch([[11, 12, 13]], [[17, 18, 19, 20]])]
    weights = torch.linspace(-1.0, 1.0, 4)
    expected: dict[str, torch.Tensor] = {}
    for half in halves:  # two micro-batches: each one's bf16 gradient is added in float32
        mine, theirs = policy(half, with_entropy=True), twin(half, with_entropy=True)
        assert torch.equal(mine.log_probs, theirs.log_probs) and torch.equal(mine.entropy, theirs.entropy)
        for scores in (mine, theirs):
            (scores.log_probs * weights[: scores.log_probs.shape[1]]).sum().add(0.1 * scores.entropy.sum()).backward()
        for name, p in twin.model.named_parameters():
            expected[name] = expected.get(name, 0) + p.grad.float()
            p.grad = None
    copied = policy.scoring_model()
    assert copied is not policy.model and {p.dtype for p in copied.parameters()} == {torch.bfloat16}
    assert all(p.grad is None for p in copied.parameters())  # the copy keeps no gradient
    grads = {name: p.grad for name, p in policy.model.named_parameters()}
    assert grads.keys() == expected.keys() and all(g is not None and g.dtype == torch.float32 for g in grads.values())
    for name, grad in grads.items():
        assert torch.equal(grad, expected[name]), name
    torch.optim.AdamW(policy.parameters(), lr=0.1).step()  # the float32 weights step; the copy follows them
    policy(halves[0])
    for trained, mirrored in zip(policy.model.parameters(), copied.parameters()):
        assert trained.dtype == torch.float32 and torch.equal(trained.detach().to(torch.bfloat16), mirrored)
    assert policy.rollout_model() is copied and not copied.training  # one copy samples and trains
    assert not any("rollout" in k for k in policy.state_dict())  # the float32 weights are what is saved


def test_two_forwards_on_the_copy_before_one_backward_train_as_one(tiny_path):
    # an algorithm may score two batches (chosen and rejected, policy and values) into one loss: each forward
    # refreshes the copy, which must not invalidate what the first forward saved for the backward
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype="bfloat16", rollout_dtype="bfloat16")
    policy.train_on_copy = True
    batch = TokenBatch([[5, 6, 7]], [[8, 9]])
    policy(batch).log_probs.sum().backward()
    once = [p.grad.clone() for p in policy.parameters() if p.requires_grad]
    policy.zero_grad(set_to_none=True)
    (policy(batch).log_probs.sum() + policy(batch).log_probs.sum()).backward()
    for p, g in zip(policy.parameters(), once):  # the tied embedding's four parts are summed in bf16
        torch.testing.assert_close(p.grad, 2 * g, rtol=1e-2, atol=1e-2 * float(g.abs().max()))


def test_training_on_the_copy_is_auto_on_cuda_only_and_refused_where_it_cannot_work(tmp_path):
    t = trainer(tmp_path, "model.rollout_dtype=bfloat16")
    try:
        assert not t.policy.train_on_copy  # a CPU run keeps its numbers
        t.device = CUDA  # the rule alone
        assert t.trains_on_copy()
        t.cfg.model.lora = {"r": 2}
        assert not t.trains_on_copy()
    finally:
        t.close()
    with pytest.raises(ConfigError, match=r"train_on_copy: true, but there is no rollout copy in another dtype"):
        trainer(tmp_path / "none", "model.train_on_copy=true")
    assert not (tmp_path / "none" / "run").exists()  # refused before the run folder is made


def test_an_update_on_the_copy_starts_at_ratio_one_and_moves_the_float32_weights(tmp_path):
    t = trainer(tmp_path, "model.train_on_copy=true", "model.rollout_dtype=bfloat16", "model.compute_dtype=bfloat16",
                "optim.micro_batch_size=3", "model.gradient_checkpointing=true")
    try:
        assert t.policy.train_on_copy and t.recomputes_old_log_probs()
        t.freeze_reference()
        before = [p.detach().clone() for p in t.policy.parameters()]
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        m = t.update(rollout, 1)  # one optimiser step: the loss's log-probs are the copy's, as the old ones are
        assert m["train/optimizer_steps"] == 1 and abs(m["train/approx_kl_old"]) < 1e-6 and m["train/kl_ref"] == 0
        assert m["train/grad_norm"] > 0
        after = list(t.policy.parameters())
        assert all(p.dtype == torch.float32 for p in after) and any(not torch.equal(a, b) for a, b in zip(after, before))
        layers = [m for m in t.policy.scoring_model().modules() if hasattr(m, "gradient_checkpointing")]
        assert layers and all(m.gradient_checkpointing for m in layers)  # the copy recomputes as the model would
        t.policy.set_checkpointing(False)
        assert not any(m.gradient_checkpointing for m in layers)
    finally:
        t.close()


# -- no host read in the scoring pass's mask code -----------------------------------------
def packed_sequence_checks(monkeypatch) -> list:
    """Record each time transformers looks for packed sequences (the check reads a tensor back to the host)."""
    import transformers.masking_utils as masking

    checks, original = [], masking.find_packed_sequence_indices
    monkeypatch.setattr(masking, "find_packed_sequence_indices", lambda positions: checks.append(1) or original(positions))
    return checks


def full_forward_log_probs(policy, prompt, reply):
    """The reply's log-probs from the model's own forward, through transformers' mask code."""
    logits = policy.model(torch.tensor([prompt + reply]), use_cache=False).logits[0].float()
    at = torch.arange(len(prompt) - 1, len(prompt) + len(reply) - 1)
    return torch.log_softmax(logits, -1)[at, torch.tensor(reply)]


def test_the_scoring_pass_runs_causal_sdpa_without_transformers_host_read(tiny_path, monkeypatch):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu")
    assert policy.model.config._attn_implementation == "sdpa"
    checks = packed_sequence_checks(monkeypatch)
    batch = TokenBatch([[5, 6, 7, 8], [9, 10]], [[14, 15, 3], [16]])
    scored = policy(batch, with_entropy=True)
    assert checks == []  # no packed-sequence check, so no wait for the GPU's queue before the forward
    assert policy.model.config._attn_implementation == "sdpa"  # generation keeps transformers' masks
    for i, (prompt, reply) in enumerate(zip(batch.prompt_ids, batch.response_ids)):
        expected = full_forward_log_probs(policy, prompt, reply)
        torch.testing.assert_close(scored.log_probs[i, : len(reply)], expected, rtol=1e-5, atol=1e-5)
    assert checks  # the model's own forward does check


def test_a_sliding_window_model_keeps_its_mask_in_the_scoring_pass(monkeypatch):
    from transformers import MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=3,
                           attn_implementation="sdpa")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1}, "<unk>")),
                                        pad_token="<pad>", eos_token="<unk>")
    policy = HFPolicy(MistralForCausalLM(config).eval(), tokenizer)
    checks = packed_sequence_checks(monkeypatch)
    prompt, reply = [5, 6, 7, 8, 9, 10], [11, 12, 13, 14]  # longer than the window
    scored = policy(TokenBatch([prompt], [reply]))
    assert checks  # transformers' own mask code, window included
    torch.testing.assert_close(scored.log_probs[0], full_forward_log_probs(policy, prompt, reply), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compute_dtype", [None, "bfloat16"])
def test_skipping_the_check_changes_no_number_of_the_loss_or_its_gradients(tiny_path, monkeypatch, compute_dtype):
    import contextlib

    from gigpo_gym.algos.policies import hf

    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype=compute_dtype)
    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10], [11, 12, 13]], [[14, 15, 3], [16], [17, 18, 19, 20]])

    def scored_with_gradients():
        policy.zero_grad(set_to_none=True)
        scores = policy(batch, with_entropy=True)
        (scores.log_probs.sum() + scores.entropy.sum()).backward()
        return [scores.log_probs.detach(), scores.entropy.detach()] + [p.grad.clone() for p in policy.parameters()
                                                                        if p.grad is not None]

    skipped = scored_with_gradients()
    with monkeypatch.context() as m:  # transformers' own mask code, check included
        m.setattr(hf, "causal_attention", lambda model: contextlib.nullcontext())
        checked = scored_with_gradients()
    assert len(skipped) == len(checked) > 2
    assert all(torch.equal(a, b) for a, b in zip(skipped, checked))


# -- the gradient through the vocabulary ------------------------------------------------
@pytest.mark.parametrize("reads", ["log-probs", "entropy", "both"])
def test_the_written_vocabulary_backward_is_autograd_s_gradient(reads):
    gen = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(6, 50, generator=gen)
    targets = torch.randint(0, 50, (6,), generator=gen)
    weights = torch.randn(2, 6, generator=gen)  # the loss's weight of each row's log-prob and entropy

    def gradient(scores):
        x = logits.clone().requires_grad_()
        logp, entropy = scores(x)[:2]
        loss = (logp * weights[0]).sum() if reads != "entropy" else 0.0
        if reads != "log-probs":
            loss = loss + (entropy * weights[1]).sum()
        loss.backward()
        return x.grad

    written = gradient(lambda x: vocab_scores(x, targets, True))
    torch.testing.assert_close(written, gradient(lambda x: forward_scores(x, targets, True)), rtol=1e-5, atol=1e-6)
    if reads == "log-probs":  # and without the entropy computed at all
        torch.testing.assert_close(gradient(lambda x: vocab_scores(x, targets, False)), written, rtol=1e-5, atol=1e-6)


def test_kept_chunk_logits_train_as_recomputed_ones_with_one_head_pass(tiny_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype="bfloat16", logits_chunk=3)
    assert not policy.keeps_logits() and policy.kept_logits_bytes() == 0  # a CPU recomputes, as it always has
    policy.written_vocab_backward = True  # what CUDA gets, run here
    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10], [11, 12, 13]], [[14, 15, 3], [16], [17, 18, 19, 20]])
    head_calls = []
    policy.model.get_output_embeddings().register_forward_hook(lambda *_: head_calls.append(1))

    def trained(keep: bool):
        policy.keep_chunk_logits = keep
        policy.zero_grad(set_to_none=True)
        head_calls.clear()
        scores = policy(batch, with_entropy=True)  # 8 response tokens in 3 chunks
        (scores.log_probs.sum() + 0.1 * scores.entropy.sum()).backward()
        return scores, [p.grad.clone() for p in policy.parameters() if p.requires_grad], len(head_calls)

    (kept, kept_grads, kept_calls), (again, again_grads, again_calls) = trained(True), trained(False)
    assert kept_calls == 3 and again_calls == 6  # the head once a chunk, or again in the backward
    assert torch.equal(kept.log_probs, again.log_probs) and torch.equal(kept.entropy, again.entropy)
    assert all(torch.equal(a, b) for a, b in zip(kept_grads, again_grads))
    policy.keep_chunk_logits = True
    vocab = policy.model.get_output_embeddings().weight.shape[0]
    assert policy.kept_logits_bytes() == 2 * vocab  # a position's logits in bf16
    policy.set_checkpointing(True)  # where memory is short, the head runs again too
    assert not policy.keeps_logits()


def test_autocast_casts_the_float32_head_once_for_all_kept_chunks(tiny_path):
    from torch.utils._python_dispatch import TorchDispatchMode

    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype="bfloat16", logits_chunk=3)
    policy.written_vocab_backward = policy.keep_chunk_logits = True  # what CUDA gets, run here
    shape = tuple(policy.model.get_output_embeddings().weight.shape)
    casts = []

    class CastsOfTheHead(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default and tuple(args[0].shape) == shape:
                casts.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10], [11, 12, 13]], [[14, 15, 3], [16], [17, 18, 19, 20]])
    with CastsOfTheHead():
        policy(batch).log_probs.sum().backward()  # three chunks, each kept
    # one bf16 copy of the weights saved for the backward, whatever the chunks (one each, before), and its gradient
    # cast back
    assert casts == [torch.float32, torch.bfloat16]


@pytest.mark.slow  # torch.compile builds its kernels with the C++ compiler: about 15 s
def test_the_compiled_vocabulary_scores_match_the_eager_ones(tiny_path):
    import warnings

    warnings.filterwarnings("error", message="torch.compile failed")  # no fallback to eager here
    generator = torch.Generator().manual_seed(0)
    for n in (7, 5):  # chunks differ in length: one graph serves both
        logits = (3 * torch.randn(n, 300, generator=generator)).bfloat16()
        targets = torch.randint(0, 300, (n,), generator=generator)
        weights = torch.randn(2, n, generator=generator)

        def scored(compiled: bool):
            x = logits.clone().requires_grad_()
            logp, entropy = vocab_scores(x, targets, True, compiled)
            ((logp * weights[0]).sum() + (entropy * weights[1]).sum()).backward()
            return logp, entropy, x.grad

        for eager, compiled in zip(scored(False), scored(True)):
            torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    # through a policy, as CUDA runs it: the scoring pass and the update's written backward both compiled
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype="bfloat16", logits_chunk=3)
    policy.written_vocab_backward = True
    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10]], [[14, 15, 3], [16, 17]])

    def through_policy(compiled: bool):
        policy.compiled_vocab = compiled
        policy.zero_grad(set_to_none=True)
        with torch.no_grad():
            old = policy(batch).log_probs
        scores = policy(batch, with_entropy=True)
        (scores.log_probs.sum() + 0.1 * scores.entropy.sum()).backward()
        return [old, scores.log_probs, scores.entropy] + [p.grad for p in policy.parameters()]

    eager, compiled = through_policy(False), through_policy(True)
    for a, b in zip(eager[:3], compiled[:3]):  # the old log-probs, the loss's log-probs and entropies
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    for a, b in zip(eager[3:], compiled[3:]):  # the gradients, through bf16 logits' gradient: to its rounding
        torch.testing.assert_close(b, a, rtol=2e-2, atol=1e-4)


def test_a_failing_compiler_leaves_the_vocabulary_scores_eager_with_one_warning(monkeypatch):
    from gigpo_gym.algos.policies import compiler

    def broken(fn):
        def compiled(*args):
            raise torch._dynamo.exc.BackendCompilerFailed(fn, RuntimeError("no working Triton"), None)
        return compiled

    monkeypatch.setattr(compiler, "_compiled", broken)
    monkeypatch.setattr(compiler, "_FAILURE", None)
    logits, targets = torch.randn(4, 50).bfloat16(), torch.tensor([1, 2, 3, 4])
    with pytest.warns(UserWarning, match="torch.compile failed on forward_scores; the compiled parts run eager"):
        first = compiler.run_compiled(forward_scores, True, logits, targets, True)
    eager = forward_scores(logits, targets, True)
    assert all(torch.equal(a, b) for a, b in zip(first, eager))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: later calls go eager without trying again
        compiler.run_compiled(forward_scores, True, logits, targets, True)


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _scored_and_trained(policy: HFPolicy, batch: TokenBatch) -> list[torch.Tensor]:
    """The old log-probs (no gradient), then the loss's log-probs and entropies, then the trained weights' gradients."""
    policy.zero_grad(set_to_none=True)
    with torch.no_grad():
        old = policy(batch).log_probs
    scores = policy(batch, with_entropy=True)
    (scores.log_probs.sum() + 0.1 * scores.entropy.sum()).backward()
    scored = [old, scores.log_probs.detach(), scores.entropy.detach()]
    return scored + [p.grad.clone() for p in policy.parameters() if p.requires_grad]


@pytest.mark.slow  # torch.compile builds its kernels with the C++ compiler: about 20 s
def test_the_compiled_decoder_layers_score_and_train_as_the_eager_ones(tiny_path):
    import warnings

    warnings.filterwarnings("error", message="torch.compile failed")  # no fallback to eager here
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", logits_chunk=3)
    assert not policy.compiled_layers  # a CPU run keeps its numbers
    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10]], [[14, 15, 3], [16, 17]])
    eager = _scored_and_trained(policy, batch)
    policy.compiled_layers = True
    compiled = _scored_and_trained(policy, batch)
    for a, b in zip(eager, compiled):  # float32 weights: to float32 rounding
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    layers = policy.model.get_decoder().layers
    assert all(layer._compiled_call_impl is None for layer in layers)  # compiled for the pass only
    graphs = _graphs()
    longer = TokenBatch([[5, 6, 7, 8, 9, 10, 11], [9, 10], [12, 13, 5]], [[14, 15, 3, 4], [16, 17], [3]])
    _scored_and_trained(policy, longer)
    assert _graphs() == graphs  # other batch sizes and lengths: the same graphs, no recompile per micro-batch
    # the update as CUDA runs it: on the bf16 copy, whose gradients reach the float32 weights through hooks
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype="bfloat16", rollout_dtype="bfloat16",
                                      logits_chunk=3)
    policy.train_on_copy = True
    eager = _scored_and_trained(policy, batch)
    policy.compiled_layers = True
    compiled = _scored_and_trained(policy, batch)
    for a, b in zip(eager, compiled):  # bf16 kernels fused differently: to bf16 rounding
        assert b.dtype == a.dtype
        torch.testing.assert_close(b, a, rtol=5e-2, atol=5e-2 * float(a.abs().max()))


def test_decoder_layers_stay_eager_where_the_backward_recomputes_them(tiny_path, monkeypatch):
    from gigpo_gym.algos.policies import compiler

    def no_compile():
        raise AssertionError("compiled under gradient checkpointing")

    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", gradient_checkpointing=True, logits_chunk=3)
    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10]], [[14, 15, 3], [16, 17]])
    policy.model.train()
    scores = policy(batch)
    scores.log_probs.sum().backward()
    eager = [p.grad.clone() for p in policy.parameters() if p.requires_grad]
    policy.zero_grad(set_to_none=True)
    policy.compiled_layers = True
    monkeypatch.setattr(compiler, "_compiled_module_call", no_compile)
    again = policy(batch)  # a compiled forward would meet an eager recompute in the backward
    again.log_probs.sum().backward()
    assert torch.equal(again.log_probs, scores.log_probs)
    assert all(torch.equal(p.grad, g) for p, g in zip(policy.parameters(), eager))


def test_a_failing_compiler_leaves_the_decoder_layers_eager_with_one_warning(tiny_path, monkeypatch):
    from gigpo_gym.algos.policies import compiler

    def broken(layer, *args, **kwargs):  # any of dynamo's own errors, not only the backend's
        raise torch._dynamo.exc.InternalTorchDynamoError("cannot trace this layer")

    monkeypatch.setattr(compiler, "_compiled_module_call", lambda: broken)
    monkeypatch.setattr(compiler, "_FAILURE", None)
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", logits_chunk=3)
    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10]], [[14, 15, 3], [16, 17]])
    eager = policy(batch).log_probs
    policy.compiled_layers = True
    assert compiler.failure() is None
    with pytest.warns(UserWarning, match="torch.compile failed on Qwen2DecoderLayer; the compiled parts run eager"):
        assert torch.equal(policy(batch).log_probs, eager)
    assert compiler.failure().startswith("torch.compile failed on Qwen2DecoderLayer")  # for a run's report
    assert all(layer._compiled_call_impl is None for layer in policy.model.get_decoder().layers)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: later passes go eager without trying again
        assert torch.equal(policy(batch).log_probs, eager)


@pytest.mark.slow  # torch.compile builds the forward's kernels with the C++ compiler
def test_a_backward_that_fails_to_build_falls_back_at_the_forward_not_in_the_backward(tiny_path, monkeypatch):
    import torch._inductor.compile_fx as inductor

    from gigpo_gym.algos.policies import compiler

    def no_backward(*args, **kwargs):
        raise RuntimeError("cannot build this backward")

    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", logits_chunk=3)
    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10]], [[14, 15, 3], [16, 17]])
    eager = policy(batch).log_probs
    eager.sum().backward()
    grads = [p.grad.clone() for p in policy.parameters() if p.requires_grad]
    policy.zero_grad(set_to_none=True)
    torch._dynamo.reset()  # build anew, from no cache, with only the backward's build failing
    monkeypatch.setattr(inductor, "compile_fx_backward", no_backward)
    monkeypatch.setattr(compiler, "_FAILURE", None)
    policy.compiled_layers = True
    try:
        with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(
                enable_autograd_cache=False), pytest.warns(UserWarning, match="torch.compile failed on Qwen2DecoderLayer"):
            scores = policy(batch)
        scores.log_probs.sum().backward()  # the eager layers' backward, not a build that fails here
    finally:
        torch._dynamo.reset()
    assert "cannot build this backward" in compiler.failure()
    assert torch.equal(scores.log_probs, eager)
    assert all(torch.equal(p.grad, g) for p, g in zip((p for p in policy.parameters() if p.requires_grad), grads))


@pytest.mark.parametrize("compute_dtype", [None, "bfloat16"])
def test_the_written_vocabulary_backward_trains_as_autograd_s(tiny_path, compute_dtype):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", compute_dtype=compute_dtype, logits_chunk=3)
    assert not policy.written_vocab_backward  # a CPU run keeps autograd's, and its numbers
    batch = TokenBatch([[5, 6, 7, 8, 9], [9, 10], [11, 12, 13]], [[14, 15, 3], [16], [17, 18, 19, 20]])
    weights = torch.linspace(-1.0, 1.0, 4)

    def scored_with_gradients(written: bool):
        policy.written_vocab_backward = written
        policy.zero_grad(set_to_none=True)
        scores = policy(batch, with_entropy=True)  # 8 response tokens in chunks of 3: each chunk recomputed
        (scores.log_probs * weights).sum().add(0.1 * scores.entropy.sum()).backward()
        return scores, {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}

    autograd_scores, autograd_grads = scored_with_gradients(False)
    written_scores, written_grads = scored_with_gradients(True)
    assert torch.equal(written_scores.log_probs, autograd_scores.log_probs)  # the ratio to the old log-probs stays 1
    assert torch.equal(written_scores.entropy, autograd_scores.entropy)
    assert written_grads.keys() == autograd_grads.keys() and len(written_grads) > 2
    tolerance = {"rtol": 1e-4, "atol": 1e-6} if compute_dtype is None else {"rtol": 2e-2, "atol": 1e-4}
    for name, grad in written_grads.items():
        torch.testing.assert_close(grad, autograd_grads[name], **tolerance, msg=name)
