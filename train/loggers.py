"""Experiment loggers: CSV by default; W&B online when it can reach its server, offline otherwise.

A logger never crashes a run: if W&B cannot start at all, a warning is printed and training goes on with CSV.
"""

from __future__ import annotations

import logging
import netrc
import os
import socket
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger

log = logging.getLogger(__name__)


def _has_wandb_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def _reachable(host: str, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def wandb_mode(requested: str = "auto", host: str = "api.wandb.ai") -> str:
    """auto -> WANDB_MODE if set, else online with a key and a reachable server, else offline (with one warning)."""
    if requested != "auto":
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if not _has_wandb_key():
        log.warning("W&B: no API key (WANDB_API_KEY or `wandb login`): logging offline. Sync later with `wandb sync`.")
        return "offline"
    if not _reachable(host):
        log.warning("W&B: %s is unreachable: logging offline. Sync later with `wandb sync <run folder>`.", host)
        return "offline"
    return "online"


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
