"""Side by side, in one process, same prompts and gamma, greedy: target-only decoding, Draftsmith's
speculative decoder, and transformers' generate() alone and with assistant_model=draft (and, with
prompt_lookup=true, both decoders' prompt lookup: no draft model).

Ours runs with the small-batch CPU matmul layout of decode/kernels/fast_linear.py (`cpu_matmul`), a draft whose LM head keeps
the first `draft_vocab` token ids (decode/drafts/draft_vocab.py) and, on CPU, int8 draft weights (decode/drafts/quantize.py,
`draft_quant`); transformers runs stock, as a user gets it, and once more with all three in place
(`hf_assisted_our_kernels`), which separates what those kernels buy from what the decoding loop buys.

    python scripts/bench_decoder.py draft=outputs/distill/<run>/export gamma=4 n_prompts=8 repeats=3

Prints tokens/s (median of `repeats` interleaved passes after a warm-up), speedups, whether outputs are identical to
the target's own greedy output and our speculative runs' acceptance rate alpha; saves JSON to `out`. With an int8
draft, `ours_speculative_float_draft` shows in the same run what quantizing the draft changed, and with the draft's
head cut to `draft_vocab` ids (decode/drafts/draft_vocab.py), `ours_speculative_full_head` what that changed. With
`compile=true`, `ours_*_compiled` run our decoder again on static KV caches with compiled passes (decode/kernels/compiled.py;
CUDA graphs on a GPU); the warm-up pass compiles them.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_bench_decoder
    from eval.shared.preflight import preflight

    preflight("bench_decoder", check_bench_decoder)

import json
import platform
import statistics
import time
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from eval.shared.preflight import usage_errors
from decode.core.metrics import acceptance
from decode.core.speculative import NoProposer, generate
from decode.drafts.draft_vocab import restrict_vocab
from decode.drafts.quantize import quantize_draft
from decode.kernels.compiled import CompiledDecoding, run_length
from decode.kernels.fast_linear import fast_cpu_linears, plan_for
from decode.kernels.runtime import setup_cpu
from decode.models.loading import check_same_vocab, load_frozen, load_tokenizer, special_token_ids
from decode.proposers.draft_model import DraftModelProposer
from decode.proposers.ngram import PromptLookupProposer
from eval.hf_arms import constant_gamma, hf_generate
from data.prompts import encode_prompt, load_prompts


def ours(target, draft, gamma, steps: list | None = None, threshold: float = 0.0):
    """Our decoder as a method; with `steps`, each generation's step logs are appended to it (for alpha)."""
    def run(prompt, max_new, eos):
        proposer = DraftModelProposer(draft, threshold) if draft is not None else NoProposer()
        gen = generate(target, proposer, prompt, gamma if draft is not None else 0, max_new, eos_token_ids=eos)
        if steps is not None:
            steps.extend(gen.steps)
        return gen.tokens
    return run


def ours_lookup(target, gamma, min_n: int, max_n: int, steps: list | None = None):
    """Our decoder with prompt lookup (decode/proposers/ngram.py): no draft model."""
    vocab = target.get_output_embeddings().weight.shape[0]

    def run(prompt, max_new, eos):
        gen = generate(target, PromptLookupProposer(vocab, min_n, max_n, target.device), prompt, gamma, max_new,
                       eos_token_ids=eos)
        if steps is not None:
            steps.extend(gen.steps)
        return gen.tokens
    return run


def hf_lookup(target, gamma, max_n: int):
    """transformers' prompt lookup decoding (generate(prompt_lookup_num_tokens=gamma, max_matching_ngram_size))."""
    def run(prompt, max_new, eos):
        return hf_generate(target, prompt, max_new, eos, prompt_lookup_num_tokens=gamma, max_matching_ngram_size=max_n)
    return run


def hf(target, draft, gamma, threshold: float = 0.0):
    """transformers' generate() alone, or assisted by `draft` with up to gamma drafted tokens a step, stopped by the
    same confidence threshold as ours (0: none)."""
    if draft is not None:
        constant_gamma(draft, gamma, threshold)

    def run(prompt, max_new, eos):
        return hf_generate(target, prompt, max_new, eos, **({"assistant_model": draft} if draft is not None else {}))
    return run


def with_layout(run, models, max_rows: int, mode: str):
    """`run` with decode/kernels/fast_linear.py's matmul layout in place for the models (timed plans are cached)."""
    def wrapped(prompt, max_new, eos):
        with fast_cpu_linears(models, max_rows, mode):
            return run(prompt, max_new, eos)
    return wrapped


def with_compiled(run, session: CompiledDecoding):
    """`run` with decode/kernels/compiled.py's static caches and compiled passes (one session: caches kept between runs)."""
    def wrapped(prompt, max_new, eos):
        with session.active():
            return run(prompt, max_new, eos)
    return wrapped


