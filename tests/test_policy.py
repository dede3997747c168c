"""The policy interface on the tiny model: generation, response-only scoring, save/load."""

from __future__ import annotations

import pytest
import torch

from gigpo_gym.algos.policies import choice
from gigpo_gym.algos.policies.hf import HFPolicy
from gigpo_gym.algos.policies.base import ChoiceBatch, Generation, SamplingParams, TokenBatch, TrainablePolicy
from gigpo_gym.algos.policies.reference import ExpertPolicy, RandomAdmissiblePolicy
from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny, train_tokenizer
from gigpo_gym.wrappers.stack import InputFormat

CORPUS = [
    "Walk to the exit. You are in room 1. The exit is east of room 3. Admissible actions: go east | go west | wait",
    "<action>go east</action>",
    "<action>go west</action>",
    "<action>wait</action>",
] * 4
SPEC = TinySpec(vocab_size=320, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
PROMPTS = ["You are in room 1.", "The exit is east of room 3. Admissible actions: go east | go west | wait"]


@pytest.fixture(scope="module")
def tiny_path():
    return build_tiny(CORPUS, SPEC, name="test")


@pytest.fixture()
def policy(tiny_path):
    return HFPolicy.from_pretrained(tiny_path, device="cpu")


def test_tiny_build_is_deterministic_and_cached(tiny_path, tmp_path, monkeypatch):
    assert build_tiny(CORPUS, SPEC, name="test") == tiny_path  # cached
    monkeypatch.setenv("GIGPO_GYM_CACHE", str(tmp_path))
    other = build_tiny(CORPUS, SPEC, name="test")
    assert other != tiny_path
    a, b = HFPolicy.from_pretrained(tiny_path, device="cpu"), HFPolicy.from_pretrained(other, device="cpu")
    assert a.tokenizer.get_vocab() == b.tokenizer.get_vocab()
    for (name, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(p, q), name
    # the saved tokenizer is the trained one (AutoTokenizer would swap in Qwen2's pre-tokeniser)
    fresh = train_tokenizer(CORPUS, SPEC.vocab_size)
    assert a.tokenizer(CORPUS[0])["input_ids"] == fresh(CORPUS[0])["input_ids"]
    # whole phrases and the answer tags are single tokens
    pieces = a.tokenizer.convert_ids_to_tokens(a.tokenizer("<action>go east</action>")["input_ids"])
    assert pieces == ["<action>", "goĠeast", "</action>"]


def test_generate_returns_tokens_and_log_probs_that_scoring_reproduces(policy):
    assert isinstance(policy, TrainablePolicy)
    gens = policy.generate(PROMPTS, SamplingParams(max_new_tokens=6, seed=3))
    assert len(gens) == 2 and all(isinstance(g, Generation) for g in gens)
    for g, p in zip(gens, PROMPTS):
        assert g.prompt_ids == policy.encode_prompt(p)
        assert 1 <= len(g.response_ids) == len(g.log_probs) <= 6
    scores = policy.log_probs(TokenBatch.from_generations(gens))
    for g, row, mask in zip(gens, scores.log_probs, scores.mask):
        assert mask.sum() == len(g.response_ids)
        torch.testing.assert_close(row[: len(g.log_probs)], torch.tensor(g.log_probs), atol=1e-4, rtol=1e-4)


def test_seeded_sampling_repeats_and_left_padding_does_not_change_greedy_output(policy):
    s = SamplingParams(max_new_tokens=5, seed=11)
    assert [g.response_ids for g in policy.generate(PROMPTS, s)] == [g.response_ids for g in policy.generate(PROMPTS, s)]
    greedy = SamplingParams(max_new_tokens=5, temperature=0)
    alone = policy.generate(PROMPTS[:1], greedy)[0]
    batched = policy.generate(PROMPTS, greedy)[0]  # the short prompt is left-padded here
    assert alone.response_ids == batched.response_ids


def test_stop_strings_end_a_row(policy):
    gens = policy.generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=0))
    first = policy.tokenizer.decode(gens[0].response_ids[:2], skip_special_tokens=True)
    stopped = policy.generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=0, stop=(first,)))[0]
    assert stopped.finished and len(stopped.response_ids) <= 2 and stopped.text.endswith(first)


