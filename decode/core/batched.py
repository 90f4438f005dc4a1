"""Speculative decoding of several prompts at once (batch > 1): a draft model drafts gamma tokens for every sequence,
the target verifies all of them in one pass, each sequence keeps its own accepted prefix.

Ragged rollback by masking, not by cutting: every step each sequence feeds the same number of tokens, so every pass
is rectangular, and a sequence that accepts fewer than the others keeps its rejected tokens' slots in the KV cache as
holes that the attention mask hides and the position ids skip (`BatchLM`). No cache is cut or copied per sequence;
a finished sequence (EOS or its token budget) leaves the batch, its rows dropped from both caches. gamma=0 is
target-only decoding at the same batch through the same code: the baseline a batched speedup divides by.

Greedy: each sequence's output is what batch 1 produces (tests/test_batched.py; a real model's float sums differ
between batch shapes, so a near-tie can flip a token: benchmarks check identity per prompt). Sampling: per sequence
Leviathan's accept/reject (decode/core/sampling.py), lossless.

    result = generate_batch(target, draft, prompts, gamma=3, max_new_tokens=128)
    result.tokens[i], result.steps[i]      # per prompt, in order: new tokens, and StepLogs (alpha, tau as batch 1)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from decode.core.sampling import accept_reject, greedy_accept, sample


class BatchLM:
    """A causal LM decoding a batch over one KV cache whose slots may be holes. `valid` (B, slots) marks the slots
    holding a sequence's tokens; `count` (B,) is how many each has, the position of its next token."""

    def __init__(self, model, pad_id: int = 0):
        self.model, self.pad_id = model, pad_id
        self.cache, self.valid, self.count = None, None, None

    def reset(self, batch: int) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool)
        self.count = torch.zeros(batch, dtype=torch.long)

    def feed(self, ids: torch.Tensor, live: torch.Tensor, keep: int) -> torch.Tensor:
        """Feed (B, k) token ids, `live` (B, k) marking real tokens (False: a hole, masked now and later); returns the
        float logits of the last `keep` fed positions, (B, keep, V)."""
        positions = self.count[:, None] + live.long().cumsum(1) - live.long()
        self.valid = torch.cat([self.valid, live], dim=1)
        device = self.model.device
        out = self.model(input_ids=ids.masked_fill(~live, self.pad_id).to(device),
                         attention_mask=self.valid.long().to(device), position_ids=positions.to(device),
                         cache=self.cache, use_cache=True, logits_to_keep=keep)
        self.count += live.sum(1)
        return out.logits.float()

    def hide_last(self, keep: torch.Tensor) -> None:
        """Of the last keep.shape[1] slots, hide those where `keep` (B, k) is False (rejected drafts)."""
        k = keep.shape[1]
        if k:
            dropped = self.valid[:, -k:] & ~keep
            self.valid[:, -k:] &= keep
            self.count -= dropped.sum(1)

    def crop(self, slots: int) -> None:
        """Forget the last `slots` slots (the cost model times a pass, then takes it back)."""
        if slots:
            self.cache.crop(-slots)
            self.count -= self.valid[:, -slots:].sum(1)
            self.valid = self.valid[:, :-slots]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the sequences `rows` (indices into the batch), in that order."""
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                index = rows.to(layer.keys.device)
                layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
        self.valid, self.count = self.valid[rows], self.count[rows]


def left_padded(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) ids and live mask of sequences left-padded to the longest."""
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    live = torch.zeros(len(seqs), width, dtype=torch.bool)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s)
            live[i, width - len(s):] = True
    return ids, live


@dataclass
class BatchStep:
    """One sequence's share of a batched step (StepLog's fields that alpha and tau read)."""
    drafted: int
    accepted: int


@dataclass
class BatchResult:
    tokens: list[list[int]]  # new tokens per prompt, in input order, truncated at EOS / max_new_tokens
    steps: list[list[BatchStep]]  # per prompt
    prefill_s: float
    decode_s: float
    passes: int  # target passes (decoding steps of the whole batch)
    draft_s: float = 0.0  # time in draft passes (decoding)


