"""Prompt lookup: drafts with no draft model, copied from earlier in the context.

Text often repeats what came before it: code reuses names, answers quote the question, lists repeat their pattern.
`ngram_continuation` finds the longest suffix of the context (between `min_n` and `max_n` tokens) that occurred
earlier, at its most recent earlier occurrence, and proposes the tokens that followed it there (transformers'
`prompt_lookup_num_tokens`, vLLM's `ngram` method). Drafting costs a search over the context, no model pass.

Lossless at any temperature: the proposal is deterministic, so its distribution q is one-hot, and rejection
sampling accepts the drafted token x with probability min(1, p(x) / 1) = p(x), resampling from norm(max(0, p - q))
otherwise, which is exactly the target's law. Greedy, a proposal is accepted iff it is the target's argmax.

`PromptLookupProposer` drafts nothing where no n-gram matches (that step is a plain target step);
`LookupThenDraftProposer` falls back to a draft model there.
"""

from __future__ import annotations

import torch

from decode.proposers.draft_model import DraftModelProposer


def ngram_continuation(tokens: list[int], max_tokens: int, min_n: int = 1, max_n: int = 3) -> list[int]:
    """Up to `max_tokens` tokens that followed the most recent earlier occurrence of the longest suffix of `tokens`
    of length min_n..max_n; [] when no such suffix occurred before. Pure."""
    if max_tokens < 1 or min_n < 1 or max_n < min_n:
        return []
    end = len(tokens)
    for n in range(min(max_n, end - 1), min_n - 1, -1):
        suffix = tokens[end - n:]
        # most recent occurrence that ends before the suffix itself starts... or overlaps it, as long as at least
        # one token follows it
        for start in range(end - n - 1, -1, -1):
            if tokens[start:start + n] == suffix:
                follow = tokens[start + n:start + n + max_tokens]
                if follow:
                    return follow
    return []


def one_hot_rows(drafted: list[int], vocab_size: int, device=None) -> torch.Tensor:
    """The proposal distribution of a deterministic draft: one row per drafted token, all mass on it."""
    q = torch.zeros(len(drafted), vocab_size, device=device)
    if drafted:
        q[torch.arange(len(drafted)), torch.tensor(drafted)] = 1.0
    return q


class PromptLookupProposer:
    """Drafts the continuation of the longest earlier n-gram match (no model). `vocab_size` sizes the one-hot
    proposal distributions that sampling needs (the target's vocabulary)."""

    def __init__(self, vocab_size: int, min_n: int = 1, max_n: int = 3, device=None):
        if min_n < 1 or max_n < min_n:
            raise ValueError(f"prompt lookup needs 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}.")
        self.vocab_size, self.min_n, self.max_n, self.device = vocab_size, min_n, max_n, device
        self.last_source = "lookup"  # recorded in each step's log: lookup drafts cost no model pass

    def start(self, prompt):
        pass

    def propose(self, tokens, gamma, params, generator):
        drafted = ngram_continuation(tokens, gamma, self.min_n, self.max_n) if gamma else []
        if not drafted:
            return [], torch.empty(0)
        return drafted, (one_hot_rows(drafted, self.vocab_size, self.device) if params.temperature > 0
                         else torch.empty(0))

    def rollback(self, keep):
        pass


class LookupThenDraftProposer:
    """Prompt lookup where an n-gram matches, the draft model otherwise. The draft model's cache catches up on the
    tokens it skipped the next time it drafts (one longer pass)."""

    def __init__(self, lookup: PromptLookupProposer, draft_proposer):
        self.lookup, self.draft = lookup, draft_proposer
        self.last_source = ""  # "lookup" or "draft": who drafted the last step (recorded in the step log)

    def start(self, prompt):
        self.lookup.start(prompt)
        self.draft.start(prompt)

    def propose(self, tokens, gamma, params, generator):
        drafted, q = self.lookup.propose(tokens, gamma, params, generator)
        if drafted:
            self.last_source = "lookup"
            return drafted, q
        self.last_source = "draft"
        return self.draft.propose(tokens, gamma, params, generator)

    def rollback(self, keep):
        self.draft.rollback(keep)


def build_lookup(request) -> PromptLookupProposer:
    """proposers=[lookup] (decode/proposers/registry.py): prompt lookup with request.settings.lookup's n-gram sizes."""
    lookup = request.settings["lookup"]
    vocab = request.target.get_output_embeddings().weight.shape[0]
    return PromptLookupProposer(vocab, int(lookup["min_n"]), int(lookup["max_n"]), request.target.device)


def build_lookup_then_draft(request) -> LookupThenDraftProposer:
    """proposers=[lookup+draft]: prompt lookup, the draft model where nothing matches."""
    return LookupThenDraftProposer(build_lookup(request), DraftModelProposer(request.draft, request.threshold))
