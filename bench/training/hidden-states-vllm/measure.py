"""Issue #63 item 1: can vLLM's `extract_hidden_states` build our feature cache on this CPU, and would it be faster?

Two parts, on the Qwen2.5-Coder-1.5B and the first packed 256-token blocks of the stored answers (chat template,
the three domains in turn), keeping what enters layers 2, 14 and 25 (EAGLE-3's layers for this target):

1. vLLM's own way: a `vllm serve` with speculative method `extract_hidden_states` and its
   ExampleHiddenStatesConnector writing each request's hidden states to disk, sent one block (max_tokens=1). What it
   wrote is compared with ours (relative error per row of each layer); where it writes nothing, the server log's
   error is recorded as is.
2. The work extraction rides on: vLLM's plain prefill of the same blocks (one request of 8 blocks, max_tokens=1,
   prefix caching off) against train/teacher_cache.features_of_target over the same 8 blocks (what the cache build
   runs, float32 weights), taking turns batch by batch. vLLM's extraction can be no faster than its prefill, so this
   bounds what it could gain. The model loads and the servers' starts are left out.

    make setup-qwen && make setup-vllm && python bench/training/hidden-states-vllm/measure.py   # from the repo root

Writes results.json and results.md beside this file (the servers' logs too). Nothing else may run meanwhile.
"""
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, ".")

HERE = Path(__file__).resolve().parent
TARGET = "embedded:qwen2.5-coder-1.5b-instruct"
LAYERS = [2, 14, 25]
BLOCK, BATCH, BATCHES = 256, 8, 6
STORES = [Path("data/stores/qwen25_coder_1_5b") / f"{d}.jsonl" for d in ("code", "medical", "general")]


def blocks(tokenizer, n: int) -> list[list[int]]:
    """The first n packed blocks of the stores' answers (chat template, each domain's answers in turn)."""
    ids, lines = [], [open(s).readlines() for s in STORES]
    for i in range(max(map(len, lines))):
        for store in lines:
            if i < len(store) and len(ids) < n * BLOCK:
                chat = tokenizer.apply_chat_template(json.loads(store[i])["messages"], return_dict=True)
                ids += list(chat["input_ids"])
    return [ids[k * BLOCK:(k + 1) * BLOCK] for k in range(n)]


def extract_args(store: str) -> list[str]:
    spec = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": LAYERS}}}
    transfer = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": store}}
    return ["--speculative-config", json.dumps(spec), "--kv-transfer-config", json.dumps(transfer)]


def log_errors(log: Path) -> list[str]:
    """The log's error lines (the last few), as vLLM wrote them."""
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = [ln.strip() for ln in text.splitlines() if re.search(r"Error|error|Traceback|not supported|CUDA", ln)]
    return lines[-6:]


def try_extract(folder: Path, block: list[int], ours) -> dict:
    """Part 1: vLLM's extract_hidden_states on one block; what it wrote, compared with ours, or how it failed."""
    from safetensors.torch import load_file

    from eval.shared.vllm_server import VllmServer

    store, log = Path(tempfile.mkdtemp(prefix="vllm-hidden-")), HERE / "vllm-extract.log"
    try:
        with VllmServer(folder, extra=extract_args(str(store)), max_num_seqs=1, kv_cache_gb=2, log=log) as server:
            server.complete_batch([block], 1, timeout=600)
            time.sleep(5)  # the connector writes on a thread after the request ends
    except Exception as e:  # noqa: BLE001 - the failure is the finding: recorded with vLLM's own words
        return {"runs": False, "error": f"{type(e).__name__}: {str(e)[-300:]}", "log_errors": log_errors(log)}
    files = sorted(store.rglob("*.safetensors"))
    if not files:
        return {"runs": False, "error": "no hidden-states file written", "log_errors": log_errors(log)}
    states = load_file(str(files[0]))["hidden_states"].float()  # (T, layers, H)
    h = states.shape[-1]
    errors = [float(((states[:BLOCK, i] - ours[:, i * h:(i + 1) * h]).norm(dim=-1)
                     / ours[:, i * h:(i + 1) * h].norm(dim=-1).clamp_min(1e-12)).median()) for i in range(len(LAYERS))]
    return {"runs": True, "shape": list(states.shape),
            "median_relative_error_per_layer": dict(zip(map(str, LAYERS), errors))}


