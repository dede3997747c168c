"""The GPU path in one command: CUDA tests, one recipe-shaped GiGPO iteration (HF and vLLM), same-seed runs.

    python benchmarks/gpu_check.py             # one H100 or H200: at most --budget-s (450 s) of steps
    python benchmarks/gpu_check.py --dry-run   # the same steps on a CPU with the tiny model

Needs torch (with CUDA), transformers, accelerate and pytest, and this package with its
dependencies (``pip install ".[train,test]"``, or its wheels with ``--no-deps`` where torch
is installed already).  vLLM is used where it imports.  Nothing downloads.

Each step runs in a process of its own under a time limit, so a failure or a hang costs
only that step, and the results are written after every step:

1. ``model``: a Qwen2.5-1.5B-shaped model with random weights, written to a temporary
   folder and loaded from there as a local model is (``bench_train_scale.random_weights_model``);
2. ``iteration-hf``: one GiGPO iteration of ``configs/alfworld_qwen2.5_1.5b.yaml`` (16 groups
   x 8, history 2, its dtypes, checkpointing and batch sizes) with episodes cut to ``--steps``
   and answers to ``--max-new-tokens``: rollout (generation, env), reference scoring, update,
   generated tokens/s, peak GPU memory;
3. ``iteration-vllm``: step 2 with ``model.generation: vllm``, where vllm imports;
4. ``same-seed``: two processes train the recipe with the tiny model and the same seed; their
   ``metrics.jsonl`` must be identical but for the timings;
5. ``tests-cuda``: the tests that need CUDA (tests/test_vllm_backend.py);
6. ``tests-distributed``: tests/test_distributed.py on the GPU machine, in what time is left.

``--dry-run`` runs the same steps on a CPU with the tiny model (2 groups x 4, 2-step episodes,
8-token answers, one same-seed iteration), collects the tests without running them, limits
only the whole run's time, and writes into a temporary folder unless ``--results-dir`` is given.  Writes ``gpu_check.json`` and the gpu_check section
of ``SPEED.md`` in ``--results-dir`` (default: benchmarks/results).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECIPE = "alfworld_qwen2.5_1.5b"
#: Seconds each step may take at most (less when the budget is nearly spent).
LIMITS = {"model": 120, "iteration-hf": 300, "iteration-vllm": 300, "same-seed": 120, "tests-cuda": 120,
          "tests-distributed": 300}
CUDA_TESTS = ("tests/test_vllm_backend.py",)
DISTRIBUTED_TESTS = ("tests/test_distributed.py",)
#: The tiny model's size in the same-seed runs and the dry run (algos/policies/tiny.py).
TINY = ["model.name=tiny", "model.tiny.corpus_episodes=20", "model.tiny.hidden_size=32",
        "model.tiny.intermediate_size=64"]
TOKENIZER_NOTE = ("a byte-level BPE trained on ALFWorld's expert episodes, padded with unused tokens to Qwen2.5's "
                  "151,936 ids: Qwen2.5's own tokenizer is not on this machine and nothing downloads; prompts are "
                  "the env's text in that tokenizer's pieces, and every id the model samples decodes")
SECTION_START, SECTION_END = "<!-- gpu_check: start -->", "<!-- gpu_check: end -->"


def settings(args: argparse.Namespace) -> dict:
    shape = {"groups": 2, "group_size": 4} if args.dry_run else {"groups": 16, "group_size": 8}
    return {"config": RECIPE, **shape, "history_length": 2, "steps": args.steps, "max_new_tokens": args.max_new_tokens}


def iteration_overrides(args: argparse.Namespace, backend: str, run_dir: str) -> list[str]:
    """The recipe's config for one timed iteration, with the episode and answer lengths cut."""
    out = [f"env.kwargs={{split: train, max_episode_steps: {args.steps}}}",
           f"sampling.max_new_tokens={args.max_new_tokens}", f"model.generation={backend}", "env.eval_episodes=0", "progress=false", f"run_dir={run_dir}"]
    if args.dry_run:
        return [*out, *TINY, "model.device=cpu", "env.num_groups=2", "env.group_size=4"]
    return [*out, f"model.name={args.model_dir}"]


