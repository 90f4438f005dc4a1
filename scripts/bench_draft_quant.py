"""Which weight format should a draft decode with? Float, int8 and int4 copies of each draft, side by side.

    python scripts/bench_draft_quant.py target=embedded:qwen2.5-coder-1.5b-instruct \
        drafts=[embedded:qwen2.5-coder-0.5b-instruct] domains=[code]

For every held-out prompt the target writes its greedy continuation once; then each weight format of each draft
(decode/drafts/quantize.py, the draft's head cut as eval/speculate.py cuts it) is judged on that same path:
- agreement: how often the draft's top-1 token, given the target's own prefix, is the target's next token: greedy
  decoding's per-token acceptance on the target's path (each prompt's counts; interval across prompts);
- c: a draft step's cost over a target step's, both timed at the prompt's length halfway through decoding, every
  format taking turns with the target call by call (a target pass runs before each draft step, as in decoding,
  so the draft's weights are not found in the CPU's caches); the median per prompt, an interval across prompts;
- the cost model's expected greedy speedup at gamma from those two and the timed (gamma+1)-token verify pass;
- paired differences in agreement, prompt by prompt on the same paths (their shared difficulty removed): each
  draft's other formats against its first (what a format costs), each later draft against the first draft in the
  same format (what training adds, and whether a format keeps it).
Writes results.json and results.md under `out`; the target is never quantized, so output stays lossless.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_bench_draft_quant
    from eval.shared.preflight import preflight

    preflight("bench_draft_quant", check_bench_draft_quant)

import json
import statistics
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from eval.shared.preflight import usage_errors
from data.prompts import encode_prompt, load_prompts
from data.token_ranking import head_ranking, rank_source, saved_ranking
from decode.core.costs import cached_pass, decoding_context
from decode.kernels.timing import seconds_in_turns
from decode.drafts.draft_vocab import restrict_vocab
from decode.kernels.fast_linear import fast_cpu_linears
from decode.drafts.kinds import feature_kind_of
from decode.models.loading import load_drafts, load_frozen, load_tokenizer, model_vocab_size, special_token_ids
from decode.core.metrics import hardware_speedup
from decode.drafts.quantize import MODES, quantize_draft, weights_label
from decode.kernels.runtime import setup_cpu
from decode.core.speculative import NoProposer, generate
from decode.core.stats import percentile_interval, ratio_alpha_ci
from eval.acceptance import paired_difference
from eval.shared.provenance import provenance


def check_config(cfg: DictConfig) -> None:
    wrong = [m for m in cfg.modes if m not in MODES or m == "auto"]
    if wrong or not cfg.modes:
        raise ValueError(f"modes must list weight formats among none, int8, int4, got {list(cfg.modes)}.")
    if not cfg.drafts:
        raise ValueError("drafts=[...] must list at least one standalone draft (an export folder or embedded:<name>).")
    features = [str(d) for d in cfg.drafts if feature_kind_of(d)]
    if features:
        raise ValueError(f"{features}: feature drafts (Medusa / EAGLE) read the target's hidden states; this benchmark "
                         "times standalone drafts only. Fix: measure them with eval/speculate.py draft_quant=<format>.")
    if cfg.gamma < 1 or cfg.repeats < 1 or cfg.n_prompts < 1:
        raise ValueError("gamma, repeats and n_prompts must be >= 1.")


@torch.inference_mode()
def agreement(model, ids: list[int], start: int) -> tuple[int, int]:
    """(positions where the model's argmax is the next token of `ids`, positions judged), from position `start`."""
    logits = model(torch.tensor([ids])).logits[0, start - 1:-1]
    return int((logits.argmax(-1) == torch.tensor(ids[start:])).sum()), len(ids) - start


def step_timers(target, variants: dict, context: list[int], gamma: int):
    """Callables for one 1-token target pass, one (gamma+1)-token pass and one 1-token step of each variant, each
    after `context` is cached (decode/core/costs.py's cached_pass); and a 2-token target pass to run between them."""
    target_pass = cached_pass(target, context)
    steps = [lambda: target_pass(1), lambda: target_pass(gamma + 1)]
    steps += [lambda step=cached_pass(v, context, "draft", keep=1): step() for v in variants.values()]
    return steps, lambda: target_pass(2)


def median_ci(values: list[float], level: float, resamples: int = 2000, seed: int = 0) -> list[float]:
    """Bootstrap interval of the median across prompts."""
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(values), (resamples, len(values)), generator=gen)
    medians = torch.tensor(values)[picks].median(dim=1).values.tolist()
    return list(percentile_interval(medians, level))


def summarize(name: str, counts: list[tuple[int, int]], ratios: list[float], passes: list[list[float]],
              gamma: int, level: float) -> dict:
    accepted, judged = [a for a, _ in counts], [n for _, n in counts]
    alpha = sum(accepted) / sum(judged)
    c = statistics.median(ratios)
    one, verify = (statistics.median(p) for p in passes)
    return {"variant": name, "agreement": alpha, "agreement_ci": list(ratio_alpha_ci(accepted, judged, level)),
            "c": c, "c_ci": median_ci(ratios, level),
            "gamma": gamma, "expected_speedup": hardware_speedup(min(alpha, 0.999), gamma, c * one,
                                                                 [one] + [verify] * gamma),
            "n_prompts": len(counts), "judged_tokens": sum(judged), "agreed": accepted, "judged": judged}


