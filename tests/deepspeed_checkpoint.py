"""Helper for tests/test_distributed.py (run in its own process: DeepSpeed sets up torch.distributed):
write a ZeRO-2 checkpoint folder the way Lightning's DeepSpeedStrategy does, from a Draftsmith last.ckpt.

    DS_ACCELERATOR=cpu python tests/deepspeed_checkpoint.py <last.ckpt> <out folder> <expected weights .pt>

The draft is wrapped so its parameters are named as Lightning names them (_forward_module.draft.*), trained one
ZeRO-2 step on CPU, and saved with Lightning's client state (the checkpoint without state_dict and optimizer
states, so the `draftsmith` entry travels); its weights after the step go to <expected weights .pt>.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from eval.shared.export import draft_from_checkpoint  # noqa: E402


def main(ckpt_path: str, out: str, expected: str) -> None:
    import deepspeed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29541"), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    deepspeed.init_distributed(dist_backend="gloo")
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    lightning_module = torch.nn.Module()
    lightning_module.draft = draft_from_checkpoint(ckpt).train()
    wrapper = torch.nn.Module()
    wrapper._forward_module = lightning_module
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}}}
    engine, *_ = deepspeed.initialize(model=wrapper, model_parameters=wrapper.parameters(), config=config)
    ids = torch.arange(8).unsqueeze(0) % lightning_module.draft.config.vocab_size
    loss = lightning_module.draft(ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    client_state = {k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer_states")}
    engine.save_checkpoint(out, client_state=client_state, tag="checkpoint")
    torch.save({k: v.detach().clone() for k, v in lightning_module.draft.state_dict().items()}, expected)


if __name__ == "__main__":
    main(*sys.argv[1:4])
