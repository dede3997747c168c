"""Advantage estimators: hand-computed cases, a naive per-row reference, invariances."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from difflib import SequenceMatcher

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_gym.algos import StepBatch, get_algorithm
from gigpo_gym.algos.estimators.batch import hex_digest_codes
from gigpo_gym.algos.estimators import reverse_scan, trajectories
from gigpo_gym.algos.estimators.kernels import factorize_uint64
from gigpo_gym.core.anchor import digest

EPS = 1e-6


def rows_of(*trajectories, group_of=None):
    """Rows from ``(traj_id, group_id, [(reward, anchor), ...])`` triples, step ids 0..L-1."""
    out = []
    for traj_id, group_id, steps in trajectories:
        for step, (reward, anchor) in enumerate(steps):
            out.append(dict(group_id=group_id, traj_id=traj_id, step_id=step, reward=reward, anchor=anchor, anchor_text=anchor))
    return out


def batch_of(*trajectories):
    return StepBatch.from_rows(rows_of(*trajectories))


# -- hand-computed cases ------------------------------------------------------------------

def test_grpo_hand_case_with_and_without_std():
    # group 0: returns 1 (two rows), 0, 0 -> mean 1/3, unbiased std sqrt(1/3); group 1: one trajectory.
    batch = batch_of((10, 0, [(0.0, "a"), (1.0, "b")]), (11, 0, [(0.0, "a")]), (12, 0, [(0.5, "a"), (-0.5, "c")]), (20, 1, [(3.0, "z")]))
    std = math.sqrt(1 / 3)
    hi, lo = (2 / 3) / (std + EPS), (-1 / 3) / (std + EPS)
    np.testing.assert_allclose(get_algorithm("grpo").advantages(batch), [hi, hi, lo, lo, lo, 0.0], rtol=1e-12)
    np.testing.assert_allclose(get_algorithm("grpo", norm_by_std=False).advantages(batch), [2 / 3, 2 / 3, -1 / 3, -1 / 3, -1 / 3, 0.0], rtol=1e-12)


def test_all_equal_returns_and_singleton_groups_give_exact_zeros():
    # 0.1 * 3 is not exactly representable: a naive mean leaves a residue that / 1e-6 would show.
    batch = batch_of((0, 0, [(0.1, "a"), (0.1, "b"), (0.1, "c")]), (1, 0, [(0.1, "a"), (0.2, "b")]), (2, 7, [(5.0, "q")]))
    for name in ("grpo", "rloo", "dapo"):
        out = get_algorithm(name).advantages(batch)
        assert np.all(out == 0.0), name
    gigpo = get_algorithm("gigpo", gamma=1.0).advantages(batch)
    assert np.all(np.isfinite(gigpo))
    # step group "a" (R = 0.3 and 0.3) and the singletons "c", "q" are exactly 0; "b" has 0.2 vs 0.2 too.
    assert np.all(gigpo == 0.0)


def test_gigpo_hand_case():
    # gamma 0.5, omega 0.5, with std.  Group 0: tau0 rewards (0, 0, 1) anchors (s, t, u);
    # tau1 rewards (0, 0) anchors (s, t); tau2 (0, 1) anchors (s, u).  Group 1 reuses anchor "s".
    batch = batch_of(
        (0, 0, [(0.0, "s"), (0.0, "t"), (1.0, "u")]),
        (1, 0, [(0.0, "s"), (0.0, "t")]),
        (2, 0, [(0.0, "s"), (1.0, "u")]),
        (3, 1, [(0.0, "s"), (2.0, "v")]),
        (4, 1, [(0.0, "s")]),
    )
    out = get_algorithm("gigpo", gamma=0.5, omega=0.5).advantages(batch)
    norm = lambda x, xs: (x - statistics.mean(xs)) / (statistics.stdev(xs) + EPS)  # noqa: E731
    ep0 = {0: norm(1, [1, 0, 1]), 1: norm(0, [1, 0, 1]), 2: norm(1, [1, 0, 1])}
    ep1 = {3: norm(2, [2, 0]), 4: norm(0, [2, 0])}
    # discounted returns: tau0 (0.25, 0.5, 1), tau1 (0, 0), tau2 (0.5, 1), tau3 (1, 2), tau4 (0)
    s0 = [0.25, 0.0, 0.5]
    t0 = [0.5, 0.0]
    u0 = [1.0, 1.0]
    s1 = [1.0, 0.0]
    expected = [
        ep0[0] + 0.5 * norm(0.25, s0), ep0[0] + 0.5 * norm(0.5, t0), ep0[0] + 0.5 * 0.0,
        ep0[1] + 0.5 * norm(0.0, s0), ep0[1] + 0.5 * norm(0.0, t0),
        ep0[2] + 0.5 * norm(0.5, s0), ep0[2] + 0.5 * 0.0,
        ep1[3] + 0.5 * norm(1.0, s1), ep1[3] + 0.0,  # "v" is a singleton step group
        ep1[4] + 0.5 * norm(0.0, s1),
    ]  # fmt: skip
    assert u0[0] == u0[1]
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    np.testing.assert_allclose(get_algorithm("gigpo", omega=0.0).advantages(batch), get_algorithm("grpo").advantages(batch))


def test_gigpo_episode_stats_step_weights_rows():
    # returns 1 (3 rows) and 0 (1 row): over rows the values are 1, 1, 1, 0.
    batch = batch_of((0, 0, [(0.0, "a"), (0.0, "b"), (1.0, "c")]), (1, 0, [(0.0, "d")]))
    out = get_algorithm("gigpo", episode_stats="step", omega=0.0).advantages(batch)
    values = [1, 1, 1, 0]
    expected = [(v - 0.75) / (statistics.stdev(values) + EPS) for v in values]
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_rloo_hand_case():
    batch = batch_of((0, 0, [(3.0, "a")]), (1, 0, [(0.5, "a"), (0.5, "b")]), (2, 0, [(2.0, "a")]), (3, 1, [(9.0, "a")]))
    np.testing.assert_allclose(get_algorithm("rloo").advantages(batch), [1.5, -1.5, -1.5, 0.0, 0.0])


def test_reinforce_pp_hand_case():
    # gamma 0.5: returns (0.5, 1) and (0); batch mean 0.5, unbiased std 0.5.
    batch = batch_of((0, 0, [(0.0, "a"), (1.0, "b")]), (1, 0, [(0.0, "a")]))
    out = get_algorithm("reinforce_pp", gamma=0.5).advantages(batch)
    np.testing.assert_allclose(out, [0.0, 0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)], rtol=1e-12)


def test_ppo_gae_hand_case():
    rows = rows_of((0, 0, [(1.0, "a"), (2.0, "b")]), (1, 0, [(4.0, "a")]))
    for row, value in zip(rows, [0.5, 1.0, 3.0]):
        row["value"] = value
    batch = StepBatch.from_rows(rows)
    ppo = get_algorithm("ppo", gamma=0.9, lam=0.8, normalize_advantages=False)
    # delta_1 = 2 - 1 = 1; delta_0 = 1 + 0.9 * 1 - 0.5 = 1.4; A_0 = 1.4 + 0.72 * 1 = 2.12; lone step: 4 - 3.
    np.testing.assert_allclose(ppo.advantages(batch), [2.12, 1.0, 1.0], rtol=1e-12)
    np.testing.assert_allclose(ppo.value_targets(batch), [2.62, 2.0, 4.0], rtol=1e-12)
    # gamma = lam = 1: the target is the return-to-go.
    np.testing.assert_allclose(get_algorithm("ppo").value_targets(batch), [3.0, 2.0, 4.0])
    whitened = get_algorithm("ppo", gamma=0.9, lam=0.8).advantages(batch)
    assert abs(whitened.mean()) < 1e-12 and whitened.std(ddof=1) == pytest.approx(1.0, rel=1e-5)


def test_ppo_needs_values():
    with pytest.raises(ValueError, match=r"ppo needs critic values: fill StepBatch.values"):
        get_algorithm("ppo").advantages(batch_of((0, 0, [(1.0, "a")])))
    assert get_algorithm("ppo").needs_critic and not get_algorithm("gigpo").needs_critic


def test_dapo_masks_zero_variance_groups_and_clips_higher():
    batch = batch_of(
        (0, 0, [(1.0, "a")]), (1, 0, [(0.0, "a")]),  # varied: kept
        (2, 1, [(1.0, "a"), (0.0, "b")]), (3, 1, [(1.0, "a")]),  # all returns 1: dropped
        (4, 2, [(0.0, "a")]),  # a single trajectory: dropped
    )  # fmt: skip
    dapo = get_algorithm("dapo")
    assert dapo.row_mask(batch).tolist() == [True, True, False, False, False, False]
    assert (dapo.clip_low, dapo.clip_high) == (0.2, 0.28)
    np.testing.assert_array_equal(dapo.advantages(batch), get_algorithm("grpo").advantages(batch))
    assert get_algorithm("grpo").row_mask(batch).all()
    assert dapo.diagnostics(batch)["adv/groups_all_equal_share"] == pytest.approx(2 / 3)


def test_steps_ordered_by_step_id_with_gaps():
    # Steps 0, 5, 9: R_t follows the order, not the numeric distance.
    batch = StepBatch(group_ids=[0, 0, 0, 0], traj_ids=[1, 1, 1, 2], step_ids=[9, 0, 5, 0], rewards=[1.0, 0.0, 0.0, 0.0], anchors=["c", "a", "b", "a"])
    out = get_algorithm("gigpo", gamma=0.5, norm_by_std=False, omega=1.0).advantages(batch)
    # R(tau1) = (0.25, 0.5, 1) for steps (0, 5, 9); step group "a": 0.25 vs 0 -> +-0.125; episode +-0.5.
    np.testing.assert_allclose(out, [0.5, 0.5 + 0.125, 0.5, -0.5 - 0.125])


# -- similarity grouping -----------------------------------------------------------------

def test_similarity_grouping_is_greedy_first_fit_on_the_first_text():
    # aaaaaaaaab ~ aaaaaaaaaa (0.9) and aaaaaaaabb ~ aaaaaaaaab (0.9) but not ~ aaaaaaaaaa (0.8) at 0.85.
    texts = ["aaaaaaaaaa", "aaaaaaaaab", "aaaaaaaabb"]
    batch = StepBatch(group_ids=[0, 0, 0], traj_ids=[0, 1, 2], step_ids=[0, 0, 0], rewards=[1.0, 0.0, 0.0], anchors=["x", "y", "z"], anchor_texts=texts)
    algo = get_algorithm("gigpo", grouping="similarity", similarity_threshold=0.85)
    codes, n = algo.step_groups(batch)
    assert n == 2 and codes[0] == codes[1] != codes[2]
    # visiting order is (traj_id, step_id): renumbering the trajectories changes the first fit
    flipped = StepBatch(group_ids=[0, 0, 0], traj_ids=[2, 1, 0], step_ids=[0, 0, 0], rewards=[1.0, 0.0, 0.0], anchors=["x", "y", "z"], anchor_texts=texts)
    codes, n = algo.step_groups(flipped)
    assert n == 2 and codes[2] == codes[1] != codes[0]


def test_similarity_threshold_one_equals_exact_grouping_and_needs_texts():
    batch = batch_of((0, 0, [(0.0, "s"), (1.0, "t")]), (1, 0, [(0.0, "s"), (0.0, "u")]), (2, 1, [(0.0, "s")]), (3, 1, [(1.0, "s")]))
    exact = get_algorithm("gigpo").advantages(batch)
    similar = get_algorithm("gigpo", grouping="similarity", similarity_threshold=1.0).advantages(batch)
    np.testing.assert_allclose(similar, exact, rtol=1e-12)
    no_texts = StepBatch(group_ids=[0], traj_ids=[0], step_ids=[0], rewards=[0.0], anchors=["s"])
    with pytest.raises(ValueError, match="similarity grouping needs StepBatch.anchor_texts"):
        get_algorithm("gigpo", grouping="similarity").advantages(no_texts)


def test_indel_similarity_can_group_where_difflib_does_not():
    # difflib's greedy matching blocks find 4 matches either way round; the longest common subsequence has 7.
    a, b = "abbaabab", "abababab"
    assert SequenceMatcher(None, a, b).ratio() == SequenceMatcher(None, b, a).ratio() == 8 / 16
    batch = StepBatch(group_ids=[0, 0], traj_ids=[0, 1], step_ids=[0, 0], rewards=[1.0, 0.0], anchors=["p", "q"], anchor_texts=[a, b])
    indel = get_algorithm("gigpo", grouping="similarity", similarity_threshold=0.7)
    difflib_algo = get_algorithm("gigpo", grouping="similarity", similarity_threshold=0.7, similarity_metric="difflib")
    assert indel.step_groups(batch)[1] == 1 and difflib_algo.step_groups(batch)[1] == 2


# -- naive per-row reference on random batches ---------------------------------------------

def naive_normalize(x, xs, norm):
    if len(xs) < 2:
        return 0.0
    dev = x - statistics.mean(xs)
    return dev / (statistics.stdev(xs) + EPS) if norm else dev


def naive_returns(rows, gamma):
    by_traj = defaultdict(list)
    for i, row in enumerate(rows):
        by_traj[row["traj_id"]].append(i)
    out = [0.0] * len(rows)
    for idx in by_traj.values():
        running = 0.0
        for i in sorted(idx, key=lambda i: rows[i]["step_id"], reverse=True):
            running = rows[i]["reward"] + gamma * running
            out[i] = running
    return out


def naive_gigpo(rows, gamma, omega, norm, per_step=False):
    ret = defaultdict(float)
    members = defaultdict(list)
    for row in rows:
        ret[row["traj_id"]] += row["reward"]
        members[row["group_id"]].append(row["traj_id"])
    episode = {}
    for trajs in members.values():
        unique = sorted(set(trajs))
        values = [ret[t] for t in (trajs if per_step else unique)]
        for t in unique:
            episode[t] = naive_normalize(ret[t], values, norm) if len(unique) > 1 else 0.0
    step_returns = naive_returns(rows, gamma)
    step_groups = defaultdict(list)
    for i, row in enumerate(rows):
        step_groups[row["group_id"], row["anchor"]].append(step_returns[i])
    return [episode[r["traj_id"]] + omega * naive_normalize(step_returns[i], step_groups[r["group_id"], r["anchor"]], norm) for i, r in enumerate(rows)]


def naive_rloo(rows):
    ret, members = defaultdict(float), defaultdict(set)
    for row in rows:
        ret[row["traj_id"]] += row["reward"]
        members[row["group_id"]].add(row["traj_id"])
    out = []
    for row in rows:
        others = [ret[t] for t in members[row["group_id"]] if t != row["traj_id"]]
        out.append(ret[row["traj_id"]] - statistics.mean(others) if others else 0.0)
    return out


def naive_gae(rows, gamma, lam):
    by_traj = defaultdict(list)
    for i, row in enumerate(rows):
        by_traj[row["traj_id"]].append(i)
    adv = [0.0] * len(rows)
    for idx in by_traj.values():
        idx = sorted(idx, key=lambda i: rows[i]["step_id"])
        running, next_value = 0.0, 0.0
        for i in reversed(idx):
            delta = rows[i]["reward"] + gamma * next_value - rows[i]["value"]
            running = delta + gamma * lam * running
            adv[i], next_value = running, rows[i]["value"]
    return adv


# Neighbours in this list are 0.9-similar, the others less: first-fit order matters.
CHAIN_TEXTS = ["aaaaaaaaaa", "aaaaaaaaab", "aaaaaaaabb", "aaaaaaabbb", "zzzz"]


def naive_similarity_clusters(rows, threshold):
    """Greedy first-fit over every row in (group, traj, step) order, one row at a time."""
    cluster = [None] * len(rows)
    representatives = defaultdict(list)  # group -> [(text, cluster id)]
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["group_id"], rows[i]["traj_id"], rows[i]["step_id"]))
    for i in order:
        reps = representatives[rows[i]["group_id"]]
        text = rows[i]["anchor_text"]
        match = next((c for rep, c in reps if 2 * lcs(text, rep) / (len(text) + len(rep)) >= threshold), None)
        if match is None:
            match = (rows[i]["group_id"], len(reps))
            reps.append((text, match))
        cluster[i] = match
    return cluster


def lcs(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


@st.composite
def random_rows(draw):
    rows, traj_id = [], draw(st.integers(0, 10**12))
    for group in draw(st.lists(st.integers(-5, 10**9), min_size=1, max_size=4, unique=True)):
        for _ in range(draw(st.integers(1, 4))):
            traj_id += draw(st.integers(1, 1000))
            steps = sorted(draw(st.lists(st.integers(0, 60), min_size=1, max_size=6, unique=True)))
            for step in steps:
                reward = draw(st.sampled_from([0.0, 0.0, 1.0, 10.0, -0.1]) | st.floats(-5, 5, allow_nan=False))
                anchor = draw(st.sampled_from(["s0", "s1", "s2", "shared"]))
                value = draw(st.floats(-2, 2, allow_nan=False))
                text = draw(st.sampled_from(CHAIN_TEXTS))
                row = dict(group_id=group, traj_id=traj_id, step_id=step, reward=reward, anchor=anchor, anchor_text=text, value=value)
                rows.append(row)
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order]


@settings(max_examples=80, deadline=None)
@given(rows=random_rows(), gamma=st.sampled_from([0.0, 0.5, 0.95, 1.0]), norm=st.booleans(), per_step=st.booleans())
def test_gigpo_and_grpo_match_naive_reference(rows, gamma, norm, per_step):
    batch = StepBatch.from_rows(rows)
    stats = "step" if per_step else "trajectory"
    out = get_algorithm("gigpo", gamma=gamma, omega=0.7, norm_by_std=norm, episode_stats=stats).advantages(batch)
    np.testing.assert_allclose(out, naive_gigpo(rows, gamma, 0.7, norm, per_step), rtol=1e-7, atol=1e-6)
    grpo = get_algorithm("grpo", norm_by_std=norm).advantages(batch)
    np.testing.assert_allclose(grpo, naive_gigpo(rows, gamma, 0.0, norm), rtol=1e-7, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(rows=random_rows(), gamma=st.sampled_from([0.5, 1.0]), lam=st.sampled_from([0.0, 0.9, 1.0]))
def test_rloo_ppo_reinforce_pp_match_naive_reference(rows, gamma, lam):
    batch = StepBatch.from_rows(rows)
    np.testing.assert_allclose(get_algorithm("rloo").advantages(batch), naive_rloo(rows), rtol=1e-9, atol=1e-9)
    raw = naive_gae(rows, gamma, lam)
    ppo = get_algorithm("ppo", gamma=gamma, lam=lam, normalize_advantages=False)
    np.testing.assert_allclose(ppo.advantages(batch), raw, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ppo.value_targets(batch), [a + r["value"] for a, r in zip(raw, rows)], rtol=1e-9, atol=1e-9)
    returns = naive_returns(rows, gamma)
    expected = [naive_normalize(g, returns, True) for g in returns]
    np.testing.assert_allclose(get_algorithm("reinforce_pp", gamma=gamma).advantages(batch), expected, rtol=1e-7, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(rows=random_rows())
def test_similarity_grouping_matches_naive_first_fit(rows):
    codes, n = get_algorithm("gigpo", grouping="similarity", similarity_threshold=0.85).step_groups(StepBatch.from_rows(rows))
    naive = naive_similarity_clusters(rows, 0.85)
    pairs = set(zip(codes.tolist(), naive))
    assert len(pairs) == n == len(set(naive))  # the same partition of the rows


@settings(max_examples=40, deadline=None)
@given(rows=random_rows(), seed=st.integers(0, 2**32 - 1))
def test_permuting_rows_permutes_every_output(rows, seed):
    batch = StepBatch.from_rows(rows)
    perm = np.random.default_rng(seed).permutation(len(rows))
    permuted = batch.take(perm)
    for name, cfg in [("grpo", {}), ("gigpo", {}), ("gigpo", {"grouping": "similarity", "similarity_threshold": 0.85}), ("rloo", {}), ("ppo", {"gamma": 0.9}), ("reinforce_pp", {}), ("dapo", {})]:
        algo = get_algorithm(name, **cfg)
        np.testing.assert_allclose(algo.advantages(permuted), algo.advantages(batch)[perm], rtol=1e-9, atol=1e-9, err_msg=name)
        np.testing.assert_array_equal(algo.row_mask(permuted), algo.row_mask(batch)[perm])


def test_empty_batch_gives_empty_advantages():
    batch = StepBatch.from_rows([])
    for name in ("grpo", "gigpo", "rloo", "reinforce_pp", "dapo"):
        out = get_algorithm(name).advantages(batch)
        assert out.shape == (0,) and out.dtype == np.float64


# -- integer anchors: the fast grouping path gives the string path's results exactly --------

GIGPO_CONFIGS = [{}, {"gamma": 1.0, "norm_by_std": False}, {"gamma": 0.0}, {"omega": 0.3, "episode_stats": "step"}]


def with_anchors(batch, anchors):
    fields = {"group_ids": batch.group_ids, "traj_ids": batch.traj_ids, "step_ids": batch.step_ids, "rewards": batch.rewards}
    return StepBatch(**fields, anchors=anchors, anchor_texts=batch.anchor_texts)


def assert_same_gigpo(expected, batch):
    for cfg in GIGPO_CONFIGS:
        algo = get_algorithm("gigpo", **cfg)
        np.testing.assert_array_equal(algo.advantages(batch), algo.advantages(expected), err_msg=str(cfg))
    assert algo.diagnostics(batch) == algo.diagnostics(expected)


def recoded(batch, codes_by_name):
    """The batch with every anchor replaced by its code (a uint64 array, or str digests)."""
    return with_anchors(batch, np.asarray([codes_by_name[a] for a in batch.anchors.tolist()]))


@settings(max_examples=60, deadline=None)
@given(rows=random_rows(), scoped=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_integer_and_digest_anchors_give_exactly_the_string_results(rows, scoped, seed):
    # Unscoped anchors ("s0" in several task groups) take the second (group, anchor)
    # hashing pass, scoped ones ("<group>/s0") do not; both have singleton step groups.
    if scoped:
        rows = [dict(row, anchor=f"{row['group_id']}/{row['anchor']}") for row in rows]
    batch = StepBatch.from_rows(rows)  # arbitrary str: Arrow's string hashing
    names = sorted(set(batch.anchors.tolist()))
    odd = np.uint64(2 * np.random.default_rng(seed).integers(0, 2**62) + 1)
    scattered = np.arange(1, len(names) + 1, dtype=np.uint64) * odd  # distinct (odd * i is one-to-one mod 2**64)
    digests = [digest(name) for name in names]
    for codes in (scattered, np.arange(len(names), dtype=np.uint64), -np.arange(len(names)), digests, hex_digest_codes(digests)):
        assert_same_gigpo(batch, recoded(batch, dict(zip(names, codes))))


def test_integer_anchors_match_on_a_large_shuffled_batch():
    # ~7000 rows: several hashing rounds and the second (group, anchor) pass; lone trajectories, step gaps,
    # anchors shared across task groups, and the reference grouping done with a dict.
    rng = np.random.default_rng(7)
    rows, traj_id = [], 0
    for group in range(150):
        for _ in range(rng.integers(1, 6)):
            traj_id += 1
            for step in np.flatnonzero(rng.random(rng.integers(1, 40)) < 0.8).tolist():
                reward = float(rng.choice([0.0, 0.0, 1.0, -0.1, 10.0]))
                anchor = f"shared{rng.integers(3)}" if rng.random() < 0.1 else f"{group}/{step}/{rng.integers(3)}"
                rows.append({"group_id": group, "traj_id": traj_id, "step_id": step, "reward": reward, "anchor": anchor})
    rows = [rows[i] for i in rng.permutation(len(rows))]
    batch = StepBatch.from_rows(rows)
    names = sorted(set(batch.anchors.tolist()))
    digests = dict(zip(names, (digest(name) for name in names)))
    as_ints = recoded(batch, dict(zip(names, hex_digest_codes(list(digests.values())))))
    for other in (as_ints, recoded(batch, digests)):
        assert_same_gigpo(batch, other)
        codes, n = get_algorithm("gigpo").step_groups(other)
        expected = defaultdict(set)
        for code, row in zip(codes.tolist(), rows):
            expected[row["group_id"], row["anchor"]].add(code)
        assert n == len(expected) and all(len(c) == 1 for c in expected.values()) and len(set.union(*expected.values())) == n


@pytest.mark.parametrize(
    "keys",
    [
        [],
        [5],
        [7] * 100,
        list(range(5000)),
        [i << 44 for i in range(3000)] * 2,  # differ only in high bits
        [(1 << 63) | i for i in range(100)] + list(range(100)),
        np.random.default_rng(0).integers(0, 50, 4000).tolist(),
    ],
)
def test_factorize_uint64_partitions_like_unique(keys):
    keys = np.asarray(keys, dtype=np.uint64)
    codes, n = factorize_uint64(keys)
    unique, inverse = np.unique(keys, return_inverse=True)
    assert n == len(unique) and codes.shape == keys.shape
    assert len(set(zip(codes.tolist(), inverse.tolist()))) == n and (n == 0 or codes.max() == n - 1)


def test_hex_digest_codes_read_digests_and_refuse_anything_else():
    digests = [digest(i) for i in range(5)]
    assert hex_digest_codes(digests).tolist() == [int(d, 16) for d in digests]
    assert hex_digest_codes(np.asarray(digests, dtype=object)).dtype == np.uint64
    for bad in ([], [digests[0], "x"], [digests[0].upper()], [digests[0] + "0"], [digests[0][:15] + "g"], [digests[0][:15] + "é"], [digests[0], None], [3]):
        assert hex_digest_codes(bad) is None, bad


def test_integer_anchor_batches_are_uint64_and_read_only():
    batch = StepBatch(group_ids=[0, 0, 1], traj_ids=[1, 2, 3], step_ids=[0, 0, 0], rewards=[1.0, 0.0, 0.0], anchors=np.array([-1, 5, 5]))
    assert batch.anchors.dtype == np.uint64 and batch.anchors.tolist() == [2**64 - 1, 5, 5] and not batch.anchors.flags.writeable
    assert batch.take([2, 1]).anchors.tolist() == [5, 5]
    with pytest.raises(ValueError, match=r"StepBatch.anchors does not hold str"):
        batch.arrow("anchors")
    assert get_algorithm("gigpo").step_groups(batch)[1] == 3  # anchor 5 in two task groups: two step groups
    batch.anchors = ["a", "a", "b"]  # back to str, then to ints again: each path sees its own anchors
    assert get_algorithm("gigpo").step_groups(batch)[1] == 2 and batch.arrow("anchors").to_pylist() == ["a", "a", "b"]
    batch.anchors = np.array([4, 4, 4], dtype=np.uint8)
    assert get_algorithm("gigpo").step_groups(batch)[1] == 2
    with pytest.raises(ValueError, match=r"StepBatch.anchors does not hold str"):
        batch.arrow("anchors")


def test_step_order_needs_an_ordered_index():
    batch = batch_of((0, 0, [(1.0, "a"), (2.0, "b")]))
    with pytest.raises(ValueError, match=r"step order needs trajectories\(batch, ordered=True\)"):
        reverse_scan(batch.rewards, trajectories(batch, ordered=False), 0.5)
