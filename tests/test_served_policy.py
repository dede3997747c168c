"""The served-model policy against a fault-injecting OpenAI-compatible server on loopback.

Every fault of ``chat_server.FakeChatServer`` gets the behaviour ``policies.chat_api``
promises (retried and lost nothing, or an episode ended with the reason, or the run
stopped with one line), and the key never reaches a file, a log or an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chat_server import FINGERPRINT, MODEL, FakeChatServer

from gigpo_gym.algos.leaderboard.cli import main
from gigpo_gym.algos.leaderboard.policies import ServerSettings, resolve_policy
from gigpo_gym.algos.leaderboard.runner import load_spec, run_spec, validate_result
from gigpo_gym.algos.policies.base import SamplingParams
from gigpo_gym.algos.policies.chat_api import ChatAPIPolicy, ServedModelError
from gigpo_gym.core.env import derive_seed

KEY_ENV = "GIGPO_TEST_API_KEY"
KEY = "sk-test-4c0ffee-d0-not-write-me"
SEARCHQA = "gigpo_gym/SearchQA-v0"


def searcher(prompt: str) -> str:
    """A deterministic 'model': searches, answers or writes no tag, as the prompt's digest says."""
    pick = int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 3
    return ["<think>look it up</think><search>born in</search>", "<answer>Zathrur</answer>", "I am not sure."][pick]


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def served(url: str, env_id: str = SEARCHQA, **settings) -> object:
    server = ServerSettings(url, KEY_ENV, backoff=(0.01, 0.05), **settings)
    return resolve_policy(f"openai:{MODEL}", env_id, server=server)


def run(url: str, episodes: int = 4, **settings) -> dict:
    loaded = served(url, **settings)
    try:
        return run_spec(load_spec("searchqa-test"), loaded, episodes=episodes, progress=False)
    finally:
        loaded.close()


def cli(*args: str) -> int:
    return main(["leaderboard", "--policy", f"openai:{MODEL}", "--api-key-env", KEY_ENV, "--no-progress", *args])


# -- transient faults: retried, nothing lost ----------------------------------------------------------
@pytest.mark.slow
def test_each_transient_fault_is_retried_and_retry_after_is_honoured():
    with FakeChatServer(searcher, hang_seconds=2.0) as server:
        loaded = served(server.url, request_timeout=0.5)
        server.faults = ["429", "500", "hang", "malformed", "drop"]
        [gen] = loaded.policy.generate(["Question: where?"], loaded.sampling)
        loaded.close()
    assert gen.error is None and gen.text == searcher("Question: where?")
    times = [r["time"] for r in server.requests[1:]]  # after the connect probe: 5 faults, then the reply
    assert len(times) == 6
    assert times[1] - times[0] >= 1.0  # Retry-After: 1
    assert 0.5 <= times[3] - times[2] < 2.0  # the hang was given up after request_timeout, not waited out
    assert (gen.model, gen.system_fingerprint) == (MODEL, FINGERPRINT)


@pytest.mark.slow
def test_a_run_through_faults_equals_a_clean_run():
    with FakeChatServer(searcher) as server:
        clean = run(server.url)
    kinds = iter(["429", "500", "malformed", "drop", "hang"] * 10)
    count = iter(range(10**6))
    with FakeChatServer(searcher, fault_for=lambda p: next(kinds) if next(count) % 3 == 1 else None,
                        hang_seconds=1.0) as server:
        faulty = run(server.url, request_timeout=0.3)
    assert len(server.requests) > clean["usage"]["requests"] + 3  # faults were served
    assert faulty["episodes"] == clean["episodes"] and faulty["counts"]["crashed"] == 0
    assert faulty["metrics"] == clean["metrics"] and faulty["config_hash"] == clean["config_hash"]
    assert clean["usage"]["system_fingerprints"] == [FINGERPRINT]
    validate_result(faulty)


# -- faults that end an episode --------------------------------------------------------------------
def test_a_request_that_keeps_failing_crashes_its_episode_only():
    spec = load_spec("searchqa-test")
    import gymnasium as gym

    env = gym.make(spec.env_id, **spec.env_kwargs)
    from gigpo_gym.algos.leaderboard.rounds import EpisodeRecord  # noqa: F401  (the record the error lands in)

    question, _ = env.reset(seed=derive_seed(0, 1))  # episode 1 of round seed 0
    with FakeChatServer(searcher, fault_for=lambda p: "500" if question in p else None) as server:
        result = run(server.url, max_retries=2)
    crashed = [e for e in result["episodes"] if e["status"] == "crashed"]
    assert [e["index"] for e in crashed] == [1]
    assert crashed[0]["error"] == "policy: 500: The server had an error after 3 attempts" and not crashed[0]["won"]
    assert result["counts"]["crashed"] == 1 and result["counts"]["episodes"] == 4


