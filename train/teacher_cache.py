"""Teacher-logit cache: run the target once over the packed training data and keep, per token, its top-k
log-probabilities, their token ids and the log of the remaining tail mass. Training then needs no target at all
(`train/distill.py teacher=cache`): a sparse forward KL (train/sparse_kl.py) compares the draft with the cached top-k plus one tail
bucket, which is exact for the top-k tokens and lumps the rest of the vocabulary together.

Feature drafts (Medusa heads, the EAGLE-style draft) read the target's final hidden states instead: a *feature
cache* (`features_of_target`, top_k=None) keeps them per token in float16 (hidden size x 2 bytes per token; or int8
with a scale per row, `feature_cache_storage=int8`, about half that: train/feature_storage.py), and the
teacher's logits come back exactly from them through the target's LM head, which the draft holds anyway. An EAGLE-3
draft also reads what enters a few of the target's layers (`aux_layers`): the cache keeps those too (hidden size x 2
bytes per token and layer more). Training then runs no target forward pass (train/distill.py builds this cache
itself when `teacher=cache`).

Stored with `datasets` as Arrow shards of `shard_blocks` blocks, each written atomically, so an interrupted
caching job resumes at the first missing shard.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

from data.atomic import temp_dir
from data.progress import progress_bar
from data.teacher_cache_files import DONE
from train.feature_storage import bytes_per_value, stored

log = logging.getLogger(__name__)


FEATURES = "target_features"
AUX_FEATURES = "target_layer_inputs"
FP16_MAX = 65504.0


def default_cache_path(cache_root: str | os.PathLike, target_slug: str, data_cache_name: str,
                       top_k: int | None, aux_layers: list[int] | None = None, storage: str = "float16") -> Path:
    """One cache per (target, tokenized data, k): <cache>/teacher/<target slug>/<data cache name>-k<k>; top_k None:
    the feature cache, <data cache name>-features (-features-aux-2-15-27 with those layers' inputs, and -int8 when
    stored as int8)."""
    if top_k is not None:
        suffix = f"k{top_k}"
    else:
        suffix = "features" + ("-aux-" + "-".join(str(i) for i in aux_layers) if aux_layers else "")
        suffix += "" if storage == "float16" else f"-{storage}"
    return Path(cache_root).expanduser() / "teacher" / target_slug / f"{data_cache_name}-{suffix}"


def reuse_richer_cache(path: Path) -> Path:
    """A draft that reads only the final hidden states (Medusa, EAGLE-style) whose cache is missing takes a finished
    EAGLE-3 cache of the same text instead (`<path>-aux-...`: it holds the final hidden states too) rather than
    running the target over the text again."""
    if (path / DONE).is_file():
        return path
    richer = sorted(p.parent for p in path.parent.glob(f"{path.name}-aux-*/{DONE}"))
    if richer:
        log.info("teacher=cache: reusing %s (an EAGLE-3 cache of the same text holds the final hidden states)",
                 richer[0])
        return richer[0]
    return path


def _half(values: torch.Tensor, what: str) -> torch.Tensor:
    peak = values.float().abs().max().item()
    if peak > FP16_MAX:
        raise ValueError(f"The target's {what} reach {peak:.3g}, beyond float16's range: they cannot be cached. "
                         "Fix: teacher=live.")
    return values.to(torch.float16)


@torch.no_grad()
def features_of_target(target, input_ids: torch.Tensor, aux_layers: list[int] | None = None,
                       storage: str = "float16") -> dict[str, torch.Tensor]:
    """The target's final hidden states (what its LM head reads) at every position of (B, S) ids, float16 or int8
    per-row scaled (train/feature_storage.py); with `aux_layers`, also what enters those layers, concatenated
    (decode/drafts/features.py `layer_inputs`)."""
    from decode.drafts.features import layer_inputs

    out, aux = layer_inputs(target, input_ids, aux_layers, use_cache=False)
    if storage == "float16":
        cached = {FEATURES: _half(out.last_hidden_state, "final hidden states")}
        if aux is not None:
            cached[AUX_FEATURES] = _half(aux, "hidden states")
        return cached
    cached = stored(out.last_hidden_state, FEATURES, storage)
    if aux is not None:
        cached.update(stored(aux, AUX_FEATURES, storage, groups=len(aux_layers)))
    return cached


@torch.no_grad()
def topk_of_target(target, input_ids: torch.Tensor, top_k: int, chunk_size: int = 1024) -> dict[str, torch.Tensor]:
    """Top-k log-probs (float16), ids (int32) and log tail mass (float32) at every position of (B, S) ids."""
    hidden = target.get_decoder()(input_ids=input_ids, use_cache=False).last_hidden_state
    flat = hidden.reshape(-1, hidden.shape[-1])
    head = target.get_output_embeddings()
    ids, logp, tail = [], [], []
    for start in range(0, flat.shape[0], chunk_size):
        log_p = F.log_softmax(head(flat[start:start + chunk_size]).float(), dim=-1)
        top = log_p.topk(top_k, dim=-1)
        ids.append(top.indices.to(torch.int32))
        logp.append(top.values.to(torch.float16))
        tail.append((1 - top.values.exp().sum(-1)).clamp_min(0).log())  # -inf when the top-k hold all the mass
    shape = input_ids.shape
    return {"teacher_ids": torch.cat(ids).reshape(*shape, top_k), "teacher_logp": torch.cat(logp).reshape(*shape, top_k),
            "teacher_tail": torch.cat(tail).reshape(shape)}


def build_cache(target, splits: dict, out: str | os.PathLike, top_k: int | None, batch_size: int = 8,
                shard_blocks: int = 64, info: dict | None = None, aux_layers: list[int] | None = None,
                storage: str = "float16", rows: dict | None = None) -> Path:
    """Cache every split ({"train": blocks, "val": blocks}, each a dataset of "input_ids" rows) under `out`: the
    target's top-k, or with top_k None its final hidden states and `aux_layers`' inputs (`features_of_target`).
    With `rows` ({split: row indices, None for all}, a view's), only the shards holding those rows are built now;
    the cache is complete (done.json) once every shard is there, and until then a view reads its part of it
    (data/teacher_cache_files.load_cache)."""
    out = Path(out)
    if (out / DONE).is_file():
        log.info("teacher cache complete: %s", out)
        return out
    out.mkdir(parents=True, exist_ok=True)
    check_disk(out, target, splits, top_k, aux_layers, storage)
    what = "features" if top_k is None else f"top-{top_k}"
    for split, blocks in splits.items():
        starts = shard_starts(len(blocks), shard_blocks, (rows or {}).get(split))
        with progress_bar() as progress:
            total = sum(min(start + shard_blocks, len(blocks)) - start for start in starts)
            bar = progress.add_task(f"caching the target's {what} ({split} blocks)", total=total)
            cache_split(target, blocks, out / split, top_k, batch_size, shard_blocks, aux_layers,
                        lambda k, kept: progress.update(bar, advance=k, kept=kept), storage, starts)
    missing = [split for split, blocks in splits.items()
               if len(shard_starts(len(blocks), shard_blocks, None)) != len(list((out / split).glob("[0-9]*")))]
    if missing:
        log.info("teacher cache: the shards this view reads are built; the rest (%s) when a run needs them: %s",
                 ", ".join(missing), out)
        return out
    extra = {"aux_layers": list(aux_layers)} if aux_layers else {}
    extra.update({"storage": storage} if top_k is None else {})
    (out / DONE).write_text(json.dumps({"top_k": top_k, "kind": "features" if top_k is None else "top_k", **extra,
                                        **{f"{s}_blocks": len(b) for s, b in splits.items()}, **(info or {})}, indent=1))
    return out


def bytes_per_token(hidden: int, top_k: int | None, aux_layers: list[int] | None, storage: str = "float16") -> float:
    """What the cache stores per token: the final hidden states (and one row per aux layer) in `storage`, or top-k
    float16 log-probs, int32 ids and a float32 tail."""
    if top_k is not None:
        return top_k * (2 + 4) + 4
    return hidden * bytes_per_value(storage, hidden) * (1 + len(aux_layers or []))


def check_disk(out: Path, target, splits: dict, top_k: int | None, aux_layers: list[int] | None,
               storage: str = "float16") -> None:
    """Refuse, before an hour of target passes, a cache the disk cannot hold (the shards still missing, with 5%
    and 1 GB to spare)."""
    from data.checks import UsageError

    done = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    tokens = sum(len(blocks) * len(blocks[0]["input_ids"]) for blocks in splits.values() if len(blocks))
    total = tokens * bytes_per_token(target.config.hidden_size, top_k, aux_layers, storage)
    need = total - done
    free = shutil.disk_usage(out).free
    if need * 1.05 + 2**30 > free:
        raise UsageError(f"the teacher cache at {out} needs about {need / 2**30:.1f} GB more ({tokens} tokens), and "
                         f"{free / 2**30:.1f} GB are free there. Fix: free space, fewer tokens "
                         "(data.max_train_tokens), or paths.cache_dir on a bigger disk.")
    log.info("teacher cache: about %.1f GB for %d tokens, %.1f GB of it still to write (%.1f GB free)",
             total / 2**30, tokens, max(need, 0) / 2**30, free / 2**30)


def shard_starts(n: int, shard_blocks: int, rows=None) -> list[int]:
    """The first block of each shard of a split of `n` blocks (its folder's name); with `rows`, only the shards
    holding them. Pure."""
    if rows is None:
        return list(range(0, n, shard_blocks))
    return sorted({int(r) // shard_blocks * shard_blocks for r in rows})


def cache_split(target, blocks, out: Path, top_k: int | None, batch_size: int, shard_blocks: int,
                aux_layers: list[int] | None, advance, storage: str = "float16", starts=None) -> None:
    """One split's shards of `shard_blocks` blocks each under `out` (those beginning at `starts`, None: all); a
    shard already there is kept. `advance(k, kept)` counts blocks done (kept: found on disk, not computed now)."""
    import datasets

    n = len(blocks)
    for start in (range(0, n, shard_blocks) if starts is None else starts):
        shard_dir = out / f"{start:08d}"
        if shard_dir.is_dir():  # written atomically: present means complete
            advance(min(start + shard_blocks, n) - start, True)
            continue
        rows: dict[str, list] = {}
        for b in range(start, min(start + shard_blocks, n), batch_size):
            ids = torch.stack([torch.as_tensor(blocks[i]["input_ids"]) for i in range(b, min(b + batch_size,
                                                                                        start + shard_blocks, n))])
            ids = ids.to(target.device)
            computed = (features_of_target(target, ids, aux_layers, storage) if top_k is None
                        else topk_of_target(target, ids, top_k))
            for key, value in computed.items():
                rows.setdefault(key, []).extend(v.cpu().numpy() for v in value)
            advance(len(ids), False)
        tmp = temp_dir(out.parent, "shard")  # a dead run's half-written shards go first
        try:
            datasets.Dataset.from_dict(rows).save_to_disk(str(tmp))
            shard_dir.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, shard_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
