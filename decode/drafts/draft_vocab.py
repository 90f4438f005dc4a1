"""A draft LM head over part of the vocabulary: a cheaper draft step, output still lossless.

The default draft's largest weight is its 49,152 x 576 LM head, two thirds of what a draft step reads. A small draft
almost never proposes rare tokens, and where the target's argmax is a rare token the draft is almost never right.
Keeping only the first `size` token ids in the draft's head (plus every special token) leaves the draft's
teacher-forced agreement with the target nearly unchanged and cuts a draft step (bench/decoding/draft-vocab/,
docs/results.md). The same idea as FR-Spec's frequency-ranked draft vocabulary and
EAGLE-3's reduced draft vocabulary.

Why the first ids: byte-level BPE tokenizers (GPT-2, Llama 3, Qwen, SmolLM, ...) number their tokens in merge order,
and merges are learned most-frequent first, so low ids are the frequent ones. No corpus is needed. But merge order
follows the tokenizer's training corpus, not the target's domain: with a 151,936-id vocabulary the first 8192 ids
may miss many tokens of code that the target writes, and every such token caps acceptance. So a head can instead keep
the ids most frequent in a text of the domain (`rank_tokens` in data/token_ranking.py, `eval/speculate.py
draft_vocab_from=<file>`), ideally the target's own answers, never the evaluation prompts.

The head scatters its `size` logits into a full-vocabulary row filled with -inf, so the rest of the decoder (and
transformers' assisted generation) sees ordinary logits: the draft's distribution q is zero outside the kept ids.
Rejection sampling is exact for any q and greedy verification only compares tokens, so output stays the target's;
what can change is acceptance, which eval/speculate.py measures. Exported checkpoints keep their full head.

`draft_vocab=auto` (the default of eval/speculate.py, scripts/bench_decoder.py and the training callback) cuts the head
to 8192 ids when the draft decodes on a CPU, where a step is bound by reading weights, and keeps it whole on GPUs,
where a draft step of a small model is bound by kernel launches (and a large draft may well propose rarer tokens).

    draft, plan = restrict_vocab(draft, 8192, keep=tokenizer.all_special_ids, copy=True)
"""

from __future__ import annotations

from copy import deepcopy

import torch
from torch import nn

AUTO_CPU_SIZE = 8192  # draft_vocab=auto on CPU


class SubsetHead(nn.Module):
    """LM head over `ids` only; returns full-vocabulary logits, -inf outside `ids`. `proj` is a plain nn.Linear
    so decode/drafts/quantize.py and decode/kernels/fast_linear.py treat it like any other layer."""

    def __init__(self, head: nn.Linear, ids: torch.Tensor):
        super().__init__()
        self.vocab_size = head.out_features
        weight = head.weight.detach()
        self.register_buffer("ids", ids.to(weight.device))
        self.proj = nn.Linear(head.in_features, len(ids), bias=head.bias is not None,
                              device=weight.device, dtype=weight.dtype)
        self.proj.weight = nn.Parameter(weight[self.ids].clone(), requires_grad=False)
        if head.bias is not None:
            self.proj.bias = nn.Parameter(head.bias.detach()[self.ids].clone(), requires_grad=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        part = self.proj(hidden)
        full = part.new_full((*part.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.ids, part)

    def extra_repr(self) -> str:
        return f"keeps {len(self.ids)} of {self.vocab_size} token ids"


def kept_ids(vocab_size: int, size: int, keep=(), ranking=None) -> torch.Tensor:
    """The ids a head of `size` keeps, sorted: every id in `keep` (special tokens), then the ids of `ranking` in its
    order (most frequent first, data/token_ranking.py `rank_tokens`), then the lowest other ids."""
    special = sorted({int(i) for i in keep if 0 <= int(i) < vocab_size})
    if size < len(special) + 1:
        raise ValueError(f"draft_vocab={size} cannot hold the {len(special)} special tokens and one more. "
                         f"Fix: draft_vocab >= {len(special) + 1}, auto (8192 on CPU), or null for the full head.")
    chosen, ids = set(special), list(special)
    for i in [int(i) for i in (ranking or ()) if 0 <= int(i) < vocab_size] + list(range(vocab_size)):
        if len(ids) == size:
            break
        if i not in chosen:
            chosen.add(i)
            ids.append(i)
    return torch.tensor(sorted(ids), dtype=torch.long)


def restrict_vocab(model, size: int | str | None, keep=(), copy: bool = False,
                   ranking=None) -> tuple[nn.Module, dict]:
    """The model with its LM head cut to `size` ids ("auto": 8192 on CPU, whole on GPUs; None, 0 or >= the
    vocabulary: unchanged), in place or in a deep copy with copy=True; `ranking` (ids, most frequent first) chooses
    which ids (`kept_ids`). Returns the model to decode with and the plan for the run's recorded conditions."""
    head = model.get_output_embeddings()
    if isinstance(head, SubsetHead):
        raise ValueError("This draft's head is already restricted; restrict the original model.")
    vocab = head.out_features if isinstance(head, nn.Linear) else None
    if size == "auto":  # a head that is not a plain nn.Linear (a LoRA-wrapped one, say) stays whole
        size = AUTO_CPU_SIZE if next(model.parameters()).device.type == "cpu" and vocab is not None else None
    plan = {"size": size, "restricted": False, "vocab_size": vocab}
    if size is None or size == 0:
        return model, plan
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"draft_vocab must be auto, a positive integer or null (full head), got {size!r}.")
    if vocab is None:
        raise ValueError(f"draft_vocab needs a plain nn.Linear LM head, this draft has {type(head).__name__}. "
                         "Fix: draft_vocab=null.")
    if size >= vocab:
        return model, plan
    ids = kept_ids(vocab, size, keep, ranking)
    if copy:
        model = deepcopy(model)
    model.set_output_embeddings(SubsetHead(model.get_output_embeddings(), ids))
    return model, {**plan, "restricted": True, "order": "frequency" if ranking else "ids"}
