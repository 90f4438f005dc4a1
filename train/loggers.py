"""Experiment loggers: CSV by default; W&B online when it can reach its server, offline otherwise.

A logger never crashes a run: if W&B cannot start at all, a warning is printed and training goes on with CSV.
"""

from __future__ import annotations

import csv as csv_module
import io
import logging
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger

from eval.shared.tracking import wandb_mode

log = logging.getLogger(__name__)


def build_loggers(cfg: dict, output_dir: str | Path, run_name: str, config_to_log: dict | None = None,
                  resumed: bool = False, resume_step: int | None = None) -> list:
    """The CSV logger, and W&B beside it when asked. `resumed`: the run continues from a checkpoint saved after
    `resume_step` steps (None: not known); see resumable_csv_logger."""
    kind = cfg.get("name", "csv")
    if kind in (None, "none"):
        return []
    csv = resumable_csv_logger(output_dir, resumed, resume_step)
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


def resumable_csv_logger(output_dir: str | Path, resumed: bool = True, resume_step: int | None = None) -> CSVLogger:
    """<output_dir>/csv/metrics.csv. A run resumed from a checkpoint saved after `resume_step` optimizer steps keeps
    the rows its earlier attempts logged for those steps and appends its own (Lightning's CSV writer would delete
    the file). Lightning labels a row with the number of steps taken before its batch, so the checkpoint's steps are
    the rows labelled below `resume_step`, and the validation run right after them (which the resumed run does not
    repeat). Rows an attempt logged after the checkpoint and then died are dropped: the resumed run logs those steps
    again, and its rows are what the exported model saw (a checkpoint whose step is not known, resume_step None,
    keeps every row). A fresh start (resumed False) in a folder an earlier attempt left begins a new file."""
    logger = CSVLogger(save_dir=str(output_dir), name="csv", version="")
    path = Path(logger.log_dir) / "metrics.csv"
    if path.is_file() and resumed:
        header, kept, dropped = rows_before(path.read_text(), resume_step)
        writer = logger.experiment  # creating the writer deletes the file
        with path.open("w", newline="") as f:
            out = csv_module.writer(f)
            out.writerow(header)
            out.writerows(kept)
        writer.metrics_keys = sorted(header)  # what the file's rows hold; new keys rewrite the header
        log.info("resumed run at step %s: appending to %s (%d rows kept, %d logged after that checkpoint dropped)",
                 resume_step if resume_step is not None else "?", path, len(kept), dropped)
    elif path.is_file():
        log.info("fresh start: %s from an earlier attempt is replaced", path)
    return logger


def rows_before(text: str, step: int | None) -> tuple[list[str], list[list[str]], int]:
    """A metrics.csv's header, its rows labelled below `step` (None: every row), and how many it holds from `step`
    on."""
    reader = csv_module.reader(io.StringIO(text))
    header = next(reader, [])
    column = header.index("step") if "step" in header else None
    kept, dropped = [], 0
    for row in reader:
        has_step = step is not None and column is not None and row[column] not in ("", None)
        if has_step and int(float(row[column])) >= step:
            dropped += 1
        else:
            kept.append(row)
    return header, kept, dropped


def run_name_and_tags(cfg, draft) -> tuple[str, list[str]]:
    """`<task>-<data>-<loss>-<draft kind>-<layers>L-<params>M`, and the same facts as tags, so W&B runs group and
    filter by domain, loss and draft size."""
    layers = getattr(draft.config, "num_hidden_layers", "?")
    size = f"{sum(p.numel() for p in draft.parameters()) / 1e6:.0f}M"
    name = f"{cfg.task_name}-{cfg.data.name}-{cfg.loss.name}-{cfg.model.draft.kind}-{layers}L-{size}"
    return name, [str(cfg.data.name), str(cfg.loss.name), f"draft-{cfg.model.draft.kind}", f"{layers}L", size]


def reference_summary(summary: dict) -> dict:
    """W&B summary keys for the reference a run has to beat: when the draft started as a pretrained model taken
    whole (an off-the-shelf draft such as Qwen2.5-Coder-0.5B), its metrics before training are that draft off the
    shelf, logged as `reference/*` beside `final/*` (eval/compare.py shows the same as its reference rows)."""
    setup = summary.get("setup", {})
    if setup.get("draft") != "pretrained" or not summary.get("before"):
        return {}
    out = {f"reference/{k}": v for k, v in summary["before"].items()}
    out["reference/draft"] = f"{setup.get('draft_from') or 'pretrained draft'} off the shelf"
    return out


def finish_wandb(loggers: list, summary: dict) -> None:
    """End-of-run W&B extras: before/final metrics as run summary and as a table, the export as a model artifact.
    Never raises: the run's files are already safe on disk."""
    for logger in loggers:
        if type(logger).__name__ != "WandbLogger":
            continue
        try:
            import wandb

            run = logger.experiment
            run.summary.update({f"before/{k}": v for k, v in summary["before"].items()})
            run.summary.update({f"final/{k}": v for k, v in summary["after"].items()})
            run.summary.update(reference_summary(summary))
            run.summary.update({"steps": summary["steps"], "train_seconds": summary["seconds"],
                                "export": summary.get("export")})
            keys = sorted(summary["after"])
            run.log({"summary/before_after": wandb.Table(
                columns=["metric", "before", "after"],
                data=[[k, summary["before"].get(k), summary["after"][k]] for k in keys])})
            if summary.get("export"):
                artifact = wandb.Artifact(f"draft-{run.name}".replace("/", "-")[:120], type="model",
                                          metadata={"final": summary["after"], "steps": summary["steps"]})
                artifact.add_dir(summary["export"])
                run.log_artifact(artifact)
            run.finish()
            # finish() returns before W&B's service process has flushed the run's .wandb log; teardown waits for
            # it, so the run folder is complete (offline: ready for `wandb sync`) when train() returns.
            wandb.teardown()
        except Exception as err:  # noqa: BLE001
            log.warning("W&B end-of-run logging failed (%s: %s); everything is in %s.", type(err).__name__, err,
                        summary.get("output_dir"))
