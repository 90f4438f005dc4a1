"""Expected acceptance along the target's own continuations: a large-sample alpha to compare drafts by.

    python eval/acceptance.py drafts=[outputs/study/jsd/export,outputs/study/generated/export] \
        domains=[general,medical,code] temperature=[0,1] n_prompts=12 samples_per_prompt=2 max_new_tokens=128 \
        out=outputs/acceptance/mine

The target continues every prompt (batched generation, the same temperature/top-k/top-p as in decoding). At
every position of every continuation one teacher-forced pass of each draft gives
beta = sum_v min(p_v, q_v), the probability that lossless rejection sampling accepts a token drafted there
(at temperature 0: 1 where the argmaxes agree, else 0). `alpha_tf` is the mean of beta over positions. Leviathan
et al. define alpha as E[beta] over the target's prefixes; this computes beta exactly at each position of the
target's own text instead of sampling accept/reject events at the positions one decode happens to visit.
It is what eval/speculate.py measures at gamma=1, up to sampling noise, at a fraction of the cost and without
timing (so a busy machine does not matter). eval/speculate.py stays the judge of tau and speedup.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_acceptance
    from eval.shared.preflight import preflight

    preflight("acceptance", check_acceptance)

import json
import logging
import math
import platform
import time
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig

from eval.shared.preflight import usage_errors
from data.prompts import encode_prompt, load_prompts
from decode.models.loading import eos_token_ids, load_drafts, load_frozen, load_tokenizer, resolve
from eval.checks import check_prompt_lengths
from decode.core.metrics import by_entropy
from decode.core.sampling import acceptance_probability, logits_to_probs
from decode.kernels.runtime import setup_cpu
from eval.report import PARTIAL, grid_progress, partial_on_error, write_partial

log = logging.getLogger("draftsmith.acceptance")


def position_betas(target_logits: torch.Tensor, draft_logits: torch.Tensor, temperature: float,
                   top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """(n, V) logits of target and draft at the same n positions -> (n,) acceptance probabilities."""
    return acceptance_probability(logits_to_probs(target_logits, temperature, top_k, top_p),
                                  logits_to_probs(draft_logits, temperature, top_k, top_p))


def ratio_and_stderr(sums: list[float], counts: list[int]) -> tuple[float, float]:
    """alpha = sum(beta) / positions over sequences, and its standard error with sequences as the unit
    (positions inside one continuation are correlated, sequences are not)."""
    total, n = sum(sums), sum(counts)
    alpha = total / n if n else float("nan")
    m = len(counts)
    if m < 2:
        return alpha, float("nan")
    mean_len = n / m
    var = sum((s - alpha * c) ** 2 for s, c in zip(sums, counts)) / (m * (m - 1))
    return alpha, math.sqrt(var) / mean_len


def paired_difference(sums_a: list[float], sums_b: list[float], counts: list[int]) -> tuple[float, float]:
    """alpha_a - alpha_b for two drafts scored on the same sequences, and its standard error. Pairing removes
    the sequences' shared difficulty, so it is tighter than the two drafts' own errors combined."""
    return ratio_and_stderr([a - b for a, b in zip(sums_a, sums_b)], counts)


def cut_at_eos(tokens: list[int], eos: set[int]) -> list[int]:
    """A generated row up to and including its first end-of-sequence token (batched rows are padded after it)."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[:i + 1]
    return tokens


@torch.inference_mode()
def continuations(target, tokenizer, prompts: list[list[int]], temperature: float, cfg: DictConfig,
                  eos: set[int], seed: int, progress=None, task=None) -> list[list[int]]:
    """The target's continuation of each prompt (left-padded batches; top_k=0 switches off transformers' default).
    `progress` advances `task` by the prompts of each batch."""
    torch.manual_seed(seed)
    sampling = ({"do_sample": True, "temperature": temperature, "top_k": cfg.top_k or 0, "top_p": cfg.top_p or 1.0}
                if temperature > 0 else {"do_sample": False})
    pad = tokenizer.pad_token_id
    out = []
    for start in range(0, len(prompts), cfg.batch_size):
        chunk = prompts[start:start + cfg.batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk], device=target.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=target.device)
        rows = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=cfg.max_new_tokens,
                               pad_token_id=pad, **sampling)
        out += [cut_at_eos(row[width:].tolist(), eos) for row in rows]
        if progress is not None:
            progress.advance(task, len(chunk))
    return out


