"""Step-group statistics of training runs over their iterations (docs/experiments/anchor_statistics.md).

For each run folder: the share of steps in step groups of two or more, the mean
step-group size, the share of those groups whose steps differ in outcome, mean |A^S|
and |A^E| and their ratio, the share of steps in a state their episode was in before, the
shares of step groups of size 1, 10-49 and 50 or more (the paper's Figure 5 buckets),
and the success rate, per iteration and over the run.  From the recorded task groups
themselves (a sample): of the step groups whose A^S is not all zero, the share whose
steps all took the same action (A^S then compares what happened after one action,
not two actions).  A run with records
(``records/``, see ``gigpo_gym.algos.training.records``) gives them all; an older run
gives what its ``metrics.jsonl`` logged (the step groups, the singleton groups and
the revisits, from the rollout rows), and null for the rest.

    python benchmarks/anchor_statistics.py runs/demo benchmarks/results/llm_study_runs/webshop/seed0-gigpo \\
        --out benchmarks/results/anchor_statistics.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from gigpo_gym.algos.training.records import read_record, recorded_iterations

KEYS = ("rows_in_shared_groups", "step_group_size_mean", "groups_of_size_1", "groups_of_size_10_to_49",
        "groups_of_size_50_up", "shared_groups_differing_outcome", "shared_groups_nonzero_step_advantage",
        "rows_nonzero_step_advantage", "rows_nonzero_episode_advantage", "mean_abs_step_advantage",
        "mean_abs_episode_advantage", "step_to_episode", "rows_revisiting", "success")


def size_shares(counts: dict[str, int]) -> dict[str, float]:
    """Shares of step groups (not of steps) by size, in the paper's buckets (its Figure 5 counts groups)."""
    total = sum(counts.values())
    share = lambda lo, hi: sum(v for k, v in counts.items() if lo <= int(k) <= hi) / total  # noqa: E731
    return {"groups_of_size_1": share(1, 1), "groups_of_size_10_to_49": share(10, 49),
            "groups_of_size_50_up": share(50, 10**9)}


def from_records(folder: Path) -> list[dict]:
    rows = []
    for it in recorded_iterations(folder / "records"):
        b = read_record(folder / "records", it)["batch"]
        step, episode = b["mean_abs_step_advantage"], b["mean_abs_episode_advantage"]
        rows.append({"iteration": it, **{k: b.get(k) for k in KEYS if k in b}, **size_shares(b["size_counts"]),
                     "success": b["success"].get("all"),
                     "step_to_episode": step / episode if step is not None and episode else None})
    return rows


def same_action_share(folder: Path) -> dict | None:
    """Recorded step groups of two or more with a non-zero A^S, and how many took one action in every step."""
    with_signal = one_action = 0
    for it in recorded_iterations(folder / "records"):
        record = read_record(folder / "records", it)
        for group in record["groups"]:
            members: dict[int, list[dict]] = {}
            for episode in group["episodes"]:
                for step in episode["steps"]:
                    members.setdefault(step["g"], []).append(step)
            for steps in members.values():
                if len(steps) >= 2 and any(abs(s["adv_s"] or 0.0) > 1e-9 for s in steps):
                    with_signal += 1
                    one_action += len({s["action"] if s["action"] is not None else s["reply"] for s in steps}) == 1
    return {"groups_with_step_advantage": with_signal, "of_them_one_action": one_action} if with_signal else None


def from_metrics(folder: Path) -> list[dict]:
    rows = []
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if m.get("iteration", 0) < 1 or "rollout/step_rows_in_shared_groups" not in m:
            continue
        hist = {k.rsplit("/", 1)[1]: v for k, v in m.items() if k.startswith("rollout/step_group_size_hist/")}
        rows.append({"iteration": m["iteration"], "rows_in_shared_groups": m["rollout/step_rows_in_shared_groups"],
                     "step_group_size_mean": m.get("rollout/step_group_size_mean"),
                     "groups_of_size_1": hist["1"] / sum(hist.values()) if hist else None,
                     "rows_revisiting": m.get("rollout/revisited_states"), "success": m.get("rollout/success")})
    return rows


def summary(rows: list[dict]) -> dict:
    out = {"iterations": len(rows)}
    for key in KEYS:
        values = [r.get(key) for r in rows if r.get(key) is not None]
        if values:
            out[key] = {"mean": float(np.mean(values)), "first": values[0], "last": values[-1],
                        "min": float(np.min(values)), "max": float(np.max(values))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (with records/ or metrics.jsonl)")
    parser.add_argument("--out", type=Path, help="write every run's rows and summary here (JSON)")
    args = parser.parse_args()
    results = {}
    for folder in args.runs:
        recorded = bool(recorded_iterations(folder / "records"))
        rows = from_records(folder) if recorded else from_metrics(folder)
        results[str(folder)] = {"source": "records" if recorded else "metrics.jsonl", "rows": rows, "summary": summary(rows),
                                "recorded_groups": same_action_share(folder) if recorded else None}
        s = results[str(folder)]["summary"]
        print(f"{folder} ({results[str(folder)]['source']}, {s['iterations']} iterations)")
        for key in KEYS:
            if key in s:
                v = s[key]
                print(f"  {key:38s} mean {v['mean']:.3f}  first {v['first']:.3f}  last {v['last']:.3f}  "
                      f"range [{v['min']:.3f}, {v['max']:.3f}]")
        same = results[str(folder)]["recorded_groups"]
        if same:
            print(f"  recorded step groups with A^S != 0: {same['groups_with_step_advantage']}, every step the same action: "
                  f"{same['of_them_one_action']} ({same['of_them_one_action'] / same['groups_with_step_advantage']:.1%})")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
