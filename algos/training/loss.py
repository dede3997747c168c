"""The policy loss every algorithm shares: PPO clipped surrogate + KL + entropy.

All terms are token-means over the mini-batch: each token counts once, whatever the
length of its response.  ``token_count`` is the mini-batch's total, so micro-batches
summed with gradient accumulation give exactly the mini-batch loss.

- surrogate: ``max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``, ``r = exp(logp - old)``;
- KL to the reference policy, the low-variance "k3" estimator
  ``exp(ref - logp) - (ref - logp) - 1`` (>= 0, unbiased for KL(pi || ref); each token's
  value capped at ``kl_max`` where set), or, over
  a choice among a few options (``optim.loss_over: choices``), the exact KL (``choice_kl``);
- entropy bonus: ``- entropy_coef * H``;
- critic (PPO): ``value_coef * 0.5 (V - target)^2``, mean over rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossWeights:
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.01
    entropy_coef: float = 0.001
    value_coef: float = 0.5
    kl_max: float | None = None


def k3_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, max_value: float | None = None) -> torch.Tensor:
    """Per-token low-variance KL estimate (clamped log-ratio for numerical safety).

    ``max_value`` caps each token's estimate (verl's ``low_var_kl`` caps it at 10): a
    token the policy has made far less likely than the reference then adds no gradient,
    where uncapped its ``exp(ref - logp)`` alone can swamp a mini-batch's update.
    """
    delta = (ref_log_probs - log_probs).clamp(-20.0, 20.0)
    kl = delta.exp() - delta - 1.0
    return kl if max_value is None else kl.clamp(max=max_value)


def choice_kl(option_log_probs: torch.Tensor, ref_option_log_probs: torch.Tensor) -> torch.Tensor:
    """Exact KL(pi || ref) of each row's distribution over its options, as ``[rows, 1]``.

    Both are ``[rows, options]`` log-probs; a row's options past its own count are -inf
    in ``option_log_probs`` and ignored (whatever ``ref_option_log_probs`` holds there).
    """
    valid = torch.isfinite(option_log_probs)
    logp = option_log_probs.masked_fill(~valid, 0.0)  # no inf anywhere, so no NaN in the backward pass
    ref = ref_option_log_probs.to(logp.dtype).masked_fill(~valid, 0.0)
    return (logp.exp() * (logp - ref)).masked_fill(~valid, 0.0).sum(-1, keepdim=True)


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    token_count: float,
    weights: LossWeights,
    *,
    ref_log_probs: torch.Tensor | None = None,
    kl: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss of one micro-batch (``[rows, tokens]`` tensors, ``advantages`` per row) and its stats.

    The KL term is ``kl`` where the caller knows it exactly, else k3 from ``ref_log_probs``.
    The stats are detached 0-d tensors on the loss's device: reading them is left to the
    caller, once per update, so a GPU's queue never waits on the host per micro-batch.
    """
    adv = advantages[:, None].to(log_probs.dtype)
    log_ratio = (log_probs - old_log_probs) * mask
    ratio = log_ratio.exp()
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - weights.clip_low, 1.0 + weights.clip_high)
    surrogate = torch.maximum(unclipped, clipped)
    loss = (surrogate * mask).sum() / token_count
    stats = {
        "pg_loss": loss.detach(),
        "clip_fraction": ((clipped > unclipped).float() * mask).sum().detach() / token_count,
        "approx_kl_old": (0.5 * log_ratio.detach() ** 2 * mask).sum() / token_count,
    }
    if kl is None and ref_log_probs is not None:
        kl = k3_kl(log_probs, ref_log_probs, weights.kl_max)
    if kl is not None and weights.kl_coef:
        kl = (kl * mask).sum() / token_count
        loss = loss + weights.kl_coef * kl
        stats["kl_ref"] = kl.detach()
    if entropy is not None:
        ent = (entropy * mask).sum() / token_count
        loss = loss - weights.entropy_coef * ent
        stats["entropy"] = ent.detach()
    return loss, stats


def value_loss(values: torch.Tensor, targets: torch.Tensor, row_count: float, weights: LossWeights) -> torch.Tensor:
    """Critic regression term of one micro-batch (mean over the mini-batch's rows)."""
    return weights.value_coef * 0.5 * ((values - targets.to(values.dtype)) ** 2).sum() / row_count
