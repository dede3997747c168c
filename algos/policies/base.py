"""The one policy interface: what the episode player, the trainer and the leaderboard may use.

``Policy`` is the whole contract of a policy that acts (``generate``, ``needs_context``,
``concurrent``, ``close``); ``TrainablePolicy`` adds what training needs (scoring with
differentiable per-token log-probabilities, values for critics, parameters, saving).
Backends: the Hugging Face one (``policies.hf``), vLLM for generation
(``policies.vllm``), served models (``policies.chat_api``) and the non-trainable
reference policies (``policies.reference``).  Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence, get_args, runtime_checkable

import numpy as np

from gigpo_gym.core.env import derive_seed

#: Attention kernels a Hugging Face policy loads with (``hf.attention_kernel`` resolves "auto").
Attention = Literal["auto", "sdpa", "flash_attention_2", "eager"]
ATTENTION: tuple[str, ...] = get_args(Attention)
#: What samples a Hugging Face policy's free text: its own decode loop, the loop over a static KV cache (a CUDA
#: graph per step on a GPU) or transformers' continuous batching (``policies.decode``).
Decoder = Literal["auto", "loop", "static", "continuous"]
DECODERS: tuple[str, ...] = get_args(Decoder)

if TYPE_CHECKING:  # the interface itself needs no torch: reference policies run without it
    import torch

#: The context keys of a policy that answers chat conversations (see ``Policy``).
CHAT_CONTEXT: tuple[str, ...] = ("messages", "tools", "last_ids")


@dataclass(frozen=True)
class SamplingParams:
    """How ``generate`` samples.  ``temperature=0`` means greedy decoding."""

    #: Most tokens one response may have.
    max_new_tokens: int = 32
    #: Softmax temperature; 0 picks the arg-max token.
    temperature: float = 1.0
    #: Nucleus sampling mass (1.0 keeps the whole distribution).
    top_p: float = 1.0
    #: Generation of a row ends once its text contains one of these (kept in the text).
    stop: tuple[str, ...] = ()
    #: Seed of the sampling generator (None: draw from the policy's own stream).
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def for_call(self, *keys: int) -> "SamplingParams":
        """These settings with a seed of their own for one ``generate`` call (one step of an episode).

        A seeded policy restarts its generator on every call, so steps that passed the same
        seed would draw the same random numbers: row i would make the same draw at every step,
        and back in a state it had seen, tend to repeat its choice.
        """
        if self.seed is None:
            return self
        return replace(self, seed=derive_seed(self.seed, *keys))


@dataclass
class Generation:
    """One sampled response and the tokens that produced it."""

    text: str
    #: Token ids the model saw as prompt (after the chat template).
    prompt_ids: list[int]
    #: Token ids the model produced (eos included when it ended on eos).
    response_ids: list[int]
    #: Log-probability of each response token under the sampling distribution.
    log_probs: list[float]
    #: True if the response ended on eos or a stop string, False if cut at max_new_tokens.
    finished: bool = True
    #: A response chosen among candidate answers (``choose_admissible``): every candidate's
    #: token ids, the log-probability of each under the draw, and the index drawn.
    options: list[list[int]] | None = None
    option_log_probs: list[float] | None = None
    choice: int = -1
    #: Why there is no reply (a served model's request that failed for good; a policy exception the leaderboard
    #: isolated); ``text`` is then "" and the episode ends with ``error_status``.
    error: str | None = None
    #: How the episode ends on ``error``: "crashed", or "truncated" (a prompt over a served model's context).
    error_status: str = "crashed"

    def usage(self) -> dict[str, Any] | None:
        """What a served model reported for this reply (``prompt_tokens``, ``completion_tokens``,
        ``system_fingerprint``); None for a policy that reports nothing."""
        return None


@dataclass
class TokenBatch:
    """Prompt/response token ids of a set of rows, for scoring."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]

    def __post_init__(self) -> None:
        if len(self.prompt_ids) != len(self.response_ids):
            raise ValueError(f"{len(self.prompt_ids)} prompts but {len(self.response_ids)} responses")

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def select(self, index: Sequence[int]) -> "TokenBatch":
        return TokenBatch([self.prompt_ids[i] for i in index], [self.response_ids[i] for i in index])

    @classmethod
    def from_generations(cls, gens: Sequence[Generation]) -> "TokenBatch":
        return cls([list(g.prompt_ids) for g in gens], [list(g.response_ids) for g in gens])


