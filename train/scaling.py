"""Trainer arguments from the `trainer` config group, including strategies given as objects (FSDP with its
wrap policy), so `trainer=ddp|fsdp|deepspeed` scale a run with Lightning's own distributed strategies."""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)
CLASS_LISTS = ("auto_wrap_policy", "activation_checkpointing_policy")  # FSDP takes sets of module classes


def import_classes(names: list[str]) -> set[type]:
    """Dotted class names -> classes; names whose module is missing (another model family) are skipped."""
    classes = set()
    for name in names:
        module, _, attr = name.rpartition(".")
        try:
            classes.add(getattr(importlib.import_module(module), attr))
        except (ImportError, AttributeError):
            log.warning("trainer.strategy: cannot import %s; skipped.", name)
    if names and not classes:
        raise ValueError(f"None of {names} could be imported. Fix: name the decoder-layer classes of your models.")
    return classes


def trainer_kwargs(trainer_cfg: dict) -> dict:
    """Plain dict of lightning.Trainer arguments; a `strategy` with `_target_` becomes the strategy object."""
    kwargs = dict(trainer_cfg)
    strategy = kwargs.get("strategy")
    if isinstance(strategy, dict) and "_target_" in strategy:
        from hydra.utils import instantiate

        spec = dict(strategy)
        for key in CLASS_LISTS:
            if isinstance(spec.get(key), list):
                spec[key] = import_classes(spec[key])
        kwargs["strategy"] = instantiate(spec, _convert_="all")
    return kwargs


def is_fsdp(strategy) -> bool:
    """Whether a `trainer.strategy` setting (a name or a `_target_` spec) is FSDP."""
    target = strategy.get("_target_", "") if hasattr(strategy, "get") else str(strategy or "")
    return "fsdp" in str(target).lower()
