"""Kill -9 a process that writes a training run's files, at seeded random moments.

``python tests/crash_writer.py RUN_DIR SEED KILLS`` forks a writer that loops over
what a training run writes (checkpoints with re-saves and pruning, metrics rows and
their truncation on resume, summary.json), SIGKILLs it after a seeded random delay,
checks that everything on disk can be read back, and forks the next writer on the
same folder.  It prints one JSON line of counts; any failed check raises.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import torch

from gigpo_gym.algos.training import checkpoint as ckpt
from gigpo_gym.algos.training.metrics import append_jsonl, keep_iterations, read_jsonl
from gigpo_gym.core.data import write_atomically

CYCLE = 7  # iterations 1..7 then again from 1: iterations 6 and 7 are re-saved over existing folders


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(512, 1024)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 512)).sum().backward()
    optimizer.step()  # the optimiser has state to save
    return model, optimizer


def write_forever(run: Path, first: int) -> None:
    model, optimizer = model_and_optimizer()
    metrics = run / "metrics.jsonl"
    for k in range(first, first + 10**6):
        iteration = k % CYCLE + 1
        value = float(k)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)
        ckpt.save_checkpoint(run / "checkpoints", iteration, model, optimizer, {"value": value}, keep=2)
        append_jsonl(metrics, {"iteration": iteration, "k": k, "pad": "m" * 3000})
        if iteration == CYCLE:
            keep_iterations(metrics, 3)  # as a resume from iteration 3 does
        write_atomically(run / "summary.json", json.dumps({"k": k, "pad": "s" * 300_000}))


def hidden(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob(".*")) if root.is_dir() else []


def check(run: Path) -> dict[str, bool]:
    """Every file the run wrote reads back; raises AssertionError otherwise."""
    root = run / "checkpoints"
    seen = {"debris": any(n.startswith((".tmp-", ".old-", ".del-")) for n in hidden(root)), "latest_missing": False}
    for folder in ckpt.list_checkpoints(root):  # what the listing calls complete is complete
        ckpt.verify_checkpoint(folder)
    pointer = root / ckpt.LATEST_FILE
    if pointer.is_file():
        named = ckpt.latest_checkpoint(root)
        if named.exists():
            ckpt.verify_checkpoint(named)  # never a half-written or half-deleted folder
        else:
            seen["latest_missing"] = True
    if ckpt.list_checkpoints(root) or any(n.startswith(".old-") for n in hidden(root)):
        notes: list[str] = []
        folder = ckpt.find_resumable(root, notes.append)
        assert not any(n.startswith((".tmp-", ".old-", ".del-")) for n in hidden(root)), hidden(root)
        model, optimizer = model_and_optimizer()
        state = ckpt.load_checkpoint(folder, model, optimizer, verify=False)
        assert all(bool((p == state["value"]).all()) for p in model.parameters()), f"{folder} mixes two saves"
        if pointer.is_file() and not seen["latest_missing"]:
            assert folder == ckpt.latest_checkpoint(root) and not notes, (folder, notes)
    summary = run / "summary.json"
    if summary.exists():
        json.loads(summary.read_text())
    rows = read_jsonl(run / "metrics.jsonl")
    keep_iterations(run / "metrics.jsonl", CYCLE)
    assert read_jsonl(run / "metrics.jsonl") == rows
    if rows:
        assert (run / "metrics.jsonl").read_text().endswith("\n")
    return seen


def in_child(fn, *args) -> dict:
    """Run ``fn`` in a forked process and return its result (torch computes only in children:
    a parent whose thread pools ran would deadlock its forks)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, json.dumps(fn(*args)).encode())
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"the check after a kill failed (status {status}); see stderr"
    return json.loads(text)


def main(run: Path, seed: int, kills: int) -> None:
    torch.set_num_threads(1)
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])  # its first construction imports for a second
    rng = random.Random(seed)
    counts = {"kills": 0, "debris": 0, "latest_missing": 0}
    for round_ in range(kills):
        delay = rng.uniform(0.01, 0.3)
        pid = os.fork()
        if pid == 0:  # the writer: runs until killed
            try:
                write_forever(run, first=round_ * 10_000)
            finally:
                os._exit(1)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"the writer ended by itself ({status})"
        counts["kills"] += 1
        for key, hit in in_child(check, run).items():
            counts[key] += hit
    print(json.dumps(counts))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
