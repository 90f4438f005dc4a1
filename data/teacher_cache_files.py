"""Reading a finished teacher cache (train/teacher_cache.py writes it): its kind, its layers, its shards.

A cache folder is complete once `done.json` is in it; until then nothing here reads it."""

from __future__ import annotations

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


def load_cache(path: str | os.PathLike, split: str, expected_blocks: int):
    """The cached split as one torch-formatted dataset, checked against the data it must align with."""
    import datasets

    path = Path(path)
    if not (path / DONE).is_file():
        raise FileNotFoundError(f"No complete teacher cache at {path}. Fix: run `python scripts/cache_teacher.py` with "
                                "the same model/target and data settings (it resumes if interrupted).")
    shards = sorted((path / split).iterdir())
    ds = datasets.concatenate_datasets([datasets.load_from_disk(str(s)) for s in shards]).with_format("torch")
    if len(ds) != expected_blocks:
        raise ValueError(f"Teacher cache {path} holds {len(ds)} {split} blocks but the data has {expected_blocks}. "
                         "Fix: rebuild the cache for these data settings (scripts/cache_teacher.py).")
    return ds
