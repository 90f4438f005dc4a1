"""Which token ids a cut draft head keeps: the ids most frequent in the text the target writes in the domain.

On CPU the draft's LM head is cut to N ids (decode/drafts/draft_vocab.py): the draft can never propose another token, so
every target token outside the kept ids is a rejection. Keeping the lowest N ids (the default) covers a tokenizer's
common merges; keeping the N ids most frequent in domain text covers more of what the target actually writes. Both
training (`model.draft.train_vocab_from`, train/train_vocab.py) and decoding (`eval/speculate.py draft_vocab_from=`,
or the `draft_vocab.json` an export carries) rank with these functions.

    ranking = rank_source({"kind": "files", "path": "answers.jsonl", "format": "chat"}, tokenizer, vocab_size)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

DRAFT_VOCAB_FILE = "draft_vocab.json"  # in an export: the ranking the draft was trained with


def rank_source(source, tokenizer, vocab_size: int, what: str = "draft_vocab_from") -> list[int] | None:
    """The token ids of a data source (as in data.sources; chats count the assistant's turns, what the target
    writes), most frequent first; None for no source. `what` names the config key in errors."""
    if not source:
        return None
    from omegaconf import DictConfig, OmegaConf

    from data.sources import describe, iter_source

    source = OmegaConf.to_container(source, resolve=True) if isinstance(source, DictConfig) else source
    if not isinstance(source, dict):
        raise ValueError(f"{what} must be a data source, got {source!r}. Fix: "
                         f"'{what}={{kind: files, path: <answers>.jsonl, format: chat}}' (or format: text).")
    ids = []
    for example in iter_source(source):
        texts = [m["content"] for m in example if m.get("role") == "assistant"] if isinstance(example, list) else [example]
        for text in texts:
            ids += tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"{what}={describe(source)} holds no text to count tokens in. Fix: point it at a text or "
                         f"chat file of the domain (the target's own answers, say), or {what}=null.")
    return rank_tokens(ids, vocab_size)


def rank_labels(labels, vocab_size: int) -> list[int]:
    """The ids the loss covers in packed training blocks (rows of `labels`, -100 = not trained on), most frequent
    first: for a run on the target's answers, the tokens the target writes."""
    ids = [int(t) for row in labels for t in (row.tolist() if hasattr(row, "tolist") else row) if int(t) >= 0]
    if not ids:
        raise ValueError("model.draft.train_vocab_from=data: the training blocks hold no labelled tokens to rank. "
                         "Fix: train_vocab_from=null (the lowest ids) or a data source of the domain's text.")
    return rank_tokens(ids, vocab_size)


def write_ranking(folder: str | Path, ranking: list[int], size: int, source: str) -> Path:
    """Save the ranking next to an exported draft, so decoding cuts its head to the ids it was trained on."""
    path = Path(folder) / DRAFT_VOCAB_FILE
    path.write_text(json.dumps({"size": int(size), "order": "frequency", "from": source,
                                "ranking": [int(i) for i in ranking]}))
    return path


def saved_ranking(folder: str | Path) -> list[int] | None:
    """The ranking an exported draft was trained with (`write_ranking`), or None (a folder without one, a Hub id)."""
    path = Path(str(folder)) / DRAFT_VOCAB_FILE
    if not path.is_file():
        return None
    return [int(i) for i in json.loads(path.read_text())["ranking"]]


def head_ranking(saved: list[int] | None, ranking: list[int] | None) -> tuple[list[int] | None, str | None]:
    """Which ids a draft's cut head keeps, and why: a draft trained over ranked ids (model.draft.train_vocab_from,
    saved as draft_vocab.json) keeps those, as its loss covered no others; draft_vocab_from ranks the ids of drafts
    that carry none (an off-the-shelf model, a draft trained over every id); else the lowest ids (None)."""
    if saved:
        return saved, "draft_vocab.json: the ids it trained over"
    return (ranking, "draft_vocab_from") if ranking else (None, None)


def rank_tokens(token_ids, vocab_size: int) -> list[int]:
    """The ids that occur in `token_ids`, most frequent first (ties: the lower id first)."""
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    ids = ids[(ids >= 0) & (ids < vocab_size)]
    counts = torch.bincount(ids, minlength=vocab_size)
    seen = torch.nonzero(counts).flatten()
    order = sorted(seen.tolist(), key=lambda i: (-int(counts[i]), i))
    return order