def test_a_gpu_decodes_a_recipe_s_rollout_in_one_pass_and_a_cpu_in_several():
    from gigpo_gym.algos.policies import decode

    rows = list(range(128))  # the 1.5B recipe's 16 groups x 8, prompts of ~300 tokens and 192-token answers
    sizes = [300 + 192] * len(rows)
    assert len(decode.passes(rows, sizes, decode.pass_budget(torch.device("cuda:0")))) == 1
    assert len(decode.passes(rows, sizes, decode.pass_budget(torch.device("cpu")))) == 4
    longest = [1536 + 512] * len(rows)  # its 512-token answers after long prompts: still one pass on a GPU
    assert len(decode.passes(rows, longest, decode.pass_budget(torch.device("cuda:0")))) == 1


def test_log_probs_match_full_logits_but_lm_head_sees_only_response_positions(policy):
    batch = TokenBatch([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14]])
    seen = []
    head = policy.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[:-1].numel()))
    scores = policy.log_probs(batch, with_entropy=True)
    hook.remove()
    assert seen == [4]  # the 4 response tokens, not prompt + response, not padding
    for i, (p, r) in enumerate(zip(batch.prompt_ids, batch.response_ids)):
        full = torch.log_softmax(policy.model(torch.tensor([p + r])).logits[0].float(), -1)
        expected = full[len(p) - 1 : len(p) - 1 + len(r)].gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
        torch.testing.assert_close(scores.log_probs[i, : len(r)], expected, atol=1e-5, rtol=1e-5)
    assert scores.log_probs[1, 1:].abs().sum() == 0 and scores.mask[1].tolist() == [1.0, 0.0, 0.0]
    assert (scores.entropy[0] > 0).all()
    scores.log_probs.sum().backward()
    assert policy.model.get_input_embeddings().weight.grad is not None


