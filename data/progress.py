"""Progress for long work that reaches a log file too.

rich's live bar redraws one terminal line; written to a file (`nohup ... > log`, CI) it shows nothing until the work
ends. `progress_bar` gives that bar on a terminal (or in Jupyter) and, anywhere else, `LineProgress`: the same calls
(add_task, update, advance), printed as one plain line per task at most every `every_s` seconds and once at the end.
A task that makes no progress for `every_s` seconds (one slow batch of a 1.5B target) still gets its line on the clock,
its time spent growing, so a log never goes quiet while work runs.
"""

from __future__ import annotations

import sys
import threading
import time


def on_a_terminal() -> bool:
    """Whether rich can draw a live bar here (a terminal or a notebook), as rich itself decides."""
    from rich.console import Console

    console = Console()
    return console.is_terminal or console.is_jupyter


def progress_bar(*columns, every_s: float = 60.0, live: bool | None = None):
    """rich's Progress with `columns` (default: what runs now, a bar, done / total, time spent, time left) when
    `live` (default: on_a_terminal()), else LineProgress."""
    if live if live is not None else on_a_terminal():
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        return Progress(*(columns or (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn())))
    return LineProgress(every_s)


def clock(seconds: float) -> str:
    """h:mm:ss."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class LineProgress:
    """The part of rich.progress.Progress used here, printed as plain lines on `stream` (default stderr). Inside
    `with`, a heartbeat thread prints the line of any unfinished task that has printed nothing for `every_s` seconds."""

    def __init__(self, every_s: float = 60.0, stream=None):
        self.every_s, self.stream, self.tasks = every_s, stream, []
        self._lock, self._stop, self._heartbeat = threading.Lock(), threading.Event(), None

    def __enter__(self):
        self._stop.clear()
        self._heartbeat = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
        self._heartbeat.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        for task_id, task in enumerate(self.tasks):
            if task["printed"] != task["completed"]:
                self._print(task_id)
        return False

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s / 4):
            with self._lock:
                for task_id, task in enumerate(self.tasks):
                    finished = task["total"] is not None and task["completed"] >= task["total"]
                    if not finished and time.monotonic() - task["last"] >= self.every_s:
                        self._print(task_id)

    def add_task(self, description: str, total: float | None = None, **fields) -> int:
        now = time.monotonic()
        with self._lock:
            self.tasks.append({"description": description, "total": total, "completed": 0, "fields": fields,
                               "started": now, "last": now, "printed": None, "kept": 0})
            return len(self.tasks) - 1

    def update(self, task_id: int, advance: float = 0, completed: float | None = None, description: str | None = None,
               total: float | None = None, kept: bool = False, **fields) -> None:
        """As rich's; `kept`: this advance is work found done (a resumed run's), left out of the rate."""
        with self._lock:
            task = self.tasks[task_id]
            task["kept"] += advance if kept else 0
            task["completed"] = completed if completed is not None else task["completed"] + advance
            task["description"] = description if description is not None else task["description"]
            task["total"] = total if total is not None else task["total"]
            task["fields"].update(fields)
            done = task["total"] is not None and task["completed"] >= task["total"]
            if done or time.monotonic() - task["last"] >= self.every_s:
                self._print(task_id)

    def advance(self, task_id: int, advance: float = 1, kept: bool = False) -> None:
        self.update(task_id, advance=advance, kept=kept)

    def line(self, task_id: int) -> str:
        """'description: 120/400 (30%), <fields>, 0:02:00 spent, 0:04:40 left'."""
        task = self.tasks[task_id]
        done, total, spent = task["completed"], task["total"], time.monotonic() - task["started"]
        parts = [f"{task['description']}: {done:g}" + (f"/{total:g} ({done / total:.0%})" if total else "")]
        parts += [str(v) for v in task["fields"].values() if str(v)]
        parts.append(f"{clock(spent)} spent")
        if total and 0 < done - task["kept"] and done < total:  # at the rate of work done now, not work found done
            parts.append(f"{clock(spent / (done - task['kept']) * (total - done))} left")
        return ", ".join(parts)

    def _print(self, task_id: int) -> None:
        task = self.tasks[task_id]
        print(self.line(task_id), file=self.stream or sys.stderr, flush=True)
        task["last"], task["printed"] = time.monotonic(), task["completed"]
