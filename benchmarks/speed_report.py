"""Run every speed benchmark of the suite in one go and write ``benchmarks/results/SPEED.md``.

Each benchmark script runs in its own process (small sizes by default, the scripts'
own defaults with ``--full``); its printed table goes into the report verbatim, and
the ratios that matter are pulled out into one summary, each measured against its
reference *in the same run*:

* native ALFWorld engine vs the TextWorld engine on the same games (``bench_alfworld_reference.py``);
* GiGPO vs GRPO advantage cost (``bench_advantages.py``);
* async vs sync grouped stepping (``bench_grouped.py``);
* browser vs text WebShop (``bench_webshop_browser.py``).

A benchmark that cannot run here (missing script, optional dependency, browser) is
listed as "not run: <reason>", never silently left out.  Sections that other scripts
write into the report between ``<!-- NAME: start -->`` and ``<!-- NAME: end -->``
(the GPU check, the served-model and LLM-training timings) are kept as they are.

    python benchmarks/speed_report.py                 # small sizes, a few minutes
    python benchmarks/speed_report.py --full          # the scripts' default sizes (long)
    python benchmarks/speed_report.py --only advantages grouped
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "SPEED.md"


@dataclass(frozen=True)
class Bench:
    key: str
    script: str
    title: str
    small: tuple[str, ...]
    #: Optional dependency check: returns a reason it cannot run, or None.
    check: Callable[[], str | None] = lambda: None
    #: Pulls "(comparison, ratio text)" pairs out of the printed output.
    ratios: Callable[[str], list[tuple[str, str]]] = lambda out: []


def _missing_module(name: str, extra: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if importlib.util.find_spec(name) is None:
            return f'needs {name} (pip install ".[{extra}]" in a gigpo-gym clone)'
        return None

    return check


def _browser_check() -> str | None:
    if importlib.util.find_spec("selenium") is None:
        return 'needs selenium (pip install ".[browser]" in a gigpo-gym clone)'
    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
        return "needs a Chromium binary (apt-get install chromium chromium-driver)"
    return None


def _reference_check() -> str | None:
    for module in ("textworld", "fast_downward"):
        if importlib.util.find_spec(module) is None:
            return f'needs {module} (pip install ".[alfworld]" in a gigpo-gym clone)'
    return None


def _advantage_ratios(out: str) -> list[tuple[str, str]]:
    pairs = []
    for line in out.splitlines():
        cells = line.split()
        if len(cells) == 11 and cells[0].isdigit():
            pairs.append((f"GiGPO / GRPO advantage time, {int(cells[0]):,} rows",
                          f"{cells[8]}x, one thread {cells[9]}x (with batch build {cells[10]}x); GRPO {cells[4]} s, "
                          f"GiGPO {cells[5]} s, one thread {cells[6]} s (numpy path {cells[7]} s)"))
    return pairs


def _grouped_ratios(env: str) -> Callable[[str], list[tuple[str, str]]]:
    def parse(out: str) -> list[tuple[str, str]]:
        rates = dict(re.findall(r"^(sync|async|ray)\s+([\d,]+)\s", out, flags=re.M))
        pairs = []
        for line in out.splitlines():
            m = re.match(r"(\w+) / (\w+) = ([\d.]+)", line.strip())
            if m:
                detail = f"{rates.get(m[1], '?')} vs {rates.get(m[2], '?')} env steps/s"
                pairs.append((f"{m[1]} vs {m[2]} grouped stepping, {env}", f"{m[3]}x ({detail})"))
        return pairs

    return parse


def _browser_ratios(out: str) -> list[tuple[str, str]]:
    for line in out.splitlines():
        if "ratio browser / text" in line:
            value = line.split("|")[2].strip()
            return [("browser vs text WebShop env steps/s", value)]
    return []


def _reference_ratios(out: str) -> list[tuple[str, str]]:
    """Rows of the table whose header has a ``native/TextWorld`` column (last cell like ``2,222x``)."""
    pairs, in_table = [], False
    for line in out.splitlines():
        if "native/TextWorld" in line:
            in_table = True
            continue
        cells = re.split(r"\s{2,}", line.strip())
        if in_table and len(cells) == 4 and cells[-1].endswith("x"):
            pairs.append((f"native vs TextWorld ALFWorld, {cells[0]}", f"{cells[3]} ({cells[1]} vs {cells[2]})"))
    return pairs


#: The benchmarks that compare against a reference (their ratios make the summary).
COMPARISONS = ("alfworld_reference", "advantages", "grouped", "grouped_searchqa", "webshop_browser")

BENCHES = (
    Bench("alfworld_reference", "bench_alfworld_reference.py", "ALFWorld: native engine vs TextWorld (same games)",
          ("--games", "4", "--steps", "15"), _reference_check, _reference_ratios),
    Bench("advantages", "bench_advantages.py", "Advantage cost: GiGPO vs GRPO",
          ("--rows", "1000", "10000", "100000", "1000000", "--repeats", "3"), ratios=_advantage_ratios),
    Bench("grouped", "bench_grouped.py", "Grouped stepping: async vs sync (ALFWorld)",
          ("--groups", "8", "--group-size", "8", "--steps", "200", "--workers", "2"),
          ratios=_grouped_ratios("ALFWorld, 8x8 envs, 2 workers")),
    Bench("grouped_searchqa", "bench_grouped.py", "Grouped stepping: async vs sync (SearchQA)",
          ("--env-id", "gigpo_gym/SearchQA-v0", "--groups", "8", "--group-size", "8", "--steps", "50", "--workers", "2"),
          ratios=_grouped_ratios("SearchQA, 8x8 envs, 2 workers")),
    Bench("webshop_browser", "bench_webshop_browser.py", "WebShop: browser vs text",
          ("--steps", "60", "--requests", "1000", "--threads", "2"), _browser_check, _browser_ratios),
    Bench("alfworld", "bench_alfworld.py", "ALFWorld native engine: steps, resets, memory",
          ("--steps", "3000", "--resets", "100", "--envs", "256", "--memory-envs", "40")),
    Bench("webshop", "bench_webshop.py", "WebShop text env and search",
          ("--products", "0", "--steps", "3000", "--queries", "100")),
    Bench("searchqa", "bench_searchqa.py", "SearchQA env and BM25 retrieval",
          ("--sizes", "10000", "--queries", "100", "--env-steps", "1000")),
    Bench("rollout", "bench_rollout.py", "Rollout generation throughput (tiny model, CPU)",
          ("--models", "tiny", "--groups", "2", "--group-size", "2", "--max-steps", "3", "--device", "cpu"),
          _missing_module("torch", "train")),
)


def run_bench(bench: Bench, full: bool, timeout: float) -> dict:
    """Run one script; returns status ('ok', 'not run', 'failed'), output and seconds."""
    script = HERE / bench.script
    if not script.is_file():
        return {"status": "not run", "reason": f"{bench.script} does not exist in this checkout", "seconds": 0.0}
    reason = bench.check()
    if reason:
        return {"status": "not run", "reason": reason, "seconds": 0.0}
    argv = [sys.executable, str(script), *(() if full else bench.small)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=HERE.parent,
                              env={**os.environ, "TQDM_DISABLE": "1"})
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {timeout:.0f} s", "seconds": timeout,
                "command": " ".join(argv[1:])}
    seconds = time.perf_counter() - started
    result = {"command": "python " + " ".join(str(Path(a).relative_to(HERE.parent)) if a == str(script) else a
                                              for a in argv[1:]),
              "seconds": seconds, "output": proc.stdout.rstrip()}
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
        return {**result, "status": "failed", "reason": f"exit code {proc.returncode}: {tail}"}
    return {**result, "status": "ok", "ratios": bench.ratios(proc.stdout)}


def _machine() -> str:
    return (f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPU cores "
            f"(shared machine: absolute numbers vary; the ratios are measured in the same run)")


#: A section another script owns inside the report (kept when the report is rewritten).
KEPT_SECTION = re.compile(r"<!-- (?P<name>[\w-]+): start -->.*?<!-- (?P=name): end -->", re.S)


def kept_sections(path: Path) -> list[str]:
    """The marked sections of an existing report, in order (none when there is no report)."""
    return [m.group(0) for m in KEPT_SECTION.finditer(path.read_text())] if path.is_file() else []


def write_report(results: list[tuple[Bench, dict]], path: Path, full: bool) -> None:
    kept = kept_sections(path)
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# gigpo-gym speed report", "",
             f"Written by `python benchmarks/speed_report.py{' --full' if full else ''}` on {now}. {_machine()}.", "",
             "## Ratios (each against its reference, measured in the same run)", "",
             "| comparison | ratio | benchmark |", "|---|---|---|"]
    for bench, r in results:
        if bench.key not in COMPARISONS:
            continue
        if r["status"] != "ok":
            lines.append(f"| {bench.title} | {r['status']}: {r['reason'].splitlines()[0]} | `{bench.script}` |")
            continue
        pairs = r.get("ratios") or [(bench.title, "ran, but no ratio line was found in its output (see below)")]
        for name, value in pairs:
            lines.append(f"| {name} | {value} | `{bench.script}` |")
    lines += ["", "For scale: the GiGPO paper reports 0.01 s of anchor grouping + 0.53 s of step advantages per "
              "iteration (128 trajectories x up to 50 steps, about 6,400 rows), 0.15% of a 363 s iteration.", ""]
    for bench, r in results:
        lines += [f"## {bench.title}", ""]
        if r["status"] == "not run":
            lines += [f"Not run: {r['reason']}.", ""]
            continue
        lines += [f"`{r.get('command', bench.script)}` ({r['seconds']:.0f} s)", ""]
        if r["status"] == "failed":
            lines += [f"Failed: {r['reason']}", ""]
        if r.get("output"):
            lines += ["```", r["output"], "```", ""]
    for section in kept:
        lines += [section, ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the scripts' own default sizes (much longer)")
    parser.add_argument("--only", nargs="+", choices=[b.key for b in BENCHES], help="run only these benchmarks")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per benchmark (default 300)")
    parser.add_argument("--out", default=str(OUT), help=f"report path (default {OUT.relative_to(HERE.parent)})")
    args = parser.parse_args(argv)
    chosen = [b for b in BENCHES if not args.only or b.key in args.only]
    results = []
    for bench in chosen:
        print(f"[speed] {bench.key} ...", file=sys.stderr, flush=True)
        r = run_bench(bench, args.full, args.timeout)
        print(f"[speed] {bench.key}: {r['status']} ({r['seconds']:.0f} s){' - ' + r['reason'].splitlines()[0] if r.get('reason') else ''}",
              file=sys.stderr, flush=True)
        results.append((bench, r))
    write_report(results, Path(args.out), args.full)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
