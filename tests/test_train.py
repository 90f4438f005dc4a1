"""Training end to end on tiny models: fit, checkpoint holds the draft only, export round trip."""

import json
import logging

import pytest
import torch
from hydra import compose, initialize_config_dir
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import CONF, make_model
from train.distill import train
from eval.shared.export import draft_from_checkpoint, export_checkpoint, read_checkpoint
from train.losses import LossSettings
from train.module import DistillModule, loss_mask, warmup_cosine


def tiny_cfg(tmp_path, tiny_target_dir, text_file, *extra):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("distill", overrides=tiny_overrides(tmp_path, tiny_target_dir, text_file, *extra))


def tiny_overrides(tmp_path, tiny_target_dir, text_file, *extra) -> list[str]:
    """Hydra overrides for a fast run on the tiny in-process models (also usable on the command line)."""
    overrides = [
        "model/target=local", f"model.target.name_or_path={tiny_target_dir}", "model.draft.layers=[0,2]",
        "data=files", f"data.sources=[{{kind: files, path: '{text_file}', text_field: text}}]",
        "data.block_size=32", "data.batch_size=2", "data.eval_batch_size=4", "data.val_tokens=64",
        "trainer.max_steps=3", "trainer.val_check_interval=2", "trainer.accelerator=cpu",
        "+trainer.enable_model_summary=false", "progress_bar=none", "optim.warmup_steps=1",
        "spec_eval.n_prompts=2", "spec_eval.max_new_tokens=8",
        f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}", *extra,
    ]
    if any(e.startswith("model/draft=") for e in extra):  # other draft kinds have no `layers`
        overrides.remove("model.draft.layers=[0,2]")
    return overrides


def test_fit_checkpoint_and_export_round_trip(tmp_path, tiny_target_dir, text_file):
    # spec_eval decodes with an int8 copy of the draft with a cut head: the checkpoint and export must stay as trained
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "spec_eval.draft_quant=int8",
                             "spec_eval.draft_vocab=64", "spec_eval.gamma=3", "spec_eval.confidence_threshold=0.1",
                             "spec_eval.domain=[general,code]", "checkpoint.keep_steps=[2]"))
    run = tmp_path / "run"
    assert summary["steps"] == 3
    assert json.loads((run / "summary.json").read_text())["export"] == str(run / "export")
    for key in ("val/top1_agree", "val/expected_accept", "val/kl"):
        assert 0 <= summary["before"][key] and 0 <= summary["after"][key]

    ckpt = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert ckpt["state_dict"] and not any(k.startswith("target.") for k in ckpt["state_dict"])
    assert all(k.startswith("draft.") for k in ckpt["state_dict"])

    exported = AutoModelForCausalLM.from_pretrained(run / "export").eval()
    tokenizer = AutoTokenizer.from_pretrained(run / "export")
    assert exported.config.num_hidden_layers == 2 and len(tokenizer) == exported.config.vocab_size
    ids = tokenizer("The patient presented with fever", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(exported(ids).logits, draft_from_checkpoint(ckpt)(ids).logits, atol=1e-5)
    assert (run / "csv" / "metrics.csv").is_file()
    # real speculative decoding ran before and after training, and the model card reports it
    for key in ("test/alpha", "test/tau", "test/speedup"):
        assert key in summary["before"] and key in summary["after"]
    assert 0 <= summary["after"]["test/alpha"] <= 1 and 1 <= summary["after"]["test/tau"] <= 5
    card = (run / "export" / "README.md").read_text()
    assert card.startswith(f"# {summary['run_name']}: a speculative-decoding draft for")
    assert "distillation from the target's logits (jsd) on `files`, 3 steps" in card
    assert f"{summary['after']['test/alpha']:.3f}" in card and "test prompts x" in card and "--speculative-config" in card and "STANDALONE" in card
    assert "draft head over the first 64 token ids" in card and exported.lm_head.out_features == len(tokenizer)
    assert "Provenance:" in card and "this folder's weights: sha256" in card and "commit `" in card
    # transformers drafts as measured (spec_eval.gamma and .confidence_threshold), not its defaults 20 and 0.4
    assert exported.generation_config.num_assistant_tokens == 3
    assert exported.generation_config.assistant_confidence_threshold == pytest.approx(0.1)
    assert "| general+code | <= 3, stop < 0.1 |" in card  # held-out prompts of both domains

    with pytest.raises(ValueError, match="export.overwrite=true"):
        export_checkpoint(run / "checkpoints" / "last.ckpt", run / "export")
    export_checkpoint(run / "checkpoints" / "last.ckpt", run / "export", overwrite=True)
    # a later export from the checkpoint alone (scripts/export_draft.py) keeps the run's name on its card
    assert (run / "export" / "README.md").read_text().startswith(f"# {summary['run_name']}: ")
    # a kept step (checkpoint.keep_steps: a learning-curve point) exports as well: weights and run meta, no optimizer
    kept = read_checkpoint(run / "checkpoints" / "step-2.ckpt")
    assert kept["global_step"] == 2 and not kept.get("optimizer_states")
    export_checkpoint(run / "checkpoints" / "step-2.ckpt", tmp_path / "step-2")
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "step-2").config.num_hidden_layers == 2


