"""Derive an int8 feature cache from a finished float16 one, shard by shard, without running the target: the same
blocks, each hidden state stored as int8 with a float16 scale per token and layer (train/feature_storage.py). A run
with `feature_cache_storage=int8` on the same data then finds it where it would have built it.

    python scripts/convert_feature_cache.py ~/.cache/draftsmith/teacher/<target>/<data>-features-aux-2-14-25

Resumable (each shard is written whole or not at all); prints the mean relative error per stored key.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path


def convert_shard(src: Path, dst: Path, aux_groups: int) -> dict[str, float]:
    """One float16 shard rewritten as int8 + scales into `dst` (atomically); the relative error of each key."""
    import datasets

    from data.atomic import temp_dir
    from train.feature_storage import SCALE, dequantize_rows, stored
    from train.teacher_cache import AUX_FEATURES, FEATURES

    ds = datasets.load_from_disk(str(src)).with_format("torch")
    rows, errors = {}, {}
    for key, groups in ((FEATURES, 1), (AUX_FEATURES, aux_groups)):
        if key not in ds.column_names:
            continue
        x = ds[:][key].float()
        out = stored(x, key, "int8", groups)
        back = dequantize_rows(out[key], out[key + SCALE])
        errors[key] = float(((x - back).norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-12)).mean())
        rows.update({k: [v.numpy() for v in t] for k, t in out.items()})
    tmp = temp_dir(dst.parent, "shard")
    try:
        datasets.Dataset.from_dict(rows).save_to_disk(str(tmp))
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return errors


def convert(src: Path, dst: Path) -> Path:
    from data.progress import progress_bar
    from data.teacher_cache_files import DONE

    info = json.loads((src / DONE).read_text()) if (src / DONE).is_file() else None
    if info is None or info.get("kind") != "features" or info.get("storage", "float16") != "float16":
        sys.exit(f"error: {src} is not a finished float16 feature cache. Fix: the folder a feature draft's run "
                 "cached (it ends in -features or -features-aux-...), once its run has finished caching.")
    shards = sorted(p for split in ("train", "val") for p in (src / split).iterdir())
    groups = len(info.get("aux_layers") or []) or 1
    errors: dict[str, list[float]] = {}
    with progress_bar() as progress:
        bar = progress.add_task(f"int8 shards of {src.name}", total=len(shards))
        for shard in shards:
            target = dst / shard.parent.name / shard.name
            if not target.is_dir():
                target.parent.mkdir(parents=True, exist_ok=True)
                for key, e in convert_shard(shard, target, groups).items():
                    errors.setdefault(key, []).append(e)
            progress.advance(bar)
    (dst / DONE).write_text(json.dumps({**info, "storage": "int8", "converted_from": str(src)}, indent=1))
    for key, e in errors.items():
        print(f"{key}: mean relative error {sum(e) / len(e):.4f} over {len(e)} shards converted now")
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cache", type=Path, help="a finished float16 feature cache folder")
    ap.add_argument("--out", type=Path, default=None, help="where the int8 cache goes (default: <cache>-int8, "
                    "where feature_cache_storage=int8 looks for it)")
    args = ap.parse_args()
    src = args.cache.expanduser()
    print(convert(src, (args.out or src.parent / f"{src.name}-int8").expanduser()))


if __name__ == "__main__":
    main()
