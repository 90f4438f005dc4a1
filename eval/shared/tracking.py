"""W&B mode selection shared by training and evaluation: online only with a key and a reachable server."""

from __future__ import annotations

import logging
import netrc
import os
import socket
from pathlib import Path

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


def eval_summary(records: list[dict]) -> dict:
    """W&B summary keys per record: alpha, tau, speedup; with `reference_draft=`, the reference draft's records are
    marked as such and every other draft's paired ratio over it is logged beside (what training buys)."""
    refs = {r["over_reference"]["draft"] for r in records if r.get("over_reference")}
    out = {}
    for r in records:
        key = f"{Path(r['draft']).name}/{r['domain']}/g{r['gamma']}/T{r['temperature']}"
        out.update({f"{key}/alpha": r["alpha"], f"{key}/tau": r["tau"], f"{key}/speedup": r["speedup"]})
        if r["draft"] in refs:
            out[f"{key}/reference"] = True
        if r.get("over_reference"):
            over = r["over_reference"]
            out.update({f"{key}/speedup_over_reference": over["speedup_ratio"],
                        f"{key}/speedup_over_reference_ci": list(over["speedup_ratio_ci"]),
                        f"{key}/alpha_over_reference": over["alpha_diff"]})
    return out


def log_eval_to_wandb(records: list[dict], conditions: dict, files: dict, cfg: dict, out: Path) -> None:
    """Eval results as a W&B run: a table, the plots as images, summary per record. Never raises."""
    try:
        import wandb

        run = wandb.init(project=cfg.get("project", "draftsmith"), entity=cfg.get("entity"), job_type="eval",
                         name=cfg.get("run_name"), group=cfg.get("group"), dir=str(out),
                         mode=wandb_mode(cfg.get("mode", "auto")), config={"conditions": conditions})
        columns = [k for k in records[0] if not isinstance(records[0][k], (list, dict))] if records else []
        run.log({"eval/results": wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in records])})
        run.log({f"eval/{p.stem}": wandb.Image(str(p)) for k, p in files.items() if k.startswith("plot")})
        run.summary.update(eval_summary(records))
        run.finish()
        wandb.teardown()  # finish() returns before the service has flushed the run folder; teardown waits for it
    except Exception as err:  # noqa: BLE001 - tracking must never lose the results already written
        log.warning("W&B logging failed (%s: %s); results are in %s.", type(err).__name__, err, out)


def _wandb_records(path: Path):
    """Raw records of a .wandb transaction log (LevelDB log format: 32 KiB blocks of checksum, length, type
    chunks, after a 7-byte file header)."""
    data, block, pos, pending = path.read_bytes(), 32768, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:  # full record
            yield chunk
        elif kind == 2:  # first, middle, last pieces of a record that spans blocks
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""
        elif kind == 0 and length == 0:  # zero padding to the end of the block
            pos += block - pos % block if pos % block else 0


def offline_summary(run_dir: str | Path) -> dict:
    """The run summary of a W&B run folder (offline or synced), read from its .wandb log: the last logged value
    of every metric, overridden by explicit summary updates. Lets tests and `eval/compare.py` read runs without
    a W&B server."""
    import json

    from wandb.proto import wandb_internal_pb2 as pb

    files = sorted(Path(run_dir).glob("run-*.wandb"))
    if not files:
        raise FileNotFoundError(f"No run-*.wandb file in {run_dir}: not a W&B run folder.")
    summary: dict = {}
    for raw in _wandb_records(files[0]):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        items = record.history.item if kind == "history" else record.summary.update if kind == "summary" else []
        for item in items:
            key = item.key or "/".join(item.nested_key)
            if not key.startswith("_"):
                summary[key] = json.loads(item.value_json)
    return summary
