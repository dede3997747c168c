"""The trainer end to end on the tiny model, its config, checkpoints and loss."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_fake import CORRIDOR_ID

from gigpo_gym.algos.training import checkpoint as ckpt
from gigpo_gym.algos.training.config import MOVED_KEYS, ConfigError, TrainConfig, load_config
from gigpo_gym.algos.training.loss import LossWeights, choice_kl, k3_kl, policy_loss
from gigpo_gym.algos.training.trainer import build_policy, learning_rate, run_training

SMALL = [
    f"env.id={CORRIDOR_ID}", "env.num_groups=2", "env.group_size=2", "env.eval_episodes=2", "prompt.history_length=1",
    "sampling.max_new_tokens=6", "model.device=cpu", "model.tiny.corpus_episodes=3", "model.tiny.vocab_size=300",
    "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64", "optim.lr=1e-3", "optim.micro_batch_size=8",
    "optim.mini_batch_size=64", "iterations=2", "progress=false", "eval_before=false",
]


def small_config(tmp_path, *extra):
    return load_config(None, [*SMALL, f"run_dir={tmp_path / 'run'}", *extra])


def test_two_iterations_change_the_weights_and_resume_from_the_checkpoint(tmp_path):
    cfg = small_config(tmp_path, "sft.steps=2", "sft.episodes=2")
    policy = build_policy(cfg)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    summary = run_training(cfg, policy=policy, echo=lambda *_: None)
    changed = [n for n, p in policy.named_parameters() if not torch.equal(p, before[n])]
    assert len(changed) == len(before)
    run = tmp_path / "run"
    assert summary["final_checkpoint"] == str(run / "checkpoints" / "iter-000002")
    assert (run / "learning_curve.png").stat().st_size > 0 and any((run / "tensorboard").iterdir())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    assert last["iteration"] == 2 and "eval/success" in last and "train/clip_fraction" in last
    assert "rollout/tokens_per_s" in last and "rollout/step_group_size_hist/1" in last
    assert load_config(run / "config.yaml") == cfg  # the resolved config reads back

    resumed = small_config(tmp_path, "iterations=3")
    new_policy = build_policy(resumed)
    logs: list[str] = []
    run_training(resumed, resume="latest", policy=new_policy, echo=logs.append)
    assert logs[0].startswith("resumed from iteration 2")
    after_resume = [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert after_resume[-1] == 3 and after_resume.count(3) == 1
    samples = [json.loads(line) for line in (run / "prompts.jsonl").read_text().splitlines()]
    assert [s["iteration"] for s in samples] == [1, 1, 1, 2, 2, 2, 3, 3, 3]  # a few per iteration, none twice
    assert samples[0]["step"] == 0 and samples[0]["prompt"].startswith("Walk to the exit.") and samples[0]["prompt_tokens"] > 0
    assert [p.name for p in ckpt.list_checkpoints(run / "checkpoints")] == ["iter-000002", "iter-000003"]

    from gigpo_gym.algos.leaderboard.policies import resolve_policy

    loaded = resolve_policy(str(run), CORRIDOR_ID, device="cpu")  # the leaderboard evaluates it as trained
    assert loaded.details["iteration"] == 3 and loaded.prompt.history_length == 1  # the run's, not the spec's 2
    assert loaded.details["algo"] == resumed.algo.name and loaded.name.endswith(f"+ {resumed.algo.name} (run, iter 3)")
    from safetensors.torch import save_model

    from gigpo_gym.algos.training.config import save_config

    (tmp_path / "warm").mkdir()
    save_config(cfg, tmp_path / "warm" / "config.yaml")  # a run folder whose weights were chosen before any RL
    save_model(new_policy, str(tmp_path / "warm" / "selected.safetensors"), metadata={"iteration": "0", "success": "nan"})
    warm = resolve_policy(str(tmp_path / "warm" / "selected.safetensors"), CORRIDOR_ID, device="cpu")
    assert (warm.details["iteration"], warm.details["algo"]) == (0, "sft") and warm.name.endswith("+ sft (warm, iter 0)")
    for (name, p), (_, q) in zip(loaded.policy.named_parameters(), new_policy.named_parameters()):
        assert torch.equal(p, q), name


def test_a_resumed_run_trains_exactly_as_one_uninterrupted_run(tmp_path):
    """Stopping after iteration 2 and resuming to 3 gives the 3-iteration run's metrics and weights."""
    def train(folder, iterations, resume=None):
        cfg = small_config(tmp_path / folder, "sft.steps=2", "sft.episodes=2", "eval_every=1", f"iterations={iterations}")
        policy = build_policy(cfg)
        run_training(cfg, policy=policy, resume=resume, echo=lambda *_: None)
        records = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
        timeless = [{k: v for k, v in r.items() if "seconds" not in k and "per_s" not in k} for r in records]
        return timeless, dict(policy.named_parameters())

    straight, weights = train("straight", 3)
    train("stopped", 2)
    stale = tmp_path / "stopped" / "run" / "records" / "iter-000003.json.gz"
    stale.write_bytes(b"from a run killed after writing it")  # the resume plays iteration 3 again and records it anew
    resumed, resumed_weights = train("stopped", 3, resume="latest")
    assert resumed[-1]["iteration"] == 3 and "eval/success" in resumed[-1]
    assert resumed == straight
    for name, p in weights.items():
        assert torch.equal(p, resumed_weights[name]), name
    from gigpo_gym.algos.training.records import read_record, recorded_iterations

    def records(folder):  # every iteration recorded once, as the uninterrupted run recorded it
        root = tmp_path / folder / "run" / "records"
        return [{k: v for k, v in read_record(root, it).items() if k != "seconds"} for it in recorded_iterations(root)]

    assert [r["iteration"] for r in records("stopped")] == [1, 2, 3] and records("stopped") == records("straight")


