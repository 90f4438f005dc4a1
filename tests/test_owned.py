"""Writers delete only what they wrote (data/owned.py): an export's overwrite replaces an earlier export and nothing
else; a live run's folder is locked; a resume reads what a checkpoint holds before any model is built."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from data.checks import UsageError
from data.owned import check_not_in_use, check_replaceable, foreign_entries, lock_holder, run_lock

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_model(tiny_target_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_target_dir)


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_export_lists_its_files_and_overwrite_replaces_it(tmp_path, tiny_model):
    from eval.shared.export import write_hf_folder

    out = write_hf_folder(tiny_model, {}, tmp_path / "export")
    listed = json.loads((out / "draftsmith.json").read_text())["export_files"]
    assert sorted(p.name for p in out.iterdir()) == listed and foreign_entries(out) == []
    (out / "draft-q8_0.gguf").write_bytes(b"GGUF")  # what scripts/export_gguf.py adds by default
    (out / ".draft-q4_k_m.gguf.tmp-4242-x1y2").write_bytes(b"GG")  # and what a killed conversion leaves
    write_hf_folder(tiny_model, {}, out, overwrite=True)
    assert (out / "config.json").is_file() and not (out / "draft-q8_0.gguf").exists()


@pytest.mark.parametrize("foreign", ["notes.txt", "sub/data.csv", "checkpoints/last.ckpt", "summary.json"])
def test_overwrite_never_deletes_a_file_no_export_wrote(tmp_path, tiny_model, foreign):
    from eval.shared.export import write_hf_folder

    out = write_hf_folder(tiny_model, {}, tmp_path / "export")
    (out / foreign).parent.mkdir(parents=True, exist_ok=True)
    (out / foreign).write_text("mine")
    before = tree(out)
    with pytest.raises(UsageError, match="which no export wrote"):
        write_hf_folder(tiny_model, {}, out, overwrite=True)
    assert tree(out) == before


def test_overwrite_never_replaces_a_folder_that_is_not_an_export(tmp_path, tiny_model):
    from eval.shared.export import write_hf_folder

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}")  # looks like a model folder, but no export of ours
    with pytest.raises(UsageError, match="which no export wrote"):
        write_hf_folder(tiny_model, {}, mine, overwrite=True)
    assert tree(mine) == {"config.json": b"{}"}


def test_no_export_replaces_the_folder_holding_its_checkpoint_or_run(tmp_path):
    from eval.shared.export import export_checkpoint

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.write_bytes(b"whatever")
    (run / "metrics.csv").write_text("step\n1\n")
    before = tree(run)
    for out in (run, run / "checkpoints", tmp_path):
        with pytest.raises(UsageError, match="which this export reads"):
            export_checkpoint(ckpt, out, overwrite=True)
    with pytest.raises(UsageError, match="which this export reads"):  # the run folder named as protected
        check_replaceable(tmp_path, "export.dir", [run])
    assert tree(run) == before


def test_an_empty_folder_or_a_missing_one_may_be_written(tmp_path):
    check_replaceable(tmp_path / "new", "out")
    (tmp_path / "empty").mkdir()
    check_replaceable(tmp_path / "empty", "out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        check_replaceable(tmp_path / "file", "out")


HOLD = ("import sys, time; sys.path.insert(0, sys.argv[2]); from data.owned import run_lock\n"
        "with run_lock(sys.argv[1], 'paths.output_dir'):\n    print('locked', flush=True); time.sleep(60)")


def test_a_second_run_into_a_live_runs_folder_is_refused_and_a_dead_holder_never_blocks(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run), str(REPO)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert lock_holder(run) == holder.pid
        with pytest.raises(UsageError, match=f"in use by a running training run \\(process {holder.pid}\\)"):
            check_not_in_use(run, "paths.output_dir")
        with pytest.raises(UsageError, match="in use"), run_lock(run, "paths.output_dir"):
            pytest.fail("took a lock a live process holds")
    finally:
        holder.kill()  # SIGKILL: no clean-up runs, the kernel drops the lock
        holder.wait()
    assert (run / ".draftsmith.lock").is_file() and lock_holder(run) is None
    check_not_in_use(run, "paths.output_dir")
    with run_lock(run, "paths.output_dir"):
        assert lock_holder(run) is None or lock_holder(run) == os.getpid()


def test_a_live_run_refuses_a_second_distill_program_into_its_folder(tmp_path, tiny_target_dir):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run), str(REPO)], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        second = subprocess.run([sys.executable, "train/distill.py", "model/target=local",
                                 f"model.target.name_or_path={tiny_target_dir}", "model.draft.layers=[0,1]",
                                 f"paths.output_dir={run}", "trainer.max_steps=1"], cwd=REPO, capture_output=True,
                                text=True, timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 2 and "in use by a running training run" in second.stderr, second.stderr[-800:]
    assert sorted(p.name for p in run.iterdir()) == [".draftsmith.lock"]  # no .hydra/, no log: nothing written


def test_a_checkpoint_says_which_draft_it_holds_without_torch(tmp_path):
    from train.checkpoint_meta import checkpoint_meta, shape_differences

    path = tmp_path / "x.ckpt"
    config = {"model": {"draft": {"kind": "truncated", "layers": [0, 1]}, "target": {"name_or_path": "t"}}}
    torch.save({"state_dict": {"draft.w": torch.zeros(3)}, "draftsmith": {"config": config}}, path)
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from train.checkpoint_meta import checkpoint_meta; "
            "m = checkpoint_meta(sys.argv[1]); print(m['config']['model']['draft']['layers'], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(REPO)], capture_output=True, text=True).stdout
    assert out.split() == ["[0,", "1]", "False"]
    now = {"model": {"draft": {"kind": "truncated", "layers": [0, 1, 2]}, "target": {"name_or_path": "t"}}}
    assert shape_differences(checkpoint_meta(path)["config"], now) == ["model.draft.layers=[0, 1] (this run: [0, 1, 2])"]
    assert shape_differences(config, config) == []


def test_auto_resume_passes_over_a_last_checkpoint_cut_short(tmp_path, caplog):
    from train.checkpointing import find_resume

    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    torch.save({"draftsmith": {}}, ckpts / "step40-expected_accept0.5.ckpt")
    (ckpts / "last.ckpt").write_bytes((ckpts / "step40-expected_accept0.5.ckpt").read_bytes()[:100])
    resume, run = find_resume("auto", tmp_path / "run", tmp_path)
    assert resume == str(ckpts / "step40-expected_accept0.5.ckpt") and run == tmp_path / "run"
    assert "last.ckpt is cut short" in caplog.text
    (ckpts / "step40-expected_accept0.5.ckpt").unlink()
    with pytest.raises(UsageError, match="cut short and no whole checkpoint"):
        find_resume("auto", tmp_path / "run", tmp_path)


def test_the_trainer_arguments_a_run_may_add_are_lightnings():
    import lightning as L

    from eval.shared.preflight import TRAINER_ARGS

    ours = {"self", "callbacks", "logger", "plugins", "default_root_dir", "enable_progress_bar"}
    assert set(TRAINER_ARGS) == set(inspect.signature(L.Trainer.__init__).parameters) - ours
