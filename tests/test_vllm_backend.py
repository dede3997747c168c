"""The generation backends' contract: one test body, run against every backend available here.

``hf`` always runs; ``vllm`` needs a CUDA GPU and the vllm package (its own environment,
``pip install ".[vllm]"``) and is skipped with the reason elsewhere.
"""

from __future__ import annotations

import pytest
import torch

from gigpo_gym.algos.policies.base import SamplingParams, TokenBatch

PROMPTS = ["go to the kitchen and take the mug", "open the fridge 1", "go to the kitchen and take the mug"]
ACTIONS = [["go north", "take mug 1", "open fridge 1"], ["open fridge 1", "go north"], ["take mug 1", "go north"]]


def _vllm_missing() -> str | None:
    from gigpo_gym.algos.policies.vllm import BackendUnavailable, check_vllm

    try:
        check_vllm()
    except BackendUnavailable as e:
        return str(e)
    return None


BACKENDS = [
    pytest.param("hf", id="hf"),
    pytest.param("vllm", id="vllm", marks=pytest.mark.skipif(_vllm_missing() is not None, reason=str(_vllm_missing()))),
]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from gigpo_gym.algos.policies.tiny import TinySpec, build_tiny

    corpus = PROMPTS + ["<action>go north</action>", "<action>take mug 1</action>", "<action>open fridge 1</action>"]
    return build_tiny(corpus * 4, TinySpec(vocab_size=200, hidden_size=32, intermediate_size=64, num_layers=2))


def backend(kind: str, trained):
    """The policy that generates for ``trained`` (an HFPolicy), as the trainer builds it."""
    if kind == "hf":
        return trained
    from gigpo_gym.algos.policies.vllm import VLLMPolicy

    return VLLMPolicy(trained, gpu_memory_utilization=0.2, seed=0)


def close(kind: str, actor) -> None:
    if kind != "hf":
        actor.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_backend_contract(kind, model_path):
    from gigpo_gym.algos.policies.hf import HFPolicy
    from gigpo_gym.wrappers.stack import InputFormat

    device = "cuda" if kind == "vllm" else "cpu"
    trained = HFPolicy.from_pretrained(model_path, device=device, input_format=InputFormat(response_prefix="<action>"))
    actor = backend(kind, trained)
    try:
        if kind == "vllm":  # fed prompt ids only, it must not claim the chats of the tools template
            assert not set(actor.needs_context) & {"messages", "tools", "last_ids"}
        # free text: the policy's own prompt tokens, at most max_new_tokens, log-probs the trained model recomputes
        sampling = SamplingParams(max_new_tokens=6, temperature=1.0, stop=("</action>",), seed=7)
        gens = actor.generate(PROMPTS, sampling)
        assert len(gens) == len(PROMPTS)
        for prompt, g in zip(PROMPTS, gens):
            assert g.prompt_ids == trained.encode_prompt(prompt)
            assert 1 <= len(g.response_ids) <= 6 and len(g.log_probs) == len(g.response_ids)
            assert g.text.startswith("<action>")
        again = actor.generate(PROMPTS, sampling)
        assert [g.response_ids for g in again] == [g.response_ids for g in gens]  # same seed, same answers
        scores = trained.log_probs(TokenBatch.from_generations(gens))
        for i, g in enumerate(gens):
            torch.testing.assert_close(scores.log_probs[i, : len(g.log_probs)].cpu(), torch.tensor(g.log_probs),
                                       atol=2e-3, rtol=0)
        # greedy answers are the trained model's own arg-max tokens
        greedy = actor.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=0.0, stop=("</action>",)))
        for g in greedy:
            ids = torch.tensor([g.prompt_ids + g.response_ids], device=trained.device)
            with torch.no_grad():
                logits = trained.model(input_ids=ids).logits[0, len(g.prompt_ids) - 1 : -1]
            assert logits.argmax(-1).tolist() == g.response_ids

        # admissible choice: one of the row's actions, with the answer's token log-probs
        trained._choose_admissible = True  # both paths on one engine: the test flips the constructor option
        contexts = [{"admissible_actions": a} for a in ACTIONS]
        chosen = actor.generate(PROMPTS, SamplingParams(temperature=1.0, seed=3), contexts)
        for g, actions in zip(chosen, ACTIONS):
            command = g.text.removeprefix("<action>").removesuffix("</action>")
            assert command in actions and g.response_ids == trained.encode_answer(command)
        scores = trained.log_probs(TokenBatch.from_generations(chosen))
        for i, g in enumerate(chosen):
            torch.testing.assert_close(scores.log_probs[i, : len(g.log_probs)].cpu(), torch.tensor(g.log_probs),
                                       atol=2e-3, rtol=0)

        # new weights reach the backend
        trained._choose_admissible = False
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)).to(p.device) * 0.5)
        if kind != "hf":
            actor.load_weights(trained)
        moved = actor.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=0.0, stop=("</action>",)))
        for g in moved:
            ids = torch.tensor([g.prompt_ids + g.response_ids], device=trained.device)
            with torch.no_grad():
                logits = trained.model(input_ids=ids).logits[0, len(g.prompt_ids) - 1 : -1]
            assert logits.argmax(-1).tolist() == g.response_ids
    finally:
        close(kind, actor)
