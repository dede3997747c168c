"""Merge leaderboard result files into ``LEADERBOARD.md`` and a PNG chart.

Every ``<spec>__<policy>.json`` of the results folder (the names the runner writes;
other JSON files there, e.g. speed numbers, are not results) must follow ``benchmarks/leaderboard/result_schema.json``
(a file that does not is an error naming it and the field).  When a spec has two
results for the same policy name, the newest (``created``) wins.  The paper's
published numbers come from ``benchmarks/leaderboard/paper_gigpo.json`` and are
printed as their own rows, marked "reported by the paper".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gigpo_gym.algos.leaderboard.specs import BENCHMARKS_DIR, LeaderboardError, default_results_dir, load_result

PAPER_FILE = BENCHMARKS_DIR / "leaderboard" / "paper_gigpo.json"
PAPER_MARK = "reported by the paper"
#: Metrics shown as percentages (fractions in the result files).
PERCENT = ("success", "score", "em", "f1")
#: Display order of policy kinds inside one table.
KIND_ORDER = {"expert": 0, "checkpoint": 1, "hf": 2, "smollm2": 3, "api": 4, "sb3": 5, "random": 6}
#: Policy kinds that decode with an LLM (greedy or sampled).
LLM_KINDS = ("checkpoint", "hf", "smollm2", "api")
ALFWORLD_TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")


def collect_results(results_dir: str | Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Spec name -> validated results (one per policy name, the newest), sorted for display."""
    folder = Path(results_dir) if results_dir is not None else default_results_dir()
    files = sorted(p for p in folder.glob("*__*.json") if p.is_file())
    if not files:
        raise LeaderboardError(f"no result files (<spec>__<policy>.json) in {folder}; run `gigpo-gym leaderboard --policy ...` first")
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for path in files:
        result = load_result(path)
        key = (result["spec"]["name"], result["policy"]["name"])
        if key not in newest or result["created"] > newest[key]["created"]:
            newest[key] = result
    by_spec: dict[str, list[dict[str, Any]]] = {}
    for (spec_name, _), result in sorted(newest.items()):
        by_spec.setdefault(spec_name, []).append(result)
    for rows in by_spec.values():
        rows.sort(key=lambda r: (KIND_ORDER.get(r["policy"]["kind"], 9), -r["metrics"]["success"]["mean"]))
    return by_spec


def fmt(stat: dict[str, Any], percent: bool = True) -> str:
    scale = 100.0 if percent else 1.0
    return f"{scale * stat['mean']:.1f} ± {scale * stat['stderr']:.1f}"


