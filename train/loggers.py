"""Experiment loggers: CSV by default; W&B online when it can reach its server, offline otherwise.

A logger never crashes a run: if W&B cannot start at all, a warning is printed and training goes on with CSV.
"""

from __future__ import annotations

import logging
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger

from eval.tracking import wandb_mode

log = logging.getLogger(__name__)


def build_loggers(cfg: dict, output_dir: str | Path, run_name: str, config_to_log: dict | None = None) -> list:
    kind = cfg.get("name", "csv")
    if kind in (None, "none"):
        return []
    csv = CSVLogger(save_dir=str(output_dir), name="csv", version="")
    if kind == "csv":
        return [csv]
    if kind != "wandb":
        raise ValueError(f"logger.name must be csv, wandb or none, got '{kind}'.")
    try:
        from lightning.pytorch.loggers import WandbLogger

        mode = wandb_mode(cfg.get("mode", "auto"))
        wandb_logger = WandbLogger(project=cfg.get("project", "draftsmith"), entity=cfg.get("entity"),
                                   name=cfg.get("run_name") or run_name, group=cfg.get("group"),
                                   tags=list(cfg.get("tags") or []), save_dir=str(output_dir), mode=mode,
                                   log_model=False)
        wandb_logger.experiment  # start now, so a failure falls back here rather than mid-training
        if config_to_log:
            wandb_logger.log_hyperparams(config_to_log)
        return [csv, wandb_logger]
    except Exception as err:  # noqa: BLE001 - never let experiment tracking kill a training run
        log.warning("W&B could not start (%s: %s): continuing with the CSV logger only.", type(err).__name__, err)
        return [csv]
