"""The CSV log of a run survives a resume (train/loggers.py)."""

import csv

from train.loggers import resumable_csv_logger, rows_before


def test_a_resumed_run_appends_to_the_csv_log_instead_of_replacing_it(tmp_path):
    first = resumable_csv_logger(tmp_path)
    first.log_metrics({"train/loss": 1.0}, step=1)
    first.log_metrics({"train/loss": 0.9}, step=2)
    first.save()
    resumed = resumable_csv_logger(tmp_path, resume_step=3)  # the same output folder, after a crash
    resumed.log_metrics({"train/loss": 0.5, "val/kl": 2.0}, step=3)  # a key the first attempt never logged
    resumed.save()
    resumed.log_metrics({"train/loss": 0.4}, step=4)
    resumed.save()
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    assert [float(r["train/loss"]) for r in rows] == [1.0, 0.9, 0.5, 0.4]
    assert rows[2]["val/kl"] == "2.0" and rows[0]["val/kl"] == ""


def test_rows_logged_after_the_resumed_checkpoint_are_dropped(tmp_path):
    first = resumable_csv_logger(tmp_path)
    # rows are labelled with the steps taken before their batch: a checkpoint after 3 steps holds rows 0-2
    for step, loss in ((0, 1.1), (1, 1.0), (2, 0.9), (3, 0.8), (4, 0.7)):  # the attempt died after row 4
        first.log_metrics({"train/loss": loss}, step=step)
    first.save()
    resumed = resumable_csv_logger(tmp_path, resume_step=3)
    resumed.log_metrics({"train/loss": 0.75}, step=3)
    resumed.save()
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["step"]), float(r["train/loss"])) for r in rows] == [(0, 1.1), (1, 1.0), (2, 0.9), (3, 0.75)]
    # a checkpoint whose step cannot be read (a sharded one, a folder) keeps every row, as before
    assert len(rows_before((tmp_path / "csv" / "metrics.csv").read_text(), None)[1]) == 4


def test_a_fresh_start_replaces_an_earlier_attempts_log(tmp_path):
    first = resumable_csv_logger(tmp_path)
    first.log_metrics({"train/loss": 1.0}, step=1)
    first.save()
    fresh = resumable_csv_logger(tmp_path, resumed=False)  # no checkpoint survived: training starts at step 0
    fresh.log_metrics({"train/loss": 2.0}, step=1)
    fresh.save()
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["step"]), float(r["train/loss"])) for r in rows] == [(1, 2.0)]
