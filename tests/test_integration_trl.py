"""The suite inside the real TRL: environments, task datasets, the tool template and GiGPOTrainer."""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass

import pytest

pytest.importorskip("trl", reason="needs the [trl] extra")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling  # noqa: E402

from gigpo_gym.algos.estimators.registry import Algorithm, get_algorithm, register_algorithm  # noqa: E402
from gigpo_gym.algos.policies.tiny import train_tokenizer  # noqa: E402
from gigpo_gym.integrations import require  # noqa: E402
from gigpo_gym.integrations.trl import (  # noqa: E402
    GiGPOConfig, GiGPOTrainer, environment_class, expert_conversations, task_dataset, token_turns, with_tool_template,
)
from gigpo_gym.wrappers.tool_env import CUT_MARK, OVER  # noqa: E402

SEARCHQA, WEBSHOP, ALFWORLD = "gigpo_gym/SearchQA-v0", "gigpo_gym/WebShop-v0", "gigpo_gym/ALFWorld-v0"


def public_functions(cls) -> set[str]:
    """What TRL turns into tools (plus reset and get_reward), read the way TRL reads it."""
    return {name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not name.startswith("_")}


# -- the environments ---------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id, tools", [(SEARCHQA, {"search", "answer"}), (WEBSHOP, {"search", "click"}),
                                           (ALFWORLD, {"act"})])
def test_the_tools_are_the_envs_own_actions_and_nothing_else_is_public(env_id, tools):
    cls = environment_class(env_id)
    assert public_functions(cls) == tools | {"reset", "get_reward"}
    env = cls()
    for name in tools:  # transformers' schema reader accepts each: typed, described arguments
        schema = get_json_schema(getattr(env, name))["function"]
        assert schema["name"] == name and schema["description"]
        assert all(p["type"] == "string" and p["description"] for p in schema["parameters"]["properties"].values())
    assert not hasattr(env, "step") and not hasattr(env, "expert_action") and not hasattr(env, "close")


def test_a_row_plays_its_task_and_the_same_row_gives_the_same_transcript():
    rows = task_dataset(SEARCHQA, "test", n=3, seed=7)
    assert rows.column_names == ["prompt", "seed", "task_id"] and len(set(rows["task_id"])) == 3
    assert rows["prompt"][0][0]["role"] == "user" and "search" in rows["prompt"][0][0]["content"]
    cls = environment_class(SEARCHQA, split="test")
    transcripts = []
    for _ in range(2):
        env = cls()
        row = rows[1]
        text = [env.reset(**row)]
        assert env.task_id == row["task_id"]
        text += [env.search("Voltiak"), env.answer("Voltiak")]
        transcripts.append((text, [(s.anchor, s.reward, s.valid) for s in env.steps]))
    assert transcripts[0] == transcripts[1]
    # by seed alone, the row's task too
    env = cls()
    env.reset(seed=row["seed"])
    assert env.task_id == row["task_id"]
    assert task_dataset(SEARCHQA, "test", n=3, seed=7)["task_id"] == rows["task_id"]


def test_every_task_of_a_split_once_and_the_wrong_split_is_named():
    rows = task_dataset(SEARCHQA, "test", world_size=800)  # the SmolLM2 recipe's world: 438 test questions
    assert len(rows) == 438 and len(set(rows["task_id"])) == 438
    env = environment_class(SEARCHQA, split="train")()
    with pytest.raises(KeyError, match="no task_id .* in the train split"):
        env.reset(task_id=rows["task_id"][0])
    with pytest.raises(ValueError, match="n must be a positive int"):
        task_dataset(SEARCHQA, n=0)


def test_reset_without_a_task_is_a_clear_error():
    env = environment_class(SEARCHQA)()
    with pytest.raises(ValueError, match="needs the row's seed or task_id.*task_dataset"):
        env.reset(prompt=[{"role": "user", "content": "hi"}])


