"""The ``tools`` prompt template: a TRL-trained model evaluated in the conversation it trained in.

The references are TRL's own: its response parser, its tool-suffix tokens
(``GRPOTrainer._get_tool_suffix_ids``), its way of listing an environment's tools and of
running a call, and ``benchmarks/bench_trl_searchqa.py``'s ``evaluate``, which replays
TRL's conversation greedily.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("trl", reason="needs the [trl] extra")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import gymnasium as gym  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from trl import GRPOTrainer  # noqa: E402
from trl.chat_template_utils import parse_response  # noqa: E402

import gigpo_gym  # noqa: E402
from gigpo_gym.algos.leaderboard import cli  # noqa: E402
from gigpo_gym.algos.leaderboard.policies import POLICY_LOADERS, LoadedPolicy, ServerSettings, resolve_policy  # noqa: E402
from gigpo_gym.algos.leaderboard.runner import load_spec, run_spec  # noqa: E402
from gigpo_gym.algos.leaderboard.specs import LeaderboardError  # noqa: E402
from gigpo_gym.algos.policies.base import Generation, Policy, SamplingParams  # noqa: E402
from gigpo_gym.algos.policies.hf import HFPolicy  # noqa: E402
from gigpo_gym.algos.policies.reference import ExpertPolicy  # noqa: E402
from gigpo_gym.algos.training.rollout import collect  # noqa: E402
from gigpo_gym.wrappers.chat import parse_reply, tool_chat  # noqa: E402
from gigpo_gym.wrappers.tool_calls import parse_calls, render_calls  # noqa: E402
from gigpo_gym.integrations.trl import environment_class, task_dataset  # noqa: E402
from gigpo_gym.wrappers.tool_env import CUT_MARK  # noqa: E402
from gigpo_gym.wrappers import PromptConfig, llm_stack, wrap_for_llm  # noqa: E402

SEARCHQA = "gigpo_gym/SearchQA-v0"
WORLD = {"split": "test", "world_size": 800, "topk": 2}  # the TRL recipe's world
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """A tiny model that writes SearchQA tool calls and answers some questions right (a few yes/no ones)."""
    from gigpo_gym.integrations.trl_tiny import tiny_tool_model

    return str(tiny_tool_model(SEARCHQA, tmp_path_factory.mktemp("tiny"), episodes=64, sft_steps=200))


def trl_tools(env) -> list:
    """The tools TRL's GRPOTrainer gives an environment: its public methods but reset and get_reward, by name."""
    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


def trl_suffix(tokenizer, messages: list[dict]) -> list[int]:
    """TRL's own tool-suffix tokens (GRPOTrainer._get_tool_suffix_ids, on a stand-in for the trainer)."""
    trainer = SimpleNamespace(processing_class=tokenizer, _tokenizer=tokenizer, chat_template=None,
                              chat_template_kwargs={}, _is_vlm=False)
    return GRPOTrainer._get_tool_suffix_ids(trainer, messages)


def trl_tool_messages(env, calls: list[dict]) -> list[dict]:
    """The tool messages TRL's multi-turn loop appends for a reply's calls (its loop body, for a sync tool)."""
    tools = {tool.__name__: tool for tool in trl_tools(env)}
    messages = []
    for call in calls:
        function = call["function"]
        name = function["name"]
        try:
            if name not in tools:
                raise ValueError(f"Tool {name} not found.")
            result = tools[name](**function["arguments"])
        except Exception as e:
            result = {"error": str(e)}
        messages.append({"role": "tool", "name": name, "content": str(result)})
    return messages


def tools_prompt(tiny: str | None = None, tokens: int = 512) -> PromptConfig:
    return PromptConfig(template="tools", max_observation_tokens=tokens, observation_tokenizer=tiny)