def test_a_prompt_over_the_context_ends_its_episode_as_truncated():
    with FakeChatServer(searcher, fault_for=lambda p: "context" if "<information>" in p else None) as server:
        result = run(server.url)
    cut = [e for e in result["episodes"] if e["error"]]
    assert cut and all(e["status"] == "truncated" and "longer than the model's context" in e["error"] for e in cut)
    assert result["counts"]["crashed"] == 0


def test_a_refused_request_crashes_its_episode_and_stops_the_run_if_the_first_one_is_refused():
    with FakeChatServer(searcher, faults=["400"]) as server:
        with pytest.raises(ServedModelError, match=r"refused the request \(400: Unrecognized request argument "
                                                   r"supplied: seed\)"):
            served(server.url)
        probe = server.requests[0]["body"]  # the run's settings, one token
        assert (probe["seed"], probe["stop"], probe["max_tokens"]) == (derive_seed(0, 0), ["</search>", "</answer>"], 1)
        calls = iter(range(10**6))
        server.fault_for = lambda p: "400" if next(calls) == 1 else None
        result = run(server.url)
    [refused] = [e for e in result["episodes"] if e["error"]]
    assert refused["status"] == "crashed" and "refused the request (400" in refused["error"]


# -- faults that stop the run ----------------------------------------------------------------------
def test_a_wrong_key_an_unknown_model_or_no_server_stop_before_any_episode(monkeypatch):
    with FakeChatServer(searcher, faults=["401"]) as server:
        with pytest.raises(ServedModelError, match=rf"refused the key in \${KEY_ENV} \(401\)") as e:
            served(server.url)
        assert KEY not in str(e.value)
        server.faults = ["403"]
        with pytest.raises(ServedModelError, match=rf"refused the key in \${KEY_ENV} \(403\)") as e:
            served(server.url)
        assert server.faults == [] and KEY not in str(e.value)  # asked once: a refused key is not retried
        monkeypatch.delenv(KEY_ENV)
        server.faults = ["401"]
        with pytest.raises(ServedModelError, match=rf"\${KEY_ENV} is not set"):
            served(server.url)
        with pytest.raises(ServedModelError, match=r"does not serve model 'fake/chat-2'.*Did you mean 'fake/chat-1'\?"):
            resolve_policy("openai:fake/chat-2", SEARCHQA, server=ServerSettings(server.url, KEY_ENV))
        url = server.url
    with pytest.raises(ServedModelError, match=rf"cannot reach the server at {url}: connection failed"):
        served(url)


