"""Scaling with Lightning's strategies: 2-process DDP (gloo, CPU) follows the same trajectory as one process on
the same global batch; the FSDP and DeepSpeed configs build valid strategies."""

import json
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