def test_best_checkpoint_by_alpha(tmp_path, tiny_target_dir, text_file):
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "checkpoint.monitor=val/alpha",
                             "export.checkpoint=best"))
    assert "alpha" in summary["best_checkpoint"]
    with pytest.raises(ValueError, match="spec_eval.enabled=true"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "checkpoint.monitor=val/alpha", "spec_eval.enabled=false"))


def test_checkpoint_selection_reads_only_tune_prompts(tmp_path, tiny_target_dir, text_file, monkeypatch):
    """During fit (what checkpoint.monitor=val/alpha chooses by) the callback decodes only tune prompts; the test
    prompts are decoded only for the reported before/after figures."""
    from train.callbacks import SpeculativeEval

    seen, original = [], SpeculativeEval._measure_module

    def spy(self, pl_module, split):
        state = pl_module.trainer.state  # after fit returns, fn stays "fit" but the status is "finished"
        seen.append(("fit" if state.fn == "fit" and state.status == "running" else "other", split))
        prompts = self.prompts if split == "tune" else self.report_prompts
        assert not {tuple(p) for p in prompts} & {tuple(p) for p in (self.report_prompts if split == "tune"
                                                                     else self.prompts)}
        return original(self, pl_module, split)

    monkeypatch.setattr(SpeculativeEval, "_measure_module", spy)
    train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "checkpoint.monitor=val/alpha", "trainer.max_steps=3",
                   "spec_eval.domain=[general,code]"))
    assert ("fit", "tune") in seen and ("other", "test") in seen
    assert all(split == "tune" for fn, split in seen if fn == "fit")
    assert all(split == "test" for fn, split in seen if fn != "fit")


def test_fast_dev_run(tmp_path, tiny_target_dir, text_file):
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "+trainer.fast_dev_run=true", "export.enabled=false"))
    assert summary["steps"] == 1 and "export" not in summary


def test_distillation_lowers_kl_on_tiny_models(tmp_path, tiny_target_dir, text_file):
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "trainer.max_steps=25",
                             "trainer.val_check_interval=25", "optim.lr=1e-2", "export.enabled=false"))
    assert summary["after"]["val/kl"] < 0.8 * summary["before"]["val/kl"]


def test_existing_export_dir_fails_before_any_work(tmp_path, tiny_target_dir, text_file):
    (tmp_path / "run" / "export").mkdir(parents=True)
    with pytest.raises(ValueError, match="export.overwrite=true"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file))


def test_gradient_reaches_only_the_draft_and_target_stays_frozen(tokenizer):
    target = make_model(len(tokenizer), layers=2)
    draft = make_model(len(tokenizer), layers=1, seed=5).train()
    module = DistillModule(target, draft)
    module.train()
    assert not target.training and draft.training
    ids = torch.randint(0, len(tokenizer), (2, 12))
    out = module._distill({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}, metrics=False)
    out["loss"].backward()
    assert all(p.grad is None for p in target.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in draft.parameters())


