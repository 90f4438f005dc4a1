"""The draft-training study: which objective and data raise acceptance.

    python scripts/run_study.py                       # everything: data, 12 training runs, evaluation, tables
    python scripts/run_study.py --skip-eval           # training runs only
    python scripts/run_study.py --real-decoding       # also eval/speculate.py (slow on a CPU: ~30 min)

Arms (conf/experiment/study_*.yaml), same draft, steps, seed and token budget:
  (i) cross-entropy baseline, (ii) forward KL, (iii) reverse KL, (iv) JSD, (v) TVD,
  (vi) the best of (ii)-(v) by teacher-forced val/expected_accept, on the target's own answers,
  (vi-ce) cross-entropy on the same answers (no target logits): separates the data from the objective,
  (vi-t1) (vi) on answers sampled at T=1 instead of greedy ones, (vi-mix) on both, 1 : 1,
  (vii) (vi) + on-policy data on half of the steps,
  (viii) (vi) + LoRA fine-tuning on the target's answers to medical prompts,
  (ix) (vi) fully fine-tuned on medical answers mixed 3:1 with general ones (conf/experiment/medical_finetune.yaml).
Acceptance: eval/acceptance.py (alpha_tf: expected acceptance at every position of the target's own continuations
of the held-out prompts, greedy and T=1), optionally real speculative decoding too. Resumable: a finished arm
(summary.json present) is skipped. Writes <out>/study.json and <out>/study.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

DIVERGENCES = ["forward_kl", "reverse_kl", "jsd", "tvd"]
PYTHON = sys.executable


def run(cmd: list[str]) -> None:
    print("\n$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def train_arm(name: str, overrides: list[str], runs: Path) -> dict:
    out = runs / name
    summary = out / "summary.json"
    if not summary.is_file():  # a crashed or missing arm is trained from scratch
        run([PYTHON, "train/distill.py", *overrides, f"paths.output_dir={out}", "export.overwrite=true",
             "progress_bar=none"])
    return json.loads(summary.read_text())


def generate(prompts_from: str, n: int) -> None:
    """The target's answers (resumable store: only missing prompts are answered)."""
    run([PYTHON, "scripts/generate_data.py", f"prompts_from={prompts_from}", f"n_prompts={n}", "batch_size=100",
         "max_new_tokens=128"])


def alpha_table(records: list[dict], exports: dict[str, str], key: str = "alpha") -> dict:
    """{arm: {"<domain> T=<t>": value}} from eval/speculate.py (alpha) or eval/acceptance.py (alpha_tf) records."""
    by_path = {v: k for k, v in exports.items()}
    table: dict[str, dict] = {}
    for r in records:
        table.setdefault(by_path[r["draft"]], {})[f"{r['domain']} T={r['temperature']:g}"] = r[key]
    return table