def test_a_null_mini_batch_takes_one_optimiser_step_per_epoch_over_all_the_iteration_s_rows(tmp_path):
    """``optim.mini_batch_size: null`` is TRL's granularity: every row in one step, as a mini-batch larger than them all."""
    def train(size):
        cfg = small_config(tmp_path / size, f"optim.mini_batch_size={size}", "optim.epochs=2", "iterations=1")
        policy = build_policy(cfg)
        run_training(cfg, policy=policy, echo=lambda *_: None)
        record = json.loads((Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()[-1])
        return record, dict(policy.named_parameters())

    whole, whole_weights = train("null")
    larger, larger_weights = train("100000")
    split, _ = train("8")
    assert whole["train/rows_used"] > 8  # so that mini-batches of 8 take more than one step an epoch
    assert whole["train/optimizer_steps"] == larger["train/optimizer_steps"] == 2
    assert split["train/optimizer_steps"] > 2
    for name, p in whole_weights.items():
        assert torch.equal(p, larger_weights[name]), name


def test_ppo_s_advantages_are_returns_less_the_critic_s_values_and_its_updates_fit_the_critic(tmp_path):
    """PPO through the trainer: the rollout's rows are valued by the value head (gathered before the update),
    the advantages are the Monte-Carlo returns less those values (gamma = lambda = 1, not whitened), and each
    update on the same rows moves the value head toward the returns."""
    from gigpo_gym.algos.training.rollout import collect
    from gigpo_gym.algos.training.trainer import Trainer
    from gigpo_gym.core.env import derive_seed

    with Trainer(small_config(tmp_path, "algo.name=ppo", "algo.kwargs.normalize_advantages=false", "optim.kl_coef=0")) as t:
        rollout = collect(t.actor, t.envs, t.sampling(1), seed=derive_seed(0, 1), shaping=t.shaping)
        with torch.no_grad():
            values = t.policy.values(rollout.tokens).numpy()
        head = t.policy.value_head.weight.detach().clone()
        losses = [t.update(rollout, 1)["train/value_loss"]]
        first = t.advantages
        losses += [t.update(rollout, 1)["train/value_loss"] for _ in range(2)]
    np.testing.assert_allclose(first.batch.values, values, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first.per_row, first.value_targets - values, rtol=1e-5, atol=1e-5)
    assert len(set(np.round(first.value_targets, 6))) > 1  # returns that differ between rows
    assert losses[0] > losses[1] > losses[2] > 0
    assert not torch.equal(t.policy.value_head.weight, head)


def test_a_kl_reset_anchors_the_kl_to_the_policy_of_its_iteration_and_a_resume_finds_it(tmp_path):
    from safetensors.torch import load_file

    def train(folder, iterations, *extra, resume=None):
        cfg = small_config(tmp_path / folder, "sft.steps=2", "sft.episodes=2", "optim.kl_coef=0.1", "eval_every=1",
                           f"iterations={iterations}", *extra)
        run_training(cfg, policy=build_policy(cfg), resume=resume, echo=lambda *_: None)
        records = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if "seconds" not in k and "per_s" not in k} for r in records]

    anchored = train("anchored", 3)
    reset = train("reset", 3, "optim.kl_reset_every=2")
    run = tmp_path / "reset" / "run"
    assert sorted(p.name for p in run.glob("reference*")) == ["reference-000002.safetensors", "reference.safetensors"]
    second = load_file(run / "reference-000002.safetensors")
    policy_at_2 = load_file(ckpt.checkpoint_folder(run / "checkpoints", 2) / ckpt.POLICY_FILE)
    assert all(torch.equal(t, policy_at_2[k]) for k, t in second.items())
    assert not all(torch.equal(t, second[k]) for k, t in load_file(run / "reference.safetensors").items())
    kl = [r["train/kl_ref"] for r in reset if "train/kl_ref" in r]
    assert kl[:2] == [r["train/kl_ref"] for r in anchored if "train/kl_ref" in r][:2]  # the same run until the reset
    assert anchored[-1]["train/kl_ref"] != kl[-1]

    train("resumed", 2, "optim.kl_reset_every=2")
    assert train("resumed", 3, "optim.kl_reset_every=2", resume="latest") == reset
    with pytest.raises(ckpt.CheckpointError, match=r"reference-000003.safetensors is missing.*every 3 iterations"):
        train("resumed", 4, "optim.kl_reset_every=3", resume="latest")
    (tmp_path / "anchored" / "run" / "reference.safetensors").unlink()  # never reset: the warm start's file
    with pytest.raises(ckpt.CheckpointError, match=r"reference.safetensors is missing.*never resets it: optim.kl_reset_every 0"):
        train("anchored", 4, resume="latest")

    # references no kept checkpoint needs are deleted: one checkpoint kept, a reset every iteration
    train("pruned", 3, "optim.kl_reset_every=1", "keep_checkpoints=1")
    run = tmp_path / "pruned" / "run"
    assert sorted(p.name for p in run.glob("reference*")) == ["reference-000003.safetensors", "reference.safetensors"]
    with pytest.raises(ConfigError, match="kl_reset_every needs a frozen reference model"):
        small_config(tmp_path, "optim.kl_reset_every=2", "optim.kl_coef=0")