# -- the key property: token for token, TRL's conversation ---------------------------------------------
@pytest.mark.slow
def test_the_model_is_fed_trls_tokens_turn_by_turn(tiny):
    cut = 40  # tool results cut to 40 tokens of the model's tokenizer, as environment_class(tokenizer=...) cuts
    envs = gigpo_gym.make_grouped(SEARCHQA, 12, 1, seed=3, env_kwargs=WORLD, wrappers=(llm_stack(tools_prompt(tiny, cut)),))
    policy = HFPolicy.from_pretrained(tiny, device="cpu", max_prompt_tokens=4096)
    out = collect(policy, envs, SamplingParams(max_new_tokens=48, temperature=0.0), seed=3)
    envs.close()
    tokenizer = AutoTokenizer.from_pretrained(tiny)  # as TRL's recipe loads it
    instructions = task_dataset(SEARCHQA, n=1, **WORLD)[0]["prompt"][0]["content"]
    turns, cuts = [], 0
    for episode in out.episodes:
        rows = [k for k in range(len(out)) if out.traj_ids[k] == episode.traj_id]
        env = environment_class(SEARCHQA, tokenizer=tokenizer, max_observation_tokens=cut, **WORLD)()
        tools = trl_tools(env)
        messages = [{"role": "user", "content": instructions + env.reset(task_id=episode.task_id)}]
        ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                            return_dict=False)
        for k in rows:
            assert out.prompt_ids[k] == ids, f"episode {episode.traj_id}, turn {out.step_ids[k]}"
            assert out.anchors[k] == env.anchor["state"]  # the state the reply was written in
            reply = out.response_ids[k]
            parsed = parse_response(tokenizer, reply, prefix=ids, tools=tools)
            calls = parsed.get("tool_calls") or []
            before = env.get_reward()
            if not calls:  # TRL's conversation ends here; so does the episode
                assert k == rows[-1] and not out.action_valid[k]
                break
            results = trl_tool_messages(env, calls)
            cuts += sum(m["content"].endswith(CUT_MARK) for m in results)
            assert out.rewards[k] == pytest.approx(10 * (env.get_reward() - before) - (0 if out.action_valid[k] else 0.1))
            ids = ids + reply + trl_suffix(tokenizer, results)
            if env.done:
                assert k == rows[-1]
        assert episode.env_return == env.get_reward() and episode.won == (env.get_reward() == 1.0)
        turns.append(len(rows))
    assert max(turns) >= 2 and cuts > 0  # later turns and cut tool results were compared too