def test_bad_calls_answer_as_tool_errors_and_never_crash():
    env = environment_class(ALFWORLD)()
    assert env.act("look").startswith("Error: act was called before reset")
    env.reset(seed=0)
    assert env.act(3).startswith("Error: act() takes command as a string, got int")
    assert "too long" in env.act("x" * 5000) and env.steps == ()
    nothing = env.act("dance wildly")
    assert nothing.startswith("Nothing happens.") and env.steps[-1].valid is False and env.steps[-1].reward == 0.0
    searchqa = environment_class(SEARCHQA)()
    searchqa.reset(seed=0)
    assert searchqa.answer("nobody") == "The episode is over." and searchqa.done
    assert searchqa.search("more") == OVER and len(searchqa.steps) == 1 and searchqa.get_reward() == 0.0


def test_step_records_hold_the_state_each_step_was_taken_in():
    env = environment_class(SEARCHQA, split="test")()
    env.reset(seed=3)
    start = env.anchor
    env.search(env._env.unwrapped._question.supports[0])
    middle = env.anchor
    env.answer(env._env.unwrapped._question.golden_answers[0])
    first, second = env.steps
    assert (first.anchor, second.anchor) == (start["state"], middle["state"]) and start != middle
    assert first.observation_anchor == start["observation"] and first.anchor_text == start["text"]
    assert (first.reward, second.reward, env.get_reward()) == (0.0, 1.0, 1.0)
    assert first.action.startswith("<search>") and second.done and first.turn is None  # no trainer: no turn


def test_observations_are_cut_to_the_stated_size_and_the_cut_is_marked():
    tokenizer = train_tokenizer(["a shop page with products [SEP] and buttons"] * 20, 300)
    env = environment_class(WEBSHOP, tokenizer=tokenizer, max_observation_tokens=40)()
    first = env.reset(seed=1)
    assert "Instruction" in first and not first.endswith(CUT_MARK)  # the task is part of the prompt: never cut
    page = env.search("white handbag")
    assert page.endswith(CUT_MARK)
    assert len(tokenizer.encode(page[: -len(CUT_MARK)], add_special_tokens=False)) <= 41
    in_bytes = environment_class(WEBSHOP, max_observation_tokens=64)()
    in_bytes.reset(seed=1)
    page = in_bytes.search("white handbag")
    assert page.endswith(CUT_MARK) and len(page[: -len(CUT_MARK)].encode()) <= 64
    with pytest.raises(ValueError, match="max_observation_tokens must be an int >= 16"):
        environment_class(WEBSHOP, max_observation_tokens=4)


def test_bad_ids_and_keywords_fail_when_the_class_is_made():
    with pytest.raises(Exception, match="Did you mean 'gigpo_gym/SearchQA-v0'"):
        environment_class("gigpo_gym/SearchQ-v0")
    with pytest.raises(TypeError, match="did you mean 'split'"):
        environment_class(SEARCHQA, splitt="test")


def test_expert_conversations_are_the_rl_conversation_with_the_experts_calls():
    data = expert_conversations(SEARCHQA, n=4, seed=0)
    rows = task_dataset(SEARCHQA, n=4, seed=0)
    assert data["reward"] == [1.0] * 4
    messages = data[0]["messages"]
    assert messages[0]["content"].startswith(rows[0]["prompt"][0]["content"])
    assert [m["role"] for m in messages[1:3]] == ["assistant", "tool"] and messages[-1] == {
        "role": "assistant", "content": "", "tool_calls": None, "name": None}
    call = messages[1]["tool_calls"][0]["function"]
    assert call["name"] == "search" and "query" in json.loads(call["arguments"])


# -- the chat template ----------------------------------------------------------------------------------
def test_the_tool_template_makes_smollm2s_tokenizer_usable_by_trl():
    from gigpo_gym.algos.policies.smollm import gguf_path

    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    assert not supports_tool_calling(tokenizer)  # SmolLM2's own template: the issue's refusal
    tokenizer = with_tool_template(tokenizer)
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    env = environment_class(SEARCHQA)()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Q?"}], tools=[env.search, env.answer],
                                           add_generation_prompt=True, return_dict=False)
    reply = 'Let me look.<tool_call>{"name": "search", "arguments": {"query": "Voltiak"}}</tool_call><|im_end|>'
    parsed = parse_response(tokenizer, tokenizer(reply, add_special_tokens=False)["input_ids"], prefix=prompt,
                            tools=[env.search])
    assert parsed["content"] == "Let me look." and parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "search", "arguments": {"query": "Voltiak"}}}]


