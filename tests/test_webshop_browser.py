"""WebShop-Browser-v0 in real headless Chromium: parity with the text env, screenshots, crashes, cleanup."""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest

import gigpo_gym  # noqa: F401
from gigpo_gym.envs.webshop.browser import (
    DEFAULT_CHROMEDRIVER,
    DEFAULT_CHROMIUM,
    INSTALL_COMMAND,
    BrowserUnavailableError,
)
from gigpo_gym.envs.webshop.env import WebShopEnv

try:
    import psutil
    import selenium  # noqa: F401

    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False
HAVE_CHROMIUM = os.access(DEFAULT_CHROMIUM, os.X_OK) and os.access(DEFAULT_CHROMEDRIVER, os.X_OK)
needs_browser = [
    pytest.mark.browser,
    pytest.mark.skipif(not HAVE_CHROMIUM, reason=f"Chromium and chromedriver missing: {INSTALL_COMMAND}"),
    pytest.mark.skipif(not HAVE_SELENIUM, reason='selenium missing: pip install ".[browser]"'),
]


def browser_test(test):
    """Mark a test as needing the real browser (skipped, with the install command, where it is missing)."""
    for mark in needs_browser:
        test = mark(test)
    return test


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COMPARED = ("admissible_actions", "anchor", "anchor_text", "action_valid", "won", "task_id", "task_type", "score",
            "instruction", "page", "reward_info", "purchased")  # fmt: skip


def test_missing_chromium_names_the_install_command():
    from gigpo_gym.envs.webshop.browser_env import WebShopBrowserEnv

    install = r"Chromium not found at /nowhere/chromium; .*apt-get install -y chromium chromium-driver"
    with pytest.raises(BrowserUnavailableError, match=install):
        WebShopBrowserEnv(chromium_path="/nowhere/chromium")
    with pytest.raises(BrowserUnavailableError, match="chromedriver not found at /nowhere/chromedriver"):
        WebShopBrowserEnv(chromium_path=sys.executable, chromedriver_path="/nowhere/chromedriver")


def test_an_unreachable_site_url_is_a_clear_error():
    import socket

    from gigpo_gym.envs.webshop.browser_env import SiteError, WebShopBrowserEnv

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if not HAVE_CHROMIUM:
        pytest.skip(f"Chromium and chromedriver missing: {INSTALL_COMMAND}")
    with pytest.raises(SiteError, match=rf"no WebShop site answers at http://127.0.0.1:{port}/health .*gigpo-gym serve webshop"):
        WebShopBrowserEnv(site_url=f"http://127.0.0.1:{port}/")


@pytest.fixture(scope="module")
def started():
    """Every env a test of this module starts; at the end, none of their processes may be left."""
    envs, pids = [], set()
    yield envs, pids
    for env in envs:
        pids.update(env.browser.tracked_pids() if env.browser else ())
        env.close()
    survivors = _alive(pids)
    assert not survivors, f"Chromium/chromedriver processes left after the tests: {survivors}"


@pytest.fixture(scope="module")
def site():
    from gigpo_gym.envs.webshop.site import LocalSite

    server = LocalSite(WebShopEnv(split="test").shop)
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def browser_env(started, site):
    from gigpo_gym.envs.webshop.browser_env import WebShopBrowserEnv

    env = WebShopBrowserEnv(split="test", site_url=site)
    started[0].append(env)
    return env


@pytest.fixture(scope="module")
def text_env():
    return WebShopEnv(split="test")


def _alive(pids) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            pass
    return alive


def _same(text_step, browser_step):
    (o1, r1, t1, *_, i1), (o2, r2, t2, *_, i2) = text_step, browser_step
    assert o2 == o1
    assert (r2, t2) == (r1, t1)
    for key in COMPARED:
        assert i2.get(key) == i1.get(key), key


