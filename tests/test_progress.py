"""data/progress.py: rich's live bar on a terminal, plain lines in a log file."""
import io
import time

from rich.progress import Progress

from data.progress import LineProgress, clock, progress_bar


def test_a_terminal_gets_the_live_bar_a_log_file_gets_lines():
    assert isinstance(progress_bar(live=True), Progress)
    assert isinstance(progress_bar(live=False), LineProgress)


def test_lines_at_most_every_interval_and_always_the_last(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("data.progress.time.monotonic", lambda: now[0])
    out = io.StringIO()
    with LineProgress(every_s=60, stream=out) as progress:
        task = progress.add_task("generating answers", total=400, rate="")
        for _ in range(10):  # 10 s apart: one line a minute
            now[0] += 10
            progress.update(task, advance=16, rate="27 answer tok/s")
        now[0] += 10
        progress.update(task, completed=400)
    lines = out.getvalue().splitlines()
    assert lines == ["generating answers: 96/400 (24%), 27 answer tok/s, 0:01:00 spent, 0:03:10 left",
                     "generating answers: 400/400 (100%), 27 answer tok/s, 0:01:50 spent"]


def test_work_stopped_early_prints_where_it_stopped_and_a_task_without_total_counts():
    out = io.StringIO()
    with LineProgress(every_s=3600, stream=out) as progress:
        a = progress.add_task("decoding", total=10)
        b = progress.add_task("scoring")
        progress.advance(a, 3)
        progress.update(b, advance=5, description="scoring drafts")
    lines = out.getvalue().splitlines()
    assert [line.split(", ")[0] for line in lines] == ["decoding: 3/10 (30%)", "scoring drafts: 5"]


def test_clock():
    assert clock(0) == "0:00:00" and clock(3725.4) == "1:02:05"


def test_a_task_stuck_in_one_long_batch_still_prints_on_the_clock():
    out = io.StringIO()
    with LineProgress(every_s=0.05, stream=out) as progress:
        task = progress.add_task("generating answers", total=4)
        time.sleep(0.4)  # the first batch has not finished: no update at all
        beats = out.getvalue().splitlines()
        progress.update(task, completed=4)
    assert len(beats) >= 2 and all(line.startswith("generating answers: 0/4 (0%)") for line in beats)
    assert out.getvalue().splitlines()[-1].startswith("generating answers: 4/4 (100%)")
    after = out.getvalue()
    time.sleep(0.2)  # the heartbeat stops with the block
    assert out.getvalue() == after


def test_a_resumed_run_s_time_left_is_at_the_rate_of_work_done_now(monkeypatch):
    """Work found done (kept shards of a resumed cache) counts toward done, not toward the rate."""
    now = [0.0]
    monkeypatch.setattr("data.progress.time.monotonic", lambda: now[0])
    out = io.StringIO()
    with LineProgress(every_s=60, stream=out) as progress:
        task = progress.add_task("caching", total=1000)
        progress.update(task, advance=700, kept=True)  # found on disk at once
        now[0] += 60
        progress.update(task, advance=10)  # 10 a minute now: 290 left is 29 minutes
        assert progress.line(task) == "caching: 710/1000 (71%), 0:01:00 spent, 0:29:00 left"
    with progress_bar(live=True) as live:  # rich takes the same call (kept is one more field to it)
        live.update(live.add_task("caching", total=10), advance=3, kept=True)