@torch.inference_mode()
def generate_batch(target, draft, prompts: list[list[int]], gamma: int, max_new_tokens: int, params=None,
                   eos_token_ids: set[int] | None = None, generator: torch.Generator | None = None,
                   pad_id: int = 0) -> BatchResult:
    """Decode every prompt at once; gamma drafted tokens a step (0 or draft None: target-only decoding)."""
    from decode.core.speculative import SamplingParams

    if not prompts or any(not p for p in prompts) or max_new_tokens < 1 or gamma < 0:
        raise ValueError("generate_batch needs non-empty prompts, max_new_tokens >= 1 and gamma >= 0.")
    params, eos = params or SamplingParams(), eos_token_ids or set()
    gamma = gamma if draft is not None else 0
    lms = [BatchLM(target, pad_id)] + ([BatchLM(draft, pad_id)] if gamma else [])
    t0 = time.perf_counter()
    ids, live = left_padded([p[:-1] for p in prompts], pad_id)  # the last prompt token stays pending
    for lm in lms:
        lm.reset(len(prompts))
        if ids.shape[1]:
            lm.feed(ids, live, 1)
    prefill_s = time.perf_counter() - t0
    rows = list(range(len(prompts)))  # batch row -> prompt index, for the sequences still decoding
    pending = torch.tensor([p[-1] for p in prompts])
    carry = torch.full((len(prompts),), -1)  # a drafted token the draft has not fed yet (all accepted), else -1
    out: list[list[int]] = [[] for _ in prompts]
    steps: list[list[BatchStep]] = [[] for _ in prompts]
    passes, draft_s, start = 0, 0.0, time.perf_counter()
    while rows:
        left = min(max_new_tokens - len(out[r]) for r in rows)
        g = max(0, min(gamma, left - 1))
        t1 = time.perf_counter()
        if gamma:  # the draft catches up on what it has not fed (also when no room is left to draft: g = 0)
            drafted, q = _draft(lms[1], pending, carry, g, params, generator)
        else:
            drafted, q = torch.empty(len(rows), 0, dtype=torch.long), None
        draft_s += time.perf_counter() - t1
        fed = torch.cat([pending[:, None], drafted], dim=1)
        logits = lms[0].feed(fed, torch.ones_like(fed, dtype=torch.bool), g + 1)
        passes += 1
        accepted, nxt = _judge(drafted, q, logits, params, generator)
        n = torch.tensor(accepted)
        lms[0].hide_last(torch.arange(g + 1)[None] <= n[:, None])  # pending and the accepted drafts stay
        if gamma:
            lms[1].hide_last(torch.arange(max(g - 1, 0))[None] < n[:, None])  # it fed d_1..d_{g-1}: d_{n+1}.. go
            carry = torch.where(n == g, drafted[:, -1], torch.full_like(n, -1)) if g else torch.full_like(n, -1)
        done = []
        for b, r in enumerate(rows):
            new = drafted[b, : accepted[b]].tolist() + [nxt[b]]
            out[r] += new
            steps[r].append(BatchStep(g, accepted[b]))
            if len(out[r]) >= max_new_tokens or any(t in eos for t in new):
                done.append(b)
        pending = torch.tensor(nxt)
        if done:
            keep = torch.tensor([b for b in range(len(rows)) if b not in done], dtype=torch.long)
            rows = [rows[b] for b in keep.tolist()]
            if rows:
                for lm in lms:
                    lm.select(keep)
                pending, carry = pending[keep], carry[keep]
    return BatchResult([_truncate(t, max_new_tokens, eos) for t in out], steps, prefill_s,
                       time.perf_counter() - start, passes, draft_s)


def _draft(lm: BatchLM, pending: torch.Tensor, carry: torch.Tensor, g: int, params, generator):
    """g (>= 0) tokens per sequence from the draft: it feeds the carried token (where there is one) and the pending
    token, then each drafted token but the last. Returns (B, g) ids and, when sampling, their laws (B, g, V)."""
    ids = torch.stack([carry.clamp_min(0), pending], dim=1)
    live = torch.stack([carry >= 0, torch.ones_like(carry, dtype=torch.bool)], dim=1)
    logits = lm.feed(ids, live, 1)[:, -1]
    tokens, laws = [torch.empty(len(pending), 0, dtype=torch.long)], []
    if not g:
        return tokens[0], None
    tokens = []
    for i in range(g):
        if params.temperature == 0:
            token = logits.argmax(-1)
        else:
            law = params.probs(logits)
            token = sample(law, generator)
            laws.append(law)
        tokens.append(token.cpu())
        if i + 1 < g:
            logits = lm.feed(tokens[-1][:, None], torch.ones(len(token), 1, dtype=torch.bool), 1)[:, -1]
    return torch.stack(tokens, dim=1), (torch.stack(laws, dim=1) if laws else None)


def _judge(drafted: torch.Tensor, q, logits: torch.Tensor, params, generator) -> tuple[list[int], list[int]]:
    """Per sequence: drafted tokens accepted and the next token (greedy, or Leviathan's rule when sampling)."""
    accepted, nxt = [], []
    if params.temperature == 0:
        argmax = logits.argmax(-1).tolist()
        for b, row in enumerate(drafted.tolist()):
            n, t = greedy_accept(row, argmax[b])
            accepted.append(n)
            nxt.append(t)
        return accepted, nxt
    p = params.probs(logits)
    for b in range(drafted.shape[0]):
        if drafted.shape[1]:
            n, t = accept_reject(drafted[b].to(p.device), q[b].to(p.device), p[b], generator)
        else:
            n, t = 0, int(sample(p[b, 0], generator))
        accepted.append(n)
        nxt.append(t)
    return accepted, nxt


def _truncate(tokens: list[int], limit: int, eos: set[int]) -> list[int]:
    tokens = tokens[:limit]
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


def batch_pass(model, context: list[int], batch: int, keep: int | None = None):
    """A callable running one k-token pass of `model` on `batch` copies of `context` (cached first), taken back
    after every call, so every call sees the same context: the cost model's batched pass (`pass_(k)`)."""
    lm = BatchLM(model)
    lm.reset(batch)
    with torch.inference_mode():
        ids = torch.tensor([context] * batch)
        lm.feed(ids, torch.ones_like(ids, dtype=torch.bool), 1)

    def pass_(k: int = 1) -> None:
        with torch.inference_mode():
            ids = torch.tensor([context[-1:] * k] * batch)
            lm.feed(ids, torch.ones_like(ids, dtype=torch.bool), keep or k)
            lm.crop(k)
    return pass_