def test_select_every_makes_the_best_iteration_on_the_selection_split_the_runs_result(tmp_path, monkeypatch):
    """The weights that score best on the selection envs are the ones evaluated "after RL", also after a resume."""
    from gigpo_gym.algos.training.trainer import Trainer

    held_out_runs = []
    evaluate = Trainer.evaluate
    monkeypatch.setattr(Trainer, "evaluate", lambda self, on="eval": (held_out_runs.append(on == "eval"),
                                                                       evaluate(self, on))[1])

    def train(folder, iterations, *extra, resume=None):
        cfg = small_config(tmp_path / folder, "sft.steps=2", "sft.episodes=2", "eval_every=1", "select_every=1",
                           "env.select_episodes=4", "env.select_kwargs={split: test}", "keep_checkpoints=4",
                           f"iterations={iterations}", *extra)
        policy = build_policy(cfg)
        summary = run_training(cfg, policy=policy, resume=resume, echo=lambda *_: None)
        records = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
        return summary, records, policy

    summary, records, policy = train("straight", 3)
    assert sum(held_out_runs) == 1 + 3  # after SFT, then each iteration; the chosen one's is not played again
    scores = [(r["iteration"], r["select/success"]) for r in records if "select/success" in r]
    assert [it for it, _ in scores] == [1, 2, 3]
    best = max(scores, key=lambda s: (s[1], -s[0]))[0]  # the highest score, the earliest on ties
    assert summary["selected"]["iteration"] == best
    root = tmp_path / "straight" / "run" / "checkpoints"

    def weights_at(iteration):
        saved = build_policy(small_config(tmp_path))
        ckpt.load_checkpoint(ckpt.checkpoint_folder(root, iteration), saved, None)
        return dict(saved.named_parameters())

    at_best, at_last = weights_at(best), weights_at(3)
    assert best != 3 and not all(torch.equal(t, at_last[k]) for k, t in at_best.items())  # a real choice here
    for name, p in policy.named_parameters():  # the trainer's policy ends with the chosen weights
        assert torch.equal(p, at_best[name]), name
    timeless = lambda m: {k: v for k, v in m.items() if "seconds" not in k and "per_s" not in k}  # noqa: E731
    from gigpo_gym.algos.leaderboard.policies import resolve_policy

    loaded = resolve_policy(str(root.parent / "selected.safetensors"), CORRIDOR_ID, device="cpu")
    assert loaded.details["iteration"] == best  # the leaderboard evaluates the chosen weights
    assert all(torch.equal(p, at_best[n]) for n, p in loaded.policy.named_parameters())
    record = next(r for r in records if r["iteration"] == best and "eval/success" in r)
    held_out_at_best = {k: v for k, v in record.items() if k.startswith("eval/")}
    assert timeless(summary["evals"]["after RL"]) == timeless(held_out_at_best)

    train("stopped", 2)
    resumed, _, _ = train("stopped", 3, resume="latest")
    assert resumed["selected"] == {**summary["selected"], "weights": str(tmp_path / "stopped" / "run" / "selected.safetensors")}
    assert timeless(resumed["evals"]["after RL"]) == timeless(summary["evals"]["after RL"])

    with pytest.raises(ConfigError, match="measured on the tasks it was chosen on"):
        small_config(tmp_path, "select_every=5")  # the selection envs would be the held-out ones


