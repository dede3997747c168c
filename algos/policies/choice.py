"""Answers drawn from a closed set for ``HFPolicy`` (``choose_admissible``): one of each row's admissible actions.

Every candidate is scored as the full answer the model would write (``<action>cmd</action>``
and eos), each row's candidates packed after its prompt as one prefix tree, so a prefix
that several candidates share is computed once and no candidate copies the prompt.
``choose`` samples among them by those likelihoods; ``choice_scores`` is the same score
with gradients, the log-prob of the chosen candidate among the row's, as the loss reads it.
"""

from __future__ import annotations

from typing import Any

import torch

from gigpo_gym.algos.policies.base import ChoiceBatch, Generation, SamplingParams, TokenScores
from gigpo_gym.algos.policies.decode import passes


def choose(policy: Any, prompt_ids: list[list[int]], options: list[list[str]], sampling: SamplingParams,
           gen: torch.Generator, tokens_per_pass: int = 6144) -> list[Generation]:
    """Pick one admissible action per row: softmax over the candidates' summed log-probs.

    Each candidate is scored as the full answer ``<action>cmd</action>`` + eos, so the
    choice is what the model would most likely have written among valid answers
    (constrained decoding over a closed set).  The Generation carries the model's
    token log-probs of the chosen answer, which is what ``log_probs`` recomputes in
    the update; raising them raises the answer's share among the candidates.

    Rows with the same prompt and candidates (copies of a task in the same state)
    are scored once; the rest run in passes of similar prompt length, so little of
    a pass is padding.  Sampling then draws per row, in row order.
    """
    encoded = {cmd: policy.encode_answer(cmd) for cmd in {c for cmds in options for c in (cmds or [""])}}
    choices = [list(cmds) or [""] for cmds in options]
    unique: dict[tuple, int] = {}
    row_key = [unique.setdefault((tuple(p), tuple(c)), len(unique)) for p, c in zip(prompt_ids, choices)]
    keys = list(unique)
    by_length = sorted(range(len(keys)), key=lambda k: len(keys[k][0]))
    scored: list[list[list[float]]] = [[] for _ in keys]
    sizes = [len(prompt) + sum(len(encoded[c]) for c in cmds) for prompt, cmds in keys]
    for part in passes(by_length, sizes, tokens_per_pass):
        logps = score_answers(policy, [list(keys[k][0]) for k in part],
                              [[encoded[c] for c in keys[k][1]] for k in part])
        for k, row in zip(part, logps):
            scored[k] = row
    out = []
    for i, cmds in enumerate(choices):
        logps = scored[row_key[i]]
        totals = torch.tensor([sum(lp) for lp in logps], dtype=torch.float64)
        if sampling.temperature == 0:
            pick = int(totals.argmax())
        else:
            totals = totals / sampling.temperature
            probs = torch.softmax(totals, dim=0).float().to(policy.device)
            pick = int(torch.multinomial(probs, 1, generator=gen))
        cmd = cmds[pick]
        out.append(Generation(f"<action>{cmd}</action>", list(prompt_ids[i]), list(encoded[cmd]), logps[pick], True,
                              [encoded[c] for c in cmds], torch.log_softmax(totals, dim=0).tolist(), pick))
    return out