def test_loss_mask_shifts_labels():
    labels = torch.tensor([[5, -100, 7, 8]])
    assert loss_mask(labels).tolist() == [[False, True, True, False]]


def test_warmup_cosine_schedule():
    assert warmup_cosine(0, 10, 100, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(9, 10, 100, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(100, 10, 100, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(55, 10, 100, 0.1) == pytest.approx(0.55)


def test_corrupted_checkpoint_fails_clearly(tmp_path):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match="corrupted or truncated"):
        read_checkpoint(bad)
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        read_checkpoint(tmp_path / "missing.ckpt")


def test_wandb_without_key_or_network_logs_offline_and_never_crashes(tmp_path, tiny_target_dir, text_file,
                                                                      monkeypatch):
    from eval.shared.tracking import offline_summary
    from train.loggers import wandb_mode

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: no key
    assert wandb_mode("auto") == "offline"
    assert wandb_mode("disabled") == "disabled"
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "logger=wandb", "trainer.max_steps=2"))
    assert summary["steps"] == 2
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    logged = offline_summary(runs[0])
    for key in ("val/alpha", "val/tau", "val/speedup", "val/expected_accept", "final/test/alpha",
                "before/val/expected_accept", "final/val/expected_accept", "steps", "export"):
        assert key in logged, key
    assert logged["final/test/alpha"] == pytest.approx(summary["after"]["test/alpha"])
    assert logged["summary/before_after/_type"] == "table-file"  # the before/after table, as a wandb.Table
    assert list((runs[0] / "files" / "media" / "table").rglob("*.table.json"))


def test_block_size_above_target_maximum_fails_before_training(tmp_path, tiny_target_dir, text_file):
    with pytest.raises(ValueError, match=r"exceeds the target's maximum sequence length \(512\)"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "data.block_size=1024"))


def test_nan_loss_stops_training_with_a_clear_error(tokenizer):
    target = make_model(len(tokenizer), layers=2)
    draft = make_model(len(tokenizer), layers=1, seed=5)
    with torch.no_grad():
        draft.model.norm.weight.fill_(float("nan"))
    module = DistillModule(target, draft)
    ids = torch.randint(0, len(tokenizer), (2, 12))
    with pytest.raises(FloatingPointError, match="train/loss is nan"):
        module.training_step({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}, 0)


@pytest.mark.parametrize("loss", ["reverse_kl", "jsd", "tvd", "skew_kl", "cross_entropy"])
def test_every_loss_config_trains_end_to_end(tmp_path, tiny_target_dir, text_file, loss):
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, f"loss={loss}", "trainer.max_steps=2",
                             "spec_eval.enabled=false", "export.enabled=false"))
    assert summary["steps"] == 2 and 0 <= summary["after"]["val/expected_accept"] <= 1


def test_cross_entropy_baseline_never_runs_the_target_in_training(tokenizer):
    V = len(tokenizer)
    target, draft = make_model(V, seed=1), make_model(V, seed=2)
    module = DistillModule(target, draft, loss=LossSettings("cross_entropy"))
    calls = []
    target.get_decoder().register_forward_hook(lambda *a: calls.append(1))
    ids = torch.randint(0, V, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    loss = module.training_step(batch, 0)
    expected = torch.nn.functional.cross_entropy(draft(ids).logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
    assert not calls and loss.item() == pytest.approx(expected.item(), rel=1e-4)


def test_bad_loss_settings_fail_before_loading_models(tmp_path, tiny_target_dir, text_file):
    with pytest.raises(ValueError, match="beta"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "loss=jsd", "loss.params.beta=1.5"))
    with pytest.raises(ValueError, match="ce_weight"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "loss.ce_weight=2"))
    with pytest.raises(ValueError, match="unknown loss"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "loss.name=nope"))