def markdown(study: dict) -> str:
    cols = study["columns"]
    lines = ["| arm | loss | data | E[accept] (val) | " + " | ".join(f"α_tf {c}" for c in cols) + " |",
             "|---|---|---|---|" + "---|" * len(cols)]
    for arm, row in study["arms"].items():
        lines.append(f"| {arm} | {row['loss']} | {row['data']} | {row['val_expected_accept']:.3f} | "
                     + " | ".join(f"{row['alpha_tf'].get(c, float('nan')):.3f}" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="outputs/study", help="where the training runs go")
    ap.add_argument("--out", default="bench/training/study", help="where the study tables go")
    ap.add_argument("--n-generated", type=int, default=400, help="target answers per domain for arms (vi), (viii)")
    ap.add_argument("--n-prompts", type=int, default=12, help="evaluation prompts per domain (12 built in)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--real-decoding", action="store_true", help="also run eval/speculate.py (gamma=4, T=0 and 1)")
    args = ap.parse_args()
    runs, out = Path(args.runs), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    summaries = {"ce": train_arm("ce", ["+experiment=study_ce"], runs)}
    for loss in DIVERGENCES:
        summaries[loss] = train_arm(loss, [f"+experiment=study_{loss}"], runs)
    best = max(DIVERGENCES, key=lambda k: summaries[k]["after"]["val/expected_accept"])
    print(f"best divergence by val/expected_accept: {best}", flush=True)
    generate("general", args.n_generated)
    summaries["generated"] = train_arm("generated", ["+experiment=study_generated", f"loss={best}"], runs)
    summaries["generated_ce"] = train_arm("generated_ce", ["+experiment=study_generated", "loss=cross_entropy",
                                                           "task_name=study-generated-ce"], runs)
    summaries["generated_t1"] = train_arm("generated_t1", ["+experiment=study_generated_t1", f"loss={best}"], runs)
    summaries["generated_mix"] = train_arm("generated_mix", ["+experiment=study_generated_mix", f"loss={best}"], runs)
    summaries["onpolicy"] = train_arm("onpolicy", ["+experiment=study_onpolicy", f"loss={best}"], runs)
    generate("medical", args.n_generated)
    summaries["medical_lora"] = train_arm("medical_lora", [
        "+experiment=study_medical_lora", f"loss={best}", f"model.draft.name_or_path={summaries['generated']['export']}"],
        runs)
    summaries["medical_finetune"] = train_arm("medical_finetune", [
        "+experiment=medical_finetune", f"loss={best}", f"model.draft.name_or_path={summaries['generated']['export']}"],
        runs)
    exports = {arm: str(Path(s["export"]).resolve()) for arm, s in summaries.items()}
    study = {"best_divergence": best, "train_seconds": {a: s["seconds"] for a, s in summaries.items()},
             "columns": [f"{d} T={t}" for t in (0, 1) for d in ("general", "medical", "code")], "arms": {}}
    alpha_tf, stderr, alphas = {}, {}, {}
    drafts = f"drafts=[{','.join(exports.values())}]"
    if not args.skip_eval:
        run([PYTHON, "eval/acceptance.py", drafts, "domains=[general,medical,code]", "temperature=[0,1]",
             f"n_prompts={args.n_prompts}", f"max_new_tokens={args.max_new_tokens}", f"out={out / 'acceptance'}"])
        records = json.loads((out / "acceptance" / "results.json").read_text())["records"]
        alpha_tf = alpha_table(records, exports, "alpha_tf")
        stderr = alpha_table(records, exports, "alpha_tf_stderr")
    if args.real_decoding:
        run([PYTHON, "eval/speculate.py", drafts, "domains=[general,medical,code]", "gamma=[4]", "temperature=[0,1]",
             f"n_prompts={args.n_prompts}", f"max_new_tokens={args.max_new_tokens}", f"out={out / 'eval'}"])
        alphas = alpha_table(json.loads((out / "eval" / "results.json").read_text())["records"], exports)
    data = {"generated": "target answers (general)", "generated_ce": "target answers (general)",
            "generated_t1": "target answers sampled at T=1 (general)",
            "generated_mix": "target answers, greedy 1 : sampled 1 (general)",
            "onpolicy": "target answers (general) + on-policy 50%", "medical_lora": "target answers (medical), LoRA",
            "medical_finetune": "target answers, medical 3 : general 1, full fine-tune"}
    for arm, s in summaries.items():
        cfg = s.get("config", {})
        loss = "cross_entropy" if arm in ("ce", "generated_ce") else (best if arm in data else arm)
        study["arms"][arm] = {"loss": loss,
                              "data": data.get(arm, "text (general)"),
                              "val_expected_accept": s["after"]["val/expected_accept"],
                              "val_top1_agree": s["after"]["val/top1_agree"], "alpha_tf": alpha_tf.get(arm, {}),
                              "alpha_tf_stderr": stderr.get(arm, {}), "alpha": alphas.get(arm, {}),
                              "export": exports[arm], **({"config": cfg} if cfg else {})}
    study["seconds"] = time.time() - t0
    (out / "study.json").write_text(json.dumps(study, indent=1))
    (out / "study.md").write_text(markdown(study))
    print(markdown(study))
    print(f"wrote {out / 'study.json'}, {out / 'study.md'}")


if __name__ == "__main__":
    main()