@pytest.mark.slow
def test_a_leaderboard_run_with_tools_gives_bench_evaluates_em_per_question(tiny, tmp_path, capsys):
    model = tmp_path / "model"  # bench's evaluate writes eval.json into the folder
    shutil.copytree(tiny, model)
    spec = {"spec_version": 1, "name": "searchqa-trl", "env_id": SEARCHQA, "env_version": "v0", "env_kwargs": WORLD,
            "split": "test", "seeds": [0], "episodes": 40, "max_steps": 4, "history_length": 2,
            "final_info_metrics": ["em", "f1"], "reward": "em"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code = cli.main(["leaderboard", "--policy", str(model), "--envs", str(tmp_path / "spec.json"), "--prompt", "tools",
                     "--max-observation-tokens", "48", "--max-new-tokens", "48", "--device", "cpu", "--batch-size", "8",
                     "--results-dir", str(tmp_path / "results"), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    [path] = (tmp_path / "results").glob("searchqa-trl__*.json")
    result = json.loads(path.read_text())
    assert result["policy"]["details"]["prompt"] == {"template": "tools", "max_observation_tokens": 48,
                                                     "observation_tokenizer": str(model)}
    assert result["sampling"]["stop"] == [] and result["policy"]["name"].endswith("tools prompt")
    board = {e["task_id"]: e["final"]["em"] for e in result["episodes"]}
    bench = _bench()
    args = argparse.Namespace(max_observation_tokens=48, eval_batch=8, reply_tokens=48, max_completion_length=4096,
                              eval_questions=0)
    reference = bench.evaluate(args, model, task_ids=sorted(board))["em"]
    assert board == reference
    # the equality is not of empty episodes: the model's calls were run (a search, then an answer)
    assert sum(e["steps"] >= 2 for e in result["episodes"]) >= len(board) // 2


@pytest.mark.slow
def test_bench_evaluate_never_steps_an_env_past_the_completion_budget_and_resumes(tiny, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny, model)
    bench = _bench()
    tasks = gym.make(bench.ENV_ID, split="test", **bench.ENV_KWARGS).unwrapped.task_ids[:6]
    # 64 tokens: a reply, the tool suffix and a result of up to 48 tokens (+ the cut mark) cannot fit: no env may step
    args = argparse.Namespace(max_observation_tokens=48, eval_batch=4, reply_tokens=48, max_completion_length=64,
                              eval_questions=0)
    summary = bench.evaluate(args, model, task_ids=tasks)
    assert summary["budget_ended"] > 0 and summary["steps_mean"] == 0.0
    # a killed evaluation keeps the answers it had (eval.partial.json) and plays only the rest
    (model / "eval.json").unlink()
    kept = {tasks[0]: {"em": 7.0, "steps": 1, "invalid": 0}}
    (model / "eval.partial.json").write_text(json.dumps({"results": kept, "seconds": 3.0}))
    again = bench.evaluate(args, model, task_ids=tasks)
    assert again["em"][tasks[0]] == 7.0 and again["em"][tasks[1]] == summary["em"][tasks[1]]
    assert len(again["em"]) == len(tasks) and not (model / "eval.partial.json").exists()


def test_the_trainer_in_trls_chat_bench_trains_exports_and_carries_its_small_files(tiny, tmp_path):
    """bench_trainer_trl_chat.py: the recipe in TRL's chat trains from a TRL-made folder, its final weights load in
    transformers with the folder's chat template (for TRL's evaluation), and only the run's small files are carried."""
    import torch
    import yaml
    from transformers import AutoModelForCausalLM

    spec = importlib.util.spec_from_file_location("bench_trainer_trl_chat", ROOT / "benchmarks" / "bench_trainer_trl_chat.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = argparse.Namespace(run_root=tmp_path / "runs", seed=0, set=[
        "iterations=1", "env.num_groups=1", "env.group_size=2", "model.device=cpu", "progress=false"])
    run_dir = bench.train(args, Path(tiny))
    written = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert (written["prompt"]["template"], written["algo"]["name"], written["model"]["name"]) == ("tools", "grpo", tiny)
    model = bench.exported(run_dir, Path(tiny))
    trained, warm = (AutoModelForCausalLM.from_pretrained(str(m)).state_dict() for m in (model, tiny))
    assert any(not torch.equal(trained[k], warm[k]) for k in warm)
    assert AutoTokenizer.from_pretrained(str(model)).chat_template == AutoTokenizer.from_pretrained(tiny).chat_template
    bench.trl_bench.carry(args.run_root, tmp_path / "carried", bench.KEPT)
    assert sorted(p.name for p in (tmp_path / "carried" / run_dir.name).iterdir()) == [
        "config.yaml", "metrics.jsonl", "summary.json"]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_trl_searchqa", ROOT / "benchmarks" / "bench_trl_searchqa.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- replies, calls and errors --------------------------------------------------------------------------
def tools_env(**kwargs):
    return wrap_for_llm(gym.make(SEARCHQA, split="test"), tools_prompt(**kwargs))


def call(name: str, **arguments) -> str:
    return render_calls("", [{"name": name, "arguments": arguments}])


def test_a_reply_without_a_tool_call_ends_the_episode():
    env = tools_env()
    text, info = env.reset(seed=0)
    assert [m["role"] for m in info["messages"]] == ["user"] and "[user]" in text and "<tool_call>" in text
    _, reward, terminated, truncated, info = env.step("I think it is Paris.")
    assert (reward, terminated, truncated, info["action_valid"], info["parsed_action"]) == (0.0, True, False, False, None)
    assert info["messages"][-1] == {"role": "assistant", "content": "I think it is Paris."}
    assert info["won"] is False and "em" not in info  # no answer was given


def test_bad_tool_calls_answer_trls_tool_errors_and_are_invalid_steps():
    env = tools_env()
    env.reset(seed=0)
    start = env.unwrapped._question.id
    replies = [call("serch", query="x"), call("search", q="x"), call("search", query=7),
               '<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>',  # not JSON: plain text
               ]
    contents = []
    for reply in replies[:3]:
        _, reward, terminated, truncated, info = env.step(reply)
        assert (reward, terminated, truncated, info["action_valid"]) == (0.0, False, False, False)
        contents.append(info["messages"][-1]["content"])
    assert contents[0] == "{'error': 'Tool serch not found.'}"
    assert contents[1] == "{'error': \"SearchQATools.search() got an unexpected keyword argument 'q'\"}"
    assert contents[2] == "Error: search() takes query as a string, got int."  # the env's own tool error
    assert env.unwrapped._question.id == start and env.get_wrapper_attr("tool_env").steps == ()  # nothing was played
    _, _, terminated, _, info = env.step(replies[3])
    assert terminated and not info["action_valid"]  # TRL reads a malformed call as text: the conversation ends
    # an action the env refuses is the env's invalid action, stepped as TRL steps it
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(call("search", query="x" * 20000))
    assert "too long" in info["messages"][-1]["content"] and not info["action_valid"] and not terminated


def test_several_calls_of_one_reply_run_in_order_and_their_rewards_add_up():
    env = tools_env(tokens=64)
    env.reset(seed=5)
    question = env.unwrapped._question
    reply = "Let me look." + call("search", query=question.supports[0]) + call("answer", answer=question.golden_answers[0])
    _, reward, terminated, truncated, info = env.step(reply)
    assert (reward, terminated, truncated, info["action_valid"], info["won"]) == (1.0, True, False, True, True)
    assert [m["role"] for m in info["messages"]] == ["user", "assistant", "tool", "tool"]
    assert info["messages"][2]["content"].endswith(CUT_MARK)  # cut to 64 UTF-8 bytes without a tokenizer
    assert info["parsed_action"].splitlines()[0] == f"<search>{question.supports[0]}</search>"


def test_the_step_limit_truncates_and_the_expert_plays_the_conversation_to_the_end():
    env = wrap_for_llm(gym.make(SEARCHQA, split="test", max_episode_steps=2), tools_prompt())
    env.reset(seed=1)
    for _ in range(2):
        _, _, terminated, truncated, _ = env.step(call("search", query="nothing"))
    assert (terminated, truncated) == (False, True)
    env.reset(seed=1)  # replies that only err step nothing, and end at the step limit too
    for _ in range(2):
        _, _, terminated, truncated, info = env.step(call("serch", query="nothing"))
    assert (terminated, truncated, info["action_valid"]) == (False, True, False)
    envs = gigpo_gym.make_grouped(SEARCHQA, 4, 1, seed=0, env_kwargs={"split": "test"},
                                  wrappers=(llm_stack(tools_prompt()),))
    out = collect(ExpertPolicy(), envs, SamplingParams(), seed=0)
    envs.close()
    assert all(e.won for e in out.episodes) and all(r.startswith("<tool_call>") for r in out.replies)


@pytest.mark.slow
def test_replies_are_read_as_trl_reads_them(tiny):
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    env = environment_class(SEARCHQA)()
    tools = trl_tools(env)
    prefix = tokenizer.apply_chat_template([{"role": "user", "content": "Q"}], tools=tools, add_generation_prompt=True,
                                           return_dict=False)
    ok = '{"name": "search", "arguments": {"query": "x"}}'
    replies = [f"hi<tool_call>{ok}</tool_call><eos>", f"<tool_call>{ok}</tool_call> <tool_call>{ok}</tool_call><eos>",
               f"<tool_call>{ok}</tool_call>after<eos>", f"<tool_call>{ok}", '<tool_call>{"name": "search"</tool_call>',
               '<tool_call>{"name": "search", "arguments": "q"}</tool_call><eos>', "<tool_call>[1]</tool_call><eos>",
               '<tool_call>{"name": "answer"}</tool_call><eos>', "plain text<eos>", "plain, cut"]
    _, parser = tool_chat(tokenizer)
    for reply in replies:
        ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        theirs = parse_response(tokenizer, ids, prefix=prefix, tools=tools)
        content, calls = parse_reply(tokenizer, ids, prefix, [t for t in env_schemas(env)], parser)
        assert (content, calls) == (theirs["content"], [c["function"] for c in theirs.get("tool_calls") or []]), reply
        # the text the policy hands the env reads back as the same calls
        assert parse_calls(render_calls(content, calls))[1] == calls, reply


def env_schemas(env) -> list[dict]:
    from transformers.utils import get_json_schema

    return [get_json_schema(tool) for tool in trl_tools(env)]


def test_the_wrappers_examples_run():
    import doctest

    from gigpo_gym.wrappers import tools_prompt

    result = doctest.testmod(tools_prompt)
    assert result.attempted > 0 and result.failed == 0


# -- served models ------------------------------------------------------------------------------------
def test_a_served_model_gets_the_chat_and_its_tool_calls_step_the_env():
    pytest.importorskip("openai")
    from chat_server import MODEL, FakeChatServer

    def reply(prompt: str) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "answer", "arguments": '{"answer": "Paris"}'}}]}

    with FakeChatServer(reply) as server:
        loaded = resolve_policy(f"openai:{MODEL}", SEARCHQA, template="tools", server=ServerSettings(server.url))
        try:
            result = run_spec(load_spec("searchqa-test"), loaded, episodes=2, progress=False)
        finally:
            loaded.close()
    body = server.requests[-1]["body"]
    assert [t["function"]["name"] for t in body["tools"]] == ["answer", "search"] and "stop" not in body
    assert body["messages"][0]["role"] == "user" and body["messages"][0]["content"].startswith("Answer the question")
    assert result["policy"]["details"]["prompt"] == {"template": "tools"}  # no tokenizer: tool results cut in bytes
    assert [e["status"] for e in result["episodes"]] == ["terminated"] * 2 and result["metrics"]["steps"]["mean"] == 1


