"""Speculative decoding, batch size 1: a proposer drafts gamma tokens, the target verifies them in one
forward pass, `accept_reject` keeps a prefix, and both KV caches roll back to the last kept token.

A proposer may instead return a token tree (decode/core/trees.py `TreeDraft`); it then names its verifier
(`make_verifier`), which scores every node in one pass, and the loop keeps the branch that `judge_tree` accepts
(greedily, or by multi-round rejection over siblings when sampling: lossless either way).

Target-only decoding runs through the same loop with a proposer that drafts nothing, so speedups compare
like with like. Every step is logged (drafted, accepted, timings, target entropy at judged positions).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import torch
from transformers import DynamicCache

from decode.kernels.compiled import static_decoding
from decode.core.sampling import accept_reject, greedy_accept, logits_to_probs, sample
from decode.core.trees import TreeDraft, judge_tree, path_ranks


@dataclass
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int | None = None
    top_p: float | None = None

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, self.temperature, self.top_k, self.top_p)


@dataclass
class StepLog:
    drafted: int  # gamma used this step (0 for target-only); a tree's depth (its longest branch)
    accepted: int  # drafted tokens kept
    draft_s: float
    verify_s: float
    entropies: list[float] = field(default_factory=list)  # target entropy (nats, T=1) at each judged position
    source: str = ""  # which proposer drafted this step, where a proposer says ("lookup", "draft", ...)
    verified: int | None = None  # tokens the target's pass scored beyond the pending one (a tree's nodes; None = drafted)
    draft_passes: int | None = None  # draft model passes this step (None = drafted)
    ranks: list[int] | None = None  # a tree step: each accepted node's rank among its siblings (0 = draft's first)


@dataclass
class Generation:
    tokens: list[int]  # new tokens only (prompt excluded), truncated at EOS / max_new_tokens
    steps: list[StepLog]
    prefill_s: float
    decode_s: float


class CachedLM:
    """A causal LM with its KV cache; `length` tokens are cached, addressed by absolute position.

    Inside a `decode.kernels.compiled.compiled_decoding` block the cache is static and short passes are compiled; `role`
    ("verify" or "draft") keeps a model that is both target and draft on two caches."""

    def __init__(self, model, role: str = "verify"):
        self.model = model
        self.role = role
        self.static = None
        self.cache = None
        self.length = 0

    @torch.inference_mode()  # static caches are inference tensors: emptying them in place needs the same mode
    def reset(self) -> None:
        self.static = static_decoding(self.model)
        self.cache = self.static.cache(self.role) if self.static else DynamicCache(config=self.model.config)
        self.length = 0

    @torch.inference_mode()
    def extend(self, ids: list[int], keep: int | None = None) -> torch.Tensor:
        """Feed `ids` at positions length.. and return the logits of the last `keep` of them (default all),
        shape (keep, V), fp32, left on the model's device (no full-vocabulary copy to the host per step).
        The LM head runs only on those positions."""
        keep = len(ids) if keep is None else keep
        if self.static is not None:
            logits = self.static.forward(ids, self.length, self.cache, keep)
        else:
            logits = self.model(input_ids=torch.tensor([ids], device=self.model.device), cache=self.cache,
                                use_cache=True, logits_to_keep=keep).logits[0]
        self.length += len(ids)
        return logits[-keep:].float()

    @torch.inference_mode()
    def rollback(self, keep: int) -> None:
        """Forget every cached position >= keep (transformers 5 `crop` takes minus the count to drop)."""
        if self.length > keep:
            self.cache.crop(keep - self.length)
            self.length = keep


class Proposer(Protocol):
    def start(self, prompt: list[int]) -> None: ...
    def propose(self, tokens: list[int], gamma: int, params: SamplingParams,
                generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]: ...
    def rollback(self, keep: int) -> None: ...


class NoProposer:
    """Drafts nothing: the loop becomes plain target-only decoding."""

    def start(self, prompt):
        pass

    def propose(self, tokens, gamma, params, generator):
        return [], torch.empty(0)

    def rollback(self, keep):
        pass


def draft_confidence(logits: torch.Tensor, token: int) -> float:
    """The draft's probability (temperature 1) of `token` under `logits`: its confidence in a greedy proposal."""
    return float(torch.softmax(logits.float(), -1)[token])


class Verifier(Protocol):
    def start(self, prompt: list[int]) -> None: ...
    def score(self, tokens: list[int], drafted: list[int]) -> torch.Tensor: ...
    def rollback(self, keep: int) -> None: ...


class ChainVerifier:
    """The target scores the pending token and a chain of drafted tokens in one forward pass."""

    def __init__(self, target):
        self.lm = CachedLM(target)

    def start(self, prompt):
        self.lm.reset()
        if len(prompt) > 1:  # the last prompt token stays pending: each step feeds it with the drafts
            self.lm.extend(prompt[:-1], keep=1)

    def score(self, tokens, drafted):
        """Target logits at each drafted position plus one past the last, shape (len(drafted) + 1, V)."""
        return self.lm.extend(tokens[self.lm.length:] + drafted, keep=len(drafted) + 1)

    def rollback(self, keep):
        self.lm.rollback(keep)


