"""An exported draft as a GGUF file for llama.cpp's speculative decoding (needs `make setup-llamacpp`).

    python scripts/export_gguf.py export=outputs/distill/<run>/export type=q8_0
    llama-server -m <target>.gguf -md outputs/distill/<run>/export/draft-q8_0.gguf --spec-type draft-simple
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_export_gguf
    from eval.shared.preflight import preflight

    preflight("export_gguf", check_export_gguf)

import hydra
from omegaconf import DictConfig

from eval.shared.preflight import usage_errors
from eval.shared.gguf import export_gguf


@hydra.main(config_path="../conf", config_name="export_gguf", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        print(f"wrote {export_gguf(cfg.export, cfg.out, cfg.type, cfg.cache_dir)}")


if __name__ == "__main__":
    main()
