"""Bad input fails fast and clearly; interrupted work leaves nothing a rerun trips on (docs/bad-input.md).

The fast suite runs every case of scripts/bad_input_table.py in-process against the tiny target (the config
composed from the case's command line, then its entry point's checks); the integration suite runs them all as
programs against the embedded target, with their time limits.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import bad_input_table as table  # noqa: E402

sys.path.pop(0)

from data.checks import UsageError  # noqa: E402
from eval.shared.preflight import preflight  # noqa: E402

IN_PROCESS = [c for c in table.CASES if not c.opens_model_files]


@pytest.mark.parametrize("case", IN_PROCESS, ids=lambda c: f"{Path(c.entry).stem}: {c.what}")
def test_each_bad_input_ends_in_one_line_with_exit_2_before_any_model_loads(case, tmp_path, tiny_target_dir,
                                                                             capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path / "cache"))
    table.build(case, tmp_path, tiny_target_dir)
    table.model_files(tiny_target_dir, tmp_path / "draft", "complete")
    config, check = table.ENTRIES[case.entry]
    module, name = check.split(":")
    before = table.snapshot(tmp_path)
    args = table.case_args(case, tmp_path, str(tiny_target_dir), str(tmp_path / "draft"))
    if config == "distill" and not any(a.startswith("model.draft.layers=") for a in args):
        args.insert(0, "model.draft.layers=[0,1]")  # the tiny target has 3 layers, the default draft keeps 4
    with table.live_lock(case, tmp_path), pytest.raises(SystemExit) as ended:
        preflight(config, getattr(importlib.import_module(module), name), args)
    err = capsys.readouterr().err.strip().splitlines()
    assert ended.value.code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and case.expect in err[0], err
    assert table.changes(case, tmp_path, before) == ([], [])  # nothing written, nothing deleted


def test_the_table_holds_at_least_30_cases_across_the_entry_points():
    assert len(table.CASES) >= 95
    assert {c.entry for c in table.CASES} >= {"eval/speculate.py", "train/distill.py", "eval/acceptance.py",
                                              "eval/compare.py", "scripts/export_draft.py", "scripts/generate_data.py"}
    page = (REPO / "docs" / "bad-input.md").read_text()
    assert page.count("\n| `") >= len(table.CASES)  # the documented table is the cases' run


def test_a_prompt_longer_than_the_context_fails_before_the_weights_load(tmp_path, tiny_target_dir, tiny_draft_dir,
                                                                         monkeypatch):
    from omegaconf import OmegaConf

    import eval.eval_models
    import eval.speculate as speculate
    from test_eval import eval_cfg

    monkeypatch.setattr(eval.eval_models, "load_frozen", lambda *a, **k: pytest.fail("the target's weights were loaded"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": "word " * 700}) + "\n" for _ in range(2)))
    cfg = eval_cfg(tmp_path, tiny_target_dir, [tiny_draft_dir], f"prompts_file={prompts}", "max_new_tokens=16")
    with pytest.raises(UsageError, match=r"the target's context holds 512"):
        speculate.evaluate(cfg)
    assert OmegaConf.select(cfg, "out") and not Path(cfg.out).exists()


def test_an_answer_store_cut_by_a_kill_is_repaired_and_the_prompt_answered_again(tmp_path, caplog):
    from data.generated import append_records, done_prompts, drop_torn_tail

    store = tmp_path / "general.jsonl"
    append_records(store, [("p1", "a1"), ("p2", "a2")])
    whole = store.read_bytes()
    store.write_bytes(whole + b'{"messages": [{"role": "user", "content": "p3"}, {"role": "ass')  # killed mid-line
    assert done_prompts(store) == {"p1", "p2"}
    assert drop_torn_tail(store) > 0 and store.read_bytes() == whole and "cut short" in caplog.text
    append_records(store, [("p3", "a3")])
    assert done_prompts(store) == {"p1", "p2", "p3"}
    assert all(json.loads(line) for line in store.read_text().splitlines())  # every line readable again
    assert drop_torn_tail(store) == 0  # a whole store is left alone


def test_a_full_disk_drops_only_the_batch_it_interrupted(tmp_path, monkeypatch):
    import data.generated as generated

    store = tmp_path / "s.jsonl"
    generated.append_records(store, [("p1", "a1")])
    real_open = open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, text):
            self.f.write(text[: len(text) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(generated, "open", lambda p, mode="r", **k: Full(real_open(p, mode, **k)) if "a" in mode
                        else real_open(p, mode, **k), raising=False)
    with pytest.raises(UsageError, match=r"disk is full.*the 1 before it are kept.*rerun"):
        generated.append_records(store, [("p2", "a2"), ("p3", "a3")])
    monkeypatch.undo()
    assert generated.done_prompts(store) == {"p1"} and generated.torn_tail(store) == 0


def test_temporaries_of_dead_writers_are_removed_and_live_ones_kept(tmp_path, caplog):
    from data.atomic import remove_stale, temp_dir

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".export.tmp-{dead}-abc"
    stale.mkdir()
    (stale / "model.safetensors").write_text("half")
    live = tmp_path / f".export.tmp-{os.getppid()}-xyz"  # a running process (this test's parent)
    live.mkdir()
    fresh = temp_dir(tmp_path, "export")
    assert not stale.exists() and live.is_dir() and fresh.is_dir() and f"-{os.getpid()}-" in fresh.name
    assert "left by an interrupted run" in caplog.text
    assert remove_stale(tmp_path, "export") == []  # this process's own and the live one stay


def test_an_export_interrupted_while_replacing_the_old_one_gets_the_old_one_back(tmp_path, tiny_target_dir, caplog):
    from transformers import AutoModelForCausalLM

    from eval.shared.export import write_hf_folder

    out = tmp_path / "export"
    (tmp_path / ".export.old").mkdir()  # the kill came between moving the old export aside and the new one in
    (tmp_path / ".export.old" / "config.json").write_text("{}")
    (tmp_path / ".export.old" / "draftsmith.json").write_text('{"export_files": ["config.json", "draftsmith.json"]}')
    model = AutoModelForCausalLM.from_pretrained(tiny_target_dir)
    with pytest.raises(UsageError, match="already exists"):  # the old export is back, and not replaced unasked
        write_hf_folder(model, {}, out)
    assert (out / "config.json").read_text() == "{}" and "restored the previous export" in caplog.text
    write_hf_folder(model, {}, out, overwrite=True)
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    assert not (tmp_path / ".export.old").exists()


def test_an_interrupted_conversion_leaves_nothing_the_rerun_trips_on(tmp_path, caplog):
    from decode.models.embedded import remove_leftovers

    out = tmp_path / "models" / "smollm2-135m-instruct"
    for leftover in (out.parent / (out.name + ".gguf-abc"), out.parent / (out.name + ".tmp-def"), out):
        leftover.mkdir(parents=True)
        (leftover / "model.gguf").write_text("half")
    (out.parent / (out.name + ".lock")).write_text("")  # an OS lock's file: harmless once its holder is gone
    remove_leftovers(out)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name + ".lock"]
    assert "interrupted conversion" in caplog.text


@pytest.mark.integration
@pytest.mark.parametrize("case", table.CASES, ids=lambda c: f"{Path(c.entry).stem}: {c.what}")
def test_each_bad_input_as_a_program_fails_within_its_limit(case):
    from decode.models.loading import resolve

    target = "embedded:smollm2-135m-instruct"
    row = table.run_case(case, Path(resolve(target)), target)
    assert table.passed(row), row


@pytest.mark.integration
def test_kill_9_while_the_target_answers_then_the_same_command_finishes_the_store(tmp_path, tiny_target_dir):
    """A real SIGKILL of `python scripts/generate_data.py` after some batches; the rerun keeps every answer written
    before the kill, answers the rest, and every line of the store is readable."""
    import signal
    import time

    from data.generated import done_prompts

    store = tmp_path / "general.jsonl"
    cmd = [sys.executable, "scripts/generate_data.py", f"target={tiny_target_dir}", "prompts_from=general",
           "n_prompts=400", "batch_size=2", "max_new_tokens=24", f"out={store}", f"cache_dir={tmp_path / 'cache'}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "first.log", "w"))
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and len(done_prompts(store)) < 6:
        time.sleep(0.05)
    assert proc.poll() is None, "finished before it could be killed: " + (tmp_path / "first.log").read_text()[-1500:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = done_prompts(store)
    assert len(kept) >= 6
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert kept <= done_prompts(store) and len(done_prompts(store)) == 400
    assert all(json.loads(line) for line in store.read_text().splitlines())
