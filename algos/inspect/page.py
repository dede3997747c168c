"""``gigpo-gym inspect``: a run's recorded task groups, or a leaderboard run's episodes, as one HTML page.

The page is one file that opens from disk and loads nothing: the data (JSON), the
script, the styles and the charts (SVG) are all inline.  A training run (or a TRL
output folder of ``GiGPOTrainer``) shows, for each recorded task group, its episodes
side by side aligned by step, each step coloured by its step advantage and marked
with its step group (hover or click lights the group up), with charts of the whole
batches over the iterations.  A leaderboard episode file (``*.episodes.jsonl``) or
result file shows its episodes, with no advantages (a leaderboard does not train).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from gigpo_gym.algos.inspect.plots import bar_chart, line_chart
from gigpo_gym.algos.training.records import RECORDS_DIR, RECORDS_VERSION, read_record, recorded_iterations

#: Files or folders that make a folder a training run (the trainer's) or a TRL output folder.
RUN_MARKERS = ("config.yaml", "metrics.jsonl", "checkpoints", "trainer_state.json")
JOURNAL_SUFFIX = ".episodes.jsonl"
_HERE = Path(__file__).resolve().parent


class InspectError(ValueError):
    """What ``gigpo-gym inspect`` cannot show, in one line that says what to do."""


def _is_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_MARKERS) or any(folder.glob("checkpoint-*"))


def load(path: str | Path, iteration: int | None = None) -> dict[str, Any]:
    """The page's data for ``path``: a run folder (its records), or a leaderboard episode or result file."""
    path = Path(path)
    if path.is_file():
        return load_leaderboard(path)
    if not path.is_dir():
        raise InspectError(f"{path} does not exist: pass a training run folder (gigpo-gym train's run_dir, or a TRL "
                           f"output_dir of GiGPOTrainer) or a leaderboard episode file (*{JOURNAL_SUFFIX})")
    if not recorded_iterations(path / RECORDS_DIR):
        if _is_run(path):
            raise InspectError(f"{path} is a run without records (written before runs recorded their iterations, or "
                               f"with records.groups: 0): train it again with records.groups > 0 (the default), or "
                               f"resume it, to record the iterations it runs")
        raise InspectError(f"{path} is not a training run (no {', '.join(RUN_MARKERS)} or {RECORDS_DIR}/ in it) nor a "
                           f"leaderboard file: pass a folder written by gigpo-gym train or GiGPOTrainer, or a "
                           f"*{JOURNAL_SUFFIX} file")
    return load_run(path, iteration)


def load_run(folder: Path, iteration: int | None = None) -> dict[str, Any]:
    """Every iteration's batch statistics, and the groups of ``iteration`` (None: of every iteration)."""
    iterations = recorded_iterations(folder / RECORDS_DIR)
    if iteration is not None and iteration not in iterations:
        raise InspectError(f"iteration {iteration} is not recorded in {folder} (recorded: {_spans(iterations)}): "
                           f"pick one of those")
    records = {}
    for it in iterations:
        try:
            record = read_record(folder / RECORDS_DIR, it)
        except (OSError, EOFError, ValueError) as e:
            raise InspectError(f"{folder / RECORDS_DIR} holds a damaged record of iteration {it} ({e}): delete "
                               "that file, or resume the run from an earlier checkpoint to write it again") from None
        if record.get("records") != RECORDS_VERSION:
            raise InspectError(f"the record of iteration {it} in {folder} has format {record.get('records')!r}, "
                               f"this gigpo-gym reads format {RECORDS_VERSION}: inspect it with the version that wrote it")
        records[it] = record
    shown = [iteration] if iteration is not None else iterations
    last = records[iterations[-1]]
    return {
        "kind": "run", "title": folder.resolve().name, "path": str(folder), "algo": last["algo"],
        "source": last["source"], "iterations": iterations, "initial": shown[-1],
        "records": {str(it): {k: records[it][k] for k in ("groups", "texts", "batch", "grouping")} for it in shown},
        "charts": run_charts(iterations, [records[it]["batch"] for it in iterations]),
    }