def timed_prefill(folder: Path, target, data: list[list[int]]) -> tuple[list[float], list[float]]:
    """Part 2: seconds per batch of BATCH blocks, ours (features_of_target) and vLLM's plain prefill, in turns."""
    import torch

    from eval.shared.vllm_server import VllmServer
    from train.teacher_cache import features_of_target

    ours_s, vllm_s = [], []
    args = ["--no-enable-prefix-caching", "--max-num-batched-tokens", str(BATCH * BLOCK)]
    with VllmServer(folder, extra=args, max_num_seqs=BATCH, kv_cache_gb=2, log=HERE / "vllm-prefill.log") as server:
        server.complete_batch(data[-BATCH:], 1)  # warm-up on blocks not timed: the first batch compiles
        for b in range(BATCHES):
            batch = data[b * BATCH:(b + 1) * BATCH]
            for who in (("ours", "vllm") if b % 2 == 0 else ("vllm", "ours")):
                started = time.perf_counter()
                if who == "ours":
                    with torch.no_grad():
                        features_of_target(target, torch.tensor(batch), LAYERS)
                    ours_s.append(time.perf_counter() - started)
                else:
                    server.complete_batch(batch, 1)
                    vllm_s.append(time.perf_counter() - started)
            print(f"batch {b + 1}/{BATCHES}: ours {ours_s[-1]:.1f} s, vLLM prefill {vllm_s[-1]:.1f} s", flush=True)
    return ours_s, vllm_s


def main() -> None:
    import torch

    from decode.models.loading import load_causal_lm, load_tokenizer, resolve
    from eval.shared.provenance import provenance
    from train.teacher_cache import AUX_FEATURES, features_of_target

    torch.set_num_threads(2)
    folder = resolve(TARGET)
    data = blocks(load_tokenizer(folder), BATCH * (BATCHES + 1))  # the last batch warms vLLM up, untimed
    target = load_causal_lm(folder, dtype="float32").eval()
    with torch.no_grad():
        ours_first = features_of_target(target, torch.tensor(data[:1]), LAYERS)[AUX_FEATURES][0].float()
    extract = try_extract(folder, data[0], ours_first)
    print(f"vLLM extract_hidden_states: {json.dumps(extract)}", flush=True)
    ours_s, vllm_s = timed_prefill(folder, target, data)
    report(ours_s, vllm_s, extract, provenance(TARGET, []))


def report(ours_s, vllm_s, extract, prov) -> None:
    tokens = BATCH * BLOCK
    ours_rate, vllm_rate = [tokens / s for s in ours_s], [tokens / s for s in vllm_s]
    ratios = [o / v for o, v in zip(ours_s, vllm_s)]
    result = {"conditions": {"target": TARGET, "layers": LAYERS, "block": BLOCK, "batch_blocks": BATCH,
                             "batches": BATCHES, "dtype": "float32", "cpu": platform.processor() or "cpu",
                             "provenance": prov},
              "extract_hidden_states": extract, "ours_tok_s": ours_rate, "vllm_prefill_tok_s": vllm_rate,
              "vllm_over_ours": ratios}
    (HERE / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    said = ("runs: " + json.dumps(extract["median_relative_error_per_layer"]) if extract["runs"]
            else "does not run here: " + extract["error"] + ("; vLLM's log: " + " / ".join(extract["log_errors"])
                                                            if extract.get("log_errors") else ""))
    lines = ["| what | tokens/s (median over batches) | per batch |", "|---|---|---|",
             f"| ours: features_of_target (final + aux layers, batch of {BATCH} blocks) | "
             f"{statistics.median(ours_rate):.0f} | " + ", ".join(f"{r:.0f}" for r in ours_rate) + " |",
             f"| vLLM plain prefill of the same blocks (one request of {BATCH}) | "
             f"{statistics.median(vllm_rate):.0f} | " + ", ".join(f"{r:.0f}" for r in vllm_rate) + " |", "",
             f"vLLM's prefill over ours, paired by batch: median {statistics.median(ratios):.2f}x "
             f"(range {min(ratios):.2f}-{max(ratios):.2f}).", "",
             f"vLLM's extract_hidden_states with ExampleHiddenStatesConnector {said}"]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