def logits_at(model, prompt: list[int], cont: list[int]) -> torch.Tensor:
    """(len(cont), V) logits predicting each continuation token."""
    ids = torch.tensor([prompt + cont], device=model.device)
    return model(input_ids=ids, logits_to_keep=len(cont) + 1).logits[0, :-1].float()


@torch.inference_mode()
def score(target, drafts: dict, sequences: list[tuple[list[int], list[int]]], temperature: float,
          cfg: DictConfig, progress=None, task=None) -> dict[str, dict]:
    """Per draft: per-sequence beta sums and lengths, plus (entropy, beta) pairs for the entropy buckets."""
    acc = {name: {"sums": [], "counts": [], "entropies": [], "betas": []} for name in drafts}
    for prompt, cont in sequences:
        if cont:
            t_logits = logits_at(target, prompt, cont)
            logp = t_logits.log_softmax(-1)
            entropy = (-(logp.exp() * logp).sum(-1)).tolist()  # nats, at T=1, as eval/speculate.py records it
            for name, draft in drafts.items():
                beta = position_betas(t_logits, logits_at(draft, prompt, cont), temperature, cfg.top_k, cfg.top_p)
                a = acc[name]
                a["sums"].append(beta.sum().item())
                a["counts"].append(len(cont))
                a["entropies"] += entropy
                a["betas"] += beta.tolist()
        if progress is not None:
            progress.advance(task)
    return acc


def load_models(cfg: DictConfig):
    from decode.drafts.kinds import feature_kind_of

    features = [str(d) for d in cfg.drafts if feature_kind_of(d)]
    if features:
        raise ValueError(f"{', '.join(features)}: feature drafts (Medusa, EAGLE-style) are measured by decoding. Fix: "
                         "python eval/speculate.py drafts=[...] (eval/acceptance.py replays standalone drafts).")
    tokenizer = load_tokenizer(cfg.target, cache_dir=cfg.cache_dir)
    check_prompt_lengths(cfg, tokenizer, resolve(cfg.target, cfg.cache_dir), 0)  # before the weights load
    target = load_frozen(cfg.target, dtype=cfg.dtype, cache_dir=cfg.cache_dir, device=cfg.device)
    drafts = load_drafts(cfg.drafts, tokenizer, target, cfg.target, dtype=cfg.draft_dtype or cfg.dtype,
                         cache_dir=cfg.cache_dir, device=cfg.device)
    return tokenizer, target, drafts, eos_token_ids(tokenizer, target)


def check_config(cfg: DictConfig) -> None:
    if not cfg.drafts:
        raise ValueError("drafts=[...] must list at least one exported draft folder (or Hub id).")
    if any(t < 0 for t in cfg.temperature):
        raise ValueError(f"temperature must be >= 0, got {list(cfg.temperature)}.")
    for key in ("n_prompts", "samples_per_prompt", "max_new_tokens", "batch_size"):
        if cfg[key] < 1:
            raise ValueError(f"{key} must be >= 1, got {cfg[key]}.")