def test_a_tokenizer_without_eos_is_refused():
    tokenizer = train_tokenizer(["some text"] * 5, 280)
    tokenizer.eos_token = None
    with pytest.raises(ValueError, match="no eos_token"):
        with_tool_template(tokenizer)


def test_token_turns_numbers_the_runs_of_generated_tokens():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0, 0]])
    turn, count = token_turns(mask)
    assert turn.tolist() == [[0, 0, -1, -1, 1, -1, 2, 2, -1], [-1] * 9, [0, 0, 0, 0, 0, -1, -1, -1, -1]]
    assert count.tolist() == [3, 0, 1]


# -- configuration errors -----------------------------------------------------------------------------
def config(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_completion_length=96,
                max_steps=1, logging_steps=1, report_to=[], learning_rate=1e-3, save_strategy="no", seed=0,
                bf16=False, use_cpu=True, disable_tqdm=True, beta=0.0, activation_checkpointing=False)
    return GiGPOConfig(**{**base, **kw})


def test_records_keep_in_step_with_the_checkpoints(tmp_path):
    """A resumed run drops the records after its checkpoint (it records those steps again); the end writes the rest."""
    from types import SimpleNamespace

    from gigpo_gym.algos.training.records import Recorder, recorded_iterations
    from gigpo_gym.integrations.trl import RecordsInStep

    recorder = Recorder(tmp_path / "records", groups=2, seed=0)
    for it in (1, 2, 3):
        recorder.add({"iteration": it})
    recorder.flush()
    recorder.add({"iteration": 9})  # held from a train() call that did not end
    callback = RecordsInStep(recorder)
    callback.on_train_begin(None, SimpleNamespace(global_step=1), None)
    assert recorded_iterations(tmp_path / "records") == [1] and not recorder.pending
    recorder.add({"iteration": 2})
    callback.on_train_end(None, SimpleNamespace(global_step=2), None)
    assert recorded_iterations(tmp_path / "records") == [1, 2]
    assert config(tmp_path, record_groups=0).record_groups == 0
    with pytest.raises(ValueError, match="record_groups must be >= 0 and record_text_chars >= 1, got -1 and 1000"):
        config(tmp_path, record_groups=-1)


def test_config_errors_name_the_value_and_the_choices(tmp_path):
    with pytest.raises(ValueError, match="unknown algorithm 'gigp'.*Did you mean 'gigpo'"):
        config(tmp_path, estimator="gigp")
    with pytest.raises(ValueError, match="needs a critic"):
        config(tmp_path, estimator="ppo")
    with pytest.raises(ValueError, match="scale_rewards='group' or 'none'"):
        config(tmp_path, scale_rewards="batch")
    with pytest.raises(ValueError, match="anchor_mode must be one of"):
        config(tmp_path, anchor_mode="text")
    with pytest.raises(TypeError, match="unknown config key 'omgea'"):
        config(tmp_path, estimator_kwargs={"omgea": 1.0})
    assert config(tmp_path, estimator="grpo").build_estimator().config() == get_algorithm("grpo").config()


def test_an_untested_trl_or_transformers_version_is_refused_at_import(monkeypatch):
    from gigpo_gym import integrations

    assert require("trl").startswith("1.16")
    monkeypatch.setattr(integrations.metadata, "version", lambda name: "1.17.2")
    with pytest.raises(ImportError, match=r"trl 1.17.2 is installed; .* tested with trl >=1.16,<1.17.*\[trl\]"):
        require("trl")
    monkeypatch.setattr(integrations.metadata, "version", lambda name: "5.26.0")
    with pytest.raises(ImportError, match=r"transformers 5.26.0 is installed; .* >=5.13,<5.26.*\[trl\]"):
        require("transformers")


