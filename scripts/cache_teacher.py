"""Run the target once over the training data and cache its top-k log-probabilities (resumable), so that
`train/distill.py teacher=cache` trains the draft without loading the target.

    python scripts/cache_teacher.py top_k=64                                      # default target and data
    python train/distill.py teacher=cache loss=forward_kl spec_eval.enabled=false  # then train from the cache
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_cache_teacher
    from eval.shared.preflight import preflight

    preflight("cache_teacher", check_cache_teacher)

import logging

import hydra
from omegaconf import DictConfig, OmegaConf

from eval.shared.preflight import usage_errors
from data.datamodule import DistillDataModule
from decode.models.loading import load_frozen, load_tokenizer
from decode.kernels.runtime import setup_cpu
from train.distill import data_module_kwargs
from train.teacher_cache import build_cache, default_cache_path

log = logging.getLogger("draftsmith.cache_teacher")


def cache_teacher(cfg: DictConfig):
    """Build (or finish) the cache for cfg's target and data; returns its folder."""
    if cfg.top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {cfg.top_k}.")
    setup_cpu(cfg.threads, cfg.get("keep_freed_memory", True))
    t = cfg.model.target
    tokenizer = load_tokenizer(t.name_or_path, cache_dir=cfg.paths.cache_dir)
    data = OmegaConf.to_container(cfg.data, resolve=True)
    dm = DistillDataModule(tokenizer, **data_module_kwargs(cfg, data, view=False))  # the very blocks training will read
    dm.setup()
    out = cfg.out or default_cache_path(cfg.paths.cache_dir, t.slug, dm.cache_path.name, cfg.top_k)
    target = load_frozen(t.name_or_path, dtype=t.dtype, cache_dir=cfg.paths.cache_dir, device=cfg.device)
    log.info("caching the top-%d of %s over %d train + %d val blocks -> %s", cfg.top_k, t.name_or_path,
             len(dm.train_set), len(dm.val_set), out)
    path = build_cache(target, {"train": dm.train_set, "val": dm.val_set}, out, cfg.top_k, cfg.batch_size,
                       cfg.shard_blocks, info={"target": str(t.name_or_path), "data": dm.cache_path.name})
    return path


@hydra.main(config_path="../conf", config_name="cache_teacher", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        print(f"teacher cache: {cache_teacher(cfg)}")


if __name__ == "__main__":
    main()