def test_lora_fine_tuning_trains_adapters_only_and_exports_a_merged_plain_model(tmp_path, tiny_target_dir, text_file):
    general = train(tiny_cfg(tmp_path / "general", tiny_target_dir, text_file, "spec_eval.enabled=false"))
    base = AutoModelForCausalLM.from_pretrained(general["export"]).eval()
    summary = train(tiny_cfg(tmp_path / "lora", tiny_target_dir, text_file, "model/draft=pretrained",
                             f"model.draft.name_or_path={general['export']}", "lora.enabled=true", "lora.r=4",
                             "optim.lr=1e-2", "spec_eval.draft_vocab=64"))
    assert 0 <= summary["after"]["test/alpha"] <= 1  # speculative decoding ran with the adapters (and a cut head)
    ckpt = read_checkpoint(tmp_path / "lora" / "run" / "checkpoints" / "last.ckpt")
    assert ckpt["draftsmith"]["lora"]["r"] == 4
    assert any("lora_A" in k for k in ckpt["state_dict"])
    export = tmp_path / "lora" / "run" / "export"
    assert summary["export"] == str(export)
    weights = json.loads((export / "config.json").read_text())
    assert "lora" not in json.dumps(weights) and not (export / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(export).eval()  # a plain model: no peft needed to load it
    assert not any("lora" in name for name, _ in merged.named_parameters())
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, draft_from_checkpoint(ckpt)(ids).logits, atol=1e-5)
        assert not torch.allclose(merged(ids).logits, base(ids).logits, atol=1e-4)  # the adapters learned something
    # embeddings were not trained: LoRA touched only the target modules
    assert torch.equal(merged.get_input_embeddings().weight, base.get_input_embeddings().weight)
    with pytest.raises(ValueError, match="target_modules"):
        train(tiny_cfg(tmp_path / "bad", tiny_target_dir, text_file, "lora.enabled=true", "lora.target_modules=[nope]"))


def test_onpolicy_steps_are_a_deterministic_fraction():
    from train.onpolicy import is_onpolicy_step

    picks = [is_onpolicy_step(s, 0.3) for s in range(2000)]
    assert 0.25 < sum(picks) / 2000 < 0.35 and picks == [is_onpolicy_step(s, 0.3) for s in range(2000)]
    assert not any(is_onpolicy_step(s, 0.0) for s in range(100)) and all(is_onpolicy_step(s, 1.0) for s in range(100))


def test_draft_continuations_are_the_drafts_own_text_and_only_they_are_scored(tokenizer):
    from train.onpolicy import draft_continuations

    draft = make_model(len(tokenizer), seed=3, init=0.3)
    ids = torch.randint(3, len(tokenizer), (2, 20), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    out = draft_continuations(draft, batch, prompt_tokens=5, new_tokens=7, temperature=0.0)
    assert out["input_ids"].shape == (2, 12) and torch.equal(out["input_ids"][:, :5], ids[:, :5])
    assert torch.all(out["labels"][:, :5] == -100) and torch.equal(out["labels"][:, 5:], out["input_ids"][:, 5:])
    with torch.no_grad():
        reference = draft.generate(ids[:, :5], attention_mask=torch.ones_like(ids[:, :5]), do_sample=False,
                                   max_new_tokens=7, min_new_tokens=7, pad_token_id=0)
    assert torch.equal(out["input_ids"], reference)  # greedy: exactly what the draft would write
    sampled = draft_continuations(draft, batch, 5, 7, 1.0, torch.Generator().manual_seed(1))
    assert sampled["input_ids"].shape == (2, 12)


def test_onpolicy_training_runs_end_to_end(tmp_path, tiny_target_dir, text_file):
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "onpolicy.fraction=1.0", "onpolicy.prompt_tokens=8",
                             "onpolicy.new_tokens=8", "trainer.max_steps=2", "spec_eval.enabled=false",
                             "export.enabled=false"))
    assert summary["steps"] == 2
    with pytest.raises(ValueError, match="onpolicy"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "onpolicy.fraction=1.5"))