# -- the trainer, with a tiny model that writes tool calls -------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from gigpo_gym.integrations.trl_tiny import tiny_tool_model

    return str(tiny_tool_model(SEARCHQA, tmp_path_factory.mktemp("tiny")))


def calls(completions, **kwargs):
    """A second reward (tool results and their length), so that episodes differ even when no answer is right."""
    return [sum(0.25 + 0.001 * len(m["content"]) for m in completion if m["role"] == "tool")
            for completion in completions]


def trainer(cls, args, tiny, max_observation_tokens=48):
    from gigpo_gym.integrations.trl_tiny import TINY_OBSERVATION_BYTES

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    env = environment_class(SEARCHQA, max_observation_tokens=max(TINY_OBSERVATION_BYTES, max_observation_tokens))
    return cls(model=model, args=args, processing_class=tokenizer, reward_funcs=[calls],
               train_dataset=task_dataset(SEARCHQA, n=4, seed=1), environment_factory=env)


def one_batch(trainer_):
    """What TRL hands ``_generate_and_score_completions``: each row num_generations times."""
    rows = trainer_.train_dataset
    trainer_.model.train()
    return [dict(rows[i]) for i in range(len(rows)) for _ in range(trainer_.num_generations)][:8]


@pytest.mark.slow
def test_per_token_advantages_are_the_estimators_on_the_turn_rows(tiny, tmp_path):
    args = config(tmp_path, per_device_train_batch_size=8, omega=1.0, gamma=0.9)
    t = trainer(GiGPOTrainer, args, tiny)
    torch.manual_seed(0)
    out = t._generate_and_score_completions(one_batch(t))
    batch = t.last_step_batch
    generated = out["completion_mask"] * out["tool_mask"]
    turn, n_turns = token_turns(generated)
    # the rows: one per generated turn, anchored where the turn started, rewarded by the env steps it made
    assert sorted(zip(batch.traj_ids.tolist(), batch.step_ids.tolist())) == sorted(
        (i, k) for i in range(8) for k in range(max(int(n_turns[i]), 1)))
    made_steps = 0
    for i, env in enumerate(t.environments):
        rows = np.flatnonzero(batch.traj_ids == i)
        rows = rows[np.argsort(batch.step_ids[rows])]
        assert batch.anchors[rows[0]] == (env.steps[0].anchor if env.steps else env.anchor["state"])
        for step in env.steps:
            assert batch.anchors[rows[step.turn]] == step.anchor
        made_steps += len(env.steps)
        trl_reward = sum(column[i] for column in t._logs["rewards"].values())  # what TRL logged for rollout i
        assert batch.rewards[rows].sum() == pytest.approx(trl_reward)
    assert made_steps > 0 and len(set(batch.rewards.tolist())) > 1
    # the tokens of turn k of rollout i carry the estimator's advantage of row (i, k)
    expected = get_algorithm("gigpo", omega=1.0, gamma=0.9, norm_by_std=True).advantages(batch)
    table = {(int(i), int(k)): a for i, k, a in zip(batch.traj_ids, batch.step_ids, expected)}
    for i in range(8):
        for position in range(generated.size(1)):
            k = int(turn[i, position])
            want = table[i, k] if k >= 0 else 0.0
            assert out["advantages"][i, position].item() == pytest.approx(want, abs=1e-6)
    assert np.abs(expected).max() > 0


