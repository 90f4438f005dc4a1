"""On-policy distillation data (DistillSpec, GKD): on a fraction λ of training steps the draft writes its own
continuations of the batch's opening tokens, and the target then scores every position of those
continuations, so the draft learns where it actually goes at decode time, not only on reference text.

Which steps are on-policy depends on the step number alone, so a resumed run makes the same choices.
"""

from __future__ import annotations

import random

import torch

from decode.core.sampling import sample


def is_onpolicy_step(step: int, fraction: float, seed: int = 0) -> bool:
    """Deterministic per step: about `fraction` of all steps."""
    return fraction > 0 and random.Random(seed * 1_000_003 + step).random() < fraction


@torch.no_grad()
def draft_continuations(draft, batch: dict, prompt_tokens: int, new_tokens: int, temperature: float,
                        generator: torch.Generator | None = None) -> dict:
    """A batch of [opening tokens of each block | the draft's own continuation]; labels -100 on the opening
    so only the continuation is scored. Sampling is plain ancestral sampling from the draft (T > 0) or greedy."""
    was_training = draft.training
    draft.eval()
    ids = batch["input_ids"][:, :prompt_tokens]
    out = ids
    cache = None
    step_ids = ids
    for _ in range(new_tokens):
        result = draft(input_ids=step_ids, cache=cache, use_cache=True, logits_to_keep=1)
        cache = result.cache if hasattr(result, "cache") else result.past_key_values
        logits = result.logits[:, -1].float()
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            step_ids = sample(probs, generator).unsqueeze(-1)  # one id per row (inverse CDF, decode/core/sampling.py)
        else:
            step_ids = logits.argmax(-1, keepdim=True)
        out = torch.cat([out, step_ids], dim=1)
    draft.train(was_training)
    labels = out.clone()
    labels[:, :prompt_tokens] = -100
    return {"input_ids": out, "attention_mask": torch.ones_like(out), "labels": labels}
