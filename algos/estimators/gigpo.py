"""GiGPO: episode-level group advantages plus step-level advantages over anchor states.

A = A^E + omega * A^S (arXiv 2505.10978, Eq. 8):

- A^E: GRPO's advantage of the row's trajectory (``group_relative.episode_advantages``).
- A^S: inside one task group, rows that share an anchor state form a step group;
  R_t = r_t + gamma * R_{t+1} is the discounted return along the trajectory, and
  A^S = (R_t - mean) / (std + 1e-6) over the step group (R_t - mean without std).
  A step group of one row gets A^S = 0.

``invalid_penalty="row"`` places the invalid-action penalty as verl-agent does: the
returns are discounted without it and each row's own penalty is subtracted afterwards,
from its episode score and its R_t alike (``episode_row_advantages``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
from rapidfuzz.distance import Indel

from gigpo_gym.algos.estimators import compiled
from gigpo_gym.algos.estimators.batch import StepBatch, hex_digest_codes
from gigpo_gym.algos.estimators.group_relative import episode_row_advantages, row_penalties
from gigpo_gym.algos.estimators.kernels import Trajectories, factorize, factorize_uint64, group_normalize, reverse_scan, trajectories
from gigpo_gym.algos.estimators.registry import AdvantageParts, Algorithm, register_algorithm

SIMILARITY_METRICS: dict[str, Callable[[str, str], float]] = {
    # 2 * LCS / (|a| + |b|) (= rapidfuzz fuzz.ratio / 100), in C.
    "indel": Indel.normalized_similarity,
    # The reference's ratio: 2 * M / (|a| + |b|), M from greedy longest matching blocks
    # (with autojunk), so never above "indel"; quadratic and pure Python.
    "difflib": lambda a, b: difflib.SequenceMatcher(None, a, b).ratio(),
}


def anchor_keys(batch: StepBatch) -> np.ndarray | None:
    """The anchors as uint64 when they are integers or 16-hex-digit digests (one to one), else None."""
    return batch.anchors if batch.anchors.dtype == np.uint64 else hex_digest_codes(batch.arrow("anchors"))


def exact_step_groups(batch: StepBatch, traj: Trajectories) -> tuple[np.ndarray, int]:
    """Step-group codes: rows sharing (task group, anchor).

    Integer anchors, and str anchors that are all 16-hex-digit digests (read as
    uint64, one to one), go through the integer hash table; other str anchors through
    Arrow's string hashing.  Anchors are usually scoped to one task already; then the
    anchor's code is the step group and no second hashing pass is needed.
    """
    keys = anchor_keys(batch)
    anchor_code, n_anchors = factorize(batch.arrow("anchors")) if keys is None else factorize_uint64(keys)
    row_group = traj.row_group
    owner = np.empty(n_anchors, dtype=np.int64)
    owner[anchor_code] = row_group
    if np.array_equal(owner[anchor_code], row_group):
        return anchor_code, n_anchors
    return factorize_uint64((row_group * n_anchors + anchor_code).astype(np.uint64))


def similarity_step_groups(batch: StepBatch, traj: Trajectories, threshold: float, metric: str = "indel") -> tuple[np.ndarray, int]:
    """Step-group codes by text similarity of ``anchor_texts`` inside each task group.

    Greedy first-fit, as in the reference: visiting a group's texts in (traj_id,
    step_id) order, a text joins the first cluster whose first text has similarity
    >= ``threshold``, else starts a cluster.  Equal texts always share a cluster, so
    only distinct texts are compared (a loop over distinct texts, not rows).
    """
    if batch.anchor_texts is None:
        raise ValueError("similarity grouping needs StepBatch.anchor_texts (the raw observation text of each step)")
    similarity = SIMILARITY_METRICS[metric]
    text_code, n_texts = factorize(batch.arrow("anchor_texts"))
    key = traj.row_group * max(n_texts, 1) + text_code
    canonical = np.lexsort((batch.step_ids, batch.traj_ids, traj.row_group))
    keys, first = np.unique(key[canonical], return_index=True)
    first_rows = canonical[np.sort(first)]  # one row per distinct (group, text), in visiting order
    cluster_of_row = np.empty(len(first_rows), dtype=np.int64)
    n_clusters, current_group = 0, None
    representatives: list[tuple[str, int]] = []
    for i, row in enumerate(first_rows.tolist()):
        group, text = traj.row_group[row], batch.anchor_texts[row]
        if group != current_group:
            current_group, representatives = group, []
        for rep_text, rep_cluster in representatives:
            if similarity(text, rep_text) >= threshold:
                cluster_of_row[i] = rep_cluster
                break
        else:
            representatives.append((text, n_clusters))
            cluster_of_row[i] = n_clusters
            n_clusters += 1
    cluster_of_key = np.empty(len(keys), dtype=np.int64)
    cluster_of_key[np.searchsorted(keys, key[first_rows])] = cluster_of_row
    return cluster_of_key[np.searchsorted(keys, key)], n_clusters


def gigpo_advantages(
    batch: StepBatch,
    traj: Trajectories,
    step_groups: np.ndarray,
    n_step_groups: int,
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    norm_by_std: bool = True,
    episode_stats: str = "trajectory",
    invalid_penalty: str = "reward",
) -> np.ndarray:
    """A = A^E + omega * A^S for every row (see the module docstring for the terms)."""
    if omega == 0.0:
        return episode_row_advantages(batch, traj, norm_by_std, episode_stats, invalid_penalty)
    return gigpo_parts(batch, traj, step_groups, n_step_groups, gamma=gamma, omega=omega, norm_by_std=norm_by_std,
                       episode_stats=episode_stats, invalid_penalty=invalid_penalty).advantages


def gigpo_parts(
    batch: StepBatch,
    traj: Trajectories,
    step_groups: np.ndarray,
    n_step_groups: int,
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    norm_by_std: bool = True,
    episode_stats: str = "trajectory",
    invalid_penalty: str = "reward",
) -> AdvantageParts:
    """``gigpo_advantages`` with its parts: A^E, A^S (computed at omega 0 too), R_t and the step groups."""
    episode = episode_row_advantages(batch, traj, norm_by_std, episode_stats, invalid_penalty)
    if invalid_penalty == "row":
        penalties = row_penalties(batch)
        step_returns = reverse_scan(batch.rewards + penalties, traj, gamma) - penalties
    else:
        step_returns = reverse_scan(batch.rewards, traj, gamma)
    step = group_normalize(step_returns, step_groups, n_step_groups, norm_by_std)
    return AdvantageParts(episode if omega == 0.0 else episode + omega * step, episode, step, step_returns,
                          step_groups, n_step_groups)


@register_algorithm("gigpo")
@dataclass
class GiGPO(Algorithm):
    """Group-in-Group Policy Optimization (episode + anchor-state step advantages)."""

    gamma: float = 0.95
    """Discount of the step-level return R_t = r_t + gamma * R_{t+1}."""
    omega: float = 1.0
    """Weight of the step-level advantage (0 gives GRPO)."""
    norm_by_std: bool = True
    """Divide by the std at both levels ("w/ std"); False is "w/o std"."""
    grouping: Literal["exact", "similarity"] = "exact"
    """Step groups by equal anchor key, or by similar ``anchor_texts`` (search QA)."""
    similarity_threshold: float = 0.9
    """Similarity at or above which a text joins a cluster (grouping="similarity")."""
    similarity_metric: Literal["indel", "difflib"] = "indel"
    """"indel" = rapidfuzz fuzz.ratio / 100 (fast); "difflib" = the reference's ratio."""
    episode_stats: Literal["trajectory", "step"] = "trajectory"
    """Episode mean/std over trajectories (the paper) or over rows (the reference code)."""
    invalid_penalty: Literal["reward", "row"] = "reward"
    """Invalid-action penalty inside the rewards before discounting, or on its own row after (the reference code)."""
    backend: Literal["auto", "numpy", "numba"] = "auto"
    """Exact grouping through the compiled loops of ``[fast]`` (numba) when installed ("auto"), or never."""

    def validate(self) -> None:
        super().validate()
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gigpo: gamma must be in [0, 1], got {self.gamma}")
        if self.omega < 0.0:
            raise ValueError(f"gigpo: omega must be >= 0, got {self.omega}")
        if not 0.0 < self.similarity_threshold <= 1.0:
            raise ValueError(f"gigpo: similarity_threshold must be in (0, 1], got {self.similarity_threshold}")
        if self.backend == "numba" and not compiled.AVAILABLE:
            from gigpo_gym.core.extras import install_command

            raise ValueError(f'gigpo: backend="numba" needs numba: {install_command("fast")} (or use backend="auto")')

    def step_groups(self, batch: StepBatch, traj: Trajectories | None = None) -> tuple[np.ndarray, int]:
        """Step-group code of every row and the number of step groups."""
        traj = traj or trajectories(batch)
        if self.grouping == "similarity":
            return similarity_step_groups(batch, traj, self.similarity_threshold, self.similarity_metric)
        return exact_step_groups(batch, traj)

    def advantages(self, batch: StepBatch) -> np.ndarray:
        return self._estimate(batch, with_parts=False).advantages

    def advantage_parts(self, batch: StepBatch) -> AdvantageParts:
        """The advantages with A^E, A^S, R_t and the step groups, each built once."""
        return self._estimate(batch, with_parts=True)

    def _estimate(self, batch: StepBatch, with_parts: bool) -> AdvantageParts:
        fast = self._compiled_parts(batch, with_parts) if self._use_compiled() else None
        if fast is not None:
            return fast
        traj = trajectories(batch)
        codes, n_codes = self.step_groups(batch, traj) if self.omega or with_parts else (None, 0)
        settings = dict(gamma=self.gamma, omega=self.omega, norm_by_std=self.norm_by_std,
                        episode_stats=self.episode_stats, invalid_penalty=self.invalid_penalty)
        if with_parts:
            return gigpo_parts(batch, traj, codes, n_codes, **settings)
        return AdvantageParts(gigpo_advantages(batch, traj, codes, n_codes, **settings))

    def _use_compiled(self) -> bool:
        return self.backend != "numpy" and self.grouping == "exact" and compiled.AVAILABLE

    def _compiled_parts(self, batch: StepBatch, with_parts: bool) -> AdvantageParts | None:
        """``_estimate`` through ``compiled`` (equal to rounding), or None to use numpy."""
        keys = anchor_keys(batch)
        if keys is None:
            keys = factorize(batch.arrow("anchors"))[0].astype(np.uint64)
        return compiled.gigpo_parts(
            batch, keys, gamma=self.gamma, omega=self.omega, norm_by_std=self.norm_by_std,
            episode_stats=self.episode_stats,
            penalties=row_penalties(batch) if self.invalid_penalty == "row" else None, with_parts=with_parts,
        )  # fmt: skip

    def diagnostics(self, batch: StepBatch, parts: AdvantageParts | None = None) -> dict[str, float]:
        """Adds the step-group size distribution (the paper's Fig. 4 statistic), from ``parts``' step groups
        when given (else they are built here)."""
        out = super().diagnostics(batch, parts)
        if len(batch) == 0:
            return out
        if parts is not None and parts.step_groups is not None:
            codes, n_codes = parts.step_groups, parts.n_step_groups
        else:
            codes, n_codes = self.step_groups(batch)
        sizes = np.bincount(codes, minlength=n_codes)
        out.update({
            "adv/step_groups": float(n_codes),
            "adv/step_group_size_mean": float(sizes.mean()),
            "adv/step_group_size_max": float(sizes.max()),
            "adv/step_group_singleton_share": float(np.mean(sizes == 1)),
            "adv/rows_in_shared_step_group": float(np.mean(sizes[codes] > 1)),
        })  # fmt: skip
        return out
