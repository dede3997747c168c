"""The /retrieve server on a real uvicorn loopback port, its bounds, and the HTTP client."""

from __future__ import annotations

import argparse
import re
import socket
import time
from pathlib import Path

import gymnasium as gym
import httpx
import pytest

import gigpo_gym  # noqa: F401
from gigpo_gym.core.net import ServerLimits, ThreadedServer
from gigpo_gym.envs.searchqa.bm25 import BM25Retriever
from gigpo_gym.envs.searchqa.cli import add_serve_cli
from gigpo_gym.envs.searchqa.corpus import load_corpus_jsonl
from gigpo_gym.envs.searchqa.http_retriever import HTTPRetriever, RetrieverServerError
from gigpo_gym.envs.searchqa.retrieval import clear_shared_retrievers
from gigpo_gym.envs.searchqa.server import create_app

FIXTURES = Path(__file__).parent / "fixtures" / "searchqa" / "flashrag"


@pytest.fixture(scope="module")
def server():
    """A real server on an ephemeral 127.0.0.1 port, stopped after the module."""
    retriever = BM25Retriever.build(load_corpus_jsonl(FIXTURES / "corpus.jsonl"))
    srv = ThreadedServer(create_app(retriever, max_queries=4, max_topk=5, max_body_bytes=2048), ServerLimits(keep_alive=1))
    yield srv.url
    srv.stop()


def _post(server, **kwargs):
    return httpx.post(f"{server}/retrieve", timeout=10, **kwargs)


def test_retrieve_answers_in_search_r1_format(server):
    reply = _post(server, json={"queries": ["Tobias Wren of Quellport", "Lowmarsh capital"], "topk": 2, "return_scores": True})
    assert reply.status_code == 200
    result = reply.json()["result"]
    assert len(result) == 2 and len(result[0]) == 2
    top = result[0][0]
    assert top["document"]["id"] == "7" and top["document"]["contents"].startswith('"Tobias Wren"\n')
    assert top["score"] > 0
    plain = _post(server, json={"queries": ["Tobias Wren"], "topk": 1}).json()["result"]
    assert plain[0][0]["id"] == "7"  # without scores each entry is the document


@pytest.mark.parametrize(
    ("request_kwargs", "status", "match"),
    [
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "malformed JSON"),
        ({"content": b"\xff\xfe", "headers": {"content-type": "application/json"}}, 400, "malformed JSON"),
        ({"content": b"[" * 1500}, 400, "malformed JSON"),
        ({"json": ["q"]}, 422, "must be a JSON object"),
        ({"json": {"queries": "Tobias"}}, 422, "'queries' must be a list of strings"),
        ({"json": {"query": ["Tobias"]}}, 422, r"the body has no 'queries' field \(a list of strings\)"),
        ({"json": {"queries": ["a"] * 5}}, 422, "the bound is 4 per request"),
        ({"json": {"queries": ["a"], "topk": 6}}, 422, r"'topk' must be an int in \[1, 5\]"),
        ({"json": {"queries": ["a"], "topk": "3"}}, 422, "'topk' must be an int"),
        ({"json": {"queries": ["a"], "topk": -1}}, 422, r"'topk' must be an int in \[1, 5\] \(or null / 0 for 3\), got -1"),
        ({"json": {"queries": ["a"], "topk": 2.5}}, 422, "'topk' must be an int"),
        ({"json": {"queries": ["a"], "topk": False}}, 422, "'topk' must be an int"),
        ({"json": {"queries": ["a" * 3000]}}, 413, "larger than 2048 bytes"),
    ],
)
def test_hostile_requests_get_4xx_and_the_server_stays_up(server, request_kwargs, status, match):
    reply = _post(server, **request_kwargs)
    assert reply.status_code == status
    assert re.search(match, reply.json()["error"])
    assert _post(server, json={"queries": ["Quellport"]}).status_code == 200


@pytest.mark.parametrize("topk", [None, 0, "missing"])
def test_topk_null_zero_or_missing_means_three_as_in_search_r1(server, topk):
    body = {"queries": ["Quellport", "Lowmarsh Edrith"], "return_scores": True}
    if topk != "missing":
        body["topk"] = topk
    reply = _post(server, json=body)
    assert reply.status_code == 200
    assert [len(ranked) for ranked in reply.json()["result"]] == [3, 3]