def _spec_table(rows: list[dict[str, Any]]) -> list[str]:
    spec = rows[0]["spec"]
    metrics = ["success", *spec["final_info_metrics"]]
    types = sorted({t for r in rows for t in r["per_task_type"]},
                   key=lambda t: (ALFWORLD_TYPES.index(t) if t in ALFWORLD_TYPES else 99, t))
    show_types = len(types) > 1
    head = ["policy", "decoding", *metrics, *(types if show_types else []), "episodes", "crashed", "mean steps",
            "tokens / episode", "wall s", "config"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["policy"]["name"], _decoding(r)]
        cells += [fmt(r["metrics"][m]) for m in metrics]
        if show_types:
            cells += [fmt(r["per_task_type"][t]) if t in r["per_task_type"] else "–" for t in types]
        cells += [str(r["counts"]["episodes"]), str(r["counts"]["crashed"]), f"{r['metrics']['steps']['mean']:.1f}",
                  _tokens(r), f"{r['wall_seconds']:.0f}", f"`{r['config_hash'][:8]}`"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _tokens(result: dict[str, Any]) -> str:
    """A served model's mean prompt + completion tokens per episode ("–" for other policies)."""
    per = result.get("usage", {}).get("per_episode")
    if not per:
        return "–"
    return f"{per['prompt_tokens']['mean']:,.0f} + {per['completion_tokens']['mean']:,.0f}"


def _decoding(result: dict[str, Any]) -> str:
    """"greedy" or "sampled, T=..." for LLM policies (a sampled row repeats within its stderr)."""
    if result["policy"]["kind"] not in LLM_KINDS:
        return "–"
    if result["policy"]["deterministic"]:
        return "greedy"
    return f"sampled, T={result['sampling'].get('temperature', 0):g}"


def _paper_section(paper: dict[str, Any]) -> list[str]:
    lines = [f"## GiGPO paper: {PAPER_MARK}", "", f"Source: {paper['source']}.", "", f"*{paper['caveat']}*", ""]
    head = ["model / method", "source", "ALFWorld all", *ALFWORLD_TYPES, "WebShop score", "WebShop success",
            "SearchQA avg EM (7 sets)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in paper["rows"]:
        a, w, s = row.get("alfworld", {}), row.get("webshop", {}), row.get("searchqa", {})
        cells = [row["name"], PAPER_MARK, *(_num(a.get(k)) for k in ("all", *ALFWORLD_TYPES)),
                 _num(w.get("score")), _num(w.get("success")), _num(s.get("em_avg7"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _num(value: Any) -> str:
    return "–" if value is None else f"{float(value):.1f}"


def load_paper(path: str | Path = PAPER_FILE) -> dict[str, Any]:
    path = Path(path)
    try:
        paper = json.loads(path.read_text())
        for key in ("source", "caveat", "rows"):
            paper[key]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise LeaderboardError(f"{path}: cannot read the paper's rows ({type(e).__name__}: {e})") from e
    return paper


def results_folder_name(results_dir: str | Path) -> str:
    """How the board names the folder its rows come from: from the checkout's root when inside it (the committed
    board's ``benchmarks/results/``), else its absolute path."""
    folder = Path(results_dir).resolve()
    root = BENCHMARKS_DIR.resolve().parent
    return f"{folder.relative_to(root).as_posix()}/" if folder.is_relative_to(root) else f"{folder.as_posix()}/"


def render_markdown(by_spec: dict[str, list[dict[str, Any]]], paper: dict[str, Any] | None,
                    source: str = "benchmarks/results/") -> str:
    lines = [
        "# gigpo-gym leaderboard",
        "",
        f"Written by `gigpo-gym leaderboard render` from the result files in `{source}` "
        "(do not edit by hand). Success, score, EM and F1 are percentages, ± one standard error of the mean "
        "over episodes. A crashed episode counts as a failure and is counted in *crashed*. *config* is the "
        "result's config hash (spec + policy + sampling + episodes + package version; for a served model its "
        "model id, prompt template and decoding settings); *tokens / episode* is a served model's mean prompt + "
        "completion tokens per episode (a served row repeats as far as its server decodes deterministically). "
        "Rerunning "
        "`gigpo-gym leaderboard --policy SPEC --envs NAME` with the same hash reproduces the row: exactly for "
        "deterministic policies (greedy decoding included), and for *sampled* LLM rows exactly with the same "
        "`--seed` and `--batch-size`, otherwise within the standard error. Rows with fewer episodes than the "
        "spec (slow models) played the spec's first episodes.",
        "",
    ]
    for name, rows in by_spec.items():
        spec = rows[0]["spec"]
        lines += [f"## {spec.get('title', name)}", "",
                  f"Spec `{name}` v{spec['spec_version']}: `{spec['env_id']}` {json.dumps(spec['env_kwargs'])}, "
                  f"seeds {spec['seeds']}, up to {spec['episodes']} episodes per seed, {spec['max_steps']} steps max. "
                  f"{spec['reward']}", ""]
        lines += _spec_table(rows)
        lines.append("")
    if paper is not None:
        lines += _paper_section(paper)
        lines.append("")
    return "\n".join(lines)


def render_chart(by_spec: dict[str, list[dict[str, Any]]], path: str | Path) -> Path | None:
    """Horizontal bars of success (± standard error) per policy, one panel per spec."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the table is the product; the chart is a convenience
        return None
    names = list(by_spec)
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 1.2 + 0.45 * sum(len(v) for v in by_spec.values()) + len(names)),
                             squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        rows = by_spec[name]
        labels = [r["policy"]["name"] for r in rows][::-1]
        means = [100 * r["metrics"]["success"]["mean"] for r in rows][::-1]
        errors = [100 * r["metrics"]["success"]["stderr"] for r in rows][::-1]
        bars = ax.barh(labels, means, xerr=errors, color="#4c72b0", capsize=3)
        ax.bar_label(bars, labels=[f"{m:.1f}" for m in means], padding=4, fontsize=7)
        ax.set_xlim(0, 112)
        ax.set_title(name, fontsize=10)
        ax.tick_params(labelsize=8)
    axes[-1, 0].set_xlabel("success (%), ± standard error")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render(results_dir: str | Path | None = None, out: str | Path | None = None, chart: str | Path | None = None,
           paper_file: str | Path | None = PAPER_FILE) -> tuple[Path, Path | None]:
    """Write LEADERBOARD.md (and the chart) from the results folder; returns their paths."""
    results_dir = Path(results_dir) if results_dir is not None else default_results_dir()
    by_spec = collect_results(results_dir)
    paper = load_paper(paper_file) if paper_file is not None else None
    out = Path(out) if out is not None else Path(results_dir) / "LEADERBOARD.md"
    chart = Path(chart) if chart is not None else out.with_name("leaderboard.png")
    out.write_text(render_markdown(by_spec, paper, results_folder_name(results_dir)))
    return out, render_chart(by_spec, chart)
