"""Reading a teacher cache (train/teacher_cache.py writes it): its kind, its layers, its shards.

A cache folder is complete once `done.json` is in it; until then only a view of the data (data/views.py) reads it,
from the shards that hold the view's rows (`load_cache(..., rows=)`)."""

from __future__ import annotations

import bisect
import json
import os
from pathlib import Path

DONE = "done.json"


def cache_kind(path: str | os.PathLike) -> str:
    """"features" or "top_k": what a complete cache folder holds (older top-k caches record no kind)."""
    return json.loads((Path(path) / DONE).read_text()).get("kind", "top_k")


def cache_aux_layers(path: str | os.PathLike) -> list[int] | None:
    """The target layers whose inputs a complete feature cache holds (None: final hidden states only)."""
    return json.loads((Path(path) / DONE).read_text()).get("aux_layers")


class ShardRows:
    """Row i of a cache split of `n` rows whose shards are partly built: from the shard that begins at or before i
    (shards are named by their first row). Indexing a row of a shard not built is an error naming the fix."""

    def __init__(self, shards: dict[int, object], n: int):
        self.starts, self.sets, self.n = sorted(shards), [shards[k] for k in sorted(shards)], n

    def __len__(self) -> int:
        return self.n

    def holds(self, i: int) -> bool:
        k = bisect.bisect_right(self.starts, i) - 1
        return k >= 0 and i - self.starts[k] < len(self.sets[k])

    def __getitem__(self, i: int):
        if not self.holds(i):
            raise IndexError(f"row {i} of this teacher cache is not built yet. Fix: rerun without the view "
                             "(data.train_sources / data.train_blocks), which builds the rest.")
        k = bisect.bisect_right(self.starts, i) - 1
        return self.sets[k][i - self.starts[k]]


def load_cache(path: str | os.PathLike, split: str, expected_blocks: int, rows: list[int] | None = None):
    """The cached split as one torch-formatted dataset, checked against the data it must align with. A cache not
    complete yet is read where its shards hold every row wanted: a view's `rows` (None: the whole split)."""
    import datasets

    path = Path(path)
    if not (path / DONE).is_file():
        shards = {int(s.name): s for s in (path / split).glob("[0-9]*")}
        part = ShardRows({k: datasets.load_from_disk(str(s)).with_format("torch") for k, s in shards.items()},
                         expected_blocks)
        if shards and all(part.holds(int(i)) for i in (range(expected_blocks) if rows is None else rows)):
            return part
        raise FileNotFoundError(f"No complete teacher cache at {path}. Fix: run `python scripts/cache_teacher.py` with "
                                "the same model/target and data settings (it resumes if interrupted).")
    shards = sorted((path / split).iterdir())
    ds = datasets.concatenate_datasets([datasets.load_from_disk(str(s)) for s in shards]).with_format("torch")
    if len(ds) != expected_blocks:
        raise ValueError(f"Teacher cache {path} holds {len(ds)} {split} blocks but the data has {expected_blocks}. "
                         "Fix: rebuild the cache for these data settings (scripts/cache_teacher.py).")
    return ds