@pytest.mark.slow
def test_with_omega_zero_the_advantages_are_trls_grpo_on_the_same_batch(tiny, tmp_path):
    # a completion limit the tiny model never nears, so that no budget stops either trainer's episodes
    common = dict(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_completion_length=512,
                  report_to=[], save_strategy="no", seed=0, bf16=False, use_cpu=True, beta=0.0,
                  activation_checkpointing=False)
    grpo = trainer(GRPOTrainer, GRPOConfig(**common), tiny)
    gigpo = trainer(GiGPOTrainer, GiGPOConfig(**common, omega=0.0), tiny)
    outputs = []
    for t in (grpo, gigpo):
        torch.manual_seed(0)
        outputs.append(t._generate_and_score_completions(one_batch(t)))
    a, b = outputs
    assert torch.equal(a["completion_ids"], b["completion_ids"])  # the same batch
    mask = (b["completion_mask"] * b["tool_mask"]).bool()
    assert (b["advantages"][~mask] == 0).all() and a["advantages"].abs().max() > 0.5
    # one advantage per rollout on its generated tokens; TRL's, but for the ε: TRL divides by std + 1e-4,
    # the package's estimators by std + 1e-6 (std: the unbiased one of the group's rewards, as TRL logged them)
    ours = torch.stack([row[m].unique() for row, m in zip(b["advantages"], mask)]).squeeze(1)
    rewards = torch.tensor([sum(column[i] for column in grpo._logs["rewards"].values()) for i in range(8)])
    std = rewards.view(2, 4).std(dim=1).repeat_interleave(4)
    assert torch.allclose(ours * (std + 1e-6), a["advantages"] * (std + 1e-4), atol=1e-5)


@pytest.mark.slow
def test_gigpo_trainer_trains_and_logs_step_groups(tiny, tmp_path):
    t = trainer(GiGPOTrainer, config(tmp_path, per_device_train_batch_size=8, max_steps=2, learning_rate=1e-2), tiny)
    before = [p.detach().clone() for p in t.model.parameters()]
    t.train()
    assert any(not torch.equal(b, p) for b, p in zip(before, t.model.parameters()))
    logged = t.state.log_history[0]
    for key in ("adv/step_groups", "adv/step_group_size_mean", "env/steps_per_episode", "env/invalid_step_share",
                "env/truncated_by_budget", "env/unseen_steps"):
        assert key in logged, sorted(logged)
    assert logged["env/unseen_steps"] == 0
    assert all(s.turn is not None for env in t.environments for s in env.steps)
    # the records the package's trainer writes, at the end (no checkpoint here), which gigpo-gym inspect reads
    from gigpo_gym.algos.inspect.page import load
    from gigpo_gym.algos.training.records import read_record, recorded_iterations

    assert recorded_iterations(tmp_path / "records") == [1, 2]
    records = [read_record(tmp_path / "records", it) for it in (1, 2)]
    assert all(r["source"] == "trl" and r["algo"]["name"] == "gigpo" and len(r["groups"]) == 2 for r in records)
    steps = [(r, s) for r in records for g in r["groups"] for e in g["episodes"] for s in e["steps"]]
    assert all(s["adv_e"] is not None and s["adv_s"] is not None and s["size"] >= 1 for _, s in steps)
    assert any(s["action"] is not None for _, s in steps) and all(isinstance(r["texts"][s["reply"]], str) for r, s in steps)
    assert load(tmp_path)["iterations"] == [1, 2]


@pytest.mark.slow
def test_a_tool_result_that_would_overflow_ends_the_episode_before_the_env_steps(tiny, tmp_path):
    # 48-byte observations, completions of 40 tokens: the budget runs out after a turn or two
    t = trainer(GiGPOTrainer, config(tmp_path, per_device_train_batch_size=8, max_completion_length=40), tiny,
                max_observation_tokens=48)
    torch.manual_seed(0)
    out = t._generate_and_score_completions(one_batch(t))
    tool_runs = token_turns(out["completion_mask"] * (1 - out["tool_mask"]))[1]
    ended = [env for env in t.environments if env.truncation == "completion budget"]
    assert ended, [len(env.steps) for env in t.environments]
    for i, env in enumerate(t.environments):  # every step's result is in the completion
        assert all(s.turn < int(tool_runs[i]) for s in env.steps)
    assert t._metrics["train"]["env/truncated_by_budget"][-1] == len(ended) / 8
    assert t._metrics["train"]["env/unseen_steps"][-1] == 0