# -- clear errors --------------------------------------------------------------------------------------
def test_settings_the_template_does_not_read_are_errors():
    with pytest.raises(ValueError, match="history_length is not read by the 'tools' template"):
        PromptConfig(template="tools", history_length=3)
    with pytest.raises(ValueError, match="max_observation_tokens is not read by the 'default' template.*'tools'"):
        PromptConfig(max_observation_tokens=100)
    with pytest.raises(ValueError, match="max_observation_tokens must be >= 16"):
        PromptConfig(template="tools", max_observation_tokens=8)
    env = tools_env()
    with pytest.raises(ValueError, match="resets by seed or task_id only"):
        env.reset(seed=0, options={"level": 2})
    from gigpo_gym.algos.training.config import ConfigError, load_config

    for setting, message in (("sft.steps=2", "sft.steps: the warm start trains on prompt strings"),
                             ("model.choose_admissible=true", "model.choose_admissible .* use one or the other"),
                             ("model.generation=vllm", "'vllm' is fed prompt ids only and answers no chats")):
        with pytest.raises(ConfigError, match=message):
            load_config(None, ["prompt.template=tools", setting])


class _TextOnly(Policy):
    def generate(self, prompts, sampling, contexts=None):
        return [Generation("", [], [], []) for _ in prompts]