def paired_comparisons(rows: list[dict], n_modes: int) -> list[dict]:
    """A - B in agreement over the same prompts' paths, with its standard error across prompts, for each draft's
    other formats against its first (rows come draft by draft, n_modes formats each) and for each later draft
    against the first draft in the same format."""
    pairs = [(rows[d + m], rows[d]) for d in range(0, len(rows), n_modes) for m in range(1, n_modes)]
    pairs += [(rows[d + m], rows[m]) for d in range(n_modes, len(rows), n_modes) for m in range(n_modes)]
    out = []
    for a, b in pairs:
        difference, stderr = paired_difference(a["agreed"], b["agreed"], a["judged"])
        out.append({"a": a["variant"], "b": b["variant"], "difference": difference, "stderr": stderr})
    return out


def table(rows: list[dict], paired: list[dict]) -> str:
    lines = ["| draft, weights | top-1 agreement [CI] | c [CI] | expected speedup at gamma |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['agreement']:.3f} [{r['agreement_ci'][0]:.3f}, {r['agreement_ci'][1]:.3f}]"
                     f" | {r['c']:.3f} [{r['c_ci'][0]:.3f}, {r['c_ci'][1]:.3f}] | {r['expected_speedup']:.2f}x "
                     f"(gamma={r['gamma']}) |")
    if paired:
        lines += ["", "| A | B | agreement A - B, paired by prompt (± standard error) |", "|---|---|---|"]
        lines += [f"| {p['a']} | {p['b']} | {p['difference']:+.3f} ± {p['stderr']:.3f} |" for p in paired]
    return "\n".join(lines)


def run(cfg: DictConfig) -> list[dict]:
    check_config(cfg)
    setup_cpu(cfg.threads, cfg.get("keep_freed_memory", True))
    tokenizer = load_tokenizer(cfg.target)
    target = load_frozen(cfg.target, dtype=cfg.dtype)
    drafts = load_drafts(cfg.drafts, tokenizer, target, cfg.target, dtype=cfg.dtype)
    special = special_token_ids(tokenizer, target)
    ranking = rank_source(cfg.get("draft_vocab_from"), tokenizer, model_vocab_size(target))
    variants = {}
    for name, draft in drafts.items():
        cut = restrict_vocab(draft, cfg.draft_vocab, special, ranking=head_ranking(saved_ranking(name), ranking)[0])[0]
        for mode in cfg.modes:
            model = quantize_draft(cut, mode, copy=True)[0] if mode != "none" else cut
            variants[f"{name}, {weights_label({'mode': mode, 'quantized': mode != 'none'}) or 'float'}"] = model
    prompts = [encode_prompt(tokenizer, p) for d in cfg.domains
               for p in load_prompts(d, cfg.n_prompts, cfg.get("prompts_file"), split=cfg.split)]
    counts = {v: [] for v in variants}
    ratios = {v: [] for v in variants}
    passes: list[list[float]] = [[], []]
    with fast_cpu_linears([target, *variants.values()], cfg.gamma + 1, cfg.cpu_matmul):
        for i, ids in enumerate(prompts):
            path = ids + generate(target, NoProposer(), ids, 0, cfg.max_new_tokens).tokens
            for v, model in variants.items():
                counts[v].append(agreement(model, path, len(ids)))
            fns, flush = step_timers(target, variants, decoding_context(ids, cfg.max_new_tokens), cfg.gamma)
            times = [statistics.median(t) for t in seconds_in_turns(fns, cfg.repeats, between=flush)]
            passes[0].append(times[0])
            passes[1].append(times[1])
            for v, t in zip(variants, times[2:]):
                ratios[v].append(t / times[0])
            print(f"prompt {i + 1}/{len(prompts)}: " + ", ".join(
                f"{v.split(', ')[-1]} c={ratios[v][-1]:.3f} agree={counts[v][-1][0]}/{counts[v][-1][1]}"
                for v in variants))
    rows = [summarize(v, counts[v], ratios[v], passes, cfg.gamma, cfg.ci_level) for v in variants]
    paired = paired_comparisons(rows, len(cfg.modes))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    conditions = {"target": cfg.target, "domains": list(cfg.domains), "split": cfg.split,
                  "n_prompts": len(prompts), "max_new_tokens": cfg.max_new_tokens, "draft_vocab": cfg.draft_vocab,
                  "draft_vocab_ranked": bool(ranking), "threads": torch.get_num_threads(), "repeats": cfg.repeats,
                  "target_step_s": statistics.median(passes[0]), "verify_pass_s": statistics.median(passes[1]),
                  "torch": torch.__version__, "provenance": provenance(str(cfg.target), [str(d) for d in cfg.drafts]),
                  "config": OmegaConf.to_container(cfg, resolve=True)}
    (out / "results.json").write_text(json.dumps({"conditions": conditions, "records": rows, "paired": paired},
                                                 indent=1))
    text = table(rows, paired)
    (out / "results.md").write_text(f"# Draft weight formats\n\n{len(prompts)} {cfg.split} prompts, "
                                    f"{cfg.max_new_tokens} target tokens each, {torch.get_num_threads()} threads.\n\n"
                                    + text + "\n")
    print(text + f"\nwrote {out / 'results.json'}")
    return rows


@hydra.main(version_base=None, config_path="../conf", config_name="bench_draft_quant")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        run(cfg)


if __name__ == "__main__":
    main()
