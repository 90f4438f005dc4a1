"""vLLM as the data engine (issue #62 item 5): answers/hour of the Qwen2.5-Coder-1.5B writing training answers,
today's engine (transformers' batched generate() with prepacked matmuls, batch 16: how data/stores grew) beside
scripts/generate_data.py engine=vllm (a vllm serve process) at batch 32 and at batch 64, each with the next batch sent
while one is decoded (vllm.in_flight=2: the server's free slots take the next batch's prompts as answers end), in
rounds of 96 prompts (so a round holds more than one batch of 32), each setting with its own fresh store, taking
turns in rounds (each round adds the next prompts to every store); every call runs in a child process of its own, so
one engine's memory is gone before the other's starts. Model loading and the server's start are left out of the
rate. Greedy answers: each store is compared with the repository's store (data/stores, written by today's engine).

    make setup-qwen && make setup-vllm && python bench/training/data-engine-vllm/measure.py   # from the repo root

Writes results.json and results.md beside this file.
"""
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")
from data.generated import done_prompts  # noqa: E402

HERE = Path(__file__).resolve().parent
TARGET = "embedded:qwen2.5-coder-1.5b-instruct"
DOMAIN, ROUNDS, PER_ROUND, NEW_TOKENS = "medical", 2, 96, 128
REPO_STORE = Path("data/stores/qwen25_coder_1_5b") / f"{DOMAIN}.jsonl"
SETTINGS = [  # name, overrides
    ("generate, batch 16, prepacked matmuls (today's engine)", ["engine=generate", "batch_size=16",
                                                                "cpu_matmul=prepacked"]),
    ("vLLM 0.32.0 CPU, batch 32, two batches in flight", ["engine=vllm", "batch_size=32", "vllm.in_flight=2"]),
    ("vLLM 0.32.0 CPU, batch 64, two batches in flight", ["engine=vllm", "batch_size=64", "vllm.in_flight=2"]),
]


def run_one(overrides, out, n_prompts, cache, queue):
    from hydra import compose, initialize_config_dir

    from train.teacher_data import generate_store

    with initialize_config_dir(config_dir=str(Path("conf").resolve()), version_base="1.3"):
        cfg = compose("generate_data", overrides=[f"target={TARGET}", f"prompts_from={DOMAIN}",
                                                  f"n_prompts={n_prompts}", f"max_new_tokens={NEW_TOKENS}",
                                                  f"cache_dir={cache}", "dtype=float32", f"out={out}", *overrides])
    stats = {}
    generate_store(cfg, stats=stats)
    queue.put(stats)


def in_child(*args) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=run_one, args=(*args, queue))
    child.start()
    stats = queue.get()
    child.join()
    return stats


def answers(store: Path) -> dict:
    out = {}
    for line in store.read_text().splitlines():
        user, assistant = json.loads(line)["messages"]
        out[user["content"]] = assistant["content"]
    assert len(out) == len(done_prompts(store))
    return out


def first_divergence(a: str, b: str) -> dict:
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"char": i, "here": a[max(0, i - 30):i + 30], "repository": b[max(0, i - 30):i + 30]}


def main():
    cache = os.environ.get("DRAFTSMITH_CACHE", os.path.expanduser("~/.cache/draftsmith"))
    stores = Path(tempfile.mkdtemp(prefix="data-engine-vllm-"))
    totals = {name: {"answers": 0, "answer_tokens": 0, "seconds": 0.0, "rounds": []} for name, _ in SETTINGS}
    for round_ in range(1, ROUNDS + 1):  # round r adds prompts (r-1)*PER_ROUND+1 .. r*PER_ROUND to each store
        for i, (name, overrides) in enumerate(SETTINGS):
            stats = in_child(overrides, str(stores / f"s{i}.jsonl"), round_ * PER_ROUND, cache)
            for k in ("answers", "answer_tokens", "seconds"):
                totals[name][k] += stats.get(k, 0)
            totals[name]["rounds"].append(stats["answers"] / stats["seconds"] * 3600)
            print(f"round {round_}: {name}: {stats}", flush=True)
    kept = answers(REPO_STORE)
    rows = []
    for i, (name, overrides) in enumerate(SETTINGS):
        t, mine = totals[name], answers(stores / f"s{i}.jsonl")
        differ = [p for p in mine if mine[p] != kept[p]]
        rows.append({"setting": name, "overrides": overrides, **t,
                     "answers_per_hour": t["answers"] / t["seconds"] * 3600,
                     "answer_tok_s": t["answer_tokens"] / t["seconds"],
                     "identical_to_repository": 1 - len(differ) / len(mine),
                     "first_divergences": [{"prompt": p[:80], **first_divergence(mine[p], kept[p])} for p in differ]})
    for r in rows:
        r["over_today"] = r["answers_per_hour"] / rows[0]["answers_per_hour"]
        r["rounds_over_today"] = [a / b for a, b in zip(r["rounds"], rows[0]["rounds"])]
    from eval.shared.provenance import provenance
    out = {"conditions": {"target": TARGET, "domain": DOMAIN, "prompts": ROUNDS * PER_ROUND, "rounds": ROUNDS,
                          "max_new_tokens": NEW_TOKENS, "temperature": 0.0, "cpu": platform.processor(),
                          "cores": os.cpu_count(), "repository_store": str(REPO_STORE),
                          "provenance": provenance(TARGET, [])},
           "rows": rows}
    (HERE / "results.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["| setting | answers | answer tokens | seconds | answers/hour | answer tok/s | over today's engine "
             "(per round) | answers identical to the repository's store |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_round = ", ".join(f"{x:.2f}x" for x in r["rounds_over_today"])
        lines.append(f"| {r['setting']} | {r['answers']} | {r['answer_tokens']} | {r['seconds']:.0f} "
                     f"| {r['answers_per_hour']:.0f} | {r['answer_tok_s']:.1f} | {r['over_today']:.2f}x ({per_round}) "
                     f"| {r['identical_to_repository']:.2f} |")
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