def markdown(records: list[dict]) -> str:
    """Drafts as rows, (domain, T) as columns: alpha_tf ± standard error, and for every draft after the first its
    paired difference from the first (the same continuations scored by both)."""
    cols = sorted({(r["domain"], r["temperature"]) for r in records}, key=lambda c: (c[1], c[0]))
    lines = ["| draft | " + " | ".join(f"α_tf {d} T={t:g}" for d, t in cols) + " |", "|---|" + "---|" * len(cols)]

    def cell(r: dict) -> str:
        over = r.get("over_first_draft")
        paired = f" ({over['diff']:+.3f} ± {over['stderr']:.3f} paired)" if over else ""
        return f"{r['alpha_tf']:.3f} ± {r['alpha_tf_stderr']:.3f}{paired}"

    for draft in dict.fromkeys(r["draft"] for r in records):
        cells = {(r["domain"], r["temperature"]): r for r in records if r["draft"] == draft}
        lines.append(f"| {Path(draft).parent.name}/{Path(draft).name} | " + " | ".join(
            cell(cells[c]) if c in cells else "" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def plot(records: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    temps = sorted({r["temperature"] for r in records})
    fig, axes = plt.subplots(1, len(temps), figsize=(6 * len(temps), 4), squeeze=False)
    for ax, t in zip(axes[0], temps):
        for r in (r for r in records if r["temperature"] == t):
            b = r["accept_by_entropy"]
            ax.plot([x["bucket"] for x in b], [x["accept_rate"] for x in b], marker="o",
                    label=f"{Path(r['draft']).parent.name}/{r['domain']}")
        ax.set(title=f"T={t:g}", xlabel="target entropy at the position (nats)", ylabel="E[accept] (beta)",
               ylim=(0, 1.05))
    axes[0][-1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = out / "alpha_by_entropy.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def evaluate(cfg: DictConfig) -> list[dict]:
    check_config(cfg)
    setup_cpu(cfg.threads, cfg.get("keep_freed_memory", True))
    started = time.time()
    tokenizer, target, drafts, eos = load_models(cfg)
    conditions = {"method": "teacher-forced beta = sum min(p, q) at every position of the target's continuations",
                  "target": str(cfg.target), "dtype": cfg.dtype, "draft_dtype": cfg.draft_dtype or cfg.dtype,
                  "device": str(target.device), "max_new_tokens": cfg.max_new_tokens,
                  "samples_per_prompt": cfg.samples_per_prompt, "top_k": cfg.top_k, "top_p": cfg.top_p,
                  "split": cfg.split, "seed": cfg.seed, "threads": torch.get_num_threads(), "torch": torch.__version__,
                  "transformers": __import__("transformers").__version__,
                  "cpu": platform.processor() or platform.machine()}
    out = Path(cfg.out)
    records = []
    with grid_progress() as progress, partial_on_error(out):
        for domain in cfg.domains:
            prompts = [encode_prompt(tokenizer, p) for p in load_prompts(domain, cfg.n_prompts, cfg.prompts_file,
                                                                                      cfg.split)]
            for temperature in cfg.temperature:
                temperature = float(temperature)
                repeats = 1 if temperature == 0 else cfg.samples_per_prompt  # greedy continuations are all alike
                sequences = []
                writing = progress.add_task(f"{domain} T={temperature:g}: the target continues",
                                            total=repeats * len(prompts))
                for k in range(repeats):
                    conts = continuations(target, tokenizer, prompts, temperature, cfg, eos, cfg.seed + k,
                                          progress, writing)
                    sequences += list(zip(prompts, conts))
                task = progress.add_task(f"{domain} T={temperature:g}: the drafts score", total=len(sequences))
                acc = score(target, drafts, sequences, temperature, cfg, progress, task)
                reference = next(iter(acc.values()))  # the first draft listed: what the others are compared with
                for name, a in acc.items():
                    alpha, stderr = ratio_and_stderr(a["sums"], a["counts"])
                    records.append({"draft": name, "domain": domain, "temperature": temperature,
                                    "n_prompts": len(prompts), "n_sequences": len(a["counts"]),
                                    "positions": sum(a["counts"]), "alpha_tf": alpha, "alpha_tf_stderr": stderr,
                                    "accept_by_entropy": by_entropy(a["entropies"], a["betas"]),
                                    # per sequence, in the same order for every draft: paired comparisons
                                    "beta_sums": a["sums"], "lengths": a["counts"],
                                    "over_first_draft": None if a is reference else dict(zip(
                                        ("diff", "stderr"), paired_difference(a["sums"], reference["sums"],
                                                                              a["counts"])))})
                    log.info("%s %s T=%g: alpha_tf %.3f ± %.3f over %d positions", name, domain, temperature,
                             alpha, stderr, sum(a["counts"]))
                write_partial(records, conditions, out)  # a crash or Ctrl-C keeps the blocks measured so far
    conditions["seconds"] = round(time.time() - started, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"conditions": conditions, "records": records}, indent=1))
    table = markdown(records)
    (out / "results.md").write_text("# Expected acceptance along the target's continuations\n\n"
                                    + ", ".join(f"{k}={v}" for k, v in conditions.items()) + "\n\n" + table)
    image = plot(records, out)
    (out / PARTIAL).unlink(missing_ok=True)
    print(table)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {image}")
    return records


@hydra.main(config_path="../conf", config_name="acceptance", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        evaluate(cfg)


if __name__ == "__main__":
    main()