@dataclass
class ChoiceBatch(TokenBatch):
    """Rows whose response was chosen among candidate answers, for scoring the choice itself.

    A policy scores such a batch as the distribution it draws from: softmax over the
    candidates' summed token log-probs, so probability moved off the candidates (onto
    answers the policy can never give) does not count.
    """

    #: Each row's candidate answers (token ids); ``response_ids[i] == options[i][choices[i]]``.
    options: list[list[list[int]]] = field(default_factory=list)
    choices: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not len(self.options) == len(self.choices) == len(self.prompt_ids):
            raise ValueError(f"{len(self.prompt_ids)} prompts, {len(self.options)} option lists, {len(self.choices)} choices")
        for i, (opts, c) in enumerate(zip(self.options, self.choices)):
            if not 0 <= c < len(opts):
                raise ValueError(f"row {i}: choice {c} is not one of its {len(opts)} options")

    def select(self, index: Sequence[int]) -> "ChoiceBatch":
        return ChoiceBatch([self.prompt_ids[i] for i in index], [self.response_ids[i] for i in index],
                           [self.options[i] for i in index], [self.choices[i] for i in index])


@dataclass
class TokenRows:
    """Rows of prompt + response ids as one right-padded tensor on the policy's device (``HFPolicy.token_rows``).

    The update builds it once per rollout and cuts each micro-batch out of it on the
    device (``select``), where a ``TokenBatch`` would be padded on the host every time.
    The lengths stay on the host, so widths and response positions need no read-back.
    """

    #: ``[rows, width]`` token ids, each row's prompt then response, then padding.
    ids: torch.Tensor
    prompt_lengths: np.ndarray
    response_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.prompt_lengths)

    def select(self, index: np.ndarray, on_device: torch.Tensor | None = None) -> "TokenRows":
        """Rows ``index`` (``on_device``: the same index on the ids' device), cut to the longest of them."""
        import torch

        index = np.asarray(index, dtype=np.int64)
        if on_device is None:
            on_device = torch.from_numpy(index).to(self.ids.device, non_blocking=True)
        prompt, response = self.prompt_lengths[index], self.response_lengths[index]
        width = int((prompt + response).max(initial=0))
        return TokenRows(self.ids.index_select(0, on_device)[:, :width], prompt, response)


@dataclass
class TokenScores:
    """Per-token outputs of ``log_probs``: right-padded ``[rows, max_response_len]``."""

    log_probs: torch.Tensor
    #: 1.0 on real response tokens, 0.0 on padding.
    mask: torch.Tensor
    #: Entropy of the model's distribution at each response position (if asked for).
    entropy: torch.Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Policy(Protocol):
    """A policy that acts: prompts in, one ``Generation`` each out.

    The episode player (``training.rollout.collect``) calls it once per step with the
    prompts of every running episode, in one call; the leaderboard and the trainer use
    nothing else.  Subclass it to inherit the defaults below, or define every member
    (``isinstance(x, Policy)`` checks that all are there).

    - ``generate(prompts, sampling, contexts=None) -> list[Generation]``: one generation per
      prompt, in order.  ``sampling.seed`` (when set) makes the call reproducible.
      ``contexts`` is passed only when ``needs_context`` is non-empty: one dict per prompt
      (``training.rollout.step_contexts`` builds it).  A reply that cannot be produced for
      one prompt (a served request failing for good) is a ``Generation`` with ``error``
      set, which ends that episode; an exception ends the call, and one whose ``fatal``
      attribute is true stops a whole leaderboard run (a wrong key, model or address).
    - ``needs_context``: the context keys ``generate`` reads: ``admissible_actions``,
      ``expert_action``, ``observation`` (the env's own), ``task`` (the first observation),
      ``episode`` (the env's index in the round), ``last_ids`` (the token ids of the
      episode's previous generation, its ``prompt_ids + response_ids``; empty at the first
      step), or any env info key (``instruction``).  Empty: the prompt is all it sees.
    - Chats: a policy whose ``needs_context`` lists ``messages`` (and ``tools``; an
      in-process model also ``last_ids``: ``CHAT_CONTEXT``) answers chat conversations.
      When a row's context has ``messages`` (the ``tools`` prompt template keeps the
      episode as chat messages, the tools' JSON schemas in ``tools``), the policy answers
      those messages, rendered with the tools by its chat template with the generation
      prompt, not the prompt string (the same chat as plain text, for policies that read
      text).  The reply's tool calls come back in its text as ``<tool_call>{"name": ...,
      "arguments": {...}}</tool_call>`` (``wrappers.tool_calls.render_calls``).  The
      leaderboard's ``tools`` prompt refuses a policy that does not list ``messages``.
    - ``concurrent``: True when every prompt of a step should go in one call however many
      (a served model, which overlaps its requests); False lets a caller cut a step into
      batches (the leaderboard's ``--batch-size``).
    - ``close()``: release what the policy holds (a client, a thread, an engine); a closed
      policy is not called again.
    """

    #: Context keys ``generate`` reads (see the class docstring); empty: none.
    needs_context: tuple[str, ...] = ()
    #: Every prompt of a step in one call (a served model); False: a caller may batch.
    concurrent: bool = False

    def generate(self, prompts: Sequence[str], sampling: SamplingParams,
                 contexts: Sequence[dict[str, Any]] | None = None) -> list[Generation]:
        """One generation per prompt (see the class docstring)."""
        ...

    def close(self) -> None:
        """Release what the policy holds; nothing by default."""


