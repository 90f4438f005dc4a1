"""Which answer stores a data=generated run fills before training (train/distill.py), read from its config alone."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig


def generated_stores(cfg: DictConfig) -> list[tuple[Path, float, str, int]]:
    """data=generated: (store, temperature, prompts_from, seed) for each answer store that the data's sources read:
    data.store and data.sampled_store (answers to data.prompts_from's prompts), and any `files` source that names
    its own `prompts_from` (and `temperature`, default data.generate.temperature; `seed`, default
    data.generate.seed: a second sampled store of the same prompts needs a seed of its own to hold other answers),
    as +experiment=all_domains and eagle_general do."""
    gen = cfg.data.get("generate")
    if not gen or not gen.enabled:
        return []
    files = [src for src in cfg.data.sources if src.get("kind") == "files"]
    read = {Path(src.path) for src in files}
    found: dict[Path, tuple[float, str, int]] = {}
    for path, t in ((cfg.data.store, gen.temperature), (cfg.data.get("sampled_store"), gen.get("sampled_temperature"))):
        if path and Path(path) in read:
            found.setdefault(Path(path), (float(t), cfg.data.prompts_from, int(gen.seed)))  # named twice: data.store's
    for src in files:
        if src.get("prompts_from"):
            found.setdefault(Path(src.path), (float(src.get("temperature", gen.temperature)), src.prompts_from,
                                              int(src.get("seed", gen.seed))))
    return [(path, t, domain, seed) for path, (t, domain, seed) in found.items()]