@torch.no_grad()
def score_answers(policy: Any, prompt_ids: list[list[int]], answers: list[list[list[int]]]) -> list[list[list[float]]]:
    """Token log-probs of each row's candidate answers, in two forward passes.

    The prompts run once (left-padded, KV cached).  Then each row's candidates run
    on top of that cache as one packed prefix tree: an answer prefix shared by
    several candidates ("<action>go to ...") is a single node, computed once.  A 4-D
    mask lets a node see the prompt and its own ancestors only, and its position is
    the prompt length plus its depth, so every candidate is scored exactly as if
    it followed the prompt alone.  No candidate copies the prompt's cache.
    """
    from transformers import DynamicCache

    ids, mask = policy._left_padded(prompt_ids)
    cache = DynamicCache()
    with policy.compute():
        out = policy.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                           use_cache=True, logits_to_keep=1, **{policy._cache_kw: cache})
    first = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1)
    rows, width = ids.shape
    trees = [PrefixTree(cands) for cands in answers]
    packed = max(max(len(t.tokens) for t in trees), 1)
    inputs = torch.full((rows, packed), policy.tokenizer.pad_token_id, dtype=torch.long)
    positions = torch.zeros((rows, packed), dtype=torch.long)
    allowed = torch.zeros((rows, packed, width + packed), dtype=torch.bool)
    allowed[:, :, :width] = mask[:, None, :].bool().cpu()
    allowed[:, :, width:] = True  # filler queries past a row's tree see everything (their output is unused)
    for r, tree in enumerate(trees):
        n = len(tree.tokens)
        if n:
            inputs[r, :n] = torch.tensor(tree.tokens)
            positions[r, :n] = int(mask[r].sum()) + torch.tensor(tree.depths)
            allowed[r, :n, width:] = False
            allowed[r, :n, width:width + n] = tree.ancestry()
    # (row, tree node, token) of every candidate token after the first
    index = [(r, node, token) for r, tree in enumerate(trees) for run in tree.predictions for node, token in run]
    later = torch.zeros(0)
    if index:
        bias = attention_bias(allowed, policy.model.dtype)
        with policy.compute():
            more = policy.model(input_ids=inputs.to(policy.device), attention_mask=bias[:, None].to(policy.device),
                                position_ids=positions.to(policy.device), use_cache=True, **{policy._cache_kw: cache})
        logits = more.logits.float()
        r_idx, n_idx, t_idx = (torch.tensor(col, device=policy.device) for col in zip(*index))
        later = (logits[r_idx, n_idx, t_idx] - torch.logsumexp(logits[r_idx, n_idx], dim=-1)).tolist()
    firsts = first[torch.tensor([r for r, cands in enumerate(answers) for _ in cands], dtype=torch.long),
                   torch.tensor([a[0] for cands in answers for a in cands], dtype=torch.long)].tolist()
    result, at, k = [], 0, 0
    for r, cands in enumerate(answers):
        row = []
        for a in cands:
            row.append([firsts[k]] + later[at:at + len(a) - 1])
            at += len(a) - 1
            k += 1
        result.append(row)
    return result


