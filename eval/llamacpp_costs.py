"""The cost model applied to llama.cpp: its own pass costs, timed by llama-bench, predict its speculative speedup.

A speculative step of llama.cpp's draft-model speculation (`--spec-type draft-simple`, a fixed chain of gamma
tokens: `--spec-draft-p-min 0`) costs gamma 1-token passes of the draft and one (gamma+1)-token pass of the target;
plain decoding costs one 1-token target pass per token. The server reports drafted and accepted tokens, so a step
yields 1 + gamma x accepted/drafted tokens (no i.i.d. assumption, no alpha needed). llama-bench times a k-token pass
after `depth` tokens of context (`-p k -n 0 -d depth`), the way decoding meets it halfway through an answer.

    costs = pass_seconds(target_gguf, [1, 2, 3, 4, 5], depth=200)     # {k: seconds}
    predicted_speedup(accepted / drafted, gamma=4, target_s=costs, draft_step_s=pass_seconds(draft, [1], 200)[1])
"""

from __future__ import annotations

import json
import os
import subprocess

from eval.llamacpp import llamacpp_bin, llamacpp_dir


def tokens_per_step(accepted_per_proposed: float, gamma: int) -> float:
    """Tokens a step emits: the accepted drafts (gamma x accepted/drafted on average) plus the target's own token."""
    return 1.0 + gamma * accepted_per_proposed


def predicted_speedup(accepted_per_proposed: float, gamma: int, target_s: dict[int, float],
                      draft_step_s: float) -> float:
    """Decoding speedup over plain decoding that the pass costs predict: tokens per step x one 1-token target pass
    over what a step costs (gamma draft passes, one (gamma+1)-token target pass)."""
    step = gamma * draft_step_s + target_s[gamma + 1]
    return tokens_per_step(accepted_per_proposed, gamma) * target_s[1] / step


def break_even(gamma: int, target_s: dict[int, float], draft_step_s: float) -> float:
    """The accepted/drafted share at which speculation only matches plain decoding, by the pass costs; above 1 the
    draft cannot pay at this gamma even when every drafted token is accepted."""
    step = gamma * draft_step_s + target_s[gamma + 1]
    return (step / target_s[1] - 1.0) / gamma


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
