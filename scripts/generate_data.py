"""Sequence-level distillation data: the target answers prompts drawn from a domain's corpora.

    python scripts/generate_data.py prompts_from=general n_prompts=400
    python train/distill.py data=generated data.prompts_from=general     # then train on the answers

Answers are appended to a JSONL store (chat records) after every batch: rerunning the same command after a
crash or Ctrl-C resumes where it stopped. Greedy answers by default: exactly what greedy serving will produce.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_generate
    from eval.shared.preflight import preflight

    preflight("generate_data", check_generate)

import hydra
from omegaconf import DictConfig

from eval.shared.preflight import usage_errors
from train.teacher_data import generate_store


@hydra.main(config_path="../conf", config_name="generate_data", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        generate_store(cfg)


if __name__ == "__main__":
    main()