def test_oversized_body_is_refused_before_reading_it_all(server):
    """A lying Content-Length bigger than the bound is refused from the header alone."""
    port = int(server.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 999999999\r\n\r\n{}")
        status_line = conn.recv(4096).split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large"
    assert httpx.get(f"{server}/health", timeout=5).json()["max_body_bytes"] == 2048


def test_http_retriever_client_against_the_server(server):
    hits = HTTPRetriever(f"{server}/retrieve").search(["Edrith Survey Office founded"], topk=3)[0]
    assert hits[0].document.title == '"Edrith Survey Office"' and hits[0].document.id == "5"
    with pytest.raises(RetrieverServerError, match=r"answered HTTP 422: .*'topk' must be an int in \[1, 5\]"):
        HTTPRetriever(f"{server}/retrieve").search(["x"], topk=9)
    with pytest.raises(RetrieverServerError, match="answered HTTP 404"):
        HTTPRetriever(f"{server}/nothing").search(["x"], topk=3)


def test_http_client_names_an_unreachable_server():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(RetrieverServerError, match=rf"cannot reach the retriever server at http://127.0.0.1:{port}/retrieve"):
        HTTPRetriever(f"http://127.0.0.1:{port}/retrieve", timeout=2).search(["x"], topk=3)


def test_env_with_http_retriever_needs_no_corpus(server, tmp_path, monkeypatch):
    (tmp_path / "test.jsonl").write_text((FIXTURES / "test.jsonl").read_text())
    monkeypatch.setenv("GIGPO_GYM_CACHE", str(tmp_path / "cache"))
    clear_shared_retrievers()
    env = gym.make("gigpo_gym/SearchQA-v0", split="test", data_dir=str(tmp_path), retriever=f"{server}/retrieve")
    env.reset(options={"task_id": "test_1"})
    obs, _, _, _, info = env.step("<search>lighthouse keeper of Quellport</search>")
    assert obs.startswith('\n\n<information>Doc 1(Title: "Tobias Wren") Tobias Wren (born 1861)')
    assert info["action_valid"]
    _, reward, terminated, _, info = env.step("<answer>tobias wren</answer>")
    assert (reward, terminated, info["em"]) == (1.0, True, 1.0)


def test_serve_cli_options_default_to_loopback():
    parser = argparse.ArgumentParser()
    add_serve_cli(parser.add_subparsers(dest="what"))
    args = parser.parse_args(["retriever"])
    assert (args.host, args.port, args.retriever, args.max_topk) == ("127.0.0.1", 8000, "bm25", 50)
    assert callable(args.func)
    args = parser.parse_args(["retriever", "--max-queries", "8", "--data-dir", "/x", "--retriever", "dense"])
    assert (args.max_queries, args.data_dir, args.retriever) == (8, "/x", "dense")


def test_serve_cli_reports_a_folder_without_corpus(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_serve_cli(parser.add_subparsers(dest="what"))
    args = parser.parse_args(["retriever", "--data-dir", str(tmp_path)])
    assert args.func(args) == 2
    assert "has no corpus file (expected one of ['corpus.jsonl'" in capsys.readouterr().err


def test_http_client_reads_entries_without_scores_or_ids():
    from gigpo_gym.envs.searchqa.http_retriever import _document

    plain = _document("u", {"contents": '"T"\nbody'})
    assert (plain.document.title, plain.document.text, plain.score) == ('"T"', "body", 0.0)
    assert plain.document.id.startswith("sha:") and plain.document.id == _document("u", {"contents": '"T"\nbody'}).document.id
    assert _document("u", {"document": {"id": 4, "contents": "x"}, "score": 1.5}).document.id == "4"
    with pytest.raises(RetrieverServerError, match="u: a result entry has no document with a 'contents' string"):
        _document("u", {"document": {"id": 1}})


_SERVE = """
import argparse, sys
from gigpo_gym.envs.searchqa.cli import add_serve_cli
parser = argparse.ArgumentParser()
add_serve_cli(parser.add_subparsers(dest="what"))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""


def test_serve_retriever_command_serves_the_embedded_world(tmp_path):
    import os
    import subprocess
    import sys

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "GIGPO_GYM_CACHE": str(tmp_path)}
    env.pop("GIGPO_SEARCHQA_DATA", None)
    argv = ["retriever", "--port", str(port), "--world-size", "40", "--max-queries", "2"]
    proc = subprocess.Popen([sys.executable, "-c", _SERVE, *argv], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline, health = time.monotonic() + 60, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert health is not None and health["max_queries"] == 2, proc.stderr.read() if proc.poll() is not None else ""
        reply = httpx.post(f"http://127.0.0.1:{port}/retrieve", json={"queries": ["city founded"], "topk": 3}, timeout=5)
        assert reply.status_code == 200 and len(reply.json()["result"][0]) == 3
    finally:
        proc.terminate()
        proc.wait(timeout=10)
