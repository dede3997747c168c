"""vLLM generation behind the policy interface: a colocated engine that holds the trained weights.

``model.generation: vllm`` (the ``[vllm]`` extra, a CUDA GPU).  The engine runs in the
training process and shares its GPU (``gpu_memory_utilization`` is its share), as
TRL's colocate mode does.  Prompts are the HF policy's own token ids (its chat template
and ``response_prefix``), so both backends see the same prompt; each row samples from
its own seed, so a row's answer does not depend on the other rows of the batch.
After each update the trainer pushes the trained weights in (``load_weights``) and
the prefix cache is emptied.  The update never uses vLLM's numbers: the trained model
recomputes the old log-probs.

vLLM is imported when an engine is built, never at module import: it pins its own
torch build, so it lives in its own environment.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from typing import Any, Sequence

from gigpo_gym.algos.policies.base import CHAT_CONTEXT, Generation, Policy, SamplingParams
from gigpo_gym.core.env import derive_seed
from gigpo_gym.core.extras import install_command


class BackendUnavailable(RuntimeError):
    """The vLLM backend cannot run here (no CUDA GPU, or vllm is not installed)."""


def check_vllm() -> None:
    """Raise ``BackendUnavailable`` with the reason and the fix when vLLM cannot run here."""
    import torch

    problems = []
    if not torch.cuda.is_available():
        problems.append("a CUDA GPU, and torch sees none (torch.cuda.is_available() is False)")
    if importlib.util.find_spec("vllm") is None:
        problems.append(f"the vllm package: {install_command('vllm')}, in an environment of its own "
                        "(vllm pins its own torch build)")
    if problems:
        raise BackendUnavailable(f"model.generation: vllm needs {' and '.join(problems)}; "
                                 "use model.generation: hf (the trained module generates) instead")


def _push(worker: Any, weights: list) -> None:
    """Runs in the engine's worker (same process): load HF-named weights into its model."""
    worker.model_runner.model.load_weights(weights)


