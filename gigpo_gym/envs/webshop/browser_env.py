"""``gigpo_gym/WebShop-Browser-v0``: WebShop played in headless Chromium through Selenium.

Description
    The same shop, goals, actions and rewards as ``gigpo_gym/WebShop-v0``, but every
    action goes through the web site (``site.py``) in a real browser.  The env starts
    the site on an ephemeral 127.0.0.1 port in a thread of this process (or uses
    ``site_url``) and a headless Chromium (``browser.py``).
Observation
    The text env's observation, read from the live DOM: one ``execute_script`` call
    collects the page model's nodes (``data-ws``) in document order with their
    ``textContent``; the text env's renderers turn them into ``text`` / ``text_rich``.
Actions
    ``search[keywords]``: the keywords are written into the search box and the
    Search button is clicked; ``click[text]``: the button, product link or option
    whose click text matches is clicked.  Validity is decided as in the text env
    (same parser, same click table, read from the DOM); an invalid action touches
    nothing.  The search box is an HTML text input, which cannot hold a carriage
    return: one in the keywords is typed as a space (same hits, a different anchor).
    Lone surrogates never reach the browser (``TextEnv`` reads them as U+FFFD).
Seeds
    As the text env's (any int >= 0, 2**64 and beyond), up to 4,300 decimal digits:
    the seed goes to the site's ``/start?seed=`` as text.
Expert
    ``expert_action(style)`` as the text env's: ``"goal"`` (the scripted shopper, which
    reads the shop, so it needs the env's own site, not a ``site_url``) or ``"page"``
    (the page-reading teacher).
Rewards, info
    As the text env.  Score, reward parts, state anchor, task id and type are read
    from the page's data attributes (the site reports them; the env never calls the
    engine).  ``screenshots=True`` adds ``info["screenshot"]`` (PNG bytes).
Failures
    A browser that dies mid-episode is restarted once and the episode resumed from
    the site's session (the page version tells whether the action was applied);
    a second failure raises ``BrowserCrashedError``.  Every browser command has a
    time limit, so nothing hangs.  ``close()`` (also run by a finalizer at exit)
    quits Chromium, kills its process tree and stops the site.
Registered id and kwargs
    ``gigpo_gym/WebShop-Browser-v0`` (extra ``[browser]``): the kwargs of
    ``WebShop-v0`` plus ``site_url`` (use a running site; the data kwargs then do
    nothing), ``screenshots``, ``chromium_path``, ``chromedriver_path``.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from typing import Any
from urllib.parse import urlencode

from gigpo_gym.core.anchor import digest
from gigpo_gym.core.data import resolve_data_dir
from gigpo_gym.core.env import TextEnv
from gigpo_gym.envs.webshop import pages as P
from gigpo_gym.envs.webshop.browser import DEFAULT_CHROMEDRIVER, DEFAULT_CHROMIUM, HeadlessChromium, check_binaries
from gigpo_gym.envs.webshop.engine import Session, WebShopEngine, parse_action
from gigpo_gym.envs.webshop.env import EXPERT_STYLES
from gigpo_gym.envs.webshop.expert import expert_action
from gigpo_gym.envs.webshop import DATA_ENV
from gigpo_gym.envs.webshop.goals import SPLITS
from gigpo_gym.envs.webshop.prompts import METADATA as PROMPTS
from gigpo_gym.envs.webshop.render import OBSERVATION_MODES, RENDERERS
from gigpo_gym.envs.webshop.site import MAX_SEED_DIGITS
from gigpo_gym.envs.webshop.teacher import page_teacher_action

#: One round trip: the page's data-ws nodes and the body's data attributes.
_READ_DOM = """
const b = document.body;
if (!b) return null;
const d = b.dataset;
const nodes = Array.from(document.querySelectorAll('[data-ws]'), n => [n.dataset.ws, n.textContent,
    n.dataset.role || '', n.dataset.group === undefined ? null : n.dataset.group, n.hasAttribute('data-selected')]);
