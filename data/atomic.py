"""Writes that a kill cannot leave half-done: a temporary file or folder beside the result, renamed into place.

Temporary names carry the writing process's id (`.<name>.tmp-<pid>-<random>`), so a later run can tell what a
dead process left behind (a SIGKILL skips every clean-up) from what a live one is still writing, and removes only
the first (`remove_stale`), saying so.

    tmp = temp_dir(out.parent, out.name)     # ... write into tmp ...;  os.replace(tmp, out)
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger("draftsmith.atomic")


def prefix(name: str) -> str:
    return f".{name}.tmp-{os.getpid()}-"


def temp_dir(parent, name: str) -> Path:
    """A new temporary folder in `parent` for a result called `name` (stale ones of dead writers removed first)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale(parent, name)
    return Path(tempfile.mkdtemp(dir=parent, prefix=prefix(name)))


def temp_file(parent, name: str) -> tuple[int, str]:
    """(fd, path) of a new temporary file in `parent` for a file called `name` (stale ones removed first)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale(parent, name)
    return tempfile.mkstemp(dir=parent, prefix=prefix(name))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def remove_stale(parent, name: str) -> list[Path]:
    """Remove the temporaries of `name` in `parent` whose writer is no longer running; returns what went."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    pattern = re.compile(rf"^\.{re.escape(name)}\.tmp-(\d+)-")
    gone = []
    for path in parent.iterdir():
        m = pattern.match(path.name)
        if m and not pid_alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            gone.append(path)
    if gone:
        log.warning("removed %d temporary file(s) of %s left by an interrupted run (process %s no longer runs)",
                    len(gone), parent / name, ", ".join(sorted({pattern.match(p.name).group(1) for p in gone})))
    return gone