def measure(methods: dict, prompts, max_new, eos, repeats, after_warmup=lambda: None) -> dict:
    """Each method decodes every prompt `repeats` times, interleaved (method A, B, C, D, then again), so drift
    on a shared machine hits all methods alike. tokens/s is the median over passes."""
    for run in methods.values():
        run(prompts[0], 8, eos)  # warm-up
    after_warmup()
    results = {name: {"tok_s_all": [], "outputs": None} for name in methods}
    for _ in range(repeats):
        for name, run in methods.items():
            t = time.perf_counter()
            outs = [run(p, max_new, eos) for p in prompts]
            results[name]["tok_s_all"].append(sum(map(len, outs)) / (time.perf_counter() - t))
            results[name]["outputs"] = results[name]["outputs"] or outs
    for r in results.values():
        r["tok_s"] = statistics.median(r["tok_s_all"])
    return results


def decoding_methods(cfg: DictConfig, tokenizer, target, draft, prompts: list, threshold: float) -> tuple:
    """(methods, per-method step logs, the target's and draft's CPU layouts, the draft's quantization and head):
    ours and transformers' decoders, with the variants that show what each of our choices buys."""
    max_rows = cfg.gamma + 1  # a verification pass feeds the target gamma + 1 tokens
    # `draft` itself stays as loaded: ours decodes with a copy whose head may be cut, then int8
    small_head, vocab = restrict_vocab(draft, cfg.draft_vocab, special_token_ids(tokenizer, draft), copy=True)
    fast_draft, quant = quantize_draft(small_head, cfg.draft_quant, copy=small_head is draft)
    steps = {"ours_speculative": [], "ours_speculative_float_draft": [], "ours_speculative_full_head": []}
    methods = {"ours_target_only": with_layout(ours(target, None, 0), [target], max_rows, cfg.cpu_matmul),
               "ours_speculative": with_layout(
                   ours(target, fast_draft, cfg.gamma, steps["ours_speculative"], threshold), [target, fast_draft],
                   max_rows, cfg.cpu_matmul),
               "hf_target_only": hf(target, None, 0), "hf_assisted": hf(target, draft, cfg.gamma, threshold)}
    if quant["quantized"]:  # what the int8 draft buys, in the same run
        methods["ours_speculative_float_draft"] = with_layout(
            ours(target, draft, cfg.gamma, steps["ours_speculative_float_draft"], threshold), [target, draft],
            max_rows, cfg.cpu_matmul)
    if vocab["restricted"]:  # what the smaller draft head buys, in the same run (int8 as configured)
        full_head = quantize_draft(draft, cfg.draft_quant, copy=True)[0]
        methods["ours_speculative_full_head"] = with_layout(
            ours(target, full_head, cfg.gamma, steps["ours_speculative_full_head"], threshold), [target, full_head],
            max_rows, cfg.cpu_matmul)
    if cfg.prompt_lookup:  # no draft model: ours and transformers' prompt lookup, same gamma and longest n-gram
        steps["ours_prompt_lookup"] = []
        methods["ours_prompt_lookup"] = with_layout(
            ours_lookup(target, cfg.gamma, int(cfg.lookup.min_n), int(cfg.lookup.max_n), steps["ours_prompt_lookup"]),
            [target], max_rows, cfg.cpu_matmul)
        methods["hf_prompt_lookup"] = hf_lookup(target, cfg.gamma, int(cfg.lookup.max_n))
    if cfg.compile:  # the same two runs again, with static caches and compiled passes
        session = CompiledDecoding([target, fast_draft], run_length(prompts, cfg.max_new_tokens, cfg.gamma), max_rows)
        steps["ours_speculative_compiled"] = []
        for name, run in (("ours_target_only_compiled", ours(target, None, 0)),
                          ("ours_speculative_compiled", ours(target, fast_draft, cfg.gamma,
                                                             steps["ours_speculative_compiled"], threshold))):
            methods[name] = with_compiled(with_layout(run, [target, fast_draft], max_rows, cfg.cpu_matmul), session)
    plans = [plan_for(m, max_rows, cfg.cpu_matmul) for m in (target, fast_draft)]  # times the layouts once (cached)
    layout = dict(zip(["target", "draft"], plans))
    if quant["quantized"]:
        layout["float_draft"] = plan_for(draft, max_rows, cfg.cpu_matmul)
    if any(set(p["layout"]) != {"torch"} for p in plans) or quant["quantized"] or vocab["restricted"]:
        methods["hf_assisted_our_kernels"] = with_layout(hf(target, fast_draft, cfg.gamma, threshold),
                                                         [target, fast_draft], max_rows, cfg.cpu_matmul)
    return methods, steps, layout, quant, vocab


