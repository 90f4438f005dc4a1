"""transformers' own speculative decoding as timing arms (eval/timing.py), beside ours in one interleaved run:
assisted generation (`generate(assistant_model=draft)`) and prompt lookup (`generate(prompt_lookup_num_tokens=...)`).

They run stock, as a user gets them: the draft a float copy with its full head, the target's linear layers back to
torch's own for the call (`stock_linears`), transformers' defaults for the draft length unless `gamma` is given.
transformers does not report acceptance, so an arm counts the target's forward calls instead: tokens per target
pass is its tau (our decoder's tau counts the same thing: tokens per verify pass, bonus token included).

    arm = Arm("hf", None, 0, run=hf_assisted(target, draft_copy, eos, gamma=None))
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from decode.core.speculative import SamplingParams

ASSISTED, LOOKUP = "transformers assisted", "transformers lookup"  # the records' proposer names
PLAIN = "transformers plain"  # transformers' own generate() without a draft: its arms' baseline
DEFAULT_LOOKUP_TOKENS = 10  # transformers documents prompt_lookup_num_tokens=10 as the usual choice


@dataclass
class HFGeneration:
    tokens: list[int]
    prefill_s: float
    decode_s: float
    target_passes: int
    steps: list = field(default_factory=list)  # no per-step logs: transformers does not expose them


@contextmanager
def stock_linears(model):
    """Within the block, every decode/kernels/fast_linear.py layer of `model` runs as torch's nn.Linear (restored after)."""
    from decode.kernels.fast_linear import FastLinear

    swapped = [m for m in model.modules() if isinstance(m, FastLinear)]
    try:
        for layer in swapped:
            layer.__class__ = torch.nn.Linear
        yield
    finally:
        for layer in swapped:
            layer.__class__ = FastLinear


def _sampling(params: SamplingParams | None) -> dict:
    if params is None or params.temperature == 0:
        return {"do_sample": False}
    # top_k=0 switches off transformers' default top-k of 50: the target's own distribution, as in our decoder
    return {"do_sample": True, "temperature": params.temperature, "top_k": params.top_k or 0,
            "top_p": params.top_p or 1.0}


def hf_generate(target, prompt: list[int], max_new_tokens: int, eos_token_ids, params: SamplingParams | None = None,
                **extra) -> list[int]:
    """One transformers generate() call on `prompt` (batch 1), `extra` its speculative arguments (assistant_model=...,
    prompt_lookup_num_tokens=...): the new tokens. Runs the models as they are (see `stock_linears`)."""
    ids = torch.tensor([prompt], device=target.device)
    eos = sorted(eos_token_ids or [])
    with torch.inference_mode():
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                              eos_token_id=eos or None, pad_token_id=eos[0] if eos else None, **_sampling(params),
                              **extra)
    return out[0, len(prompt):].tolist()


def constant_gamma(draft, gamma: int, threshold: float = 0.0) -> None:
    """Make transformers' assisted generation draft exactly `gamma` tokens a step with `draft` (stopped early only
    below `threshold` confidence; 0 = never), instead of its own schedule."""
    draft.generation_config.num_assistant_tokens = gamma
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = threshold


def _run(target, extra: dict):
    def run(prompt, max_new_tokens, params, eos_token_ids, generator) -> HFGeneration:
        calls = [0]
        hook = target.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        torch.manual_seed(int(generator.initial_seed()))  # transformers samples from the global generator
        try:
            with stock_linears(target):
                start = time.perf_counter()
                tokens = hf_generate(target, prompt, max_new_tokens, eos_token_ids, params, **extra)
                seconds = time.perf_counter() - start
        finally:
            hook.remove()
        return HFGeneration(tokens, 0.0, seconds, calls[0])
    return run


def hf_assisted(target, draft, gamma: int | None = None):
    """transformers' assisted generation with `draft` (a float copy, full head). gamma None: transformers' defaults
    (its draft length schedule and confidence stop); an int: exactly gamma drafted tokens a step."""
    if gamma is not None:
        constant_gamma(draft, gamma)
    return _run(target, {"assistant_model": draft})


def hf_plain(target):
    """transformers' plain generate(): the baseline its speculative arms are divided by (one engine)."""
    return _run(target, {})


def hf_lookup(target, gamma: int | None = None, max_n: int = 3):
    """transformers' prompt lookup: up to gamma (default 10) tokens continuing the longest n-gram match <= max_n."""
    return _run(target, {"prompt_lookup_num_tokens": gamma or DEFAULT_LOOKUP_TOKENS, "max_matching_ngram_size": max_n})