def _policy(text_env: WebShopEnv, info: dict, rng: random.Random) -> str:
    """Mostly the expert, sometimes a random admissible click, now and then an invalid action."""
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(["click[no such button]", "", "search[out of place]", "Click[Buy Now]", "click[]"])
    clicks = [a for a in info["admissible_actions"] if a.startswith("click[") and a != "click[buy now]"]
    if roll < 0.35 and clicks:
        return rng.choice(clicks)
    return text_env.expert_action()


@browser_test
@pytest.mark.slow
def test_thirty_goals_give_identical_transcripts(browser_env, text_env):
    """Same actions -> same observation text, admissible actions, reward and info in both envs."""
    steps = 0
    for seed in range(30):
        rng = random.Random(seed)
        o1, i1 = text_env.reset(seed=seed)
        o2, i2 = browser_env.reset(seed=seed)
        assert o2 == o1 and all(i2.get(k) == i1.get(k) for k in COMPARED)
        for _ in range(15):
            action = _policy(text_env, i1, rng)
            step = text_env.step(action)
            _same(step, browser_env.step(action))
            i1, steps = step[-1], steps + 1
            if step[2]:
                break
    assert steps > 150  # the transcripts went deep: searches, pages, items, options, purchases


@browser_test
def test_text_rich_mode_reads_the_same_marks(started, site):
    from gigpo_gym.envs.webshop.browser_env import WebShopBrowserEnv

    text_env = WebShopEnv(split="test", observation_mode="text_rich")
    env = WebShopBrowserEnv(split="test", site_url=site, observation_mode="text_rich", screenshots=True)
    started[0].append(env)
    o1, i1 = text_env.reset(seed=4)
    o2, i2 = env.reset(seed=4)
    assert o2 == o1 and i2["screenshot"].startswith(PNG_SIGNATURE)
    clicked = False
    while True:
        action = text_env.expert_action()
        step = text_env.step(action)
        _same(step, env.step(action))
        clicked |= "You have clicked" in step[0]
        if step[2]:
            break
    assert step[1] == 1.0 and clicked


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == PNG_SIGNATURE and png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


@browser_test
def test_each_page_type_shows_its_key_elements(browser_env, text_env, tmp_path):
    """A screenshot per page type; the elements a person needs there are visible and have a size."""
    from selenium.webdriver.common.by import By

    seed = next(s for s in range(50) if text_env.shop.by_asin[text_env.goals[s].asin].options)
    text_env.reset(seed=seed)
    browser_env.reset(seed=seed)
    plan = [("search", None)]
    while text_env.session.page != "item":
        action = text_env.expert_action()
        text_env.step(action)
        plan.append((text_env.session.page, action))
    plan += [("description", "click[description]"), ("item", "click[< prev]"), ("features", "click[features]"),
             ("item", "click[< prev]"), ("reviews", "click[reviews]"), ("item", "click[< prev]")]  # fmt: skip
    option = text_env.expert_action()
    plan += [("item", option), ("done", "click[buy now]")]
    assert option.startswith("click[") and option != "click[buy now]"  # an option is chosen before buying
    key = {
        "search": ["input[data-ws-search]", "button[data-role=search]", "[data-role=instruction]"],
        "results": ["button[data-ws=link]", "button[data-role=next]", "[data-role=title]", "[data-role=price]"],
        "item": ["button[data-ws=option]", "button[data-role=buy]", "h2[data-role=title]", "button[data-role=prev]"],
        "description": ["[data-role=description]", "button[data-role=prev]"],
        "features": ["[data-role=bullet]", "button[data-role=prev]"],
        "reviews": ["button[data-role=prev]", "button[data-role=back_to_search]"],
        "done": ["[data-role=thanks]", "[data-role=score]"],
    }
    shots = {}
    for page, action in plan:
        if action is not None:
            *_, info = browser_env.step(action)
            assert info["page"] == page
        for selector in key[page]:
            element = browser_env.driver.find_element(By.CSS_SELECTOR, selector)
            size = element.size
            assert element.is_displayed() and size["width"] > 0 and size["height"] > 0, (page, selector)
        png = browser_env.driver.get_screenshot_as_png()
        width, height = _png_size(png)
        assert width >= 800 and height >= 600
        shots[page] = tmp_path / f"webshop_{page}.png"
        shots[page].write_bytes(png)
    assert set(shots) == set(key)
    assert 0.0 < float(browser_env.driver.find_element(By.CSS_SELECTOR, "[data-role=score]").text) <= 1.0


