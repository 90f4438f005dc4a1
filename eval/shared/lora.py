"""LoRA fine-tuning of a draft with peft (e.g. a general draft adapted to a domain), and merging the adapters
back into plain weights so the exported folder is an ordinary model that serving engines load as is.

    python train/distill.py +domain=medical model/draft=pretrained \
        model.draft.name_or_path=outputs/distill/<general run>/export lora.enabled=true
"""

from __future__ import annotations


def lora_settings(cfg) -> dict:
    """Plain, checkpointable LoRA settings from the `lora` config group."""
    if cfg.r < 1 or cfg.alpha <= 0 or not 0 <= cfg.dropout < 1:
        raise ValueError(f"lora needs r >= 1, alpha > 0 and 0 <= dropout < 1, got r={cfg.r}, alpha={cfg.alpha}, "
                         f"dropout={cfg.dropout}.")
    if not cfg.target_modules:
        raise ValueError("lora.target_modules is empty. Fix: name the draft's linear layers, e.g. [q_proj, v_proj].")
    return {"r": int(cfg.r), "alpha": float(cfg.alpha), "dropout": float(cfg.dropout),
            "target_modules": [str(m) for m in cfg.target_modules]}


def add_lora(model, settings: dict):
    """Wrap `model` with LoRA adapters; only the adapters train (peft freezes the base weights)."""
    from peft import LoraConfig, get_peft_model

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [m for m in settings["target_modules"] if m not in present]
    if missing:
        raise ValueError(f"lora.target_modules {missing} are not modules of the draft "
                         f"({model.config.model_type}). Fix: pick among its linear layers, e.g. q_proj, v_proj.")
    config = LoraConfig(r=settings["r"], lora_alpha=settings["alpha"], lora_dropout=settings["dropout"],
                        target_modules=settings["target_modules"], bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def merge_lora(peft_model):
    """Fold the adapters into the base weights: a plain transformers model with no peft left in it."""
    return peft_model.merge_and_unload()