def test_the_leaderboard_refuses_tools_for_a_policy_that_reads_prompt_strings_only(monkeypatch, capsys):
    monkeypatch.setitem(POLICY_LOADERS, "textonly", lambda req: LoadedPolicy(
        _TextOnly(), req.text, "hf", "text only", True, SamplingParams()))
    with pytest.raises(LeaderboardError, match="answers prompt strings only"):
        resolve_policy("textonly", SEARCHQA, template="tools")
    with pytest.raises(LeaderboardError, match=r"--prompt tools is for LLM policies; 'random' is not one \(its kind: random\)"):
        resolve_policy("random", SEARCHQA, template="tools")
    with pytest.raises(LeaderboardError, match="--max-observation-tokens cuts the tool results of --prompt tools"):
        resolve_policy("textonly", SEARCHQA, max_observation_tokens=64)
    with pytest.raises(LeaderboardError, match="--choose-admissible .* --prompt tools"):
        resolve_policy("textonly", SEARCHQA, template="tools", choose_admissible=True)
    assert cli.main(["leaderboard", "--policy", "expert", "--envs", "searchqa-test", "--prompt", "tools"]) == 2
    assert "--prompt tools is for LLM policies" in capsys.readouterr().err


def test_the_trainer_trains_in_trls_chat_on_the_tokens_the_model_wrote(tiny, tmp_path):
    """prompt.template 'tools' through the trainer: the rows are the chat's tokens as generated (scored again, they
    give the rollout's log-probs), tool results are cut in the model's own tokens, and the update moves the weights."""
    import torch

    from gigpo_gym.algos.training.config import ConfigError, load_config
    from gigpo_gym.algos.training.trainer import Trainer

    settings = ["env.id=gigpo_gym/SearchQA-v0", "env.kwargs={split: train, world_size: 800, topk: 2}",
                "env.num_groups=2", "env.group_size=4", "env.eval_episodes=0", f"model.name={tiny}",
                "model.device=cpu", "prompt.template=tools", "prompt.max_observation_tokens=40",
                "sampling.max_new_tokens=48", "algo.name=grpo", "optim.lr=1e-3", "optim.skip_zero_advantage=false",
                "iterations=1", "progress=false", "eval_before=false", f"run_dir={tmp_path / 'run'}"]
    cfg = load_config(None, settings)
    assert cfg.wrapper().keywords["prompt"].observation_tokenizer == tiny  # TRL's recipe cuts in the policy's tokens
    with pytest.raises(ConfigError, match="the given policy answers prompt strings only"):
        Trainer(cfg, policy=_TextOnly())
    with Trainer(cfg) as trainer:
        rollout = trainer.rollout(1)
        later = [k for k in range(len(rollout)) if rollout.step_ids[k] > 0]
        assert later  # episodes went on after their first tool call
        for k in later:  # a later turn's prompt is the earlier turn's prompt and reply, then the tool's message
            earlier = next(j for j in range(len(rollout)) if rollout.traj_ids[j] == rollout.traj_ids[k]
                           and rollout.step_ids[j] == rollout.step_ids[k] - 1)
            assert rollout.prompt_ids[k][:len(rollout.prompt_ids[earlier]) + len(rollout.response_ids[earlier])] \
                == rollout.prompt_ids[earlier] + rollout.response_ids[earlier]
        with torch.no_grad():
            scored = trainer.policy.log_probs(rollout.tokens).log_probs
        for k, old in enumerate(rollout.old_log_probs):
            assert scored[k, :len(old)].tolist() == pytest.approx(old, abs=1e-4)
        before = [p.detach().clone() for p in trainer.params]
        metrics = trainer.update(rollout, 1)
        assert metrics["train/optimizer_steps"] == 1
        assert any(not torch.equal(a, p) for a, p in zip(before, trainer.params))


def test_a_long_template_s_prompts_end_where_the_model_s_positions_leave_room_for_the_reply(tiny):
    positions = json.loads((Path(tiny) / "config.json").read_text())["max_position_embeddings"]
    assert positions < 8192  # the tiny model: a limit of 8192 tokens would run past its positions
    loaded = resolve_policy(tiny, SEARCHQA, template="tools", max_new_tokens=40, device="cpu")
    assert loaded.policy.max_prompt_tokens == positions - 40
