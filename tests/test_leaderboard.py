"""Leaderboard protocol: specs, runs, reproducibility, crashes, schema, rendering, CLI errors."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from gigpo_gym.algos.leaderboard.runner import (
    LeaderboardError,
    check_spec,
    load_result,
    load_spec,
    result_filename,
    run_spec,
    validate_result,
    write_result,
)
from gigpo_gym.algos.leaderboard.cli import main
from gigpo_gym.algos.leaderboard.policies import LoadedPolicy, resolve_policy
from gigpo_gym.algos.leaderboard.render import PAPER_MARK, render
from gigpo_gym.algos.policies.base import Generation, Policy, SamplingParams

SPEC_NAMES = ("alfworld-valid_seen", "alfworld-valid_unseen", "webshop-test", "searchqa-test")


def _run(name: str, policy: str, episodes: int = 2) -> dict:
    spec = load_spec(name)
    return run_spec(spec, resolve_policy(policy, spec.env_id), episodes=episodes, progress=False)


@pytest.fixture(scope="module")
def small_results() -> dict[tuple[str, str], dict]:
    return {(n, p): _run(n, p) for n in SPEC_NAMES for p in ("random", "expert")}


# -- specs ------------------------------------------------------------------------------
def test_committed_specs_load_and_name_their_env():
    for name in SPEC_NAMES:
        spec = load_spec(name)
        assert spec.name == name and spec.env_id.endswith(spec.env_version)
        assert spec.spec_version == 1 and spec.episodes >= 1 and spec.seeds


def test_unknown_spec_name_suggests_the_closest():
    with pytest.raises(LeaderboardError, match=r"unknown leaderboard spec 'webshop-tset'.*Did you mean 'webshop-test'"):
        load_spec("webshop-tset")


def test_spec_with_unknown_env_id_names_the_file_and_the_close_id(tmp_path: Path):
    data = json.loads(Path(load_spec("alfworld-valid_seen").path).read_text())
    data["env_id"] = "gigpo_gym/ALFWorld-v1"
    data["env_version"] = "v1"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LeaderboardError, match=r"bad\.json: unknown env id 'gigpo_gym/ALFWorld-v1'.*Did you mean 'gigpo_gym/ALFWorld-v0'"):
        load_spec(path)


def test_spec_key_errors_are_named():
    data = dict(load_spec("webshop-test").data)
    with pytest.raises(LeaderboardError, match=r"unknown spec key 'episode' \(did you mean 'episodes'\?\)"):
        check_spec({**data, "episode": 3}, "x.json")
    with pytest.raises(LeaderboardError, match=r"x\.json: episodes must be an integer, got '3'"):
        check_spec({**data, "episodes": "3"}, "x.json")
    with pytest.raises(LeaderboardError, match=r"x\.json: seeds\[1\] must be an integer, got 'a'"):
        check_spec({**data, "seeds": [0, "a"]}, "x.json")
    with pytest.raises(LeaderboardError, match=r"x\.json: the spec key 'reward' is missing"):
        check_spec({k: v for k, v in data.items() if k != "reward"}, "x.json")
    with pytest.raises(LeaderboardError, match=r"env_version 'v9' does not match env_id"):
        check_spec({**data, "env_version": "v9"}, "x.json")
    spec = check_spec(data, "x.json")
    assert spec.data == data and spec.path == "x.json" and spec.episodes == data["episodes"]
    with pytest.raises(AttributeError):  # a spec is frozen: a run cannot change the protocol it reports
        spec.episodes = 3


# -- runs -------------------------------------------------------------------------------
def test_small_runs_write_schema_valid_results(small_results, tmp_path: Path):
    for (name, policy), result in small_results.items():
        validate_result(result)
        assert result["counts"] == {"episodes": 2, "terminated": result["counts"]["terminated"],
                                    "truncated": result["counts"]["truncated"], "crashed": 0}
        assert len(result["episodes"]) == 2 and result["seeds"] == [0]
        path = write_result(result, tmp_path / result_filename(result))
        assert load_result(path)["config_hash"] == result["config_hash"]
    expert_ws = small_results[("webshop-test", "expert")]
    assert expert_ws["metrics"]["success"]["mean"] == 1.0 and expert_ws["metrics"]["score"]["mean"] == 1.0
    assert set(small_results[("searchqa-test", "expert")]["metrics"]) >= {"em", "f1", "success"}
    alf = small_results[("alfworld-valid_seen", "expert")]
    assert sum(s["n"] for s in alf["per_task_type"].values()) == 2


def test_same_spec_and_deterministic_policy_give_identical_numbers(small_results):
    for name in ("alfworld-valid_seen", "webshop-test"):
        again = _run(name, "random")
        first = small_results[(name, "random")]
        assert again["episodes"] == first["episodes"]
        assert again["metrics"] == first["metrics"] and again["config_hash"] == first["config_hash"]


def test_random_search_fills_the_webshop_query_with_the_instruction():
    result = _run("webshop-test", "random-search", episodes=6)
    validate_result(result)
    assert result["policy"]["name"] == "random admissible, instruction search"
    plain = _run("webshop-test", "random", episodes=6)
    assert [e["task_id"] for e in plain["episodes"]] == [e["task_id"] for e in result["episodes"]]
    assert plain["metrics"]["score"]["mean"] == 0.0  # the literal search[<query>] finds nothing
    assert result["metrics"]["score"]["mean"] > 0.0  # searching the instruction reaches products


def test_an_llm_choosing_admissible_actions_plays_only_valid_concrete_commands(tmp_path: Path):
    from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny

    corpus = ["<action>search[red shoes]</action>", "<action>go to cabinet 1</action>", "<action>look</action>"] * 4
    model = str(build_tiny(corpus, TinySpec(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1,
                                            num_heads=2, num_kv_heads=1), name="leaderboard-choice"))
    for name in ("webshop-test", "alfworld-valid_seen"):
        spec = load_spec(name)
        loaded = resolve_policy(model, spec.env_id, device="cpu", choose_admissible=True)
        assert loaded.name.endswith("zero-shot, admissible choice") and loaded.details["choose_admissible"]
        [search] = loaded.policy.generate(["Search for red shoes."], loaded.sampling,
                                          [{"admissible_actions": ["search[<query>]"], "instruction": "red shoes"}])
        assert search.text == "<action>search[red shoes]</action>"  # the template is filled, never played literally
        result = run_spec(spec, loaded, episodes=2, progress=False)
        validate_result(result)
        assert result["counts"]["crashed"] == 0
        assert result["metrics"]["invalid_rate"]["mean"] == 0.0
        again = run_spec(spec, resolve_policy(model, spec.env_id, device="cpu", choose_admissible=True), episodes=2,
                         progress=False)
        assert again["episodes"] == result["episodes"]  # greedy choice: the same episodes
    with pytest.raises(LeaderboardError, match="open action space"):
        resolve_policy(model, "gigpo_gym/SearchQA-v0", device="cpu", choose_admissible=True)
    with pytest.raises(LeaderboardError, match="for LLM policies"):
        resolve_policy("random", "gigpo_gym/ALFWorld-v0", choose_admissible=True)


def test_fewer_episodes_play_the_first_tasks_of_the_spec():
    three = _run("alfworld-valid_unseen", "expert", episodes=3)
    two = _run("alfworld-valid_unseen", "expert", episodes=2)
    assert [e["task_id"] for e in three["episodes"][:2]] == [e["task_id"] for e in two["episodes"]]


class _RaiseOnTaskPolicy(Policy):
    needs_context = ("expert_action", "task")

    def __init__(self, bad_task: str):
        self.bad_task = bad_task

    def generate(self, prompts, sampling, contexts):
        out = []
        for prompt, ctx in zip(prompts, contexts):
            if ctx["task"] == self.bad_task:
                raise RuntimeError("model fell over")
            out.append(Generation(f"<action>{ctx['expert_action']}</action>", [], [], []))
        return out


def test_a_crashing_policy_episode_is_recorded_not_dropped():
    spec = load_spec("webshop-test")
    probe = _run("webshop-test", "expert", episodes=3)
    import gymnasium as gym

    env = gym.make(spec.env_id, **spec.env_kwargs)
    bad_task, _ = env.reset(seed=probe["episodes"][1]["reset_seed"])
    policy = _RaiseOnTaskPolicy(bad_task)
    loaded = LoadedPolicy(policy, "test", "expert", "crashy", True, SamplingParams(max_new_tokens=1, temperature=0.0))
    result = run_spec(spec, loaded, episodes=3, progress=False)
    validate_result(result)
    crashed = [e for e in result["episodes"] if e["status"] == "crashed"]
    assert result["counts"]["crashed"] == len(crashed) >= 1 and result["counts"]["episodes"] == 3
    assert all("model fell over" in e["error"] and not e["won"] for e in crashed)
    assert result["metrics"]["success"]["mean"] == pytest.approx((3 - len(crashed)) / 3)


def test_an_env_that_raises_ends_its_episode_as_crashed(monkeypatch):
    from gigpo_gym.envs.alfworld.env import ALFWorldEnv

    original = ALFWorldEnv._step

    def broken(self, action):
        if self.engine.world.task_type == "heat":
            raise KeyError("engine bug")
        return original(self, action)

    monkeypatch.setattr(ALFWorldEnv, "_step", broken)
    result = _run("alfworld-valid_seen", "expert", episodes=4)
    validate_result(result)
    statuses = {e["task_type"]: e["status"] for e in result["episodes"]}
    assert statuses.get("heat") == "crashed"
    heat = [e for e in result["episodes"] if e["task_type"] == "heat"]
    assert all("step: KeyError" in e["error"] for e in heat)
    assert all(e["status"] == "terminated" for e in result["episodes"] if e["task_type"] != "heat")


def test_an_episode_whose_worker_died_is_recorded_as_crashed(monkeypatch):
    """A grouped env ends the episodes of a dead worker as truncated with ``worker_failed``."""
    from gigpo_gym.envs.alfworld.env import ALFWorldEnv

    original = ALFWorldEnv._step

    def worker_died(self, action):
        obs, reward, terminated, info = original(self, action)
        if self.engine.world.task_type == "heat":
            info["worker_failed"] = True
            terminated = True
        return obs, reward, terminated, info

    monkeypatch.setattr(ALFWorldEnv, "_step", worker_died)
    result = _run("alfworld-valid_seen", "expert", episodes=4)
    heat = [e for e in result["episodes"] if e["task_type"] == "heat"]
    assert heat and all(e["status"] == "crashed" and "worker process" in e["error"] and not e["won"] for e in heat)
    assert result["counts"]["crashed"] == len(heat)


# -- schema -------------------------------------------------------------------------------
def test_a_result_that_breaks_the_schema_is_rejected_with_its_field(small_results, tmp_path: Path):
    bad = copy.deepcopy(small_results[("webshop-test", "expert")])
    bad["metrics"]["success"]["stderr"] = -1.0
    with pytest.raises(LeaderboardError, match=r"does not follow the result schema at metrics/success/stderr"):
        validate_result(bad)
    missing = copy.deepcopy(small_results[("webshop-test", "expert")])
    del missing["config_hash"]
    path = tmp_path / "webshop-test__broken.json"
    path.write_text(json.dumps(missing))
    with pytest.raises(LeaderboardError, match=r"webshop-test__broken\.json: .*'config_hash' is a required property"):
        load_result(path)


# -- render -------------------------------------------------------------------------------
def test_render_merges_results_and_marks_the_paper_rows(small_results, tmp_path: Path):
    for result in small_results.values():
        write_result(result, tmp_path / result_filename(result))
    table, chart = render(tmp_path)
    text = table.read_text()
    for name in SPEC_NAMES:
        assert f"Spec `{name}` v1" in text
    assert "| expert (upper bound) | – | 100.0 ± 0.0 |" in text  # no decoding: not an LLM
    sampled = copy.deepcopy(small_results[("searchqa-test", "random")])
    sampled["policy"].update(kind="checkpoint", name="tiny sampled", deterministic=False)
    sampled["sampling"]["temperature"] = 1.0
    write_result(sampled, tmp_path / result_filename(sampled))
    assert "| tiny sampled | sampled, T=1 |" in render(tmp_path)[0].read_text()
    assert f"| Qwen2.5-1.5B GiGPO w/ std | {PAPER_MARK} | 86.7 |" in text
    assert chart is not None and chart.stat().st_size > 1000


def test_render_refuses_a_broken_result_file(small_results, tmp_path: Path):
    result = small_results[("alfworld-valid_seen", "random")]
    write_result(result, tmp_path / result_filename(result))
    (tmp_path / "alfworld-valid_seen__bad.json").write_text('{"result_version": 1}')
    with pytest.raises(LeaderboardError, match=r"alfworld-valid_seen__bad\.json: does not follow the result schema"):
        render(tmp_path)


# -- policies and the command line ---------------------------------------------------------
def test_policy_spec_errors_are_clear(tmp_path: Path):
    with pytest.raises(LeaderboardError, match=r"policy 'expret'.*Did you mean 'expert'"):
        resolve_policy("expret", "gigpo_gym/ALFWorld-v0")
    with pytest.raises(LeaderboardError, match=r"not in the local Hugging Face cache.*`hf download no-such-org/"):
        resolve_policy("no-such-org/no-such-model-xyz", "gigpo_gym/ALFWorld-v0")
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(LeaderboardError, match=r"has no complete checkpoint"):
        resolve_policy(str(tmp_path / "run"), "gigpo_gym/ALFWorld-v0")
    ckpt = tmp_path / "run2" / "checkpoints" / "iter-000001"
    ckpt.mkdir(parents=True)
    (ckpt / "manifest.json").write_text("{}")
    with pytest.raises(LeaderboardError, match=r"config\.yaml is missing"):
        resolve_policy(str(ckpt), "gigpo_gym/ALFWorld-v0")


def test_cli_runs_and_renders(tmp_path: Path, capsys):
    from gigpo_gym.algos.leaderboard.cli import main

    assert main(["leaderboard", "--policy", "expert", "--envs", "searchqa-test", "--episodes", "2",
                 "--results-dir", str(tmp_path), "--no-progress"]) == 0
    assert (tmp_path / "searchqa-test__expert__upper_bound.json").is_file()
    assert main(["leaderboard", "render", "--results-dir", str(tmp_path)]) == 0
    assert (tmp_path / "LEADERBOARD.md").is_file()
    assert main(["leaderboard", "--policy", "expert", "--envs", "alfworld", "--results-dir", str(tmp_path)]) == 2
    assert "Did you mean 'alfworld-valid_seen' or 'alfworld-valid_unseen'" in capsys.readouterr().err


# -- speed report ---------------------------------------------------------------------------
def test_speed_report_lists_ratios_and_says_why_a_benchmark_did_not_run(tmp_path: Path, monkeypatch):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "speed_report.py"
    spec = importlib.util.spec_from_file_location("speed_report", path)
    speed = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "speed_report", speed)  # dataclasses look their module up
    spec.loader.exec_module(speed)
    by_key = {b.key: b for b in speed.BENCHES}
    missing = speed.Bench("alfworld_reference", "no_such_bench.py", "ALFWorld: native vs TextWorld", ())
    grouped_out = "sync          6,593     0.10\nasync        17,325     0.50\nasync / sync = 2.63\n"
    results = [
        (missing, speed.run_bench(missing, full=False, timeout=10)),
        (by_key["grouped"], {"status": "ok", "seconds": 1.0, "command": "python benchmarks/bench_grouped.py",
                             "output": grouped_out, "ratios": by_key["grouped"].ratios(grouped_out)}),
    ]
    out = tmp_path / "SPEED.md"
    speed.write_report(results, out, full=False)
    text = out.read_text()
    assert "| ALFWorld: native vs TextWorld | not run: no_such_bench.py does not exist in this checkout |" in text
    assert "| async vs sync grouped stepping, ALFWorld, 8x8 envs, 2 workers | 2.63x (17,325 vs 6,593 env steps/s) |" in text
    adv = "     rows  groups step groups   build s    grpo s   gigpo s 1 thread s   numpy s gigpo/grpo 1 thread/grpo with build\n" \
          "    10468      49        5211    0.0134    0.0002    0.0016     0.0020    0.0030       8.43         10.00       1.10\n"
    assert by_key["advantages"].ratios(adv) == [
        ("GiGPO / GRPO advantage time, 10,468 rows",
         "8.43x, one thread 10.00x (with batch build 1.10x); GRPO 0.0002 s, GiGPO 0.0016 s, one thread 0.0020 s "
         "(numpy path 0.0030 s)")]


# -- where results go, and what they may replace ------------------------------------------------------
def test_results_go_to_the_current_directory_unless_it_is_inside_the_checkout(tmp_path: Path, monkeypatch, capsys):
    from gigpo_gym.algos.leaderboard.cli import main
    from gigpo_gym.algos.leaderboard.specs import BENCHMARKS_DIR, default_results_dir

    committed = BENCHMARKS_DIR / "results" / "searchqa-test__expert__upper_bound.json"
    before = committed.read_bytes()
    monkeypatch.chdir(BENCHMARKS_DIR.parent / "docs")
    assert default_results_dir() == BENCHMARKS_DIR / "results"
    monkeypatch.chdir(tmp_path)  # an editable install run elsewhere: the checkout is not "here"
    assert default_results_dir() == Path(".")
    assert main(["leaderboard", "--policy", "expert", "--envs", "searchqa-test", "--episodes", "2", "--no-progress"]) == 0
    assert json.loads((tmp_path / committed.name).read_text())["counts"]["episodes"] == 2
    assert committed.read_bytes() == before


def test_a_result_of_another_config_is_never_replaced_silently(tmp_path: Path, capsys):
    from gigpo_gym.algos.leaderboard.cli import main

    args = ["leaderboard", "--policy", "expert", "--envs", "searchqa-test", "--no-progress", "--results-dir", str(tmp_path)]
    path = tmp_path / "searchqa-test__expert__upper_bound.json"
    assert main([*args, "--episodes", "3"]) == 0
    capsys.readouterr()
    assert main([*args, "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path} holds another result (3 episodes, config ") and "--overwrite replaces it" in err
    assert json.loads(path.read_text())["counts"]["episodes"] == 3  # refused before anything ran
    assert main([*args, "--episodes", "3"]) == 0  # the same config again: a rerun replaces its own result
    assert main([*args, "--episodes", "2", "--overwrite"]) == 0
    assert json.loads(path.read_text())["counts"]["episodes"] == 2


def test_help_lists_every_policy_states_the_defaults_and_render_has_its_own(capsys):
    from gigpo_gym.cli import main

    with pytest.raises(SystemExit):
        main(["leaderboard", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "random | random-search | expert | smollm2 | openai:MODEL" in text
    assert "(default: the current directory, or the checkout's benchmarks/results when run inside the checkout" in text
    with pytest.raises(SystemExit):
        main(["leaderboard", "render", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: gigpo-gym leaderboard render [-h] [--results-dir RESULTS_DIR] [--out OUT]")
    assert "--policy" not in text
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "default: the config's run_dir" in " ".join(capsys.readouterr().out.split())


def test_resume_with_overwrite_keeps_the_finished_episodes_and_replaces_the_other_result(tmp_path: Path, capsys):
    from gigpo_gym.algos.leaderboard.cli import main

    args = ["leaderboard", "--policy", "expert", "--envs", "searchqa-test", "--no-progress", "--results-dir", str(tmp_path)]
    assert main([*args, "--episodes", "3"]) == 0
    assert main([*args, "--episodes", "2", "--results-dir", str(tmp_path / "other")]) == 0
    [journal] = (tmp_path / "other").glob("*.episodes.jsonl")
    header, first, *_ = journal.read_text().splitlines()
    (tmp_path / journal.name).write_text(f"{header}\n{first}\n")  # a 2-episode run killed after its first episode
    capsys.readouterr()
    assert main([*args, "--episodes", "2", "--resume"]) == 2
    assert "holds another result (3 episodes" in capsys.readouterr().err
    assert main([*args, "--episodes", "2", "--resume", "--overwrite"]) == 0
    lines = (tmp_path / journal.name).read_text().splitlines()
    assert lines[:2] == [header, first] and len(lines) == 4 and json.loads(lines[-1]) == {"complete": True}
    result = json.loads((tmp_path / "searchqa-test__expert__upper_bound.json").read_text())
    assert result["counts"]["episodes"] == 2 and [e["index"] for e in result["episodes"]] == [0, 1]


# -- the policy loader registry, the config hash -------------------------------------------
def test_a_package_registers_a_policy_prefix_of_its_own(tmp_path, monkeypatch):
    from gigpo_gym.algos.leaderboard import policies

    monkeypatch.setattr(policies, "POLICY_LOADERS", dict(policies.POLICY_LOADERS))
    (tmp_path / "toy_policy_pkg.py").write_text(
        "from gigpo_gym.algos.leaderboard.policies import LoadedPolicy\n"
        "from gigpo_gym.algos.policies.base import SamplingParams\n"
        "from gigpo_gym.algos.policies.reference import ExpertPolicy\n"
        "def load(request):\n"
        "    return LoadedPolicy(ExpertPolicy(), request.text, 'expert', f'toy {request.argument}', True,\n"
        "                        SamplingParams(max_new_tokens=1, temperature=0.0), details={'arg': request.argument})\n")
    info = tmp_path / "toy_policy_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-policy-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gigpo_gym.policies]\nmyserver = toy_policy_pkg:load\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = resolve_policy("myserver:big-model", "gigpo_gym/ALFWorld-v0")  # found through the entry point
    assert loaded.name == "toy big-model" and loaded.details == {"arg": "big-model"}
    assert "myserver" in policies.POLICY_LOADERS
    policies.register_policy_loader("other", lambda request: loaded)
    assert resolve_policy("other", "gigpo_gym/ALFWorld-v0") is loaded
    with pytest.raises(ValueError, match="has no ':' or '/'"):
        policies.register_policy_loader("a:b", lambda request: loaded)


def test_the_config_hash_is_computed_once_per_run(tmp_path, monkeypatch):
    from gigpo_gym.algos.leaderboard import runner

    calls = []
    real = runner.config_hash
    monkeypatch.setattr(runner, "config_hash", lambda *a: calls.append(a) or real(*a))
    assert main(["leaderboard", "--policy", "random", "--envs", "searchqa-test", "--episodes", "2", "--results-dir", str(tmp_path),
                 "--no-progress"]) == 0
    assert len(calls) == 1
    result = json.loads(next(tmp_path.glob("searchqa-test__*.json")).read_text())
    assert result["config_hash"] == real(load_spec("searchqa-test"), resolve_policy("random", "gigpo_gym/SearchQA-v0"), 2)


# -- what cannot be compared is refused -------------------------------------------------------
def test_a_run_trained_on_another_env_is_refused_before_anything_is_built(tmp_path: Path, monkeypatch):
    from gigpo_gym.algos.training.checkpoint import RunFolder
    from gigpo_gym.algos.training.config import load_config

    run = RunFolder(tmp_path / "run")
    run.write_config(load_config("demo"))  # trained on ALFWorld
    (run.checkpoints / "iter-000001").mkdir(parents=True)
    (run.checkpoints / "latest").write_text("iter-000001\n")

    def never(cfg):
        raise AssertionError("the model was built")

    monkeypatch.setattr("gigpo_gym.algos.training.models.build_policy", never)
    with pytest.raises(LeaderboardError, match=rf"{tmp_path / 'run'} was trained on gigpo_gym/ALFWorld-v0, and this spec "
                                               r"plays gigpo_gym/SearchQA-v0: evaluate it on a spec of "
                                               r"gigpo_gym/ALFWorld-v0 \(alfworld-valid_seen, alfworld-valid_unseen\)"):
        resolve_policy(str(run.path), "gigpo_gym/SearchQA-v0")


def test_a_round_in_which_every_episode_crashed_writes_no_result(tmp_path: Path, capsys):
    from gigpo_gym.algos.leaderboard.runner import Evaluation, run_to_file

    class Exploding(Policy):
        def generate(self, prompts, sampling, contexts=None):
            raise RuntimeError("model fell over")

    spec = load_spec("searchqa-test")
    loaded = LoadedPolicy(Exploding(), "test", "expert", "always crashing", True, SamplingParams(max_new_tokens=1))
    with pytest.raises(LeaderboardError, match=r"every episode of round \d+ crashed, so no result is written; the "
                                               r"first: policy: RuntimeError: model fell over"):
        run_to_file(Evaluation.of(spec, loaded, 2), tmp_path, progress=False)
    assert not list(tmp_path.glob("*.json"))


def test_more_episodes_than_the_spec_plays_are_refused(capsys):
    spec = load_spec("searchqa-test")
    with pytest.raises(LeaderboardError, match=rf"--episodes {spec.episodes + 1} is more than the {spec.episodes} "
                                               r"episodes per round that searchqa-test plays; use at most"):
        _run("searchqa-test", "expert", episodes=spec.episodes + 1)
    assert main(["leaderboard", "--policy", "expert", "--envs", "searchqa-test", "--episodes", "100000"]) == 2
    assert capsys.readouterr().err.startswith("error: --episodes 100000 is more than the")


def test_render_names_the_folder_it_read(small_results, tmp_path: Path, capsys):
    from gigpo_gym.algos.leaderboard.render import results_folder_name
    from gigpo_gym.algos.leaderboard.specs import RESULTS_DIR

    result = small_results[("searchqa-test", "expert")]
    write_result(result, tmp_path / result_filename(result))
    assert main(["leaderboard", "render", "--results-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"read the results in {tmp_path}; wrote {tmp_path / 'LEADERBOARD.md'}")
    assert f"from the result files in `{tmp_path.resolve().as_posix()}/`" in (tmp_path / "LEADERBOARD.md").read_text()
    assert results_folder_name(RESULTS_DIR) == "benchmarks/results/"  # the committed board's words


def test_choosing_admissible_actions_is_for_llms_and_says_what_the_policy_is():
    with pytest.raises(LeaderboardError, match=r"--choose-admissible is for LLM policies; 'expert' is not one \(its "
                                               r"kind: expert\)"):
        resolve_policy("expert", "gigpo_gym/ALFWorld-v0", choose_admissible=True)