@browser_test
def test_killed_chromium_is_restarted_and_the_episode_goes_on(browser_env, text_env, started):
    text_env.reset(seed=7)
    browser_env.reset(seed=7)
    action = text_env.expert_action()
    _same(text_env.step(action), browser_env.step(action))
    pids = browser_env.browser.pids()
    started[1].update(browser_env.browser.tracked_pids())
    restarts = browser_env.restarts
    os.kill(pids["chromium"][0], signal.SIGKILL)  # the browser's main process
    began = time.monotonic()
    action = text_env.expert_action()
    _same(text_env.step(action), browser_env.step(action))
    assert time.monotonic() - began < 60 and browser_env.restarts == restarts + 1
    deadline = time.monotonic() + 10
    while _alive(pids["chromium"] + pids["chromedriver"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pids["chromium"] + pids["chromedriver"])  # the dead browser's tree was reaped
    # chromedriver itself gone before a reset: restarted as well
    pids = browser_env.browser.pids()
    started[1].update(browser_env.browser.tracked_pids())
    os.kill(pids["chromedriver"][0], signal.SIGKILL)
    assert browser_env.reset(seed=8)[0] == text_env.reset(seed=8)[0] and browser_env.restarts == restarts + 2


@browser_test
def test_close_and_interpreter_exit_leave_no_processes(started):
    from gigpo_gym.envs.webshop.browser_env import WebShopBrowserEnv

    env = WebShopBrowserEnv(split="test", num_products=200)
    env.reset(seed=0)
    pids = env.browser.tracked_pids()
    assert len(_alive(pids)) >= 2
    env.close()
    env.close()  # twice is fine
    assert not _alive(pids)
    script = (
        "import json; from gigpo_gym.envs.webshop.browser_env import WebShopBrowserEnv\n"
        "env = WebShopBrowserEnv(split='test', num_products=200); env.reset(seed=1)\n"
        "print(json.dumps(env.browser.tracked_pids()), flush=True)\n"
    )  # exits without close(): the finalizer must clean up
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    orphans = json.loads(out.stdout.strip().splitlines()[-1])
    started[1].update(orphans)
    deadline = time.monotonic() + 10
    while _alive(orphans) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(orphans) >= 2 and not _alive(orphans)


@browser_test
def test_bad_task_id_and_finished_episode(browser_env):
    with pytest.raises(ValueError, match=r"unknown task_id 'webshop-x'"):
        browser_env.reset(options={"task_id": "webshop-x"})
    obs, info = browser_env.reset(options={"task_id": "webshop-12"})
    assert info["task_id"] == "webshop-12" and obs.startswith("WebShop [SEP] Instruction:")
    obs2, reward, terminated, truncated, info = browser_env.step("click[buy now]")  # not on the search page
    assert (obs2, reward, terminated, info["action_valid"]) == (obs, 0.0, False, False)
    with pytest.raises(TypeError):
        browser_env.step(None)


@browser_test
def test_search_keywords_with_odd_characters(browser_env, text_env):
    queries = ["green\rtea", "<b>tea</b> & 'milk' \"x\"", "café 茶 ☕", "a" * 1016, "tea\udfff \ud800x", "\x00tea\u202e\u200f\ufeff"]
    for seed, query in enumerate(queries):  # lone surrogates never reach Selenium; NULs and bidi marks are typed
        text_env.reset(seed=seed)
        browser_env.reset(seed=seed)
        o1, r1, t1, _, i1 = text_env.step(f"search[{query}]")
        o2, r2, t2, _, i2 = browser_env.step(f"search[{query}]")
        assert (o2, r2, t2, i2["admissible_actions"]) == (o1, r1, t1, i1["admissible_actions"]) and i2["action_valid"]


@browser_test
def test_registered_id_makes_the_browser_env(site, started):
    if "gigpo_gym/WebShop-Browser-v0" not in gym.registry:
        pytest.skip("gigpo_gym/WebShop-Browser-v0 is not registered in this build")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make("gigpo_gym/WebShop-Browser-v0", split="test", site_url=site)
    started[0].append(env.unwrapped)
    with pytest.raises(gym.error.Error, match="Seed must be greater or equal to zero"):
        env.reset(seed=-1)
    obs, info = env.reset(seed=0)  # a refused seed leaves the env usable
    assert obs == WebShopEnv(split="test").reset(seed=0)[0] and env.spec.max_episode_steps == 15
    assert env.step("search[tea]")[-1]["action_valid"]


@browser_test
def test_seeds_past_64_bits_pick_the_text_envs_goal(browser_env, text_env):
    for seed in (2**64, 2**64 + 5, 10**4299 + 11):
        assert browser_env.reset(seed=seed)[0] == text_env.reset(seed=seed)[0]
    with pytest.raises(ValueError, match="more than 4300 digits"):
        browser_env.reset(seed=10**4300)


@browser_test
def test_hostile_actions_keep_the_contract_and_match_the_text_env(browser_env, text_env):
    """Fuzzed actions (lone surrogates, NULs, bidi marks, "İ" at the bound...): same answers as the text env."""
    from gigpo_gym.core.fuzz import fuzz_action, fuzz_env

    failures = list(fuzz_env(browser_env, 150, seed=5))
    assert not failures, "\n".join(map(str, failures))
    rng = np.random.default_rng(6)
    o1, i1 = text_env.reset(seed=6)
    assert browser_env.reset(seed=6)[0] == o1
    for _ in range(150):
        action = fuzz_action(rng, 1024, i1["admissible_actions"])
        if len(action) > 1024 or "\r" in action:  # refused by both / typed as a space (another anchor)
            continue
        step = text_env.step(action)
        _same(step, browser_env.step(action))
        i1 = step[-1]
        if step[2]:
            i1 = text_env.reset(seed=7)[1]
            browser_env.reset(seed=7)
    query = "İ" * 1016  # at the bound; lower-cased it is 2,032 characters
    text_env.reset(seed=8)
    browser_env.reset(seed=8)
    _same(text_env.step(f"search[{query}]"), browser_env.step(f"search[{query}]"))


@browser_test
def test_the_experts_play_the_browser_as_they_play_the_text_env(started, browser_env, text_env):
    """``expert_action`` of the browser env: the goal-aware expert (on the env's own site and shop) and the page
    teacher say what they say in the text env, step for step."""
    from gigpo_gym.envs.webshop.browser_env import WebShopBrowserEnv

    own = WebShopBrowserEnv(split="test")
    started[0].append(own)
    for seed, style in ((0, "goal"), (1, "goal"), (2, "page")):
        own.reset(seed=seed)
        text_env.reset(seed=seed)
        for _ in range(15):
            action = own.expert_action(style)
            assert action == text_env.expert_action(style)
            _, reward, done, _, info = own.step(action)
            assert (reward, done) == text_env.step(action)[1:3]
            if done:
                break
        assert done and info["page"] == "done"
    browser_env.reset(seed=0)
    with pytest.raises(RuntimeError, match=r"this env plays a site it did not start \(site_url\): use "
                                           r"expert_action\(style='page'\)"):
        browser_env.expert_action()
    with pytest.raises(ValueError, match=r"expert style must be one of \['goal', 'page'\], got 'pager'"):
        own.expert_action("pager")