def test_corrupted_checkpoint_is_a_clear_error_and_the_previous_one_stays_intact(tmp_path):
    cfg = small_config(tmp_path, "optim.kl_coef=0")
    run_training(cfg, echo=lambda *_: None)
    root = tmp_path / "run" / "checkpoints"
    latest = ckpt.latest_checkpoint(root)
    assert latest == ckpt.checkpoint_folder(root, 2) and ckpt.checkpoint_iteration(latest) == 2
    with pytest.raises(ckpt.CheckpointError, match="not a checkpoint folder"):
        ckpt.checkpoint_iteration(root)
    weights = latest / ckpt.POLICY_FILE
    weights.write_bytes(weights.read_bytes()[:-64] + b"\0" * 64)
    policy = build_policy(cfg)
    with pytest.raises(ckpt.CheckpointError, match=r"iter-000002/policy.safetensors is corrupted.*iter-000001 is intact"):
        ckpt.load_checkpoint(latest, policy)
    assert ckpt.load_checkpoint(root / "iter-000001", policy)["iteration"] == 1


def test_bad_config_keys_and_values_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.learning_rate'"):
        load_config(None, ["optim.learning_rate=1e-5"])
    with pytest.raises(ConfigError, match=r"unknown config key 'env.num_group' \(did you mean 'env.num_groups'\?\)"):
        load_config(None, ["env.num_group=3"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("iterations: 3\nsampling:\n  temprature: 0.5\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown config key 'sampling.temprature'.*'sampling.temperature'"):
        load_config(bad)
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown config key 'sampling.temprature'"):  # with overrides
        load_config(bad, ["iterations=2"])
    with pytest.raises(ConfigError, match=r"^unknown config key 'env.num_group'"):  # a --set's mistake, not the file's
        load_config("demo", ["env.num_group=3"])
    half = tmp_path / "half.yaml"  # valid only with its override: it loads
    half.write_text("optim: {mini_batch_size: 4}\n")
    with pytest.raises(ConfigError, match=r"half.yaml: optim.mini_batch_size \(4\) must be >= micro_batch_size"):
        load_config(half)
    assert load_config(half, ["optim.micro_batch_size=4"]).optim.micro_batch_size == 4
    with pytest.raises(ConfigError, match="iterations must be an integer, got 'many'"):
        load_config(None, ["iterations=many"])
    with pytest.raises(ConfigError, match=r"optim.mini_batch_size \(4\) must be >= micro_batch_size \(8\)"):
        load_config(None, ["optim.mini_batch_size=4", "optim.micro_batch_size=8"])
    assert load_config(None, ["optim.lr=1e-5"]).optim.lr == 1e-5  # YAML reads 1e-5 as a string
    with pytest.raises(ConfigError, match=r"reward.revisit_penalty must be >= 0 \(a penalty is subtracted\), got -0.1"):
        load_config(None, ["reward.revisit_penalty=-0.1"])
    with pytest.raises(ConfigError, match="reward.invalid_action_penalty must be >= 0"):
        load_config(None, ["reward.invalid_action_penalty=-0.1"])
    with pytest.raises(ConfigError, match=r"reward.source must be one of \['won', 'env'\], got 'score'"):
        load_config(None, ["reward.source=score"])
    with pytest.raises(ConfigError, match=r"^keys from before the prompt: and reward: sections \(not read; rename "
                                          r"them\): env.reward_scale is reward.scale now$"):
        load_config(None, ["env.reward_scale=1"])


def test_a_run_folder_from_before_the_prompt_and_reward_sections_is_told_where_its_keys_went(tmp_path):
    old = tmp_path / "config.yaml"  # what a run wrote before 2026-11-29
    old.write_text("model: {use_chat_template: null, system_prompt: null}\nenv: {reward_scale: 10.0, history_length: 2}\n")
    with pytest.raises(ConfigError) as e:
        load_config(old)
    assert str(e.value) == (f"{old}: keys from before the prompt: and reward: sections (not read; rename them): "
                            "model.use_chat_template is prompt.chat_template now; model.system_prompt is "
                            "prompt.system_prompt now; env.reward_scale is reward.scale now; env.history_length is "
                            "prompt.history_length now")
    for new in MOVED_KEYS.values():  # every new place exists
        section, key = new.split(".")
        assert key in {f.name for f in dataclasses.fields(getattr(TrainConfig(), section))}


def test_surrogate_clips_and_kl_is_the_k3_estimator():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    old = torch.zeros(1, 3)
    w = LossWeights(kl_coef=0.0, entropy_coef=0.0)
    same, stats = policy_loss(old.clone(), old, torch.tensor([2.0]), mask, 2.0, w)
    assert float(same) == pytest.approx(-2.0) and float(stats["clip_fraction"]) == 0.0
    pushed = torch.log(torch.tensor([[1.5, 1.0, 9.0]]))  # ratio 1.5 on a positive advantage: clipped at 1.2
    loss, stats = policy_loss(pushed, old, torch.tensor([1.0]), mask, 2.0, w)
    assert float(loss) == pytest.approx(-(1.2 + 1.0) / 2) and float(stats["clip_fraction"]) == 0.5
    assert float(k3_kl(old, old).abs().sum()) == 0.0
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert float(k3_kl(lp, ref)) == pytest.approx(float(torch.exp(ref - lp) - (ref - lp) - 1))


def test_a_capped_kl_stops_one_unlikely_token_from_swamping_the_update():
    # the policy made a token 12 nats less likely than the reference: exp(12) ~ 1.6e5 uncapped
    lp = torch.tensor([[-13.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -1.5]])
    mask = torch.ones(1, 2)
    for kl_max, first_grad in ((None, -torch.exp(torch.tensor(12.0)) + 1), (10.0, 0.0)):
        w = LossWeights(kl_coef=1.0, entropy_coef=0.0, kl_max=kl_max)
        loss, stats = policy_loss(lp, lp.detach(), torch.tensor([0.0]), mask, 2.0, w, ref_log_probs=ref)
        (grad,) = torch.autograd.grad(loss, lp)
        assert float(grad[0, 0]) == pytest.approx(float(first_grad) / 2, rel=1e-4)  # a token-mean over 2 tokens
        assert float(grad[0, 1]) == pytest.approx((1 - float(torch.exp(torch.tensor(-0.5)))) / 2, rel=1e-4)
    assert float(stats["kl_ref"]) == pytest.approx((10.0 + float(k3_kl(lp.detach()[:, 1:], ref[:, 1:]))) / 2, rel=1e-5)
    with pytest.raises(ConfigError, match="kl_max must be > 0"):
        load_config(None, ["optim.kl_max=0"])


def test_learning_rate_warms_up_then_decays_over_the_run_s_iterations(tmp_path):
    def rates(schedule, warmup, iterations):
        o = load_config(None, ["optim.lr=1.0", f"optim.lr_schedule={schedule}", f"optim.warmup_iterations={warmup}"]).optim
        return [learning_rate(o, i, iterations) for i in range(1, iterations + 1)]

    assert rates("constant", 0, 3) == [1.0, 1.0, 1.0]
    assert rates("linear", 2, 6) == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])
    assert rates("cosine", 0, 4) == pytest.approx([1.0, 0.5 + 0.5 ** 1.5, 0.5, 0.5 - 0.5 ** 1.5])
    cfg = small_config(tmp_path, "optim.lr_schedule=linear", "optim.lr=1e-3")
    run_training(cfg, echo=lambda *_: None)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/lr"] for r in records if "train/lr" in r] == pytest.approx([1e-3, 5e-4])
    with pytest.raises(ConfigError, match=r"optim.lr_schedule must be one of \['constant', 'linear', 'cosine'\]"):
        small_config(tmp_path, "optim.lr_schedule=step")
    with pytest.raises(ConfigError, match="optim.warmup_iterations must be >= 0"):
        small_config(tmp_path, "optim.warmup_iterations=-1")


