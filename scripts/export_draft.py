"""Export a Draftsmith checkpoint as a plain Hugging Face folder (safetensors, config, tokenizer, generation config).

    python scripts/export_draft.py ckpt_path=outputs/distill/<run>/checkpoints/last.ckpt out=exports/my-draft
    python scripts/export_draft.py ckpt_path=... out=... overwrite=true dtype=bfloat16

The folder loads with AutoModelForCausalLM.from_pretrained and as transformers' `assistant_model`.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_export
    from eval.shared.preflight import preflight

    preflight("export_draft", check_export)

import hydra
from omegaconf import DictConfig

from eval.shared.preflight import usage_errors
from eval.shared.export import export_checkpoint


@hydra.main(config_path="../conf", config_name="export_draft", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        out = export_checkpoint(cfg.ckpt_path, cfg.out, overwrite=cfg.overwrite, dtype=cfg.dtype)
        print(f"exported {cfg.ckpt_path} -> {out}")


if __name__ == "__main__":
    main()