def run_charts(iterations: list[int], stats: list[dict[str, Any]]) -> list[str]:
    """The charts over the iterations (SVG text): step groups, outcomes, advantages, success, revisits."""

    def series(key: str) -> list[float | None]:
        return [s.get(key) for s in stats]

    advantages = {"|A^S| step": series("mean_abs_step_advantage"), "|A^E| episode": series("mean_abs_episode_advantage"),
                  "|A| estimator": series("mean_abs_advantage")}
    types = sorted({t for s in stats for t in s.get("success", {}) if t != "all"})
    success = {"all": [s.get("success", {}).get("all") for s in stats],
               **{t: [s.get("success", {}).get(t) for s in stats] for t in types}}
    return [
        line_chart("Steps in step groups of size >= 2", iterations, {"share": series("rows_in_shared_groups")},
                   y_min=0.0, y_max=1.0),
        line_chart("Mean step-group size", iterations, {"rows": series("step_group_size_mean")}, y_min=0.0),
        line_chart("Groups of >= 2 whose outcomes differ", iterations,
                   {"share": series("shared_groups_differing_outcome")}, y_min=0.0, y_max=1.0),
        line_chart("Mean |advantage|", iterations, {k: v for k, v in advantages.items() if any(x is not None for x in v)},
                   y_min=0.0),
        line_chart("Steps with a non-zero advantage", iterations,
                   {k: v for k, v in {"A^S": series("rows_nonzero_step_advantage"),
                                      "A^E": series("rows_nonzero_episode_advantage")}.items()
                    if any(x is not None for x in v)}, y_min=0.0, y_max=1.0),
        line_chart("Success per task type", iterations, success, y_min=0.0, y_max=1.0),
        line_chart("Steps in a state their episode was in before", iterations, {"share": series("rows_revisiting")},
                   y_min=0.0, y_max=1.0),
    ]


def load_leaderboard(path: Path) -> dict[str, Any]:
    """The episodes of a leaderboard episode file (``*.episodes.jsonl``) or result file (``*.json``)."""
    if path.name.endswith(JOURNAL_SUFFIX):
        header, episodes = None, []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                if number == 1:
                    break
                continue  # a line a killed run cut short
            if header is None:
                header = item
            elif "episode" in item:
                episodes.append(item["episode"])
        if header is None or "config_hash" not in header:
            raise InspectError(f"{path} is not a leaderboard episode file (its first line is no header with a "
                               "config_hash): pass the *.episodes.jsonl file gigpo-gym leaderboard wrote")
        title = f"{header.get('spec', '?')} | {header.get('policy', '?')}"
    else:
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            result = None
        if not isinstance(result, dict) or not isinstance(result.get("episodes"), list) or "spec" not in result:
            raise InspectError(f"{path} is neither a run folder nor a leaderboard file: pass a training run folder, "
                               f"a *{JOURNAL_SUFFIX} episode file or a leaderboard result *.json")
        episodes = result["episodes"]
        title = f"{result['spec'].get('name', '?')} | {result.get('policy', {}).get('name', '?')}"
    if not episodes:
        raise InspectError(f"{path} holds no finished episode yet: run or resume the leaderboard first")
    episodes.sort(key=lambda e: e.get("index", 0))
    by_type: dict[str, list[bool]] = {}
    for e in episodes:
        by_type.setdefault(e.get("task_type") or "?", []).append(bool(e.get("won")))
    success = {"all": sum(e.get("won", False) for e in episodes) / len(episodes),
               **{t: sum(w) / len(w) for t, w in sorted(by_type.items())}}
    return {"kind": "leaderboard", "title": title, "path": str(path), "episodes": episodes,
            "charts": [bar_chart("Success per task type", success)]}


def _spans(numbers: list[int]) -> str:
    """1-5, 8, 10-12."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def render(data: dict[str, Any]) -> str:
    """The page (one self-contained HTML document) for ``load``'s data."""
    payload = json.dumps({k: v for k, v in data.items() if k != "charts"}, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("<", "\\u003c")  # nothing in the data can close the script element
    heading = "Episodes of a leaderboard run" if data["kind"] == "leaderboard" else "Step groups of a training run"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{html.escape(data['title'])}: gigpo-gym inspect</title>"
        f"<style>{(_HERE / 'page.css').read_text(encoding='utf-8')}</style></head><body>"
        f"<header><h1>{html.escape(heading)}: {html.escape(data['title'])}</h1>"
        f"<p class=\"path\">{html.escape(data['path'])}</p></header>"
        f"<section id=\"charts\">{''.join(data['charts'])}</section>"
        "<section id=\"controls\"></section><section id=\"summary\"></section><main id=\"view\"></main>"
        f"<script id=\"inspect-data\" type=\"application/json\">{payload}</script>"
        f"<script>{(_HERE / 'page.js').read_text(encoding='utf-8')}</script></body></html>\n"
    )


def write_page(path: str | Path, out: str | Path | None = None, iteration: int | None = None) -> Path:
    """Render ``path`` (see ``load``) into ``out`` (default: ``inspect.html`` in the run folder, or beside the file)."""
    path = Path(path)
    data = load(path, iteration)
    if out is None:
        out = (path if path.is_dir() else path.parent) / ("inspect.html" if path.is_dir() else f"{path.name}.html")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(data), encoding="utf-8")
    return out