def test_the_warm_start_s_learning_rate_follows_its_schedule(tmp_path):
    cfg = small_config(tmp_path, "sft.steps=3", "sft.episodes=2", "sft.lr=3e-3", "sft.lr_schedule=linear", "iterations=0")
    run_training(cfg, echo=lambda *_: None)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["sft/step"], r["sft/lr"]) for r in records if "sft/lr" in r] == [(0, 3e-3), (2, pytest.approx(1e-3))]
    with pytest.raises(ConfigError, match=r"sft.lr_schedule must be one of \['constant', 'linear', 'cosine'\]"):
        small_config(tmp_path, "sft.lr_schedule=exponential")


def test_choice_kl_is_the_exact_kl_over_each_row_s_options():
    logits = torch.tensor([[0.0, 1.0, 2.0], [0.5, -0.5, float("-inf")]], requires_grad=True)
    logp = torch.log_softmax(logits, dim=-1)
    half = float(torch.log(torch.tensor(0.5)))
    ref = torch.tensor([[-1.0, -1.5, -1.0], [half, half, 0.0]])  # what a row's padding holds does not matter
    kl = choice_kl(logp, ref)
    p = logp.detach().exp()
    want = [float((p[0] * (logp[0] - ref[0])).sum()), float((p[1, :2] * (logp[1, :2] - half)).sum())]
    assert tuple(kl.shape) == (2, 1) and kl[:, 0].tolist() == pytest.approx(want, abs=1e-6)
    kl.sum().backward()
    assert bool(torch.isfinite(logits.grad[:, :2]).all())
    assert float(choice_kl(ref[:1], ref[:1])) == 0.0


