"""The cost model applied to llama.cpp: its own pass costs, timed by llama-bench, predict its speculative speedup.

A speculative step of llama-server's draft-model speculation (`--spec-type draft-simple`, a fixed chain of gamma
tokens: `--spec-draft-p-min 0`) costs, as its source does it (tools/server/server-context.cpp, `TAG_SPEC_AVOID_DRAFT_REEVAL`):
one (gamma+1)-token target pass to verify; the same gamma+1 tokens fed once more to the draft, which re-evaluates
every batch the target processed (its drafted tokens are dropped from its cache after drafting); then gamma 1-token
draft passes (the newest token, then each drafted token but the last). Plain decoding costs one 1-token target pass
per token. The server reports drafted and accepted tokens, so a step yields 1 + gamma x accepted/drafted tokens (no
i.i.d. assumption, no alpha needed). llama-bench times a k-token pass after `depth` tokens of context
(`-p k -n 0 -d depth`, logits for the last token only), the way decoding meets it halfway through an answer.

    target = pass_seconds(target_gguf, [1, 2, 3, 4, 5], depth=200)     # {k: seconds}
    draft = pass_seconds(draft_gguf, [1, 5], depth=200)
    predicted_speedup(accepted / drafted, gamma=4, target_s=target, draft_s=draft)
"""

from __future__ import annotations

import json
import os
import subprocess

from eval.shared.gguf import llamacpp_bin, llamacpp_dir


def tokens_per_step(accepted_per_proposed: float, gamma: int) -> float:
    """Tokens a step emits: the accepted drafts (gamma x accepted/drafted on average) plus the target's own token."""
    return 1.0 + gamma * accepted_per_proposed


def step_seconds(gamma: int, target_s: dict[int, float], draft_s: dict[int, float]) -> float:
    """One speculative step of llama-server: the target's (gamma+1)-token verify pass, the draft's re-evaluation of
    those gamma+1 tokens, and gamma 1-token draft passes. `draft_s` needs keys 1 and gamma+1."""
    return target_s[gamma + 1] + draft_s[gamma + 1] + gamma * draft_s[1]


def predicted_speedup(accepted_per_proposed: float, gamma: int, target_s: dict[int, float],
                      draft_s: dict[int, float]) -> float:
    """Decoding speedup over plain decoding that the pass costs predict: tokens per step x one 1-token target pass
    over what a step costs (step_seconds)."""
    return tokens_per_step(accepted_per_proposed, gamma) * target_s[1] / step_seconds(gamma, target_s, draft_s)


def break_even(gamma: int, target_s: dict[int, float], draft_s: dict[int, float]) -> float:
    """The accepted/drafted share at which speculation only matches plain decoding, by the pass costs; above 1 the
    draft cannot pay at this gamma even when every drafted token is accepted."""
    return (step_seconds(gamma, target_s, draft_s) / target_s[1] - 1.0) / gamma


def break_even_draft_step(accepted_per_proposed: float, gamma: int, target_s: dict[int, float],
                          draft_s: dict[int, float]) -> float:
    """The most a 1-token draft pass may cost for speculation at this acceptance to match plain decoding, the draft's
    (gamma+1)-token re-run scaling with it as this draft's does; at most 0 when even a free draft cannot pay."""
    rerun = draft_s[gamma + 1] / draft_s[1] if draft_s[1] > 0 else 1.0
    return (tokens_per_step(accepted_per_proposed, gamma) * target_s[1] - target_s[gamma + 1]) / (rerun + gamma)


def parse_bench(text: str) -> dict[int, float]:
    """llama-bench's JSON output -> {k: seconds of one k-token pass} (its prompt tests: n_prompt = k, n_gen = 0)."""
    return {int(r["n_prompt"]): float(r["avg_ns"]) / 1e9 for r in json.loads(text) if int(r.get("n_gen", 0)) == 0}


def pass_seconds(gguf, ks: list[int], depth: int, threads: int | None = None, repetitions: int = 5,
                 cache_dir=None) -> dict[int, float]:
    """Time one k-token pass of `gguf` after `depth` context tokens, for each k, with llama-bench (the same build,
    threads and weight layout as the servers)."""
    cmd = [str(llamacpp_bin("llama-bench", cache_dir)), "-m", str(gguf), "-p", ",".join(map(str, ks)), "-n", "0",
           "-d", str(depth), "-r", str(repetitions), "-t", str(threads or os.cpu_count()), "-o", "json"]
    if (llamacpp_dir(cache_dir) / "no-repack").is_file():
        cmd += ["--repack", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({out.returncode}): {out.stderr[-1500:]}")
    return parse_bench(out.stdout)