def as_policy(obj: Any) -> Policy:
    """``obj`` when it has the whole ``Policy`` contract.

    An object with only ``generate`` (the contract before it was written out) still plays:
    it gets the defaults of the rest (no context, batched, nothing to close) and a
    ``DeprecationWarning`` saying to subclass ``Policy``.
    """
    if isinstance(obj, Policy):
        return obj
    if not callable(getattr(obj, "generate", None)):
        raise TypeError(f"{type(obj).__name__} is not a policy: it has no generate(prompts, sampling, contexts=None)")
    import warnings

    missing = [name for name in ("needs_context", "concurrent", "close") if not hasattr(obj, name)]
    warnings.warn(f"{type(obj).__name__} lacks {', '.join(missing)} of the Policy contract: subclass "
                  "gigpo_gym.algos.Policy to inherit the defaults", DeprecationWarning, stacklevel=3)
    return _WithDefaults(obj)


class _WithDefaults(Policy):
    """An object with ``generate`` and perhaps part of the rest, completed with ``Policy``'s defaults."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.needs_context = tuple(getattr(policy, "needs_context", ()))
        self.concurrent = bool(getattr(policy, "concurrent", False))

    def generate(self, prompts, sampling, contexts=None):
        if contexts is None:
            return self.policy.generate(prompts, sampling)
        return self.policy.generate(prompts, sampling, contexts)

    def close(self) -> None:
        close = getattr(self.policy, "close", None)
        if close is not None:
            close()


@runtime_checkable
class TrainablePolicy(Policy, Protocol):
    """A policy with parameters: scored, optimised, saved and loaded (``HFPolicy``).

    - ``device``: where its tensors live; ``TokenScores`` come back there.
    - ``log_probs(batch, with_entropy=False)``: differentiable log-probs of each row's
      response tokens (a ``ChoiceBatch``: of each row's choice among its options; a
      ``TokenRows``: the same rows as ids on the device).
    - ``token_rows(batch)``: a ``TokenBatch`` as ``TokenRows``, built once so the update
      cuts its micro-batches on the device.
    - ``rollout_dtype``: the dtype of the weights that sample free text when they are a
      copy of the trained ones in another dtype, else None (the trainer then recomputes
      the old log-probs).
    - ``values(batch)``: one differentiable value per row (a policy built with a critic).
    - ``parameters()``, ``train(mode)``: as ``torch.nn.Module``'s; the trainer optimises the
      parameters that require gradients.
    - ``save(path)``: a folder its class's ``load`` reads back.
    """

    device: torch.device
    rollout_dtype: str | None

    def log_probs(self, batch: TokenBatch, *, with_entropy: bool = False) -> TokenScores:
        """Differentiable log-probs of the response tokens only (prompt logits never built)."""
        ...

    def token_rows(self, batch: TokenBatch) -> TokenRows:
        """``batch`` as one right-padded id tensor on the device."""
        ...

    def values(self, batch: TokenBatch) -> torch.Tensor:
        """One value per row (needs a critic head); differentiable."""
        ...

    def parameters(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def save(self, path: str | Path) -> None: ...