def test_choices_loss_trains_the_choice_among_admissible_actions(tmp_path, monkeypatch):
    from gigpo_gym.algos.policies.hf import HFPolicy

    cfg = small_config(tmp_path, "model.choose_admissible=true", "optim.loss_over=choices")
    policy = build_policy(cfg)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    scored, forward = [], HFPolicy.forward
    monkeypatch.setattr(HFPolicy, "forward", lambda self, batch, **kw: scored.append(type(batch).__name__) or forward(self, batch, **kw))
    run_training(cfg, policy=policy, echo=lambda *_: None)
    assert all(not torch.equal(p, before[n]) for n, p in policy.named_parameters())
    assert scored and set(scored) == {"ChoiceBatch"}  # the reference's scores and the update's, all over choices
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "train/pg_loss" in r]
    assert len(trained) == 2
    for r in trained:  # entropy and KL of the choice among the corridor's three actions
        assert 0.0 <= r["train/entropy"] <= float(torch.log(torch.tensor(3.0))) + 1e-6
        assert r["train/kl_ref"] >= 0.0 and r["train/rows_used"] > 0
    from gigpo_gym.algos.training.rollout import Rollout

    free_text = Rollout(rewards=[0.0], prompt_ids=[[1]], response_ids=[[2]], options=[[]], choices=[-1])
    with pytest.raises(ValueError, match="carry no candidate answers"):
        free_text.choice_batch
    with pytest.raises(ConfigError, match="needs model.choose_admissible: true"):
        small_config(tmp_path, "optim.loss_over=choices")
    with pytest.raises(ConfigError, match=r"optim.loss_over must be one of \['tokens', 'choices'\], got 'words'"):
        small_config(tmp_path, "optim.loss_over=words")


