"""LightningDataModule: sources -> (doc-level train/val split) -> tokenize -> pack -> cached `datasets` on disk."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import time
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from data.atomic import temp_dir
from data.checks import UsageError
from data.packing import encode, pack
from data.sources import content_stamp, describe, iter_source
from data.views import check_pick

log = logging.getLogger(__name__)
CACHE_VERSION = 3  # bump whenever tokenization, splitting, packing or the corpora's held-out items change


def tokenizer_fingerprint(tokenizer) -> str:
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()))
    extra = json.dumps([type(tokenizer).__name__, tokenizer.bos_token_id, tokenizer.eos_token_id,
                        getattr(tokenizer, "chat_template", None)])
    return hashlib.sha256((vocab + extra).encode()).hexdigest()[:16]


def split_and_pack(tokenizer, sources: list[dict], block_size: int, train_tokens: int | None, val_tokens: int,
                   seed: int = 0, train_on_prompt: bool = False, encode_batch: int = 256):
    """Shuffle each source's documents, send the first ones to validation until it holds its share of
    `val_tokens`, the rest to training until its share of `train_tokens` (None: all). Returns packed
    {"train": blocks, "val": blocks} and per-source token counts."""
    weights = [float(s.get("weight", 1.0)) for s in sources]
    if not sources or min(weights) <= 0:
        raise ValueError("data.sources must list at least one source, each with weight > 0.")
    splits = {"train": [], "val": []}
    doc_sources: dict[str, list[int]] = {"train": [], "val": []}
    stats = []
    for source, weight in zip(sources, weights):
        share = weight / sum(weights)
        val_budget = int(val_tokens * share)
        train_budget = None if train_tokens is None else int(train_tokens * share)
        docs = list(iter_source(source))
        if not docs:
            raise ValueError(f"data source {describe(source)} is empty: no documents found. Fix the path or field.")
        random.Random(seed).shuffle(docs)
        counts = {"train": 0, "val": 0}
        for start in range(0, len(docs), encode_batch):
            for ids, mask in encode(tokenizer, docs[start:start + encode_batch], train_on_prompt):
                split = "val" if counts["val"] < val_budget else "train"
                splits[split].append((ids, mask))
                doc_sources[split].append(len(stats))
                counts[split] += len(ids)
            if train_budget is not None and counts["train"] >= train_budget:
                break
        if train_budget is not None:  # trim the last batch's overshoot at the document level
            while splits["train"] and counts["train"] - len(splits["train"][-1][0]) >= train_budget:
                counts["train"] -= len(splits["train"].pop()[0])
                doc_sources["train"].pop()
        stats.append({"source": describe(source), "docs": len(docs), **{f"{k}_tokens": v for k, v in counts.items()}})
    packed = {k: pack(v, block_size, doc_sources[k]) for k, v in splits.items()}
    n_val = max(1, -(-val_tokens // block_size))  # one long document can overshoot the budget: cap it
    packed["val"] = {k: v[:n_val] for k, v in packed["val"].items()}
    for source, row in enumerate(stats):  # where each source's blocks lie (data/views.py): packed in source order
        found = {k: [i for i, s in enumerate(v["source"]) if s == source] for k, v in packed.items()}
        row["blocks"] = {k: [i[0], i[-1] + 1] if i else [0, 0] for k, i in found.items()}
    packed = {k: {c: rows for c, rows in v.items() if c != "source"} for k, v in packed.items()}
    for split, blocks in packed.items():
        if not blocks["input_ids"]:
            raise UsageError(f"The {split} split holds no full block of {block_size} tokens. Fix: more text (e.g. "
                             f"data.generate.n_prompts, or more files), a lower data.block_size, or a higher "
                             f"data.{'val_tokens' if split == 'val' else 'max_train_tokens'}.")
    return packed, stats


class EpochShuffleSampler(torch.utils.data.Sampler):
    """A seeded permutation per epoch (Lightning calls set_epoch), split across `world_size` data-parallel ranks
    (rank r takes positions r, r + world_size, ...), that can start `skip` samples in. So a DDP run sees the same
    global batches as one process, and a run resumed mid-epoch the batches an uninterrupted run would."""

    def __init__(self, n: int, seed: int, rank: int = 0, world_size: int = 1):
        self.n, self.seed, self.rank, self.world_size = n, seed, rank, world_size
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        skip, self.skip = self.skip, 0  # only the first epoch after a resume is partial
        order = order[skip:]
        order = order[: len(order) // self.world_size * self.world_size]  # every rank gets as many samples
        return iter(order[self.rank::self.world_size])

    def __len__(self) -> int:
        return self.n // self.world_size


class Zipped(torch.utils.data.Dataset):
    """Row i of `a` merged with row i of `b` (packed blocks + their cached teacher top-k)."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __len__(self) -> int:
        return len(self.a)

    def __getitem__(self, i):
        return {**self.a[i], **self.b[i]}