def test_a_key_refused_mid_run_stops_it_and_resume_continues(tmp_path: Path, capsys):
    with FakeChatServer(searcher) as server:
        assert cli("--base-url", server.url, "--envs", "searchqa-test", "--episodes", "6",
                   "--results-dir", str(tmp_path / "clean")) == 0
    clean = json.loads(next((tmp_path / "clean").glob("*.json")).read_text())
    calls = iter(range(10**6))
    with FakeChatServer(searcher, fault_for=lambda p: "401" if next(calls) == 9 else None) as server:
        args = ("--base-url", server.url, "--envs", "searchqa-test", "--episodes", "6", "--results-dir", str(tmp_path))
        assert cli(*args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "refused the key" in err and "--resume continues" in err
        [journal] = tmp_path.glob("*.episodes.jsonl")
        kept = [json.loads(line) for line in journal.read_text().splitlines()[1:]]
        assert 0 < len(kept) < 6
        assert cli(*args) == 2 and "--resume continues it, --overwrite starts it over" in capsys.readouterr().err
        assert cli(*args, "--resume") == 0
    result = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert result["episodes"] == clean["episodes"] and result["config_hash"] == clean["config_hash"]
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sorted(line["k"] for line in lines if "episode" in line) == list(range(6))  # none twice
    assert lines[-1] == {"complete": True}


def test_a_server_that_goes_away_stops_the_run_and_another_address_resumes_it(tmp_path: Path, capsys):
    args = ["--envs", "searchqa-test", "--episodes", "5", "--max-retries", "1"]
    with FakeChatServer(searcher) as server:
        assert cli("--base-url", server.url, *args, "--results-dir", str(tmp_path / "clean")) == 0
    clean = json.loads(next((tmp_path / "clean").glob("*.json")).read_text())
    calls = iter(range(10**6))
    with FakeChatServer(searcher) as server:
        server.fault_for = lambda p: (server.go_away() or "drop") if next(calls) == 6 else None
        assert cli("--base-url", server.url, *args, "--results-dir", str(tmp_path)) == 2
    assert "stopped answering: connection failed" in capsys.readouterr().err
    with FakeChatServer(searcher) as other:  # the same model elsewhere: the config hash holds no address
        assert cli("--base-url", other.url, *args, "--results-dir", str(tmp_path), "--resume") == 0
    result = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert result["episodes"] == clean["episodes"] and result["runtime"]["base_url"] == other.url


def test_ctrl_c_keeps_the_finished_episodes_and_resume_continues(tmp_path: Path, capsys, monkeypatch):
    args = ["--envs", "searchqa-test", "--episodes", "5", "--max-concurrency", "1"]
    with FakeChatServer(searcher) as server:
        assert cli("--base-url", server.url, *args, "--results-dir", str(tmp_path / "clean")) == 0
        clean = json.loads(next((tmp_path / "clean").glob("*.json")).read_text())
        calls = iter(range(10**6))
        generate = ChatAPIPolicy.generate

        def interrupted(self, *a, **kw):
            if next(calls) == 3:
                raise KeyboardInterrupt
            return generate(self, *a, **kw)

        monkeypatch.setattr(ChatAPIPolicy, "generate", interrupted)
        assert cli("--base-url", server.url, *args, "--results-dir", str(tmp_path)) == 130
        [journal] = tmp_path.glob("*.episodes.jsonl")
        assert f"interrupted: the finished episodes are kept in {journal}" in capsys.readouterr().err
        assert 0 < journal.read_text().count('"episode"') < 5 and not list(tmp_path.glob("*__*.json"))
        monkeypatch.setattr(ChatAPIPolicy, "generate", generate)
        assert cli("--base-url", server.url, *args, "--results-dir", str(tmp_path), "--resume") == 0
    assert json.loads(next(tmp_path.glob("*.json")).read_text())["episodes"] == clean["episodes"]


# -- what goes on the wire ------------------------------------------------------------------------
def test_requests_carry_the_decoding_settings_and_a_seed_per_episode():
    with FakeChatServer(searcher) as server:
        policy = ChatAPIPolicy(MODEL, base_url=server.url, api_key_env=KEY_ENV, system_prompt="Be brief.")
        sampling = SamplingParams(max_new_tokens=7, temperature=0.5, top_p=0.9, stop=("</answer>",), seed=11)
        policy.generate(["a", "b"], sampling, [{"episode": 5}, {"episode": 2}])
        policy.close()
    bodies = sorted((r["body"] for r in server.requests), key=lambda b: b["messages"][-1]["content"])
    assert [b["seed"] for b in bodies] == [derive_seed(11, 5), derive_seed(11, 2)]
    for b in bodies:
        assert (b["max_tokens"], b["temperature"], b["top_p"], b["stop"]) == (7, 0.5, 0.9, ["</answer>"])
        assert b["messages"][0] == {"role": "system", "content": "Be brief."} and b["model"] == MODEL
    assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in server.requests)


def test_every_prompt_of_a_step_is_in_flight_at_once_up_to_max_concurrency():
    with FakeChatServer(lambda p: f"<answer>{p}</answer>", delay=0.3) as server:
        policy = ChatAPIPolicy(MODEL, base_url=server.url, api_key_env=KEY_ENV, max_concurrency=3)
        started = time.perf_counter()
        gens = policy.generate([f"q{i}" for i in range(9)], SamplingParams(temperature=0.0))
        took = time.perf_counter() - started
        policy.close()
    assert [g.text for g in gens] == [f"<answer>q{i}</answer>" for i in range(9)]  # in the prompts' order
    assert server.most_in_flight == 3 and took < 9 * 0.3  # one at a time would take 2.7 s at least