def test_save_load_round_trip_and_critic(tiny_path, tmp_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", critic=True)
    batch = TokenBatch([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    with torch.no_grad():
        policy.value_head.bias.fill_(0.5)
    values = policy.values(batch)
    assert values.shape == (2,) and values.requires_grad
    scores = policy.log_probs(batch, with_values=True)
    torch.testing.assert_close(scores.extras["values"], values)
    policy.save(tmp_path / "saved")
    loaded = HFPolicy.load(tmp_path / "saved", device="cpu")
    torch.testing.assert_close(loaded.log_probs(batch).log_probs, scores.log_probs)
    torch.testing.assert_close(loaded.values(batch), values)
    with pytest.raises(FileNotFoundError, match="policy.json is missing"):
        HFPolicy.load(tmp_path, device="cpu")


def test_lora_trains_only_adapters_and_round_trips(tiny_path, tmp_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", lora={"r": 2})
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    batch = TokenBatch([[5, 6, 7]], [[9, 10]])
    policy.log_probs(batch).log_probs.sum().backward()
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.add_(0.05)
    policy.save(tmp_path / "lora")
    loaded = HFPolicy.load(tmp_path / "lora", device="cpu")
    torch.testing.assert_close(loaded.log_probs(batch).log_probs, policy.log_probs(batch).log_probs)


def test_bad_sampling_params_are_rejected():
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingParams(top_p=0)


def test_reference_policies_act_from_context():
    ctx = [{"admissible_actions": ["look", "go east"], "expert_action": "go east"}]
    rnd = RandomAdmissiblePolicy(seed=1).generate(["p"], SamplingParams(), ctx)[0]
    assert rnd.text in ("<action>look</action>", "<action>go east</action>") and rnd.response_ids == []
    assert ExpertPolicy().generate(["p"], SamplingParams(), ctx)[0].text == "<action>go east</action>"
    with pytest.raises(ValueError, match="needs one context"):
        ExpertPolicy().generate(["p"], SamplingParams())


def test_response_prefix_is_part_of_the_prompt_and_of_the_text(tiny_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", input_format=InputFormat(response_prefix="<action>"))
    tag = policy.tokenizer.convert_tokens_to_ids("<action>")
    gen = policy.generate(PROMPTS[:1], SamplingParams(max_new_tokens=3, seed=0))[0]
    assert gen.prompt_ids[-1] == tag and tag not in gen.response_ids[:1]
    assert gen.text.startswith("<action>")


def test_choose_admissible_answers_with_one_of_the_row_s_actions(tiny_path, tmp_path):
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", choose_admissible=True)
    assert policy.needs_context == ("admissible_actions",)
    contexts = [{"admissible_actions": ["go east", "go west", "wait"]}, {"admissible_actions": ["wait"]}]
    gens = policy.generate(PROMPTS, SamplingParams(seed=1), contexts)
    assert gens[0].text in {"<action>go east</action>", "<action>go west</action>", "<action>wait</action>"}
    assert gens[1].text == "<action>wait</action>"
    scores = policy.log_probs(TokenBatch.from_generations(gens))
    for g, row in zip(gens, scores.log_probs):  # what the update recomputes is what was recorded
        torch.testing.assert_close(row[: len(g.log_probs)], torch.tensor(g.log_probs), atol=1e-4, rtol=1e-4)
    # greedy picks the answer the model finds most likely
    greedy = policy.generate(PROMPTS[:1], SamplingParams(temperature=0), contexts[:1])[0]
    options = contexts[0]["admissible_actions"]
    answers = [policy.tokenizer(f"<action>{a}</action>")["input_ids"] + [policy.tokenizer.eos_token_id] for a in options]
    prompt = policy.encode_prompt(PROMPTS[0])
    totals = policy.log_probs(TokenBatch([prompt] * 3, answers)).log_probs.sum(-1)
    assert greedy.text == f"<action>{options[int(totals.argmax())]}</action>"
    with pytest.raises(ValueError, match="admissible_actions"):
        policy.generate(PROMPTS, SamplingParams())
    policy.save(tmp_path / "chooser")
    assert HFPolicy.load(tmp_path / "chooser", device="cpu").choose_admissible


def test_admissible_scores_match_one_sequence_at_a_time_scoring(tiny_path):
    """Packed candidates over left-padded prompts give each answer's own log-probs."""
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", choose_admissible=True)
    prompts = [policy.encode_prompt(p) for p in (PROMPTS[0], PROMPTS[1] + " " + PROMPTS[1], "room")]
    eos = policy.tokenizer.eos_token_id
    texts = [["go east", "wait now go west", ""], ["wait"], ["go west", "go east go east go east", "wait", "go east"]]
    answers = [[policy.tokenizer(f"<action>{t}</action>")["input_ids"] + [eos] for t in row] for row in texts]
    packed = choice.score_answers(policy, prompts, answers)
    for prompt, row, got in zip(prompts, answers, packed):
        expected = policy.log_probs(TokenBatch([prompt] * len(row), row)).log_probs
        for answer, want, logps in zip(row, expected, got):
            torch.testing.assert_close(torch.tensor(logps), want[: len(answer)], atol=1e-4, rtol=1e-4)


def test_a_choice_is_scored_as_the_distribution_the_rollout_drew_it_from(tiny_path):
    """``loss_over: choices`` trains exactly what was sampled: the recorded option log-probs, with gradients."""
    policy = HFPolicy.from_pretrained(tiny_path, device="cpu", choose_admissible=True)
    contexts = [{"admissible_actions": ["go east", "go west", "wait"]}, {"admissible_actions": ["wait"]},
                {"admissible_actions": ["go east go east", "go west", "wait now", "go east"]}]
    gens = policy.generate([*PROMPTS, "room"], SamplingParams(seed=3), contexts)
    batch = ChoiceBatch([g.prompt_ids for g in gens], [g.response_ids for g in gens],
                        [g.options for g in gens], [g.choice for g in gens])
    scores = policy.log_probs(batch, with_entropy=True)
    options = scores.extras["option_log_probs"]
    for i, g in enumerate(gens):
        recorded = torch.tensor(g.option_log_probs, dtype=torch.float32)
        assert g.response_ids == g.options[g.choice] and len(g.options) == len(contexts[i]["admissible_actions"])
        torch.testing.assert_close(options[i, : len(g.options)], recorded, atol=1e-4, rtol=1e-4)
        assert float(torch.logsumexp(recorded, 0)) == pytest.approx(0.0, abs=1e-5)  # mass off the options is ignored
        assert float(scores.log_probs[i, 0]) == pytest.approx(g.option_log_probs[g.choice], abs=1e-4)
        assert float(scores.entropy[i, 0]) == pytest.approx(float(-(recorded.exp() * recorded).sum()), abs=1e-4)
    assert torch.isinf(options[1, 1:]).all()  # a row with one option: the rest is padding
    (scores.log_probs.sum() - scores.entropy.sum()).backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)
    with pytest.raises(ValueError, match="row 0: choice 3 is not one of its 3 options"):
        ChoiceBatch(batch.prompt_ids[:1], batch.response_ids[:1], batch.options[:1], [3])


def test_word_pieces_share_names_across_texts():
    words = train_tokenizer(["put a mug in the sinkbasin", "<action>take mug 1 from cabinet 2</action>"] * 8, 300, "words")
    goal, command = words.tokenize("put a mug in the sinkbasin"), words.tokenize("take mug 1 from cabinet 2")
    assert "Ġmug" in goal and "Ġmug" in command  # the same token in the goal and in the command
    with pytest.raises(ValueError, match="pieces must be 'words' or 'phrases'"):
        train_tokenizer(["a b"], 300, "letters")