def test_shipped_configs_load_and_the_cli_names_bad_keys(tmp_path, capsys):
    import argparse
    from pathlib import Path

    from gigpo_gym.algos.cli import add_cli

    configs = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
    assert any(p.name == "demo.yaml" for p in configs)
    for path in configs:
        load_config(path)
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    args = parser.parse_args(["train", "--config", str(configs[0]), "--set", "optim.lr_rate=1", "--iterations", "3"])
    assert args.func(args) == 2
    assert "unknown config key 'optim.lr_rate'" in capsys.readouterr().err


def test_algo_flag_drops_the_other_algorithms_kwargs_and_bad_algo_keys_are_config_errors(tmp_path, capsys):
    import argparse
    from pathlib import Path

    from gigpo_gym.algos.cli import _reset_algo_kwargs, add_cli, flag_overrides
    from gigpo_gym.algos.training.config import resolve_config

    demo = str(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml")
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers())
    args = parser.parse_args(["train", "--config", demo, "--algo", "grpo"])
    overrides = ["algo.name=grpo"]
    _reset_algo_kwargs(args, overrides)
    assert load_config(demo, overrides).algo.kwargs == {}  # demo.yaml's GiGPO gamma is not passed to GRPO
    assert "algo.kwargs {'gamma': 0.95} are not used" in capsys.readouterr().err
    kept = parser.parse_args(["train", "--config", demo, "--algo", "gigpo", "--set", "algo.kwargs.gamma=0.9"])
    overrides = list(kept.overrides)
    _reset_algo_kwargs(kept, overrides)
    assert load_config(demo, overrides).algo.kwargs == {"gamma": 0.9}
    with pytest.raises(ConfigError, match=r"algo.kwargs: grpo: unknown config key 'gamma'"):
        load_config(demo, ["algo.name=grpo", f"run_dir={tmp_path / 'run'}"])
    # the config read for its algorithm has the other flags: here --sft-steps 0 is what the tools template needs
    chat = parser.parse_args(["train", "--config", "searchqa_smollm2", "--algo", "grpo", "--sft-steps", "0",
                              *[f"--set={o}" for o in ("prompt.template=tools", "prompt.history_length=2",
                                                       "prompt.intro=null", "prompt.action_format=null")]])
    chat.config = resolve_config(chat.config)
    overrides = flag_overrides(chat)
    _reset_algo_kwargs(chat, overrides)
    cfg = load_config(chat.config, overrides)
    assert (cfg.algo.name, cfg.algo.kwargs, cfg.sft.steps, cfg.prompt.template) == ("grpo", {}, 0, "tools")
    bad = parser.parse_args(["train", "--set", "algo.kwargs.gama=0.9", "--run-dir", str(tmp_path / "bad")])
    assert bad.func(bad) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'gama'" in err and "Did you mean 'gamma'" in err


def test_demonstrations_pass_expert_kwargs_and_answer_from_the_prompt_s_actions():
    from gigpo_gym.algos.training.sft import expert_demonstrations
    from gigpo_gym.wrappers import PromptConfig, llm_stack

    kwargs = dict(env_kwargs={"max_episode_steps": 60}, wrapper=llm_stack(PromptConfig(history_length=2)))
    plan = expert_demonstrations("gigpo_gym/ALFWorld-v0", 3, **kwargs)
    search = expert_demonstrations("gigpo_gym/ALFWorld-v0", 3, expert_kwargs={"style": "search"}, **kwargs)
    assert len(search) > len(plan) > 0  # searching takes more steps than knowing
    for prompt, response in search:
        command = response.removeprefix("<action>").removesuffix("</action>")
        assert command in prompt.split("Admissible actions: ")[1].split("\n\n")[0].split(" | ")


