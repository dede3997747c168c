"""WebShop in a browser vs as text: env steps/s of both, and the site's requests/s on loopback.

    python benchmarks/bench_webshop_browser.py                  # 120 expert steps, 2,000 requests
    python benchmarks/bench_webshop_browser.py --steps 300 --requests 5000 --threads 8

Prints a Markdown table.  Both envs run the same expert episodes (reset not
counted as a step, but its time is included).  The request benchmark opens one
session per worker and then times a mix of page views (``GET /s/<id>``) and
actions (``POST /s/<id>/act`` + the redirect they answer with) on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gigpo_gym.envs.webshop.env import WebShopEnv  # noqa: E402


def expert_steps_per_s(env, text_env: WebShopEnv, steps: int) -> float:
    """Steps/s of ``env`` following the expert of ``text_env`` (stepped alongside when they differ)."""
    n, seed = 0, 0
    start = time.perf_counter()
    while n < steps:
        env.reset(seed=seed)
        if env is not text_env:
            text_env.reset(seed=seed)
        done = False
        while not done and n < steps:
            action = text_env.expert_action()
            if env is not text_env:
                text_env.step(action)
            _, _, done, _, _ = env.step(action)
            n += 1
        seed += 1
    return n / (time.perf_counter() - start)


def site_requests_per_s(url: str, requests: int, threads: int) -> tuple[float, float]:
    """(requests/s, p50 ms) of page views and actions spread over ``threads`` sessions."""
    import httpx

    def worker(count: int) -> list[float]:
        times = []
        with httpx.Client(base_url=url, timeout=10) as c:
            path = c.get("/start", params={"split": "test", "seed": count}).headers["location"]
            for i in range(count):
                t = time.perf_counter()
                if i % 4 == 3:  # an action: search, or back to search from the results
                    page = c.get(path).text
                    version = re.search(r'data-ws-version="(\d+)"', page).group(1)
                    el = re.search(r'name="el" value="(\d+)"', page).group(1)
                    c.post(f"{path}/act", data={"v": version, "el": el, "q": "green tea"})
                else:
                    assert c.get(path).status_code == 200
                times.append(time.perf_counter() - t)
        return times

    share = [requests // threads + (i < requests % threads) for i in range(threads)]
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        times = sorted(t for ts in pool.map(worker, share) for t in ts)
    elapsed = time.perf_counter() - start
    # an action is three requests (view, post, redirect); count what was sent
    sent = sum(3 if i % 4 == 3 else 1 for count in share for i in range(count))
    return sent / elapsed, 1000 * times[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=120, help="env steps per env (default 120)")
    parser.add_argument("--requests", type=int, default=2000, help="site requests to time (default 2,000)")
    parser.add_argument("--threads", type=int, default=4, help="client threads, one session each (default 4)")
    args = parser.parse_args(argv)

    from gigpo_gym.envs.webshop.browser_env import WebShopBrowserEnv
    from gigpo_gym.envs.webshop.site import LocalSite

    text_env = WebShopEnv(split="test")
    text_rate = expert_steps_per_s(text_env, text_env, args.steps * 20)
    site = LocalSite(text_env.shop)
    try:
        started = time.perf_counter()
        browser = WebShopBrowserEnv(split="test", site_url=site.url)
        startup = time.perf_counter() - started
        try:
            browser_rate = expert_steps_per_s(browser, WebShopEnv(split="test"), args.steps)
        finally:
            browser.close()
        requests_rate, p50 = site_requests_per_s(site.url, args.requests, args.threads)
    finally:
        site.stop()
    rows = [
        ("text env steps/s (expert)", f"{text_rate:,.0f}"),
        ("browser env steps/s (expert)", f"{browser_rate:,.1f}"),
        ("ratio browser / text", f"{browser_rate / text_rate:.5f} (1 : {text_rate / browser_rate:,.0f})"),
        ("browser start (Chromium + driver)", f"{startup:.2f} s"),
        (f"site requests/s on loopback ({args.requests:,} views/actions, {args.threads} threads)", f"{requests_rate:,.0f}"),
        ("site request p50 (view, or view+post+redirect)", f"{p50:.2f} ms"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"| {'measure'.ljust(width)} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