def test_after_metrics_reuse_the_final_fit_validation(tmp_path, tiny_target_dir, text_file, monkeypatch):
    """When fit validated the final weights, 'after' reuses those numbers instead of validating twice."""
    import lightning as L

    calls = []
    original = L.Trainer.validate
    monkeypatch.setattr(L.Trainer, "validate", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "trainer.max_steps=4"))  # validates at 2 and 4
    assert len(calls) == 1  # only 'before'
    for key in ("val/top1_agree", "val/expected_accept", "val/kl", "val/alpha", "test/alpha", "test/speedup"):
        assert key in summary["after"]
    calls.clear()
    train(tiny_cfg(tmp_path / "b", tiny_target_dir, text_file, "trainer.max_steps=3", "spec_eval.every_n_validations=2"))
    assert len(calls) == 2  # the last fit validation (step 2) is not the final weights: validate again


def test_bf16_mixed_makes_only_the_draft_bfloat16_and_the_teacher_keeps_its_dtype(tokenizer):
    V = len(tokenizer)
    target, draft = make_model(V, layers=2), make_model(V, layers=1, seed=5)
    module = DistillModule(target, draft)
    seen = {"target": set(), "draft": set()}
    for name, model in (("target", target), ("draft", draft)):
        for layer in (model.model.layers[0].mlp.down_proj, model.get_output_embeddings()):
            layer.register_forward_hook(lambda m, i, out, name=name: seen[name].add(out.dtype))
    ids = torch.randint(0, V, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    full = module._distill(batch, metrics=True)
    seen = {"target": set(), "draft": set()}
    with torch.autocast("cpu", dtype=torch.bfloat16):  # what trainer.precision=bf16-mixed does on a CPU
        mixed = module._distill(batch, metrics=True)
    assert seen == {"target": {torch.float32}, "draft": {torch.bfloat16}}
    mixed["loss"].backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in draft.parameters())  # fp32 master weights
    assert mixed["loss"].dtype == torch.float32
    assert mixed["loss"].item() == pytest.approx(full["loss"].item(), rel=0.05)


def test_bf16_mixed_trains_end_to_end(tmp_path, tiny_target_dir, text_file):
    summary = train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "trainer.precision=bf16-mixed",
                             "trainer.max_steps=2", "spec_eval.enabled=false", "export.enabled=false"))
    assert summary["steps"] == 2 and 0 <= summary["after"]["val/expected_accept"] <= 1


def test_decoding_conditions_caption():
    from train.distill import decoding_conditions

    assert decoding_conditions({}) == ""
    assert decoding_conditions({"draft_weights": "int8", "draft_vocab": 8192}) == (
        ", int8 draft weights, draft head over the first 8192 token ids")
    assert decoding_conditions({"confidence_threshold": 0.8}) == " at most, stopped after a token the draft gives p < 0.8"


def test_step_description():
    from train.progress import progress_bar, step_description
    assert step_description(1, 120, 160) == "Epoch 1 · step 120/160"
    assert step_description(0, 5, -1) == step_description(0, 5, None) == "Epoch 0"
    with pytest.raises(ValueError, match="progress_bar must be rich, tqdm or none"):
        progress_bar("fancy")


@pytest.mark.parametrize("bar,terminal", [("tqdm", False), ("rich", True), ("rich", False)])
def test_progress_bars_count_steps_against_the_budget(tmp_path, tiny_target_dir, text_file, capsys, caplog,
                                                      monkeypatch, bar, terminal):
    """Lightning's own bars print 'Epoch 0/-2' for a run budgeted by max_steps; ours name the step. Off a terminal
    (a log file) rich's live bar would show nothing until the end: there the run logs step and validation lines."""
    monkeypatch.setattr("train.progress.on_a_terminal", lambda: terminal)
    caplog.set_level(logging.INFO, logger="draftsmith")
    cfg = tiny_cfg(tmp_path, tiny_target_dir, text_file, f"progress_bar={bar}", "export.enabled=false",
                   "spec_eval.enabled=false")
    train(cfg)
    printed = capsys.readouterr()
    shown = printed.out + printed.err + caplog.text
    assert "step 3/3" in shown and "/-2" not in shown
    if bar == "rich" and not terminal:
        assert "step 3/3 (100%), train/loss" in caplog.text and "validation at step 3: val/" in caplog.text
        assert "━" not in printed.out + printed.err  # no live bar drawn into the log


