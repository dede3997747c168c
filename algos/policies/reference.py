"""Non-trainable reference policies for baselines: random admissible and expert.

They answer the same ``generate`` call as a model, but act from each row's context
(its admissible actions, or the env's ``expert_action()``), which the rollout passes
in ``contexts``; the prompt text is ignored.  Their generations carry no tokens.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from gigpo_gym.algos.policies.base import Generation, Policy, SamplingParams


#: A reply already in an env's own tags (SearchQA's expert writes ``<search>title</search>``).
_TAGGED = re.compile(r"<(\w+)>.*</\1>", re.DOTALL)


def _as_generation(action: str) -> Generation:
    """The reply for ``action``: inside ``<action>`` tags, unless it is already a reply in an env's own tags."""
    text = action if _TAGGED.fullmatch(action) else f"<action>{action}</action>"
    return Generation(text=text, prompt_ids=[], response_ids=[], log_probs=[])


class RandomAdmissiblePolicy(Policy):
    """Picks uniformly among the admissible actions (seeded, reproducible)."""

    needs_context = ("admissible_actions",)

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    def generate(
        self, prompts: Sequence[str], sampling: SamplingParams, contexts: Sequence[dict[str, Any]] | None = None
    ) -> list[Generation]:
        if contexts is None or len(contexts) != len(prompts):
            raise ValueError("RandomAdmissiblePolicy needs one context (with admissible_actions) per prompt")
        rng = self._rng if sampling.seed is None else np.random.default_rng(sampling.seed)
        out = []
        for ctx in contexts:
            options = list(ctx.get("admissible_actions") or [])
            out.append(_as_generation(options[int(rng.integers(len(options)))] if options else ""))
        return out


class ExpertPolicy(Policy):
    """Plays the env's own expert (``unwrapped.expert_action()``): the upper-bound baseline, and the
    demonstrator of the SFT warm start (``sft.expert_demonstrations``)."""

    needs_context = ("expert_action",)

    def generate(
        self, prompts: Sequence[str], sampling: SamplingParams, contexts: Sequence[dict[str, Any]] | None = None
    ) -> list[Generation]:
        if contexts is None or len(contexts) != len(prompts):
            raise ValueError("ExpertPolicy needs one context (with expert_action) per prompt")
        return [_as_generation(ctx.get("expert_action") or "") for ctx in contexts]