return {ready: document.readyState, page: d.wsPage || null, version: d.wsVersion === undefined ? null : +d.wsVersion,
        session: d.wsSession || null, error: d.wsError || null, taskId: d.wsTaskId || null,
        taskType: d.wsTaskType || null, instruction: d.wsInstruction || null, state: d.wsState || null,
        purchase: d.wsPurchase || null, search: document.querySelector('[data-ws-search]') !== null,
        message: (document.querySelector('.message') || {}).textContent || null, nodes: nodes};
"""
#: Seeds go to the site as decimal text of at most MAX_SEED_DIGITS digits.
_SEED_BOUND = 10**MAX_SEED_DIGITS
_SET_QUERY = "const i = document.querySelector('[data-ws-search]'); i.value = arguments[0]; return i.value;"
_NODE = "return document.querySelectorAll('[data-ws]')[arguments[0]];"


class BrowserCrashedError(RuntimeError):
    """The browser died and could not be brought back to the episode."""


class SiteError(RuntimeError):
    """The site answered with an error page where a shop page was expected."""


class _Resources:
    """What the env owns outside Python objects; closed by ``close()`` or the finalizer at exit."""

    def __init__(self):
        self.browser: HeadlessChromium | None = None
        self.site = None

    def close(self) -> None:
        if self.browser is not None:
            self.browser.quit()
            self.browser = None
        if self.site is not None:
            self.site.stop()
            self.site = None


def click_table(page: P.Page) -> dict[str, int]:
    """Click text -> index of the element it clicks, exactly as ``Page.clickables`` picks it."""
    table: dict[str, int] = {}
    for kind in (P.BUTTON, P.LINK, P.OPTION):
        for i, element in enumerate(page.elements):
            if element.kind == kind:
                table[element.click] = i
    return table


class WebShopBrowserEnv(TextEnv):
    metadata = {**TextEnv.metadata, "observation_modes": OBSERVATION_MODES, **PROMPTS}
    max_action_length = 1024

    def __init__(
        self,
        split: str = "train",
        data_dir: str | os.PathLike | None = None,
        observation_mode: str = "text",
        num_products: int | None = None,
        human_goals: bool | None = None,
        render_mode: str | None = None,
        site_url: str | None = None,
        screenshots: bool = False,
        chromium_path: str = DEFAULT_CHROMIUM,
        chromedriver_path: str = DEFAULT_CHROMEDRIVER,
        step_timeout: float = 30.0,
    ):
        super().__init__(render_mode=render_mode)
        if observation_mode not in OBSERVATION_MODES:
            raise ValueError(f"observation_mode must be one of {list(OBSERVATION_MODES)}, got {observation_mode!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
        check_binaries(chromium_path, chromedriver_path)
        self.split, self.observation_mode, self.screenshots = split, observation_mode, bool(screenshots)
        self.step_timeout = float(step_timeout)
        self._render = RENDERERS[observation_mode]
        self._chromium = (chromium_path, chromedriver_path)
        self._res = _Resources()
        self._finalizer = weakref.finalize(self, self._res.close)
        self._shop = None  # the goal-aware expert reads it (an env on another site has none)
        if site_url is None:
            from gigpo_gym.envs.webshop.shop import load_shop
            from gigpo_gym.envs.webshop.site import LocalSite

            path = resolve_data_dir(data_dir, DATA_ENV)
            shop = self._shop = load_shop(path, num_products or (1000 if path is None else None), human_goals)
            self._res.site = LocalSite(shop)
            site_url = self._res.site.url
        self.site_url = site_url.rstrip("/")
        _check_site(self.site_url)
        self._res.browser = HeadlessChromium(chromium_path, chromedriver_path, command_timeout=step_timeout)
        self._dom: dict[str, Any] | None = None
        self._page: P.Page | None = None
        self._session_url: str | None = None
        #: Browser restarts after a crash (for tests and logs).
        self.restarts = 0

    @property
    def driver(self):
        if self._res.browser is None:
            raise RuntimeError("the env is closed")
        return self._res.browser.driver

    @property
    def browser(self) -> HeadlessChromium:
        return self._res.browser

    # -- TextEnv ----------------------------------------------------------------------
    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        task_id = options.get("task_id")
        if task_id is None and seed >= _SEED_BOUND:
            raise ValueError(f"the seed has more than {MAX_SEED_DIGITS} digits, more than the site reads")
        query = {"task_id": str(task_id)} if task_id is not None else {"split": self.split, "seed": seed}
        url = f"{self.site_url}/start?{urlencode(query)}"
        self._session_url = None
        self._guarded(lambda: self.driver.get(url))
        self._dom = self._read_page(expected_version=0)
        if self._dom["error"]:
            raise ValueError(f"the WebShop site refused {url}: {self._dom['message']}")
        self._session_url = f"{self.site_url}/s/{self._dom['session']}"
        return self._observe(valid=True)

    def _step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        name, arg = parse_action(action)
        target, query = None, None
        if name == "search" and arg and self._page.has_search_bar:
            # typed as written (the site lower-cases it, as the text env does: "İ" lower-cased is two
            # characters); an HTML text input cannot hold CR (LF never parses); the analyzer splits on both alike
            target, query = click_table(self._page).get("search"), arg.replace("\r", " ")
        elif name == "click" and arg is not None and arg.lower() != "search":
            target = click_table(self._page).get(arg.lower())
        if target is None:
            obs, info = self._observe(valid=False)
            return obs, 0.0, False, info
        version = self._dom["version"] + 1
        self._guarded(lambda: self._act(target, query), act=(version, target, query))
        self._dom = self._read_page(expected_version=version)
        if self._dom["error"]:
            raise SiteError(f"the WebShop site answered {self._dom['error']} to {action!r}: {self._dom['message']}")
        obs, info = self._observe(valid=True)
        if self._dom["page"] != P.DONE:
            return obs, 0.0, False, info
        return obs, info["score"], True, info

    def close(self) -> None:
        self._finalizer()
        super().close()

    def expert_action(self, style: str = "goal") -> str:
        """The next action of the scripted expert (``"goal"``) or of the page-reading teacher (``"page"``), as the text
        env's ``expert_action``: the goal-aware one replays the session the page reports on the env's own shop."""
        if self._dom is None:
            raise RuntimeError("call reset() before expert_action()")
        if style not in EXPERT_STYLES:
            raise ValueError(f"expert style must be one of {list(EXPERT_STYLES)}, got {style!r}")
        if style == "page":
            return page_teacher_action(self._page)
        if self._shop is None:
            raise RuntimeError("the goal-aware expert reads the shop, and this env plays a site it did not start "
                               "(site_url): use expert_action(style='page')")
        state = json.loads(self._dom["state"])
        query = state["query"]
        session = Session(goal=self._shop.goals[state["goal"]], page=self._dom["page"], query=query,
                          hits=self._shop.search(query) if query is not None else (),
                          page_num=state["page_num"] or 1, asin=state["asin"], options=dict(state["options"]))
        return expert_action(self._shop, session)

    # -- browser work -----------------------------------------------------------------
    def _act(self, index: int, query: str | None) -> None:
        if query is not None:
            typed = self.driver.execute_script(_SET_QUERY, query)
            if typed != query:
                raise SiteError(f"the search box holds {typed!r} instead of {query!r}")
        element = self.driver.execute_script(_NODE, index)
        try:
            element.click()
        except Exception as e:  # covered by another element: submit through it, as a click would
            if type(e).__name__ != "ElementClickInterceptedException":
                raise
            self.driver.execute_script("arguments[0].form.requestSubmit(arguments[0]);", element)

    def _read_page(self, expected_version: int) -> dict[str, Any]:
        """The DOM once the page at ``expected_version`` (or an error page) has loaded."""
        begin = time.monotonic()
        deadline = begin + self.step_timeout
        while True:
            dom = self._guarded(lambda: self.driver.execute_script(_READ_DOM), quiet=True)
            if dom and dom["ready"] == "complete" and (dom["error"] or dom["version"] == expected_version):
                return dom
            if dom and dom["ready"] == "complete" and dom["page"] is None and time.monotonic() > begin + 2:
                url = self._guarded(lambda: self.driver.current_url)
                raise SiteError(f"the browser is on {url!r:.120}, not a WebShop page (is the site at {self.site_url} up?)")
            if time.monotonic() > deadline:
                raise BrowserCrashedError(
                    f"the page did not reach version {expected_version} within {self.step_timeout} s (got {dom!r:.200})"
                )
            time.sleep(0.005)

    def _guarded(self, work, act: tuple | None = None, quiet: bool = False):
        """Run ``work``; if the browser died, restart it once and resume the episode from the site.

        After a restart the browser reopens the session's page; for an action (``act`` =
        (version after it, element index, query)) the page version tells whether the
        site applied it before the crash, and it is done again only if not.
        """
        try:
            return work()
        except Exception as e:
            if not _is_browser_failure(e):
                if quiet and type(e).__name__ in ("JavascriptException", "StaleElementReferenceException"):
                    return None  # the page was navigating; read again
                raise
            failure = e
        self._restart(failure)
        try:
            if self._session_url is not None:
                self.driver.get(self._session_url)
            if act is None:
                return work()
            version, target, query = act
            if self._read_any()["version"] == version - 1:  # the action had not reached the site
                self._act(target, query)
            return None
        except Exception as e:
            if _is_browser_failure(e):
                raise BrowserCrashedError(f"Chromium failed again right after a restart: {e}") from e
            raise

    def _read_any(self) -> dict[str, Any]:
        dom = self.driver.execute_script(_READ_DOM)
        if not dom or dom["error"] or dom["version"] is None:
            raise BrowserCrashedError(f"after a restart the session page could not be read: {dom!r:.200}")
        return dom

    def _restart(self, failure: Exception) -> None:
        self._res.browser.quit()
        self._res.browser = None
        try:
            self._res.browser = HeadlessChromium(*self._chromium, command_timeout=self.step_timeout)
        except Exception as e:
            raise BrowserCrashedError(f"Chromium died ({failure}) and could not be restarted: {e}") from e
        self.restarts += 1

    # -- observation ------------------------------------------------------------------
    @staticmethod
    def _page_of(dom: dict[str, Any]) -> P.Page:
        elements = tuple(P.Element(kind, text, role, group, selected) for kind, text, role, group, selected in dom["nodes"])
        return P.Page(dom["page"], elements, has_search_bar=dom["search"])

    def _observe(self, valid: bool) -> tuple[str, dict[str, Any]]:
        dom = self._dom
        self._page = self._page_of(dom)
        obs = self._render(self._page)
        state = json.loads(dom["state"])
        visited = state.pop("visited")
        if self.observation_mode == "text_rich":
            state["visited"] = visited
        purchase = json.loads(dom["purchase"]) if dom["purchase"] else None
        score = purchase["score"] if purchase else 0.0
        info: dict[str, Any] = {
            "admissible_actions": WebShopEngine.admissible(self._page),
            "anchor": digest(state),
            "anchor_text": obs,
            "action_valid": valid,
            "won": bool(purchase is not None and score == 1.0),
            "task_id": dom["taskId"],
            "task_type": dom["taskType"],
            "score": score,
            "instruction": dom["instruction"],
            "page": dom["page"],
        }
        if purchase is not None:
            info["reward_info"] = purchase["reward_info"]
            info["purchased"] = purchase["purchased"]
        if self.screenshots:
            info["screenshot"] = self.driver.get_screenshot_as_png()
        return obs, info


def _check_site(url: str, timeout: float = 10.0) -> None:
    """Fail early, and clearly, when no WebShop site answers at ``url``."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as reply:
            health = json.loads(reply.read(65536))
    except (OSError, ValueError, urllib.error.URLError) as e:
        raise SiteError(f"no WebShop site answers at {url}/health ({e}); start one with `gigpo-gym serve webshop`") from e
    if not isinstance(health, dict) or health.get("status") != "ok" or "goals" not in health:
        raise SiteError(f"{url} answers /health with {health!r:.200}, not a WebShop site")


def _is_browser_failure(e: Exception) -> bool:
    """True for errors that mean Chromium or chromedriver is gone (not a page-level error)."""
    name = type(e).__name__
    if name in ("InvalidSessionIdException", "NoSuchWindowException", "MaxRetryError", "ProtocolError",
                "NewConnectionError", "ReadTimeoutError"):  # fmt: skip
        return True
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    text = str(e).lower()
    return name == "WebDriverException" and any(
        s in text for s in ("not reachable", "disconnected", "session deleted", "no such session", "crashed")
    )
