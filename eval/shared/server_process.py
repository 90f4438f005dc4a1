"""What every serving engine we measure as a real process shares: a free local port, the wait for its health check,
the process's life (`ServerProcess`: started, health-checked, its process group stopped on exit and on error), and
where a setting's output first leaves plain decoding's (eval/llamacpp.py, eval/shared/vllm_server.py, benchmarks).

    class MyServer(ServerProcess): name = "my-server"; def popen(self, out): ...; def healthy(self): ...
"""

from __future__ import annotations

import os
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


class ServerProcess:
    """A server run as a child process in a session of its own (a context manager): `popen(out)` starts it with its
    output to `out`, `healthy()` says when it serves; stopped (SIGTERM to its process group, SIGKILL after
    `stop_timeout` seconds) on exit and when starting fails. Subclasses set `args`, `log`, `start_timeout`."""

    name = "server"
    stop_timeout = 10.0
    wait_options: dict = {}  # more keyword arguments of wait_until_healthy (poll_s, every_s, waiting)
    proc: subprocess.Popen | None = None

    def popen(self, out) -> subprocess.Popen:
        raise NotImplementedError

    def healthy(self) -> bool:
        raise NotImplementedError

    def __enter__(self):
        self.proc = self.popen(open(self.log, "w") if self.log else subprocess.DEVNULL)
        try:
            wait_until_healthy(self.proc, self.healthy, self.start_timeout, self.log, self.name, **self.wait_options)
            return self
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)  # the group: vLLM's engine core runs in a child of its front end
            try:
                self.proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


def first_difference(output: Sequence, plain: Sequence) -> int | None:
    """Where a setting's output (tokens or text) first leaves plain decoding's (None: identical)."""
    return next((i for i, (a, b) in enumerate(zip(output, plain)) if a != b),
                None if len(output) == len(plain) else min(len(output), len(plain)))
