"""The data engine's speed on the Qwen pair: answers/hour of the 1.5B writing training answers, transformers' batched
generate() (what scripts/generate_data.py does by default) beside our batched speculative decoder with the 0.5B,
each setting with its own fresh store, taking turns in rounds (each round adds the next prompts to every store).

    make setup-qwen && python bench/training/data-engine-qwen/measure.py      # from the repository root

Writes results.json and results.md beside this file. Greedy answers: every store should hold the same text, so the
share of answers identical to the first setting's is reported too.
"""
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from data.generated import done_prompts  # noqa: E402
from decode.models.loading import load_frozen, load_tokenizer  # noqa: E402
from eval.shared.provenance import provenance  # noqa: E402
from train.teacher_data import generate_store  # noqa: E402

HERE = Path(__file__).resolve().parent
TARGET, DRAFT = "embedded:qwen2.5-coder-1.5b-instruct", "embedded:qwen2.5-coder-0.5b-instruct"
DOMAIN, ROUNDS, PER_ROUND, NEW_TOKENS = "medical", 2, 8, 128
SETTINGS = [  # name, overrides
    ("generate, batch 8 (today's default engine)", ["engine=generate", "batch_size=8"]),
    ("generate, batch 8, prepacked matmuls", ["engine=generate", "batch_size=8", "cpu_matmul=prepacked"]),
    ("speculative, batch 4, γ=3, int4 0.5B, prepacked", ["engine=speculative", "batch_size=4", "cpu_matmul=prepacked",
                                                          f"speculative.draft={DRAFT}", "speculative.draft_quant=int4"]),
    ("speculative, batch 2, γ=3, int4 0.5B, prepacked", ["engine=speculative", "batch_size=2", "cpu_matmul=prepacked",
                                                          f"speculative.draft={DRAFT}", "speculative.draft_quant=int4"]),
]


def config(overrides, out, n_prompts, cache):
    with initialize_config_dir(config_dir=str(Path("conf").resolve()), version_base="1.3"):
        return compose("generate_data", overrides=[f"target={TARGET}", f"prompts_from={DOMAIN}", f"n_prompts={n_prompts}",
                                                   f"max_new_tokens={NEW_TOKENS}", f"cache_dir={cache}", "dtype=float32",
                                                   f"out={out}", *overrides])


def main():
    cache = os.environ.get("DRAFTSMITH_CACHE", os.path.expanduser("~/.cache/draftsmith"))
    tokenizer, target = load_tokenizer(TARGET, cache_dir=cache), load_frozen(TARGET, dtype="float32", cache_dir=cache)
    stores = Path(tempfile.mkdtemp(prefix="data-engine-"))
    totals = {name: {"answers": 0, "answer_tokens": 0, "seconds": 0.0} for name, _ in SETTINGS}
    for round_ in range(1, ROUNDS + 1):  # the settings take turns: round r adds prompts (r-1)*8+1 .. r*8 to each
        for i, (name, overrides) in enumerate(SETTINGS):
            stats = {}
            generate_store(config(overrides, stores / f"s{i}.jsonl", round_ * PER_ROUND, cache), target, tokenizer,
                           stats=stats)
            for k in totals[name]:
                totals[name][k] += stats.get(k, 0)
            print(f"round {round_}: {name}: {stats}", flush=True)
    first = answers(stores / "s0.jsonl")
    rows = []
    for i, (name, overrides) in enumerate(SETTINGS):
        t = totals[name]
        mine = answers(stores / f"s{i}.jsonl")
        rows.append({"setting": name, "overrides": overrides, **t, "answers_per_hour": t["answers"] / t["seconds"] * 3600,
                     "answer_tok_s": t["answer_tokens"] / t["seconds"],
                     "identical_to_first": sum(mine.get(p) == a for p, a in first.items()) / len(first)})
    base = rows[0]["answers_per_hour"]
    for r in rows:
        r["over_first"] = r["answers_per_hour"] / base
    out = {"conditions": {"target": TARGET, "draft": DRAFT, "domain": DOMAIN, "prompts": ROUNDS * PER_ROUND,
                          "rounds": ROUNDS, "max_new_tokens": NEW_TOKENS, "temperature": 0.0,
                          "threads": torch.get_num_threads(), "cpu": platform.processor(),
                          "provenance": provenance(TARGET, [DRAFT])},
           "rows": rows}
    (HERE / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["| setting | answers | answer tokens | seconds | answers/hour | answer tok/s | over the first | "
             "answers identical to the first's |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['answers']} | {r['answer_tokens']} | {r['seconds']:.0f} "
                     f"| {r['answers_per_hour']:.0f} | {r['answer_tok_s']:.1f} | {r['over_first']:.2f}x "
                     f"| {r['identical_to_first']:.2f} |")
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def answers(store: Path) -> dict:
    out = {}
    for line in store.read_text().splitlines():
        user, assistant = json.loads(line)["messages"]
        out[user["content"]] = assistant["content"]
    assert len(out) == len(done_prompts(store))
    return out


if __name__ == "__main__":
    main()
