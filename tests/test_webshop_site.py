"""The WebShop web site over real loopback HTTP: pages match the text env, hostile input gets a 4xx."""

from __future__ import annotations

import argparse
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser

import httpx
import pytest

from gigpo_gym.envs.webshop import pages as P
from gigpo_gym.envs.webshop.browser_env import click_table
from gigpo_gym.envs.webshop.cli import add_serve_cli
from gigpo_gym.envs.webshop.engine import WebShopEngine
from gigpo_gym.envs.webshop.env import WebShopEnv
from gigpo_gym.envs.webshop.render import render_text, render_text_rich
from gigpo_gym.envs.webshop.shop import load_shop
from gigpo_gym.envs.webshop.site import MAX_QUERY_CHARS, BadRequest, LocalSite, SessionTable, create_app


class PageReader(HTMLParser):
    """The page model as the DOM holds it: data-ws nodes with their text, and the body's data attributes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.nodes: list[list] = []
        self.body: dict[str, str] = {}
        self.has_search = False
        self._open: list | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if "data-ws-search" in a:
            self.has_search = True
        if "data-ws" in a:
            self._open = [a["data-ws"], "", a.get("data-role", ""), a.get("data-group"), "data-selected" in a]
            self.nodes.append(self._open)

    def handle_data(self, data):
        if self._open is not None:
            self._open[1] += data

    def handle_endtag(self, tag):
        self._open = None

    def page(self) -> P.Page:
        elements = tuple(P.Element(k, t, r, g, s) for k, t, r, g, s in self.nodes)
        return P.Page(self.body.get("data-ws-page", ""), elements, has_search_bar=self.has_search)


def read(html: str) -> PageReader:
    reader = PageReader()
    reader.feed(html)
    return reader


@pytest.fixture(scope="module")
def site():
    server = LocalSite(load_shop(None, 1000, None), max_sessions=256)
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def client(site):
    with httpx.Client(base_url=site, timeout=10, follow_redirects=True) as c:
        yield c


def start(client, **query) -> tuple[str, PageReader]:
    reply = client.get("/start", params=query)
    assert reply.status_code == 200, reply.text
    return str(reply.url.path), read(reply.text)


def act(client, path: str, reader: PageReader, action: str):
    """Submit ``action`` as the page's form would (the element's index; the query for a search)."""
    name, arg = action.split("[", 1)
    arg = arg[:-1].lower()
    form = {"v": reader.body["data-ws-version"]}
    if name == "search":
        form.update(el=str(click_table(reader.page())["search"]), q=arg)
    else:
        form["el"] = str(click_table(reader.page())[arg])
    return client.post(f"{path}/act", data=form)


def test_pages_read_back_as_the_text_env_observations():
    """Expert episodes through HTTP: every page's data-ws nodes give the text env's obs and actions."""
    env = WebShopEnv(split="test")
    server = LocalSite(env.shop)
    try:
        with httpx.Client(base_url=server.url, timeout=10, follow_redirects=True) as c:
            for seed in range(6):
                obs, info = env.reset(seed=seed)
                path, reader = start(c, split="test", seed=seed)
                while True:
                    page = reader.page()
                    assert render_text(page) == obs
                    assert WebShopEngine.admissible(page) == info["admissible_actions"]
                    assert reader.body["data-ws-task-id"] == info["task_id"]
                    if env.session.purchase is not None:
                        break
                    action = env.expert_action()
                    obs, reward, *_, info = env.step(action)
                    reply = act(c, path, reader, action)
                    assert reply.status_code == 200
                    reader = read(reply.text)
                assert reader.body["data-ws-page"] == "done" and reward == 1.0
                assert '"score": 1.0' in reader.body["data-ws-purchase"]
    finally:
        server.stop()


def test_text_rich_marks_survive_the_html(client):
    env = WebShopEnv(split="test", observation_mode="text_rich")
    obs, _ = env.reset(seed=4)
    path, reader = start(client, split="test", seed=4)
    while env.session.page != "item" or not env.session.options:
        action = env.expert_action()
        obs, *_ = env.step(action)
        reader = read(act(client, path, reader, action).text)
    assert "[clicked button]" in obs and render_text_rich(reader.page()) == obs


def test_a_person_can_shop_start_search_open_choose_and_buy(client):
    index = client.get("/")
    assert index.status_code == 200 and 'action="/start"' in index.text and "goals" in index.text
    path, reader = start(client, task_id="webshop-3")
    assert reader.page().name == "search" and reader.has_search
    reply = act(client, path, reader, "search[hot sauce gluten free]")
    results = read(reply.text)
    assert results.page().name == "results" and 'class="product-link' in reply.text
    asin = next(e.click for e in results.page().elements if e.kind == P.LINK)
    item = read(act(client, path, results, f"click[{asin}]").text)
    assert item.page().name == "item" and "Buy Now" in render_text(item.page())
    done = act(client, path, item, "click[buy now]")
    assert done.status_code == 200 and "Thank you for shopping with us!" in done.text
    assert re.search(r'class="t-score"[^>]*>[0-9.]+<', done.text)


def test_stale_pages_and_non_clickable_elements_are_refused(client):
    path, reader = start(client, split="test", seed=0)
    act(client, path, reader, "search[tea]")
    stale = client.post(f"{path}/act", data={"v": "0", "el": "3", "q": "again"})
    assert stale.status_code == 409 and "out of date" in stale.text
    current = read(client.get(path).text)
    plain = next(i for i, e in enumerate(current.page().elements) if e.kind == P.TEXT)
    reply = client.post(f"{path}/act", data={"v": current.body["data-ws-version"], "el": str(plain)})
    assert reply.status_code == 422 and "not clickable" in reply.text
    assert read(client.get(path).text).body["data-ws-version"] == current.body["data-ws-version"]
    missing = client.post(f"{path}/act", data={"v": current.body["data-ws-version"]})
    assert missing.status_code == 422 and "&#39;el&#39; must be an integer in [0, " in missing.text, missing.text[:500]


HOSTILE = [
    ("GET", "/start?seed=-1", None, 422),
    ("GET", "/start?seed=abc", None, 422),
    ("GET", "/start?seed=" + "9" * 4301, None, 422),  # past the 4,300 digits of any printable seed
    ("GET", "/start?seed=%D9%A3", None, 422),  # a non-ASCII digit
    ("GET", "/start?split=tset", None, 422),
    ("GET", "/start?task_id=webshop-999999", None, 404),
    ("GET", "/start?evil=1", None, 422),
    ("GET", "/s/0123456789abcdef", None, 404),
    ("GET", "/s/..%2F..%2Fetc%2Fpasswd", None, 404),
    ("GET", "/s/" + "a" * 5000, None, 404),
    ("POST", "/s/0123456789abcdef/act", "v=0&el=0", 404),
    ("GET", "/static/../site.py", None, 404),
    ("GET", "/static/%2e%2e/site.py", None, 404),
    ("GET", "/static/..%2fhtml.py", None, 404),
    ("GET", "/static/%2e%2e/%2e%2e/%2e%2e/setup.cfg", None, 404),
    ("GET", "/static//etc/passwd", None, 404),
    ("GET", "/no/such/page", None, 404),
]


@pytest.mark.parametrize(("method", "target", "body", "status"), HOSTILE)
def test_hostile_urls_get_a_4xx(site, method, target, body, status):
    reply = _raw(site, f"{method} {target} HTTP/1.1\r\nHost: x\r\n" + _body_headers(body))
    assert reply.startswith(f"HTTP/1.1 {status}".encode()), reply[:80]
    assert b"[options]" not in reply and b"import " not in reply and b"root:" not in reply


def test_hostile_forms_get_a_4xx(client):
    path, reader = start(client, split="test", seed=1)
    v = reader.body["data-ws-version"]
    cases = {
        "v=0&el=3&q=" + "x" * (MAX_QUERY_CHARS + 1): 422,  # oversized query
        "v=0&el=3&q=" + "x" * 20000: 413,  # over the body bound
        "v=0&el=999&q=a": 422,
        "v=0&el=-1&q=a": 422,
        "v=zz&el=3": 422,
        "v=0&el=3&q=a&q=b": 422,
        "v=0&el=3&x=1": 422,
        "%ff%fe=1": 422,
        "v=0&el=3&q=": 422,  # empty search: invalid action
        "\xff\xfe": 400,
        "&&&": 400,
    }
    for body, status in cases.items():
        data = body.encode("latin-1")
        reply = client.post(f"{path}/act", content=data, headers={"content-type": "application/x-www-form-urlencoded"})
        assert reply.status_code == status, (body[:40], reply.status_code, reply.text[-300:])
    declared = _raw(client.base_url, f"POST {path}/act HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n")
    assert declared.startswith(b"HTTP/1.1 413")
    assert read(client.get(path).text).body["data-ws-version"] == v  # nothing was applied


def test_server_stays_up_under_a_bounded_hostile_load(site, client):
    def one(i: int) -> int:
        if i % 4 == 0:
            return client.get("/start", params={"split": "test", "seed": i}).status_code
        if i % 4 == 1:
            return client.get(f"/static/{'../' * (i % 7)}site.py").status_code
        if i % 4 == 2:
            return client.post("/s/0123456789abcdef/act", content=b"v=0&el=0" * (i % 2000)).status_code
        return client.get("/s/" + "%00" * (i % 300)).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(one, range(400)))
    assert all(s < 500 for s in statuses) and statuses.count(200) == 100
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["sessions"] <= 256  # the session table stays bounded


def test_seeds_past_2_64_pick_the_text_envs_goal(client):
    env = WebShopEnv(split="test")
    for seed in (2**64, 2**64 + 7, 10**300 + 1):
        _, info = env.reset(seed=seed)
        _, reader = start(client, split="test", seed=seed)
        assert reader.body["data-ws-task-id"] == info["task_id"]


def test_a_full_session_table_answers_503_with_retry_after_and_keeps_live_sessions():
    site = LocalSite(load_shop(None, 1000, None), max_sessions=2, session_idle_seconds=600)
    try:
        heads = [_raw(site.url, f"GET /start?seed={i} HTTP/1.1\r\nHost: x\r\n\r\n") for i in range(3)]
        assert [h.split(b" ", 2)[1] for h in heads] == [b"303", b"303", b"503"]
        assert re.search(rb"\r\nretry-after: (\d+)\r\n", heads[2], re.IGNORECASE).group(1) == b"600"
        live = re.search(rb"\r\nlocation: (\S+)\r\n", heads[0], re.IGNORECASE).group(1).decode()
        assert _raw(site.url, f"GET {live} HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 200")
    finally:
        site.stop()
    with pytest.raises(ValueError, match="max_sessions must be >= 1"):
        create_app(load_shop(None, 1000, None), max_sessions=0)


def test_only_sessions_idle_long_enough_make_room():
    now = [0.0]
    table = SessionTable(2, idle_seconds=8, clock=lambda: now[0])
    shop = load_shop(None, 1000, None)
    a, b = (table.add(WebShopEngine(shop).new_session(shop.goals[i])) for i in range(2))
    now[0] = 5
    assert table.get(a) is not None  # a is used again; b is now the least recently used
    now[0] = 10
    c = table.add(WebShopEngine(shop).new_session(shop.goals[2]))  # b was idle 10 s >= 8: dropped
    assert table.get(b) is None and table.get(a) is not None and table.get(c) is not None
    now[0] = 11  # a (used at 10) and c (used at 10) are live: no room for 7 more seconds
    with pytest.raises(BadRequest) as refused:
        table.add(WebShopEngine(shop).new_session(shop.goals[3]))
    assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "7"}


def test_serve_cli_binds_loopback_by_default():
    parser = argparse.ArgumentParser()
    add_serve_cli(parser.add_subparsers(dest="server"))
    args = parser.parse_args(["webshop"])
    assert (args.host, args.port, args.human_goals) == ("127.0.0.1", 3000, "auto") and callable(args.func)


def _body_headers(body: str | None) -> str:
    if body is None:
        return "\r\n"
    return f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n\r\n{body}"


def _raw(base, request: str) -> bytes:
    """Send a request byte for byte (no client-side URL normalisation) and return the reply's head."""
    host, port = str(base).removeprefix("http://").rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request.encode("latin-1"))
        return s.recv(4096)