def result_rows(results: dict, steps: dict) -> list[dict]:
    """One row per method: tok/s, speed over ours target-only, greedy identity, alpha; printed as a table."""
    reference = results["ours_target_only"]["outputs"]
    base = results["ours_target_only"]["tok_s"]
    rows = []
    print(f"{'method':<30}{'tok/s':>9}{'vs ours target-only':>22}{'identical to target greedy':>29}{'alpha':>8}")
    for name, r in results.items():
        identical = r["outputs"] == reference
        alpha = acceptance(steps[name])["alpha"] if steps.get(name) else None  # over every pass (all identical)
        rows.append({"method": name, "tok_s": r["tok_s"], "tok_s_all": r["tok_s_all"], "speedup": r["tok_s"] / base,
                     "identical_to_target_greedy": identical, "alpha": alpha,
                     "new_tokens": sum(map(len, r["outputs"]))})
        print(f"{name:<30}{r['tok_s']:>9.1f}{r['tok_s'] / base:>21.2f}x{str(identical):>29}"
              f"{'' if alpha is None else f'{alpha:.3f}':>8}")
    return rows


def print_ratios(cfg: DictConfig, results: dict, layout: dict, quant: dict, vocab: dict, threshold: float,
                 n_prompts: int, device) -> tuple:
    """ours against transformers' assisted generation (and with our kernels, and compiled); returns the ratios."""
    ratio = results["ours_speculative"]["tok_s"] / results["hf_assisted"]["tok_s"]
    same = (results["ours_speculative"]["tok_s"] / results["hf_assisted_our_kernels"]["tok_s"]
            if "hf_assisted_our_kernels" in results else None)
    where = device if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    stops = f" stopped when the draft's probability < {threshold:g}" if threshold else ""
    print(f"\nours_speculative / hf_assisted = {ratio:.2f}x   (gamma={cfg.gamma}{stops}, {n_prompts} {cfg.domain} "
          f"prompts, max_new_tokens={cfg.max_new_tokens}, median of {cfg.repeats}, {where})")
    compiled = (results["ours_speculative_compiled"]["tok_s"] / results["hf_assisted"]["tok_s"]
                if "ours_speculative_compiled" in results else None)
    if compiled is not None:
        print(f"ours_speculative_compiled / hf_assisted = {compiled:.2f}x   (static caches + torch.compile, "
              f"decode/kernels/compiled.py)")
    if same is not None:
        print(f"ours_speculative / hf_assisted_our_kernels = {same:.2f}x   (both with the target's layouts by row "
              f"count {layout['target']['layout']}, draft int8: {quant['quantized']}, draft head: "
              f"{vocab['size'] if vocab['restricted'] else 'full'})")
    return ratio, same, compiled


def bench(cfg: DictConfig) -> dict:
    """Run every method on the same prompts; print the table; save and return bench_decoder.json's content."""
    setup_cpu(cfg.threads, cfg.get("keep_freed_memory", True))
    if cfg.gamma < 1:
        raise ValueError(f"gamma must be >= 1, got {cfg.gamma}.")
    threshold = float(cfg.get("confidence_threshold", 0.0))
    if not 0 <= threshold < 1:
        raise ValueError(f"confidence_threshold must be in [0, 1) (0 = always draft gamma), got {threshold}.")
    tokenizer = load_tokenizer(cfg.target, cache_dir=cfg.cache_dir)
    target = load_frozen(cfg.target, dtype=cfg.dtype, cache_dir=cfg.cache_dir, device=cfg.device)
    draft = load_frozen(cfg.draft, dtype=cfg.draft_dtype or cfg.dtype, cache_dir=cfg.cache_dir, device=cfg.device)
    check_same_vocab(tokenizer, load_tokenizer(cfg.draft), target, draft, str(cfg.target), str(cfg.draft))
    eos = {tokenizer.eos_token_id}
    prompts = [encode_prompt(tokenizer, p) for p in load_prompts(cfg.domain, cfg.n_prompts, cfg.prompts_file)]
    methods, steps, layout, quant, vocab = decoding_methods(cfg, tokenizer, target, draft, prompts, threshold)
    results = measure(methods, prompts, cfg.max_new_tokens, eos, cfg.repeats,
                      after_warmup=lambda: [s.clear() for s in steps.values()])
    rows = result_rows(results, steps)
    ratio, same, compiled = print_ratios(cfg, results, layout, quant, vocab, threshold, len(prompts), target.device)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    conditions = {**OmegaConf.to_container(cfg, resolve=True), "threads": torch.get_num_threads(),
                  "torch": torch.__version__, "transformers": __import__("transformers").__version__,
                  "cpu": platform.processor() or platform.machine(), "device": str(target.device),
                  "gpu": torch.cuda.get_device_name(target.device) if target.device.type == "cuda" else None,
                  "cpu_matmul_plans": layout, "draft_quant_plan": quant, "draft_vocab_plan": vocab}
    result = {"conditions": conditions, "rows": rows, "ours_vs_hf_assisted": ratio,
              "ours_vs_hf_assisted_our_kernels": same, "ours_compiled_vs_hf_assisted": compiled}
    (out / "bench_decoder.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {out / 'bench_decoder.json'}")
    return result


@hydra.main(config_path="../conf", config_name="bench_decoder", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        bench(cfg)


if __name__ == "__main__":
    main()