class DistillDataModule(L.LightningDataModule):
    def __init__(self, tokenizer, sources: list[dict], block_size: int = 256, batch_size: int = 8,
                 eval_batch_size: int = 8, max_train_tokens: int | None = None, val_tokens: int = 8192,
                 train_on_prompt: bool = False, seed: int = 0, num_workers: int = 0,
                 cache_dir: str | os.PathLike = "~/.cache/draftsmith", name: str = "data",
                 teacher_cache: str | os.PathLike | None = None, train_sources: list[str] | None = None,
                 train_blocks: int | None = None, train_blocks_pick: str = "spread"):
        super().__init__()
        self.train_sources = list(train_sources) if train_sources else None  # a view (data/views.py): not in the key
        self.train_blocks, self.train_blocks_pick = train_blocks, check_pick(train_blocks_pick)
        self.teacher_cache = teacher_cache
        self.tokenizer = tokenizer
        self.sources = [dict(s) for s in sources]
        self.block_size, self.batch_size, self.eval_batch_size = block_size, batch_size, eval_batch_size
        self.max_train_tokens, self.val_tokens = max_train_tokens, val_tokens
        self.train_on_prompt, self.seed, self.num_workers, self.name = train_on_prompt, seed, num_workers, name
        key = json.dumps([CACHE_VERSION, self.sources, block_size, max_train_tokens, val_tokens, train_on_prompt,
                          seed, tokenizer_fingerprint(tokenizer), [content_stamp(s) for s in self.sources]],
                         sort_keys=True, default=str)
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        self.cache_path = Path(cache_dir).expanduser() / "data" / f"{name}-{digest}"
        self.train_set = self.val_set = None

    def prepare_data(self) -> None:
        """Tokenize and pack once; later runs (and other ranks) read the cache."""
        import datasets

        if (self.cache_path / "dataset_dict.json").is_file():
            log.info("data: using cache %s", self.cache_path)
            return
        log.info("data: tokenizing and packing %s -> %s", ", ".join(describe(s) for s in self.sources),
                 self.cache_path)
        packed, stats = split_and_pack(self.tokenizer, self.sources, self.block_size, self.max_train_tokens,
                                       self.val_tokens, self.seed, self.train_on_prompt)
        for row in stats:
            log.info("data: %(source)s: %(docs)d docs, %(train_tokens)d train / %(val_tokens)d val tokens", row)
        dd = datasets.DatasetDict({k: datasets.Dataset.from_dict(v) for k, v in packed.items()})
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_dir(self.cache_path.parent, self.cache_path.name)
        try:
            dd.save_to_disk(str(tmp))
            (tmp / "stats.json").write_text(json.dumps(stats, indent=1))
            if self.cache_path.exists():
                shutil.rmtree(self.cache_path)
            os.replace(tmp, self.cache_path)  # atomic: never a half-written cache
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def setup(self, stage: str | None = None) -> None:
        import datasets

        if self.train_set is None:
            if not (self.cache_path / "dataset_dict.json").is_file():
                self.prepare_data()
            dd = datasets.load_from_disk(str(self.cache_path)).with_format("torch")
            self.train_set, self.val_set = dd["train"], dd["val"]
            if len(self.train_set) < self.batch_size:
                raise ValueError(f"Only {len(self.train_set)} training blocks of {self.block_size} tokens, fewer than "
                                 f"data.batch_size={self.batch_size}. Fix: add data, raise data.max_train_tokens, or "
                                 "lower data.block_size / data.batch_size.")
            log.info("data: %d train blocks, %d val blocks of %d tokens", len(self.train_set), len(self.val_set),
                     self.block_size)
            picked = {"train": self.view("train", len(self.train_set)), "val": self.view("val", len(self.val_set))}
            if self.teacher_cache:  # the target's cached top-k rides along with each block
                from data.teacher_cache_files import load_cache

                self.train_set = Zipped(self.train_set, load_cache(self.teacher_cache, "train", len(self.train_set),
                                                                   picked["train"]))
                self.val_set = Zipped(self.val_set, load_cache(self.teacher_cache, "val", len(self.val_set),
                                                               picked["val"]))
            self.train_set = self._view(self.train_set, "train", picked["train"])
            self.val_set = self._view(self.val_set, "val", picked["val"])

    def view(self, split: str, n_blocks: int) -> list[int] | None:
        """The rows of `split` this run reads (data.train_sources / data.train_blocks), None for all."""
        from data.views import view_indices

        if not self.train_sources and self.train_blocks is None:
            return None
        return view_indices(self.block_stats(), self.sources, split, n_blocks, self.train_sources, self.train_blocks,
                            self.train_blocks_pick)

    def _view(self, rows, split: str, picked: list[int] | None):
        if picked is None:
            return rows
        log.info("data: %s view of %d of %d blocks (data.train_sources=%s, data.train_blocks=%s)", split,
                 len(picked), len(rows), self.train_sources, self.train_blocks)
        return torch.utils.data.Subset(rows, picked)

    def block_stats(self) -> list[dict]:
        """stats.json's per-source rows with where each source's blocks lie; a cache packed before they were
        recorded is packed again (the same blocks) to find them, and its stats.json rewritten."""
        path = self.cache_path / "stats.json"
        stats = json.loads(path.read_text()) if path.is_file() else []
        if stats and all("blocks" in row for row in stats):
            return stats
        log.info("data: finding each source's blocks in %s (packing once more)", self.cache_path)
        packed, stats = split_and_pack(self.tokenizer, self.sources, self.block_size, self.max_train_tokens,
                                       self.val_tokens, self.seed, self.train_on_prompt)
        import datasets

        on_disk = datasets.load_from_disk(str(self.cache_path))
        if any(len(packed[k]["input_ids"]) != len(on_disk[k]) for k in packed):
            raise RuntimeError(f"data: packing {self.cache_path}'s sources again gave other blocks. Fix: delete it "
                               "(it is rebuilt), or data.train_sources=null data.train_blocks=null.")
        path.write_text(json.dumps(stats, indent=1))
        return stats

    def train_labels(self, wait_s: float = 3600.0) -> list:
        """The training blocks' labels (-100 = not trained on), read without the teacher cache riding along. Called
        before the Trainer exists: under torchrun only local rank 0 packs the data; the others wait for its cache."""
        import datasets

        ready = self.cache_path / "dataset_dict.json"
        if not ready.is_file():
            if int(os.environ.get("LOCAL_RANK", "0")) == 0:
                self.prepare_data()
            else:
                deadline = time.monotonic() + wait_s
                while not ready.is_file():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"data: local rank 0 has not written {self.cache_path} after {wait_s:.0f} s. "
                                           "Fix: check rank 0's log, or pack the data once first (a one-process run).")
                    time.sleep(2.0)
        labels = datasets.load_from_disk(str(self.cache_path))["train"]["labels"]
        picked = self.view("train", len(labels))
        return labels if picked is None else [labels[i] for i in picked]

    @staticmethod
    def _collate(rows):
        batch = {key: torch.stack([r[key] for r in rows]) for key in rows[0]}
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        return batch

    def train_dataloader(self):
        trainer = getattr(self, "trainer", None)
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        sampler = EpochShuffleSampler(len(self.train_set), self.seed, rank, world)  # shards for DDP itself
        if trainer is not None and trainer.global_step > 0:  # resumed mid-epoch: skip the batches already trained on
            global_batch = self.batch_size * world
            per_epoch = len(self.train_set) // global_batch
            sampler.skip = (trainer.global_step * trainer.accumulate_grad_batches % per_epoch) * global_batch
            if sampler.skip:
                log.info("data: resumed at step %d mid-epoch: this epoch skips the %d blocks already trained on",
                         trainer.global_step, sampler.skip)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler, drop_last=True,
                          collate_fn=self._collate, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.eval_batch_size, shuffle=False, collate_fn=self._collate,
                          num_workers=self.num_workers)
