"""Writers delete only what they wrote: the rule an export's `overwrite=true` follows, and the lock of a live run.

An export folder carries its own list of files (`draftsmith.json` "export_files"); replacing one is allowed only
when everything in it is on that list, or was added to it by our own tools later (the model card, measurements, a
GGUF copy). A folder holding anything else (a user's notes, a run's checkpoints and logs) is never replaced, and
neither is a folder that holds the checkpoint being exported or the run it came from. Both refusals are one line
naming the fix (data.checks.UsageError).

A training run holds an OS lock on `<output_dir>/.draftsmith.lock` while it runs: a second run into the same folder
is refused at once, and a dead holder's lock is released by the kernel, so a leftover file never blocks.

    check_replaceable(out, "out", protected=[ckpt_path])       # before an export replaces `out`
    with run_lock(output_dir, "paths.output_dir"): ...          # while a run writes `output_dir`
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from pathlib import Path

from data.checks import UsageError

INFO = "draftsmith.json"
LOCK = ".draftsmith.lock"
# what our tools add to an export after it is written: the model card and measurements (eval/shared/card.py), GGUF copies
# (scripts/export_gguf.py writes <export>/draft-<type>.gguf by default)
ADDED_LATER = ("README.md", INFO, "draftsmith.json.tmp", ".generation_config.json.tmp", ".README.md.tmp")
ADDED_SUFFIXES = (".gguf",)
OUR_TEMPORARY = re.compile(r"^\..+\.tmp-\d+-")  # data/atomic.py's temporaries (a GGUF conversion killed mid-write)
# an export written before exports listed their files: what write_hf_folder has ever written
LEGACY_EXPORT_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
                       "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                       "merges.txt", "chat_template.jinja", "added_tokens.json", "draft_vocab.json", "README.md", INFO)


def export_files(folder: Path) -> list[str] | None:
    """The names an export folder says it was written with; None when `folder` is no export of ours."""
    info = folder / INFO
    try:
        data = json.loads(info.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    listed = data.get("export_files")
    return list(listed) if isinstance(listed, list) else list(LEGACY_EXPORT_FILES)


def foreign_entries(folder: Path) -> list[str]:
    """What in `folder` no export wrote (sub-folders always count), sorted; [] for a whole export of ours."""
    listed = export_files(folder)
    entries = sorted(folder.iterdir())
    if listed is None:
        return [p.name + ("/" if p.is_dir() else "") for p in entries]
    ours = set(listed) | set(ADDED_LATER)
    return [p.name + ("/" if p.is_dir() else "") for p in entries
            if p.is_dir() or not (p.name in ours or p.name.endswith(ADDED_SUFFIXES) or OUR_TEMPORARY.match(p.name))]


def inside(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies under it (both resolved)."""
    path, folder = Path(path).expanduser().resolve(), Path(folder).expanduser().resolve()
    return path == folder or folder in path.parents


def check_replaceable(out, what: str, protected=(), overwrite: bool = True) -> None:
    """Refuse to write an export into `out` where that would delete what the export did not write: `out` holding (or
    being) a `protected` path (the checkpoint, the run folder), a file, or a folder with anything but an earlier
    export in it. An existing folder is refused outright unless `overwrite`."""
    out = Path(str(out)).expanduser()
    for path in protected:
        if path is not None and inside(Path(str(path)), out):
            raise UsageError(f"{what}: {out} holds {path}, which this export reads or belongs to; replacing it would "
                             f"delete it. Fix: a folder of the export's own, e.g. {what}={out / 'export'}.")
    if not out.exists():
        return
    if not out.is_dir():
        raise UsageError(f"{what}: {out} is a file. Fix: another {what} (an export is a folder).")
    if not overwrite:
        return
    foreign = foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
        raise UsageError(f"{what}: {out} holds {shown}, which no export wrote: overwrite replaces only an earlier "
                         f"export. Fix: another {what}, or empty the folder yourself.")


def is_rank_zero() -> bool:
    """Not one of the extra processes a distributed launcher starts (they share rank 0's folder and lock)."""
    return os.environ.get("RANK", "0") == "0" and os.environ.get("LOCAL_RANK", "0") == "0"


def lock_holder(folder) -> int | None:
    """The process id of a live run holding `folder`'s lock, else None; reads only (creates nothing)."""
    path = Path(str(folder)).expanduser() / LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)  # closing drops the shared lock taken just now
    return None


def check_not_in_use(folder, what: str) -> None:
    """One line when a live run holds `folder`."""
    pid = lock_holder(folder)
    if pid is not None:
        raise UsageError(f"{what}: {folder} is in use by a running training run (process "
                         f"{pid if pid > 0 else 'unknown'}); two runs in one folder would mix their checkpoints and "
                         f"logs. Fix: wait for it to finish, or another {what}.")


@contextlib.contextmanager
def run_lock(folder, what: str):
    """Hold `folder`'s lock while the block runs (the folder is created); refused while another live process holds
    it. The kernel releases it when this process dies, however it dies."""
    folder = Path(str(folder)).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            fd = -1
            check_not_in_use(folder, what)
            raise UsageError(f"{what}: {folder} is in use by another running process. Fix: another {what}.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield folder
    finally:
        if fd >= 0:
            os.close(fd)