def _entropy(logits: torch.Tensor) -> list[float]:
    logp = torch.log_softmax(logits.float(), -1)
    return (-(logp.exp() * logp).sum(-1)).tolist()


def generate(target, proposer: Proposer, prompt: list[int], gamma: int, max_new_tokens: int,
             params: SamplingParams | None = None, eos_token_ids: set[int] | None = None,
             generator: torch.Generator | None = None, record_entropy: bool = False,
             verifier: Verifier | None = None) -> Generation:
    """Speculative decoding of one prompt (target-only when proposer is NoProposer or gamma == 0).

    `target` is the verifying model, wrapped in the proposer's `make_verifier` (tree proposers) or a ChainVerifier
    unless `verifier` is given."""
    if gamma < 0:
        raise ValueError(f"gamma must be >= 1 for speculative decoding (0 for target-only), got {gamma}.")
    if max_new_tokens < 1 or not prompt:
        raise ValueError("generate needs a non-empty prompt and max_new_tokens >= 1.")
    params = params or SamplingParams()
    eos = eos_token_ids or set()
    verifier = verifier or getattr(proposer, "make_verifier", ChainVerifier)(target)
    t0 = time.perf_counter()
    verifier.start(prompt)
    proposer.start(prompt)
    prefill_s = time.perf_counter() - t0
    tokens, steps = list(prompt), []
    start = time.perf_counter()
    while len(tokens) - len(prompt) < max_new_tokens:
        g = max(0, min(gamma, max_new_tokens - (len(tokens) - len(prompt)) - 1))
        t1 = time.perf_counter()
        drafted, q = proposer.propose(tokens, g, params, generator)
        t2 = time.perf_counter()
        logits = verifier.score(tokens, drafted)
        if isinstance(drafted, TreeDraft):
            accepted, nxt = judge_tree(drafted, logits, params, generator)
            g, n, size = drafted.depth, len(accepted), drafted.size
            ranks = path_ranks(drafted.parents, drafted.path)
        else:
            g = size = len(drafted)
            if params.temperature == 0:  # one host transfer of gamma + 1 ids, no one-hot distributions
                n, nxt = greedy_accept(drafted, logits.argmax(-1).tolist())
            elif g:
                p = params.probs(logits)
                n, nxt = accept_reject(torch.tensor(drafted, device=p.device), q.to(p.device), p, generator)
            else:
                n, nxt = 0, int(sample(params.probs(logits), generator))
            accepted, ranks = drafted[:n], None
        t3 = time.perf_counter()
        kept = len(tokens) + n
        tokens += accepted + [nxt]
        verifier.rollback(kept)
        proposer.rollback(kept)
        judged = min(n + 1, g) if g else 0
        entropies = []
        if record_entropy and judged:  # the target's rows at the judged positions (a tree: along the kept branch)
            rows = [0] + drafted.path if isinstance(drafted, TreeDraft) else list(range(n + 1))
            entropies = _entropy(logits[rows[:judged]])
        steps.append(StepLog(g, n, t2 - t1, t3 - t2, entropies, getattr(proposer, "last_source", ""), size, g,
                             ranks))
        if eos and any(t in eos for t in tokens[kept - n:]):
            break
    new = tokens[len(prompt):][:max_new_tokens]
    for i, t in enumerate(new):
        if t in eos:
            new = new[: i + 1]
            break
    return Generation(new, steps, prefill_s, time.perf_counter() - start)


def generate_all(target, proposer: Proposer, prompts: list[list[int]], gamma: int, max_new_tokens: int,
                 params: SamplingParams | None = None, eos_token_ids: set[int] | None = None, seed: int = 0,
                 record_entropy: bool = False) -> dict:
    """Decode every prompt once (prompt i seeded with seed + i). Returns the tokens per prompt, all step logs,
    the wall time (prefill included) and the number of new tokens, in total and per prompt (`prompt_seconds`;
    `prompt_prefill_seconds`, their prefill part; `prompt_steps`, how many of `steps` belong to each prompt, in
    order)."""
    tokens, steps, prompt_seconds, prompt_steps, prefill_seconds = [], [], [], [], []
    device = getattr(target, "device", torch.device("cpu"))  # sampling runs where the logits are
    for i, prompt in enumerate(prompts):
        gen = generate(target, proposer, prompt, gamma, max_new_tokens, params, eos_token_ids,
                       torch.Generator(device=device).manual_seed(seed + i), record_entropy)
        tokens.append(gen.tokens)
        steps += gen.steps
        prompt_steps.append(len(gen.steps))
        prompt_seconds.append(gen.prefill_s + gen.decode_s)
        prefill_seconds.append(gen.prefill_s)
    return {"tokens": tokens, "steps": steps, "seconds": sum(prompt_seconds), "new_tokens": sum(map(len, tokens)),
            "prompt_seconds": prompt_seconds, "prompt_steps": prompt_steps,
            "prompt_prefill_seconds": prefill_seconds}
