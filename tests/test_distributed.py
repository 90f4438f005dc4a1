"""Scaling with Lightning's strategies: 2-process DDP (gloo, CPU) follows the same trajectory as one process on
the same global batch; each strategy config builds a real Lightning Trainer (FSDP and DeepSpeed run only on GPUs
in Lightning, which the tests check too); a real ZeRO-2 checkpoint folder consolidates and exports; FSDP turns the
speculative-evaluation callback off with a message."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import CONF
from test_train import tiny_overrides
from train.scaling import trainer_kwargs

REPO = Path(__file__).resolve().parents[1]


def _strategy_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("distill", overrides=list(overrides))
    return trainer_kwargs(OmegaConf.to_container(cfg.trainer, resolve=True))


def test_ddp_config_builds_a_two_process_cpu_trainer():
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy

    kwargs = _strategy_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true")
    trainer = L.Trainer(**kwargs, logger=False, enable_checkpointing=False)
    assert isinstance(trainer.strategy, DDPStrategy) and trainer.num_devices == 2
    assert trainer.strategy.num_processes == 2 and trainer.strategy.root_device.type == "cpu"


def test_fsdp_runs_on_gpus_only_and_switches_speculative_eval_off(caplog):
    import lightning as L
    from train.distill import build_spec_eval, check_config

    kwargs = _strategy_cfg("trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=1")
    with pytest.raises(ValueError, match="requires a GPU"):  # Lightning's own check: no CPU FSDP to test here
        L.Trainer(**kwargs, logger=False)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("distill", overrides=["trainer=fsdp"])
        bad = compose("distill", overrides=["trainer=fsdp", "trainer.accelerator=auto", "checkpoint.monitor=val/alpha"])
    with caplog.at_level("WARNING"):
        assert build_spec_eval(cfg, tokenizer=None, target=None) is None
    assert "FSDP" in caplog.text and "eval/speculate.py" in caplog.text
    with pytest.raises(ValueError, match="FSDP"):
        check_config(bad)


@pytest.mark.integration  # CI installs DeepSpeed (make setup-deepspeed) before the integration step
def test_deepspeed_config_builds_a_deepspeed_trainer():
    pytest.importorskip("deepspeed", reason="optional: pip install --no-build-isolation deepspeed==0.19.8")
    import lightning as L
    from lightning.pytorch.strategies import DeepSpeedStrategy

    trainer = L.Trainer(**_strategy_cfg("trainer=deepspeed", "trainer.accelerator=cpu", "trainer.devices=1"),
                        logger=False)
    assert isinstance(trainer.strategy, DeepSpeedStrategy)
    assert trainer.strategy.config["zero_optimization"]["stage"] == 2


@pytest.mark.integration
def test_a_zero2_checkpoint_folder_consolidates_and_exports(tmp_path, tiny_target_dir, text_file):
    """A real ZeRO-2 checkpoint folder (DeepSpeed on CPU, in Lightning's layout) exports to the weights it holds."""
    pytest.importorskip("deepspeed", reason="optional: pip install --no-build-isolation deepspeed==0.19.8")
    from transformers import AutoModelForCausalLM

    from eval.shared.export import export_checkpoint

    _run(tmp_path, tiny_target_dir, text_file, "plain")
    folder, expected = tmp_path / "last.ckpt", tmp_path / "expected.pt"
    done = subprocess.run([sys.executable, "tests/deepspeed_checkpoint.py", str(tmp_path / "plain" / "run" /
                           "checkpoints" / "last.ckpt"), str(folder), str(expected)], cwd=REPO, capture_output=True,
                          text=True, timeout=900, env={**os.environ, "DS_ACCELERATOR": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert folder.is_dir() and (folder / "latest").is_file()
    export_checkpoint(folder, tmp_path / "export")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export").state_dict()
    want = torch.load(expected)
    assert exported.keys() == want.keys()
    for key in want:
        assert torch.allclose(exported[key], want[key], atol=1e-6), key
    assert (tmp_path / "last.ckpt.consolidated").is_file()


def test_fsdp_and_deepspeed_configs_build_lightning_strategies():
    from lightning.pytorch.strategies import FSDPStrategy
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        fsdp = compose("distill", overrides=["+experiment=llama8b_fsdp"])
        ddp = compose("distill", overrides=["trainer=ddp"])
        deepspeed = compose("distill", overrides=["trainer=deepspeed"])
    kwargs = trainer_kwargs(OmegaConf.to_container(fsdp.trainer, resolve=True))
    strategy = kwargs["strategy"]
    assert isinstance(strategy, FSDPStrategy) and strategy.kwargs["use_orig_params"]
    assert LlamaDecoderLayer in strategy.kwargs["auto_wrap_policy"]._module_classes
    assert kwargs["devices"] == 8 and kwargs["precision"] == "bf16-mixed"
    assert fsdp.model.target.name_or_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert trainer_kwargs(OmegaConf.to_container(ddp.trainer))["strategy"] == "ddp"
    assert deepspeed.trainer.strategy == "deepspeed_stage_2"


def _run(tmp_path, tiny_target_dir, text_file, name, *extra):
    out = tmp_path / name
    cmd = [sys.executable, "train/distill.py", *tiny_overrides(
        out, tiny_target_dir, text_file, "trainer.max_steps=4", "trainer.val_check_interval=2",
        "optim.lr=1e-2", "spec_eval.enabled=false", "logger=none", "trainer.gradient_clip_val=null", *extra)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "run" / "summary.json").read_text())
    state = torch.load(out / "run" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    return summary, state


@pytest.mark.integration
def test_two_process_ddp_matches_one_process_on_the_same_global_batch(tmp_path, tiny_target_dir, text_file):
    one, w1 = _run(tmp_path, tiny_target_dir, text_file, "one", "data.batch_size=4")
    two, w2 = _run(tmp_path, tiny_target_dir, text_file, "two", "data.batch_size=2", "trainer=ddp",
                   "trainer.devices=2", "trainer.accelerator=cpu")
    assert one["steps"] == two["steps"] == 4
    for key in ("val/kl", "val/expected_accept", "val/top1_agree"):
        assert two["after"][key] == pytest.approx(one["after"][key], rel=1e-3, abs=1e-5), key
    assert w1.keys() == w2.keys()
    for k in w1:
        assert torch.allclose(w1[k], w2[k], atol=1e-4), k