def choice_scores(policy: Any, batch: ChoiceBatch, with_entropy: bool, with_values: bool) -> TokenScores:
    """Differentiable log-prob of each row's choice among its options, in one decoder pass.

    A row is its prompt followed by the prefix tree of its options (as in
    ``score_answers``, here with gradients): prompt tokens attend causally, a tree
    node attends to the prompt and its own ancestors, so each option is scored as if
    it followed the prompt alone.  ``log_probs`` and ``entropy`` are ``[rows, 1]``
    (the choice's log-prob and the entropy of the distribution over options);
    ``extras["option_log_probs"]`` is ``[rows, max_options]``, -inf past a row's options.
    """
    trees = [PrefixTree(opts) for opts in batch.options]
    lengths = [len(p) for p in batch.prompt_ids]
    rows = len(batch)
    width = max(n + len(t.tokens) for n, t in zip(lengths, trees))
    ids = torch.full((rows, width), policy.tokenizer.pad_token_id, dtype=torch.long)
    positions = torch.zeros((rows, width), dtype=torch.long)
    allowed = torch.eye(width, dtype=torch.bool).repeat(rows, 1, 1)  # padding sees itself: no empty softmax
    at, targets, option_of = [], [], []  # hidden position predicting each option token, the token, its option
    most = max(len(opts) for opts in batch.options)
    for r, (prompt, tree, opts) in enumerate(zip(batch.prompt_ids, trees, batch.options)):
        n, m = lengths[r], len(tree.tokens)
        ids[r, :n] = torch.tensor(prompt)
        positions[r, :n] = torch.arange(n)
        allowed[r, :n, :n] = torch.ones((n, n), dtype=torch.bool).tril()
        if m:
            ids[r, n : n + m] = torch.tensor(tree.tokens)
            positions[r, n : n + m] = n + torch.tensor(tree.depths)
            allowed[r, n : n + m, :n] = True
            allowed[r, n : n + m, n : n + m] = tree.ancestry()
        for k, (answer, run) in enumerate(zip(opts, tree.predictions)):
            at.append(r * width + n - 1)
            targets.append(answer[0])
            option_of.append(r * most + k)
            for node, token in run:
                at.append(r * width + n + node)
                targets.append(token)
                option_of.append(r * most + k)
    bias = attention_bias(allowed, policy.model.dtype)
    with policy.compute():
        hidden = policy.model.get_decoder()(input_ids=ids.to(policy.device), attention_mask=bias[:, None].to(policy.device),
                                            position_ids=positions.to(policy.device), use_cache=False).last_hidden_state
    token_logp, _ = policy._score_positions(policy.model.get_output_embeddings(),
                                            hidden.reshape(rows * width, -1)[torch.tensor(at, device=policy.device)],
                                            torch.tensor(targets, device=policy.device), False)
    totals = torch.zeros(rows * most, dtype=torch.float32, device=policy.device)
    totals = totals.index_add(0, torch.tensor(option_of, device=policy.device), token_logp).view(rows, most)
    valid = (torch.arange(most)[None, :] < torch.tensor([len(o) for o in batch.options])[:, None]).to(policy.device)
    option_logp = torch.log_softmax(totals.masked_fill(~valid, float("-inf")), dim=-1)
    chosen = option_logp.gather(1, torch.tensor(batch.choices, device=policy.device)[:, None])
    entropy = None
    if with_entropy:
        entropy = -(option_logp.exp() * option_logp.masked_fill(~valid, 0.0)).sum(-1, keepdim=True)
    extras = {"option_log_probs": option_logp}
    if with_values:
        extras["values"] = policy._value_at(hidden, torch.tensor(lengths, device=policy.device) - 1)
    return TokenScores(chosen, torch.ones_like(chosen), entropy, extras)


def attention_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive attention mask: 0 where ``allowed``, the dtype's lowest value elsewhere."""
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)


class PrefixTree:
    """The candidate answers of one row as a prefix tree of the tokens fed after the prompt.

    Answer ``a`` feeds ``a[:-1]``; the node of prefix ``a[:k]`` (k >= 1) holds token
    ``a[k-1]`` at depth ``k-1`` and its output predicts ``a[k]``.  ``predictions[i]``
    lists (node, next token) for every token of answer ``i`` after the first.
    """

    def __init__(policy, answers: list[list[int]]):
        policy.tokens: list[int] = []
        policy.depths: list[int] = []
        policy.parents: list[int] = []
        policy.predictions: list[list[tuple[int, int]]] = []
        nodes: dict[tuple[int, ...], int] = {}
        for answer in answers:
            parent = -1
            policy.predictions.append([])
            for k in range(1, len(answer)):
                prefix = tuple(answer[:k])
                node = nodes.get(prefix)
                if node is None:
                    node = nodes[prefix] = len(policy.tokens)
                    policy.tokens.append(answer[k - 1])
                    policy.depths.append(k - 1)
                    policy.parents.append(parent)
                policy.predictions[-1].append((node, answer[k]))
                parent = node

    def ancestry(policy) -> torch.Tensor:
        """``[n, n]`` bool: node i may attend to node j (j is i or an ancestor of i)."""
        n = len(policy.tokens)
        seen = torch.zeros((n, n), dtype=torch.bool)
        for i, parent in enumerate(policy.parents):  # parents come before their children
            if parent >= 0:
                seen[i] = seen[parent]
            seen[i, i] = True
        return seen
