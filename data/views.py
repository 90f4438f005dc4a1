"""Views of packed training data: the blocks of some of its sources (`data.train_sources`), and `data.train_blocks`
of them, spread evenly or the first ones (`data.train_blocks_pick`: a partial teacher cache holds the first). A view selects rows of the one packed dataset and of the one teacher cache built over
it, so a per-domain run or a learning-curve point reuses the features an all-domain run cached.

    indices = view_indices(stats, "train", 3787, train_sources=["medical"], train_blocks=500, pick="first")
"""

from __future__ import annotations

from pathlib import Path

from data.checks import UsageError


PICKS = ("spread", "first")


def check_pick(pick: str) -> str:
    if pick not in PICKS:
        raise UsageError(f"data.train_blocks_pick must be one of {list(PICKS)}, got {pick!r}. Fix: spread (evenly "
                         "over the data) or first (its first blocks).")
    return pick


def spread(n: int, k: int | None, pick: str = "spread") -> list[int]:
    """`k` of the indices 0..n-1 (all of them when k is None or k >= n): evenly spaced from the first (spread), or
    the first k (first)."""
    check_pick(pick)
    if k is None or k >= n:
        return list(range(n))
    if k < 1:
        raise UsageError(f"data.train_blocks must be >= 1, got {k}. Fix: a positive count, or null for all blocks.")
    return list(range(k)) if pick == "first" else [i * n // k for i in range(k)]


def source_label(source: dict) -> str:
    """How `data.train_sources` names a source: its `prompts_from` (a domain's store), else its name, else the stem
    of its path."""
    return str(source.get("prompts_from") or source.get("name") or Path(str(source.get("path", "?"))).stem)


def source_blocks(stats: list[dict], sources: list[dict], split: str, wanted: list[str]) -> list[int]:
    """The indices of `split`'s blocks whose first token comes from a source named in `wanted` (stats: the packed
    data's per-source rows, each with its "blocks" range per split)."""
    labels = [source_label(s) for s in sources]
    unknown = sorted(set(wanted) - set(labels))
    if unknown:
        raise UsageError(f"data.train_sources names {unknown}, which no data source is called. Fix: some of "
                         f"{labels}, or null for all sources.")
    out: list[int] = []
    for label, row in zip(labels, stats):
        if label in wanted:
            start, end = row["blocks"][split]
            out.extend(range(start, end))
    return out


def view_indices(stats: list[dict], sources: list[dict], split: str, n_blocks: int,
                 train_sources: list[str] | None, train_blocks: int | None, pick: str = "spread") -> list[int] | None:
    """The rows of `split` a run reads (None: all of them): its sources' blocks, then for training `train_blocks` of
    those (`pick`: spread evenly or the first). Validation keeps every block of the chosen sources, or all blocks
    when they have none."""
    rows = list(range(n_blocks)) if not train_sources else source_blocks(stats, sources, split, list(train_sources))
    if split == "val":
        return None if not train_sources or not rows else rows
    if not rows:
        raise UsageError(f"data.train_sources={list(train_sources)} holds no full training block. Fix: other sources.")
    picked = [rows[i] for i in spread(len(rows), train_blocks, pick)]
    return None if len(picked) == n_blocks else picked