def test_step_lines_say_time_per_step_and_time_left_from_where_a_resumed_run_began():
    from train.progress import StepLines
    lines = StepLines()
    lines.first_step = 40  # resumed at step 40
    line = lines.step_line(60, 160, 600.0, {"train/loss": 0.4123, "val/kl": 0.5})
    assert line == "step 60/160 (38%), train/loss 0.4123, 30.0 s/step, 0:10:00 spent, 0:50:00 left"
    assert lines.step_line(40, -1, 5.0, {}) == "step 40, 0:00:05 spent"


@pytest.mark.parametrize("recipe", ["qwen_coder_quick", "qwen_coder", "qwen_coder_layers_quick", "qwen_coder_layers"])
def test_qwen_coder_recipe_runs_on_tiny_stand_ins(tmp_path, tiny_target_dir, tokenizer, recipe):
    """The Qwen2.5-Coder recipes' code path in the fast suite, tiny models standing in for the pair: the target answers
    code prompts into a greedy store, then the draft learns them. qwen_coder(_quick): LoRA on a whole model of the
    same vocabulary, forward KL against the live target, merged on export; qwen_coder_layers(_quick): layers cut from
    that model learn the answers by cross-entropy (the target never runs in a training step) and the export keeps
    the donor's width. Every recipe but the cut quick one scores and exports the ids the answers use most."""
    donor = tmp_path / "donor"
    make_model(len(tokenizer), layers=3, hidden=16, seed=5).save_pretrained(donor)
    tokenizer.save_pretrained(donor)
    whole = recipe in ("qwen_coder_quick", "qwen_coder")
    draft = [f"model.draft.name_or_path={donor}"] if whole else [f"model.draft.source={donor}", "model.draft.layers=[0,2]"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("distill", overrides=[
            f"+experiment={recipe}", f"model.target.name_or_path={tiny_target_dir}", "model.target.slug=tiny",
            "model.draft.train_vocab=48", *draft, "data.generate.n_prompts=8",
            "data.generate.batch_size=4", "data.generate.max_new_tokens=12", "data.block_size=16", "data.val_tokens=16",
            "data.batch_size=2", "trainer.max_steps=2",
            "trainer.val_check_interval=1", "progress_bar=none", f"paths.output_dir={tmp_path / 'run'}",
            f"paths.cache_dir={tmp_path / 'cache'}"])
    assert cfg.data.prompts_from == "code"
    assert (cfg.loss.name, cfg.teacher, cfg.lora.enabled) == (
        ("forward_kl", "live", True) if whole else ("cross_entropy", "live", False))
    summary = train(cfg)
    assert summary["steps"] == 2
    assert summary["setup"]["draft_layers"] == (3 if whole else 2)
    assert (tmp_path / "cache" / "generated" / "tiny" / "code.jsonl").read_text().count("\n") == 8
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "export")
    assert exported.config.hidden_size == 16 and exported.config.vocab_size == len(tokenizer)
    assert not any("lora" in name for name in exported.state_dict())  # adapters merged
    saved = tmp_path / "run" / "export" / "draft_vocab.json"
    if recipe != "qwen_coder_layers_quick":
        from data.token_ranking import rank_source

        store = {"kind": "files", "path": str(tmp_path / "cache" / "generated" / "tiny" / "code.jsonl"),
                 "format": "chat"}
        assert json.loads(saved.read_text())["ranking"] == rank_source(store, tokenizer, len(tokenizer), "store")
    else:
        assert not saved.exists()  # the lowest 48 ids: nothing to save