def test_oversample_repeats_the_steps_of_the_listed_verbs():
    from gigpo_gym.algos.training.sft import oversample

    demos = [("p1", "<action>go to desk 1</action>"), ("p2", "<action>take mug 1 from desk 1</action>")]
    assert oversample(demos, {}) == demos
    assert oversample(demos, {"take": 3}) == [demos[0]] + [demos[1]] * 3
    with pytest.raises(ValueError, match="ints >= 1"):
        oversample(demos, {"take": 0})


def test_success_line_prints_the_standard_error_and_episode_count():
    from gigpo_gym.algos.training.trainer import format_success

    line = format_success("after SFT", {"eval/success": 0.25, "eval/episodes": 100.0, "eval/success/heat": 0.5})
    assert "25.0 +-  4.3 (n=100)" in line  # sqrt(0.25 * 0.75 / 100) = 0.0433
    assert "heat  50.0" in line and "out of steps" not in line
    assert "| out of steps  75.0%" in format_success("after RL", {"eval/success": 0.25, "eval/truncated": 0.75})


def test_gain_line_gives_the_change_with_its_standard_error_per_type():
    from gigpo_gym.algos.training.trainer import format_gain

    before = {"eval/success": 0.1, "eval/episodes": 100.0, "eval/success/pick": 0.2}
    after = {"eval/success": 0.3, "eval/episodes": 100.0, "eval/success/pick": 0.5}
    line = format_gain(before, after)
    assert "all +20.0 +-  5.5" in line  # hypot(sqrt(.1*.9/100), sqrt(.3*.7/100)) = 0.0548
    assert "pick +30.0" in line


def test_each_config_section_checks_itself_and_names_the_key():
    from gigpo_gym.algos.training.config import EnvConfig, ModelConfig, OptimConfig, SamplingConfig

    with pytest.raises(ValueError, match="epochs must be >= 1, got 0"):
        OptimConfig(epochs=0)  # made in code, the section still checks itself
    with pytest.raises(TypeError, match="num_groups must be an integer, got '4'"):
        EnvConfig(num_groups="4")
    with pytest.raises(ValueError, match=r"dtype must be one of \['float32', 'bfloat16', 'float16'\], got 'fp32'"):
        ModelConfig(dtype="fp32")
    with pytest.raises(ConfigError, match=r"sampling.top_p must be in \(0, 1\], got 0.0"):
        load_config(None, ["sampling.top_p=0"])
    with pytest.raises(ConfigError, match=r"prompt.template must be one of \['default', 'paper'.*got 'papr' \(did you mean 'paper'\?\)"):
        load_config(None, ["prompt.template=papr"])
    with pytest.raises(ConfigError, match=r"prompt.intro is not read by the 'paper' template"):
        load_config(None, ["prompt.template=paper", "prompt.intro=hi"])
    with pytest.raises(ConfigError, match=r"algo.name: unknown algorithm 'gigp'"):
        load_config(None, ["algo.name=gigp"])
    assert SamplingConfig(eval_temperature=0.0).params(evaluation=True, seed=3).temperature == 0.0


def test_what_shapes_the_prompt_is_the_prompt_section_s():
    with pytest.raises(ConfigError, match=r"env.prompt_intro is prompt.intro now$"):
        load_config(None, ["env.prompt_intro=Hello."])
    with pytest.raises(ConfigError, match=r"model.response_prefix is prompt.response_prefix now$"):
        load_config(None, ["model.response_prefix=<action>"])
    kwargs = "env.kwargs={split: train, observation_mode: text_rich}"
    with pytest.raises(ConfigError, match=r"env.kwargs.observation_mode: how the policy sees the env is "
                                          r"prompt.observation_mode \(set it there: prompt.observation_mode: text_rich\)"):
        load_config(None, ["env.id=gigpo_gym/WebShop-v0", kwargs])
    cfg = load_config(None, ["env.id=gigpo_gym/WebShop-v0", "prompt.observation_mode=text_rich",
                             "prompt.response_prefix=<action>", "prompt.system_prompt=Shop.", "prompt.chat_template=false"])
    assert cfg.env_kwargs("eval")["observation_mode"] == "text_rich"  # every env of the run renders the same way
    assert (cfg.prompt.input_format().response_prefix, cfg.prompt.input_format().chat_template) == ("<action>", False)
    with pytest.raises(ConfigError, match=r"prompt.intro is not read by the 'tools' template"):
        load_config(None, ["prompt.template=tools", "prompt.intro=hi"])