class VLLMPolicy(Policy):
    """Generation (free text and admissible choice) by a vLLM engine with the weights of ``policy``.

    ``policy`` is the ``HFPolicy`` being trained (or its inference copy): it encodes the
    prompts, decodes the answers and scores them.
    """

    def __init__(self, policy: Any, *, gpu_memory_utilization: float = 0.3, max_model_len: int | None = None,
                 seed: int = 0):
        check_vllm()
        if hasattr(policy.model, "peft_config"):
            raise BackendUnavailable("model.generation: vllm does not take LoRA adapters here; "
                                     "train without model.lora or use model.generation: hf")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: weights pass in memory
        from vllm import LLM

        self.policy = policy
        self._dir = tempfile.mkdtemp(prefix="gigpo-gym-vllm-")
        policy.model.save_pretrained(self._dir)
        policy.tokenizer.save_pretrained(self._dir)
        self.dtype = policy.compute_dtype or policy.weights_dtype
        kwargs: dict[str, Any] = dict(model=self._dir, dtype=self.dtype, gpu_memory_utilization=gpu_memory_utilization,
                                      seed=int(seed), enable_prefix_caching=True)
        if max_model_len is not None:
            kwargs["max_model_len"] = int(max_model_len)
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # one engine per process of a data-parallel run
            kwargs["distributed_executor_backend"] = "external_launcher"
        self.llm = LLM(**kwargs)

    # -- the Policy interface --------------------------------------------------------------
    @property
    def needs_context(self) -> tuple[str, ...]:
        """The wrapped policy's keys but the chat ones: the engine is fed prompt ids only, so it answers no chats
        (the leaderboard then refuses the ``tools`` template for it with a clear error)."""
        return tuple(key for key in self.policy.needs_context if key not in CHAT_CONTEXT)

    def encode_prompt(self, prompt: str) -> list[int]:
        return self.policy.encode_prompt(prompt)

    def generate(self, prompts: Sequence[str], sampling: SamplingParams,
                 contexts: Sequence[dict[str, Any]] | None = None) -> list[Generation]:
        if not prompts:
            return []
        prompt_ids = [self.encode_prompt(p) for p in prompts]
        seeds = [None if sampling.seed is None else derive_seed(sampling.seed, i) for i in range(len(prompts))]
        if self.policy.choose_admissible:
            if contexts is None or len(contexts) != len(prompts):
                raise ValueError("choose_admissible needs one context with admissible_actions per prompt")
            options = [list(c.get("admissible_actions") or []) or [""] for c in contexts]
            return self._choose(prompt_ids, options, sampling, seeds)
        return self._generate(prompt_ids, sampling, seeds)

    def _generate(self, prompt_ids: list[list[int]], sampling: SamplingParams, seeds: list) -> list[Generation]:
        from vllm import SamplingParams as VLLMSampling
        from vllm.inputs import TokensPrompt

        params = [VLLMSampling(n=1, temperature=sampling.temperature, top_p=sampling.top_p,
                               max_tokens=sampling.max_new_tokens, stop=list(sampling.stop),
                               stop_token_ids=sorted(self.policy.eos_ids), include_stop_str_in_output=True,
                               seed=seed, logprobs=0) for seed in seeds]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], params, use_tqdm=False)
        out = []
        for ids, result in zip(prompt_ids, outputs):
            c = result.outputs[0]
            tokens = list(c.token_ids)
            logps = [float(step[t].logprob) for step, t in zip(c.logprobs or [], tokens)]
            text = self.policy.response_prefix + self.policy._decode(tokens, sampling.stop)
            out.append(Generation(text, list(ids), tokens, logps, c.finish_reason == "stop"))
        return out

    def _choose(self, prompt_ids: list[list[int]], options: list[list[str]], sampling: SamplingParams,
                seeds: list) -> list[Generation]:
        """One admissible action per row, drawn from softmax(summed log-probs of each full answer).

        Each candidate answer is scored as prompt + answer with ``prompt_logprobs`` (the
        prompt's KV is shared through the prefix cache); the draw uses the row's own seed.
        """
        import torch
        from vllm import SamplingParams as VLLMSampling
        from vllm.inputs import TokensPrompt

        encoded = {cmd: self.policy.encode_answer(cmd) for cmds in options for cmd in cmds}
        requests = [(r, cmd) for r, cmds in enumerate(options) for cmd in cmds]
        scoring = VLLMSampling(n=1, max_tokens=1, prompt_logprobs=0, temperature=0.0)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=prompt_ids[r] + encoded[cmd]) for r, cmd in requests],
                                    scoring, use_tqdm=False)
        logps: dict[tuple[int, str], list[float]] = {}
        for (r, cmd), result in zip(requests, outputs):
            start, answer = len(prompt_ids[r]), encoded[cmd]
            logps[(r, cmd)] = [float(result.prompt_logprobs[start + k][t].logprob) for k, t in enumerate(answer)]
        out = []
        for r, cmds in enumerate(options):
            totals = torch.tensor([sum(logps[(r, c)]) for c in cmds], dtype=torch.float64)
            if sampling.temperature == 0:
                pick = int(totals.argmax())
            else:
                totals = totals / sampling.temperature
                gen = torch.Generator().manual_seed(int(seeds[r] if seeds[r] is not None else derive_seed(r)))
                pick = int(torch.multinomial(torch.softmax(totals, dim=0), 1, generator=gen))
            cmd = cmds[pick]
            out.append(Generation(f"<action>{cmd}</action>", list(prompt_ids[r]), list(encoded[cmd]), logps[(r, cmd)], True,
                                  [encoded[c] for c in cmds], torch.log_softmax(totals, dim=0).tolist(), pick))
        return out

    # -- weights ---------------------------------------------------------------------------
    def load_weights(self, module: Any) -> None:
        """Put ``module``'s weights (an HFPolicy with the trained weights) into the engine."""
        import torch

        dtype = getattr(torch, self.dtype)
        weights = [(name, t.detach().to(dtype)) for name, t in module.model.state_dict().items()]
        self.llm.collective_rpc(_push, args=(weights,))
        self.llm.reset_prefix_cache()  # cached keys and values were computed with the old weights

    def close(self) -> None:
        import gc

        import torch

        self.llm = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        shutil.rmtree(self._dir, ignore_errors=True)
