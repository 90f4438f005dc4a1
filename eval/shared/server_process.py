"""What every serving engine we measure as a real process shares: a free local port, the wait for its health check,
and where a setting's output first leaves plain decoding's (eval/llamacpp.py, eval/vllm.py and their benchmarks).

    proc = subprocess.Popen(args, ...); wait_until_healthy(proc, healthy, 300, log, "llama-server")
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(proc: subprocess.Popen, healthy: Callable[[], bool], timeout: float, log: Path | None,
                       name: str, poll_s: float = 0.25, every_s: float | None = None, waiting: str = "") -> None:
    """Return once `healthy()` says yes; raise if the process exits first (with its log's tail) or `timeout`
    passes. With `every_s`, a line on how long it has waited (and `waiting`: why) that often."""
    started = time.time()
    said = 0
    while time.time() < started + timeout:
        if proc.poll() is not None:
            tail = log.read_text()[-2000:] if log else ""
            raise RuntimeError(f"{name} exited with {proc.returncode} while starting: {tail}")
        if healthy():
            return
        if every_s and time.time() - started >= (said + 1) * every_s:
            said += 1
            print(f"{name}: starting ({time.time() - started:.0f} s{'; ' + waiting if waiting else ''}, log: {log})",
                  flush=True)
        time.sleep(poll_s)
    raise TimeoutError(f"{name} did not become healthy in {timeout:.0f} s (log: {log})")


def first_difference(output: Sequence, plain: Sequence) -> int | None:
    """Where a setting's output (tokens or text) first leaves plain decoding's (None: identical)."""
    return next((i for i, (a, b) in enumerate(zip(output, plain)) if a != b),
                None if len(output) == len(plain) else min(len(output), len(plain)))