@dataclass
class LastTurnOnly(Algorithm):
    """A third party's step-level estimator: the trajectory's return on its last row, 0 elsewhere."""

    def advantages(self, batch):
        last = {}
        for row, (traj, step) in enumerate(zip(batch.traj_ids, batch.step_ids)):
            if traj not in last or step > batch.step_ids[last[traj]]:
                last[traj] = row
        out = np.zeros(len(batch))
        for traj, row in last.items():
            out[row] = batch.rewards[batch.traj_ids == traj].sum()
        return out


@pytest.mark.slow
def test_a_registered_third_party_estimator_drives_the_trainer_by_name(tiny, tmp_path, monkeypatch):
    from gigpo_gym.algos.estimators import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the plugin leaves with the test
    register_algorithm("test_integration_plugin", LastTurnOnly)
    t = trainer(GiGPOTrainer, config(tmp_path, per_device_train_batch_size=8, estimator="test_integration_plugin"),
                tiny)
    assert isinstance(t.estimator, LastTurnOnly)
    torch.manual_seed(0)
    out = t._generate_and_score_completions(one_batch(t))
    turn, n_turns = token_turns(out["completion_mask"] * out["tool_mask"])
    for i in range(8):
        last = turn[i] == n_turns[i] - 1
        assert (out["advantages"][i][(turn[i] >= 0) & ~last] == 0).all()
        assert torch.allclose(out["advantages"][i][last], t.last_step_batch.rewards[
            t.last_step_batch.traj_ids == i].sum().astype(np.float32) * torch.ones(1))


@pytest.mark.slow
def test_the_trainer_needs_its_config_and_its_environments(tiny, tmp_path):
    with pytest.raises(TypeError, match="needs args=GiGPOConfig"):
        trainer(GiGPOTrainer, GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[]), tiny)

    class Plain:
        def reset(self, **kwargs):
            return ""

        def get_reward(self):
            return 0.0

        def noop(self, x: str) -> str:
            """Nothing.

            Args:
                x: anything
            """
            return x

    with pytest.raises(TypeError, match="environment_factory=environment_class"):
        GiGPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny), args=config(tmp_path),
                     processing_class=AutoTokenizer.from_pretrained(tiny),
                     train_dataset=task_dataset(SEARCHQA, n=2), environment_factory=Plain)


@pytest.mark.slow
def test_two_processes_gather_the_rows_of_a_group_split_between_them(tiny, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from gigpo_gym.algos.estimators.batch import StepBatch

    worker = Path(__file__).resolve().parent / "integration_trl_worker.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}  # two CPU processes over gloo
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                             f"--master_port={free_port()}", "--max_restarts=0", str(worker), tiny, str(tmp_path)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["processes"] for r in ranks] == [2, 2]
    assert ranks[0]["batch"] == ranks[1]["batch"]  # every process runs the estimator on all rows
    rows = ranks[0]["batch"]
    assert sorted(set(rows["traj_ids"])) == [0, 1, 2, 3] and set(rows["group_ids"]) == {0}  # one group, both processes
    batch = StepBatch(group_ids=np.array(rows["group_ids"], dtype=np.int64), traj_ids=np.array(rows["traj_ids"], dtype=np.int64),
                      step_ids=np.array(rows["step_ids"], dtype=np.int64), rewards=rows["rewards"], anchors=rows["anchors"])
    expected = get_algorithm("gigpo", omega=1.0, gamma=0.9, norm_by_std=True).advantages(batch)
    table = {(int(t), int(s)): a for t, s, a in zip(rows["traj_ids"], rows["step_ids"], expected)}
    for record in ranks:
        for local, (turns, advantages) in enumerate(zip(record["turn"], record["advantages"])):
            traj = 2 * record["rank"] + local
            for k, a in zip(turns, advantages):
                assert a == pytest.approx(table[traj, k] if k >= 0 else 0.0, abs=1e-6)
    assert sum(sum(r["steps"]) for r in ranks) > 0


def free_port() -> int:
    """A free loopback port (bound, then released for torch.distributed to take)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