# -- the workers (each step's own process) --------------------------------------------
def model_worker(args: argparse.Namespace) -> dict:
    import torch

    from bench_train_scale import random_weights_model

    folder = random_weights_model("1.5b", Path(args.model_dir))
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "gpu_memory_gb": props.total_memory / 1e9, "torch": torch.__version__,
            "cuda": torch.version.cuda, "folder": str(folder), "tokenizer": TOKENIZER_NOTE}


def iteration_worker(args: argparse.Namespace) -> dict:
    """One timed iteration of the recipe on ``args.backend``; the trainer's own pieces (bench_train_scale)."""
    import gc

    import torch
    import transformers

    from bench_train_scale import peak_memory_mb, time_iteration
    from gigpo_gym.algos.cli import resolve_config
    from gigpo_gym.algos.training.config import load_config
    from gigpo_gym.algos.training.trainer import Trainer

    with tempfile.TemporaryDirectory(prefix="gpu-check-run-") as run_dir:
        cfg = load_config(resolve_config(RECIPE), iteration_overrides(args, args.backend, run_dir))
        trainer = Trainer(cfg)
        try:
            t0 = time.perf_counter()
            trainer.prepare()  # a vLLM engine starts here
            start_s = time.perf_counter() - t0
            trainer.freeze_reference()
            record = time_iteration(trainer, 1)
            if torch.cuda.is_available():  # what the device holds, the vLLM engine's pool included
                free, total = torch.cuda.mem_get_info()
                record["device_used_mb"] = (total - free) / 2**20
        finally:
            trainer.close()
            del trainer
            gc.collect()
    record["engine_start_s"] = start_s
    record["generated_tokens_per_s"] = record["generated_tokens"] / max(record["generate_s"], 1e-9)
    record["peak_memory_mb"] = peak_memory_mb()
    record["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    if torch.cuda.is_available():
        record["peak_reserved_mb"] = torch.cuda.max_memory_reserved() / 2**20
    if args.backend == "vllm":
        import vllm

        record["versions"]["vllm"] = vllm.__version__
    return record


# -- running steps ---------------------------------------------------------------------
def start(command: list[str], cwd: Path = ROOT) -> subprocess.Popen:
    """``command`` in a process group of its own (a timeout ends its children too).

    PYTHONSAFEPATH keeps the working folder off ``sys.path``: run from the checkout, ``-m``
    would import its ``gigpo_gym/`` folder in place of an installed (non-editable) package.
    """
    env = {**os.environ, "PYTHONSAFEPATH": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, deadline: float) -> tuple[int | None, str]:
    """Wait for ``proc`` until ``deadline``; (None, output so far) when it had to be stopped."""
    try:
        out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def failure(state: str, rc: int | None, output: str, what: str = "") -> dict:
    """A step that failed or ran out of time: the reason with the output's last line, and its tail."""
    last = tail(output, 1) or "no output"
    return {"status": state, "reason": f"{what}{state} (exit code {rc}): {last}", "output_tail": tail(output)}


def run_worker(kind: str, args: argparse.Namespace, deadline: float, *extra: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out_file = Path(f.name)
    command = [sys.executable, __file__, "--worker", kind, "--worker-out", str(out_file), "--steps", str(args.steps),
               "--max-new-tokens", str(args.max_new_tokens), *(["--dry-run"] if args.dry_run else []),
               *(["--model-dir", args.model_dir] if args.model_dir else []), *extra]
    rc, output = finish(start(command), deadline)
    try:
        if rc == 0:
            return {"status": "passed", **json.loads(out_file.read_text())}
        return failure("timed out" if rc is None else "failed", rc, output)
    finally:
        out_file.unlink(missing_ok=True)


def comparable(path: Path) -> list[dict]:
    """A run's logged metrics without the timings (which no two runs share)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if not (k.startswith("time/") or k.endswith(("seconds", "tokens_per_s")))}
            for row in rows]


def first_difference(first: list[dict], second: list[dict]) -> str | None:
    """Where two runs' logged metrics first differ (None: nowhere)."""
    for a, b in zip(first, second):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return (f"iteration {a.get('iteration')} {key}: {a.get(key)!r} in one process, "
                        f"{b.get(key)!r} in the other")
    if len(first) != len(second):
        return f"{len(first)} logged rows in one process, {len(second)} in the other"
    return None


def same_seed(args: argparse.Namespace, deadline: float) -> dict:
    """Two processes train the recipe (tiny model; 2 iterations, 1 in a dry run) with seed 0 at once; compare their logs."""
    iterations = 1 if args.dry_run else 2
    overrides = [*TINY, f"model.device={'cpu' if args.dry_run else 'cuda'}", "env.num_groups=2", "env.group_size=4",
                 "env.kwargs={split: train, max_episode_steps: 4}", "sampling.max_new_tokens=8", "env.eval_episodes=4",
                 f"iterations={iterations}", f"save_every={iterations}", "seed=0"]
    with tempfile.TemporaryDirectory(prefix="gpu-check-seed-") as tmp:
        procs = []
        for k in (1, 2):
            command = [sys.executable, "-m", "gigpo_gym.algos.cli", "train", "--config", RECIPE, "--no-progress",
                       "--run-dir", str(Path(tmp) / f"run{k}")]
            procs.append(start([*command, *(a for o in overrides for a in ("--set", o))], cwd=Path(tmp)))
        results = [finish(p, deadline) for p in procs]
        for rc, output in results:
            if rc != 0:
                return failure("timed out" if rc is None else "failed", rc, output, "a training run ")
        first, second = (comparable(Path(tmp) / f"run{k}" / "metrics.jsonl") for k in (1, 2))
    report = {"rows": len(first), "metrics_per_row": max(len(r) for r in first), "overrides": overrides}
    difference = first_difference(first, second)
    if difference is None and len(first) != iterations + 1:  # iteration 0 (the first evaluation), then each one
        difference = f"{len(first)} logged rows, expected {iterations + 1}"
    return {"status": "failed", **report, "reason": difference} if difference else {"status": "passed", **report}


def run_tests(files: tuple[str, ...], args: argparse.Namespace, deadline: float) -> dict:
    """pytest on ``files``: counts by outcome, each skip's reason (the dry run collects only)."""
    command = [sys.executable, "-m", "pytest", *files, "-p", "no:cacheprovider", *(
        ["--collect-only", "-q"] if args.dry_run else ["-rs", "-v"])]
    rc, output = finish(start(command), deadline)
    outcomes = re.findall(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", output, re.M)
    counts = {o.lower(): sum(1 for _, x in outcomes if x == o) for o in {x for _, x in outcomes}}
    report = {"command": " ".join(["python", *command[1:]]), "counts": counts,
              "skips": sorted(set(re.findall(r"^SKIPPED \[\d+\] (.+)$", output, re.M))),
              "failures": [t for t, x in outcomes if x in ("FAILED", "ERROR")]}
    if args.dry_run:
        collected = re.findall(r"^tests/\S+::\S+$", output, re.M)
        return {**report, "collected": len(collected),
                **({"status": "passed"} if rc == 0 else failure("failed", rc, output, "collecting "))}
    if rc is None:
        return {**report, "status": "timed out", "reason": f"stopped after {len(outcomes)} test(s)",
                "output_tail": tail(output)}
    if rc != 0:
        return {**report, **failure("failed", rc, output, "pytest "), "output_tail": tail(output, 30)}
    return {**report, "status": "passed"}


# -- the report ------------------------------------------------------------------------
def summary_line(name: str, r: dict) -> str:
    head = f"{name}: {r['status']} ({r.get('seconds', 0):.0f} s)"
    if r["status"] != "passed":
        return f"{head}: {r.get('reason', '')}"
    if name.startswith("iteration-"):
        return (f"{head}: iteration {r['iteration_s']:.1f} s = rollout {r['env_s'] + r['generate_s']:.1f} "
                f"(generation {r['generate_s']:.1f}, env {r['env_s']:.1f}) + update {r['update_s']:.1f} (reference "
                f"{r['reference_s']:.1f}, optimiser {r['optimize_s']:.1f}); {r['generated_tokens_per_s']:,.0f} "
                f"generated tok/s; {r['rows']} rows of {r['prompt_tokens'] / max(r['rows'], 1):.0f} prompt tokens on "
                f"average; peak memory {r['peak_memory_mb'] / 1024:.1f} GiB"
                + (f"; engine start {r['engine_start_s']:.0f} s" if name == "iteration-vllm" else ""))
    if name == "same-seed":
        return f"{head}: {r['rows']} logged rows of {r['metrics_per_row']} metrics identical in both processes"
    if name == "model":
        return f"{head}: {r['device']}, tokenizer: {r['tokenizer']}"
    counts = ", ".join(f"{n} {k}" for k, n in sorted(r["counts"].items())) or f"{r.get('collected', 0)} collected"
    return f"{head}: {counts}" + "".join(f"; skipped {skip}" for skip in r.get("skips", []))


def render_section(result: dict | None) -> str:
    lines = [SECTION_START, "## GPU check (`benchmarks/gpu_check.py`)", ""]
    if result is None:
        lines += ["GPU numbers are pending: no machine with a GPU has run this check yet. On one H100 or H200,",
                  "`python benchmarks/gpu_check.py` runs it (its steps stop within `--budget-s`, 450 s by default)",
                  "and writes this section and `benchmarks/results/gpu_check.json`. What it runs: docs/gpu.md."]
    else:
        s = result["settings"]
        lines += [f"`{result['command']}` on {result['date']}, {result['device']}: one iteration of "
                  f"`{s['config']}` ({s['groups']} groups x {s['group_size']}, history {s['history_length']}) with "
                  f"{s['steps']}-step episodes and {s['max_new_tokens']}-token answers, random weights"
                  f"{' (dry run: the tiny model on a CPU)' if result['dry_run'] else ''}. Peak memory: CUDA's max "
                  "allocated (a CPU: the process's peak RSS).", ""]
        lines += ["| generation | iteration | rollout: generation | rollout: env steps | update: old log-probs | "
                  "update: reference log-probs | update: optimiser | generated tok/s | peak memory |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for backend in ("hf", "vllm"):
            r = result["steps"].get(f"iteration-{backend}")
            if r and r["status"] == "passed":
                lines.append(f"| {backend} | {r['iteration_s']:.1f} s | {r['generate_s']:.1f} s | {r['env_s']:.1f} s | "
                             f"{r['score_s'] - r['reference_s']:.1f} s | {r['reference_s']:.1f} s | "
                             f"{r['optimize_s']:.1f} s | {r['generated_tokens_per_s']:,.0f} | "
                             f"{r['peak_memory_mb'] / 1024:.1f} GiB |")
            elif r:
                lines.append(f"| {backend} | {r['status']}: {r.get('reason', '')} | | | | | | | |")
        lines += ["", *(f"- {summary_line(name, r)}" for name, r in result["steps"].items()
                        if not name.startswith("iteration-"))]
    return "\n".join([*lines, SECTION_END])


def write_section(path: Path, section: str) -> None:
    """Put ``section`` in place of the file's gpu_check section (appended when there is none)."""
    text = path.read_text() if path.is_file() else "# gigpo-gym speed report\n"
    pattern = re.compile(re.escape(SECTION_START) + r".*?" + re.escape(SECTION_END), re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n")


def vllm_problem() -> str | None:
    """Why the vLLM backend cannot run here (the trainer's own check), or None."""
    from gigpo_gym.algos.policies.vllm import BackendUnavailable, check_vllm

    try:
        check_vllm()
    except BackendUnavailable as e:
        return str(e)
    return None


def missing(args: argparse.Namespace) -> list[str]:
    """What this machine lacks for the check."""
    needs = {"torch": "torch", "transformers": "transformers", "accelerate": "accelerate", "yaml": "pyyaml",
             "safetensors": "safetensors", "tokenizers": "tokenizers", "tensorboard": "tensorboard",
             "matplotlib": "matplotlib"}
    if not ({"tests-cuda", "tests-distributed"} <= set(args.skip)):
        needs["pytest"] = "pytest (or --skip tests-cuda tests-distributed)"
    out = [what for module, what in needs.items() if importlib.util.find_spec(module) is None]
    try:
        import gigpo_gym.algos  # noqa: F401  (this package and its own dependencies)
    except ImportError as e:
        out.append(f"this package's dependencies ({e})")
    if not out and not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            out.append(f"a CUDA GPU (torch {torch.__version__} sees none; --dry-run runs on a CPU)")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="the same steps on a CPU with the tiny model")
    p.add_argument("--steps", type=int, help="steps per episode (default 3; dry run 2; the recipe's are 50)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per answer (default 192; dry run 8; the recipe's 512)")
    p.add_argument("--budget-s", type=float, default=450.0, help="seconds for all steps together (default 450)")
    optional = [name for name in LIMITS if name != "model"]
    p.add_argument("--skip", nargs="+", default=[], choices=optional, metavar="STEP",
                   help=f"steps not to run: {', '.join(optional)}")
    p.add_argument("--results-dir", help="where gpu_check.json and SPEED.md go (default: benchmarks/results; "
                   "a dry run: a temporary folder)")
    p.add_argument("--worker", choices=["model", "iteration"], help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--backend", default="hf", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.steps = args.steps or (2 if args.dry_run else 3)
    args.max_new_tokens = args.max_new_tokens or (8 if args.dry_run else 192)
    if args.worker:
        work = model_worker if args.worker == "model" else iteration_worker
        Path(args.worker_out).write_text(json.dumps(work(args)))
        return 0
    lacking = missing(args)
    if lacking:
        print(f"gpu_check needs {', '.join(lacking)}: install them next to this package "
              '(pip install ".[train,test]"), then run it again', file=sys.stderr)
        return 2
    default = tempfile.mkdtemp(prefix="gpu-check-") if args.dry_run and not args.results_dir else HERE / "results"
    results_dir = Path(args.results_dir or default)
    results_dir.mkdir(parents=True, exist_ok=True)
    result = {"check": "gpu_check", "dry_run": args.dry_run, "date": time.strftime("%Y-%m-%d"),
              "command": " ".join(["python benchmarks/gpu_check.py", *sys.argv[1:]]), "machine": platform.platform(),
              "device": "CPU (dry run)", "settings": settings(args), "steps": {}}
    deadline = time.monotonic() + args.budget_s
    s = result["settings"]
    print(f"[gpu_check] one GiGPO iteration of {RECIPE}: {s['groups']} groups x {s['group_size']}, history 2, "
          f"{s['steps']}-step episodes, {s['max_new_tokens']}-token answers (the recipe's: 50 and 512); "
          f"steps stop within {args.budget_s:g} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-model-") as model_dir:
        args.model_dir = None if args.dry_run else model_dir
        for name in LIMITS:
            started = time.monotonic()
            step_deadline = deadline if args.dry_run else min(deadline, started + LIMITS[name])  # a CPU is slow
            if name in args.skip:
                r = {"status": "skipped", "reason": "--skip"}
            elif step_deadline - started < 30:
                r = {"status": "not run", "reason": f"the time budget (--budget-s {args.budget_s:g}) was spent"}
            elif name == "model" and args.dry_run:
                r = {"status": "skipped", "reason": "the dry run uses the tiny model and its tokenizer (a BPE "
                     "trained on the env's text, algos/policies/tiny.py)"}
            elif name.startswith("iteration-") and result["steps"]["model"]["status"] not in ("passed", "skipped"):
                r = {"status": "not run", "reason": "no model (the model step did not pass)"}
            elif name == "iteration-vllm" and vllm_problem():
                r = {"status": "skipped", "reason": vllm_problem()}
            elif name == "model":
                r = run_worker("model", args, step_deadline)
                result["device"] = r.get("device", "CUDA GPU")
            elif name.startswith("iteration-"):
                r = run_worker("iteration", args, step_deadline, "--backend", name.removeprefix("iteration-"))
            elif name == "same-seed":
                r = same_seed(args, step_deadline)
            else:
                r = run_tests(CUDA_TESTS if name == "tests-cuda" else DISTRIBUTED_TESTS, args, step_deadline)
            result["steps"][name] = {**r, "seconds": time.monotonic() - started}
            print(f"[gpu_check] {summary_line(name, result['steps'][name])}", flush=True)
            if r.get("output_tail"):
                print("    " + r["output_tail"].replace("\n", "\n    "), flush=True)
            (results_dir / "gpu_check.json").write_text(json.dumps(result, indent=2) + "\n")
            write_section(results_dir / "SPEED.md", render_section(result))
    print(f"[gpu_check] wrote {results_dir / 'gpu_check.json'} and its section of {results_dir / 'SPEED.md'}")
    return 0 if all(r["status"] in ("passed", "skipped") for r in result["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