@pytest.mark.parametrize("split_reasoning", [False, True])
def test_replies_read_as_the_model_wrote_them_up_to_the_first_stop_string(split_reasoning):
    replies = {"kept": "<think>x</think><action>look</action>\nand more", "left out": "<think>x</think><action>go to desk 1",
               "ended": "<think>no action yet</think>"}
    with FakeChatServer(lambda p: replies[p], split_reasoning=split_reasoning) as server:
        policy = ChatAPIPolicy(MODEL, base_url=server.url, api_key_env=KEY_ENV)
        gens = policy.generate(list(replies), SamplingParams(temperature=0.0, stop=("</action>",)))
        policy.close()
    assert [g.text for g in gens] == ["<think>x</think><action>look</action>",  # the server kept the stop and more
                                      "<think>x</think><action>go to desk 1</action>",  # it left the stop out
                                      "<think>no action yet</think>"]  # it ended on its own


# -- the key is never written ---------------------------------------------------------------------
def test_the_key_reaches_no_file_log_or_error(tmp_path: Path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    spec = load_spec("searchqa-test")
    import gymnasium as gym

    question, _ = gym.make(spec.env_id, **spec.env_kwargs).reset(seed=derive_seed(0, 0))
    with FakeChatServer(searcher, fault_for=lambda p: "echo500" if question in p else None) as server:
        assert cli("--base-url", server.url, "--envs", "searchqa-test", "--episodes", "3", "--max-retries", "1",
                   "--results-dir", str(tmp_path)) == 0
        server.faults = ["401"]
        assert cli("--base-url", server.url, "--envs", "searchqa-test", "--episodes", "2", "--results-dir",
                   str(tmp_path / "refused")) == 2
    assert any(KEY in str(r["headers"]) for r in server.requests)  # it was sent, and echoed back by the server
    result = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert "upstream failed for Bearer ***" in result["episodes"][0]["error"]  # the echo, scrubbed
    written = [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    out = capsys.readouterr()
    for text in (*written, out.out, out.err, caplog.text):
        assert KEY not in text


def test_the_served_path_imports_no_torch():
    code = """
import sys
from gigpo_gym.algos.policies import chat_api
from gigpo_gym.algos.leaderboard import cli, journal, policies, rounds, runner
from gigpo_gym.wrappers import paper_stack
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_config_hash_holds_the_served_model_the_template_and_decoding_not_the_address():
    from gigpo_gym.algos.leaderboard.runner import config_hash

    spec = load_spec("webshop-test")

    def digest(url: str, template: str = "default", max_concurrency: int = 8, **kw) -> str:
        server = ServerSettings(url, KEY_ENV, max_concurrency=max_concurrency)
        loaded = resolve_policy(f"openai:{MODEL}", spec.env_id, server=server, template=template, **kw)
        loaded.close()
        return config_hash(spec, loaded, 2)

    with FakeChatServer(searcher) as one, FakeChatServer(searcher) as two, \
            FakeChatServer(searcher, answer_as="fake/chat-1-2025-01-01") as snapshot:
        base = digest(one.url)
        assert digest(two.url, max_concurrency=2) == base  # where and how fast it is served: not in the hash
        assert digest(snapshot.url) != base  # the same name, another model behind it
        assert digest(one.url, template="paper") != base
        assert len({base, digest(one.url, temperature=0.7), digest(one.url, max_new_tokens=64),
                    digest(one.url, top_p=0.5)}) == 4


def first_listed(prompt: str) -> str:
    """Reply with the first admissible action the paper's WebShop prompt lists (a query for the search bar)."""
    listed = re.search(r"^'(.+)',$", prompt, re.MULTILINE)
    if listed is None:  # the connect probe
        return "OK"
    return f"<think>buy</think><action>{listed.group(1).replace('<your query>', 'red shoes')}</action>"


@pytest.mark.slow
def test_the_leaderboard_sends_the_papers_prompt_with_paper():
    with FakeChatServer(first_listed) as server:
        loaded = resolve_policy(f"openai:{MODEL}", "gigpo_gym/WebShop-v0", template="paper",
                                server=ServerSettings(server.url, KEY_ENV))
        assert loaded.name == "fake/chat-1 (served), paper prompt" and loaded.sampling.max_new_tokens == 512
        result = run_spec(load_spec("webshop-test"), loaded, episodes=1, progress=False)
        loaded.close()
    prompts = [r["body"]["messages"][-1]["content"] for r in server.requests[1:]]
    assert prompts[0].startswith("\nYou are an expert autonomous agent operating in the WebShop e‑commerce environment.")
    assert "search[<your query>]" in prompts[0] and result["policy"]["details"]["prompt"] == {"template": "paper"}
    assert result["metrics"]["invalid_rate"]["mean"] == 0.0  # the <action> block was parsed