@pytest.mark.integration  # a training run and an evaluation: several seconds, outside the 2-minute fast suite
def test_a_draft_trained_over_ranked_ids_exports_them_and_decodes_with_them(tmp_path, tiny_target_dir, text_file):
    """model.draft.train_vocab_from=data: training keeps the ids most frequent in its own labels, the export saves
    them (draft_vocab.json), and eval/speculate.py cuts the draft's head to the same ids (still lossless)."""
    import datasets

    from data.token_ranking import rank_labels
    from eval.speculate import evaluate

    train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "model.draft.train_vocab=48",
                   "model.draft.train_vocab_from=data", "spec_eval.draft_vocab=48"))
    export = tmp_path / "run" / "export"
    saved = json.loads((export / "draft_vocab.json").read_text())
    cache = next((tmp_path / "cache" / "data").glob("*/dataset_dict.json")).parent
    labels = datasets.load_from_disk(str(cache))["train"]["labels"]
    assert saved["ranking"] == rank_labels(labels, 320) and saved["size"] == 48
    assert saved["from"].startswith("training text of")
    # the training callback decoded with the same ranked head, and says so (not "the first 48 ids")
    assert "draft head over the 48 token ids most frequent" in (export / "README.md").read_text()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("speculate", overrides=[f"target={tiny_target_dir}", f"drafts=[{export}]", "max_new_tokens=8",
                                              "n_prompts=2", f"out={tmp_path / 'eval'}", "domains=[general]",
                                              "cpu_matmul=torch", "gamma=[2]", "draft_vocab=48"])
    records = evaluate(cfg)
    vocab = json.loads((tmp_path / "eval" / "results.json").read_text())["conditions"]["draft_vocab"][str(export)]
    assert vocab["restricted"] and vocab["order"] == "frequency" and vocab["ranked_by"].startswith("draft_vocab.json")
    assert all(r["greedy_identical"] for r in records)


def test_train_vocab_from_needs_train_vocab_and_a_known_value(tmp_path, tiny_target_dir, text_file):
    from train.distill import check_config

    with pytest.raises(ValueError, match="needs train_vocab"):
        check_config(tiny_cfg(tmp_path, tiny_target_dir, text_file, "model.draft.train_vocab_from=data"))
    with pytest.raises(ValueError, match="must be null"):
        check_config(tiny_cfg(tmp_path, tiny_target_dir, text_file, "model.draft.train_vocab=48",
                              "model.draft.train_vocab_from=answers"))


def test_the_before_after_caption_names_the_head_the_callback_decoded_with():
    from train.distill import decoding_conditions

    assert decoding_conditions({"draft_vocab": 64}) == ", draft head over the first 64 token ids"
    assert decoding_conditions({"draft_vocab": 64, "draft_vocab_order": "frequency"}) == (
        ", draft head over the 64 token ids most frequent in its training text")
    assert decoding_conditions({"draft_weights": "int4"}) == ", int4 draft weights"


def test_a_missing_train_vocab_source_fails_before_the_teacher_cache_is_built(tmp_path, tiny_target_dir, text_file):
    """train_vocab_from names a data source: it is read before the (possibly hour-long) teacher cache."""
    cfg = tiny_cfg(tmp_path, tiny_target_dir, text_file, "model/draft=eagle", "teacher=cache",
                   "spec_eval.enabled=false", "model.draft.train_vocab=48",
                   "model.draft.train_vocab_from={kind: files, path: '${paths.cache_dir}/missing.jsonl', format: chat}")
    with pytest.raises(ValueError, match="missing.jsonl does not exist"):
        train(cfg)
    assert not (tmp_path / "cache" / "teacher").exists()
    # a standalone draft learns from the cached top-k, which train_vocab cannot restrict: refused before any work
    with pytest.raises(ValueError, match="train_vocab works with teacher=live"):
        train(tiny_cfg(tmp_path, tiny_target_dir, text_file, "teacher=cache", "loss=forward_kl",
                       "spec_eval.enabled=false", "model.draft.train_vocab=48"))
    assert not (tmp_path / "cache" / "teacher").exists()
