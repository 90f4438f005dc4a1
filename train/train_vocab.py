"""Train against the draft vocabulary it will decode with: the loss over the kept token ids only.

On CPU the decoder cuts the draft's LM head to `draft_vocab` ids plus the special ones (decode/drafts/draft_vocab.py: the
lowest ids, or with `model.draft.train_vocab_from` the ids most frequent in domain text, data/token_ranking.py,
which the export saves as draft_vocab.json for decoding to keep): the draft can never propose another token.
Training the draft's full 151,936-row head for those tokens is wasted work, and for a small draft of a
large-vocabulary target the head is a large part of a training step. With `model.draft.train_vocab: N` a training step scores the kept ids only: a frozen copy of the head's
kept rows makes the logits, the loss covers the positions whose next token is kept (the others are tokens the draft
could not propose anyway), and a distillation teacher is renormalised over the same ids. Validation still scores the
full head, and the export keeps it whole.

    ids, head = kept_head(draft, 8192, special_ids)
"""

from __future__ import annotations

import torch
from torch import nn

from decode.drafts.draft_vocab import kept_ids


def kept_head(draft, size: int, keep=(), ranking=None) -> tuple[torch.Tensor, nn.Linear]:
    """The kept ids (sorted, as decode/drafts/draft_vocab.py keeps them: `ranking`, most frequent first, chooses which;
    None: the lowest ids) and a frozen linear over those rows of the draft's head. The head must be frozen (model.draft.train_embeddings=false): the copy would not train it."""
    head = draft.get_output_embeddings()
    if not isinstance(head, nn.Linear):
        raise ValueError(f"model.draft.train_vocab needs a plain nn.Linear LM head, this draft has "
                         f"{type(head).__name__}. Fix: model.draft.train_vocab=null.")
    if head.weight.requires_grad:
        raise ValueError("model.draft.train_vocab trains against a frozen copy of the head's kept rows, so the head "
                         "must be frozen. Fix: model.draft.train_embeddings=false, or model.draft.train_vocab=null.")
    ids = kept_ids(head.out_features, size, keep, ranking).to(head.weight.device)
    sub = nn.Linear(head.in_features, len(ids), bias=head.bias is not None, device=head.weight.device,
                    dtype=head.weight.dtype)
    sub.weight = nn.Parameter(head.weight.detach()[ids].clone(), requires_grad=False)
    if head.bias is not None:
        sub.bias = nn.Parameter(head.bias.detach()[ids].clone(), requires_grad=False)
    return ids, sub


def remap(tokens: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(position of each token among `ids`, 0 where it is not kept; whether it is kept). -100 labels count as not
    kept."""
    lookup = torch.full((vocab_size,), -1, dtype=torch.long, device=tokens.device)
    lookup[ids] = torch.arange(len(ids), device=tokens.device)
    index = lookup[tokens.clamp(0, vocab_size - 1)]
    kept = (index >= 0) & (tokens >= 0)
    return index.clamp_min(0), kept
