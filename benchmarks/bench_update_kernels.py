"""What one update micro-batch costs on this machine, and what would make it cheaper.

The update of an RL iteration is forward + backward of the policy over every row
(plus a reference forward), so its time is that of one micro-batch times their
number.  This times forward + backward of the demo's tiny Qwen2 (hidden 128, 2
layers, vocabulary 8,192) on one micro-batch of ``--rows`` x ``--tokens`` tokens,
in the variants one would try first:

- ``sdpa``: what the trainer runs (float32, PyTorch's scaled-dot-product attention);
- ``eager``: transformers' plain attention;
- ``compile``: ``torch.compile`` of the decoder (inductor; the compile is not timed);
- ``bf16``: bfloat16 autocast (float32 weights), as on a GPU.

It also prints the rate of the decoder's matrix products (weights only, forward 2
FLOP per weight and token, backward twice that), to compare with what the CPU can do.

    python benchmarks/bench_update_kernels.py                  # 16 x 170 tokens, torch's threads
    python benchmarks/bench_update_kernels.py --tokens 330 --variants sdpa bf16
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from gigpo_gym.algos.policies.tiny import TinySpec

SPEC = TinySpec()  # hidden 128, 2 layers, vocabulary 8,192: configs/demo.yaml's model.tiny
VARIANTS = ("sdpa", "eager", "compile", "bf16")


def build(attention: str) -> torch.nn.Module:
    """The tiny model's decoder at its default shape (the demo's), weights from its seed."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=SPEC.vocab_size, hidden_size=SPEC.hidden_size,
                         intermediate_size=SPEC.intermediate_size, num_hidden_layers=SPEC.num_layers,
                         num_attention_heads=SPEC.num_heads, num_key_value_heads=SPEC.num_kv_heads,
                         tie_word_embeddings=True, attn_implementation=attention)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SPEC.seed)
        return Qwen2ForCausalLM(config).get_decoder()


def time_variant(name: str, ids: torch.Tensor, calls: int, repeats: int) -> float:
    """Median seconds of one forward + backward."""
    decoder = build("eager" if name == "eager" else "sdpa")
    run = torch.compile(decoder) if name == "compile" else decoder

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "bf16"):
            hidden = run(input_ids=ids).last_hidden_state
        hidden.float().square().mean().backward()

    step()  # warm-up (and the compile)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=16, help="rows of the micro-batch (the demo's micro_batch_size)")
    p.add_argument("--tokens", type=int, default=170, help="tokens per row (the demo's prompt + answer)")
    p.add_argument("--calls", type=int, default=10, help="forward + backward calls per timing")
    p.add_argument("--repeats", type=int, default=3, help="timings per variant (the median is printed)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    args = p.parse_args()
    ids = torch.randint(0, SPEC.vocab_size, (args.rows, args.tokens), generator=torch.Generator().manual_seed(0))
    weights = sum(w.numel() for n, w in build("sdpa").named_parameters() if "layers" in n and w.dim() == 2)
    matmul_flop = 3 * 2 * weights * args.rows * args.tokens  # forward + backward (x2)
    print(f"{args.rows} x {args.tokens} tokens, {torch.get_num_threads()} torch threads, "
          f"{matmul_flop / 1e9:.1f} GFLOP of weight products per forward + backward")
    base = None
    for name in args.variants:
        seconds = time_variant(name, ids, args.calls, args.repeats)
        base = base or seconds
        print(f"{name:>8}: {seconds * 1e3:7.1f} ms  ({base / seconds:4.2f}x the first; "
              f"weight products at {matmul_flop / seconds / 1e9:5.1f} GFLOP/s if they took all of it)")


if __name__ == "__main__":
    main()
