"""Compiled decoding passes on preallocated KV caches (`compile=true` in eval/speculate.py and bench_decoder.py).

A decode step at batch size 1 runs a few hundred small kernels per forward pass: on a CPU the Python and op
dispatch between the matmuls are a sizeable part of a small target's step, and on a GPU the launches are the
step. Inside `compiled_decoding(models, ...)`, every `CachedLM` of those models (decode/core/speculative.py) keeps
its keys and values in a transformers `StaticCache` of fixed length, and runs passes of 1..max_rows tokens through
`torch.compile(fullgraph=True)` of the model's forward: fused kernels on CPU, and with mode `reduce-overhead` on
CUDA, CUDA graphs replayed per step. Prompts (longer passes) run eagerly into the same cache. Rolling back
moves the cache's write position; stale entries past it are masked by position and overwritten.

The first pass of each shape compiles (7-47 s per shape for the 135M target in the runs on this 2-core CPU);
dynamo keeps the graphs for the process. Outputs agree with eager decoding to float32 rounding (tests: greedy output
identical). Static caches attend over their whole length, so `max_len` is sized to the run, not to the model.

    with compiled_decoding([target, draft], max_len=512, max_rows=gamma + 1):
        generate(target, DraftModelProposer(draft), prompt, gamma, 128)
"""

from __future__ import annotations

import logging
from contextlib import contextmanager, nullcontext

import torch
from transformers import StaticCache

log = logging.getLogger(__name__)
_active: dict[int, "StaticDecoding"] = {}  # id(model) -> its compiled decoding, while a block is open


def compile_mode(device: torch.device) -> str:
    """CUDA graphs where kernel launches dominate (GPUs); plain inductor kernels on CPU."""
    return "reduce-overhead" if device.type == "cuda" else "default"


def static_pass(model, ids: torch.Tensor, positions: torch.Tensor, cache: StaticCache, keep: int) -> torch.Tensor:
    """One forward pass writing `ids` at `positions` of a static cache; logits of the last `keep`, (1, keep, V)."""
    return model(input_ids=ids, cache_position=positions, position_ids=positions.unsqueeze(0), cache=cache,
                 use_cache=True, logits_to_keep=keep).logits


def compiled_forward(model, mode: str):
    """`torch.compile` of `static_pass` for `model`. Dynamo keeps compiled graphs per code object and guards, so a
    later block over the same model reuses them."""
    def forward(ids, positions, cache, keep):
        return static_pass(model, ids, positions, cache, keep)
    return torch.compile(forward, fullgraph=True, dynamic=False, mode=mode)


class StaticDecoding:
    """One model's compiled forward and its static caches, one per role ("verify", "draft"), so that a model
    that is both target and draft keeps two independent caches."""

    def __init__(self, model, max_len: int, max_rows: int):
        self.model, self.max_len, self.max_rows = model, max_len, max_rows
        self.device = next(model.parameters()).device
        self.compiled = compiled_forward(model, compile_mode(self.device))
        self.caches: dict[str, StaticCache] = {}
        self.shapes: set[tuple[int, int]] = set()  # (tokens, logits kept) passes run so far

    def cache(self, role: str) -> StaticCache:
        """The role's cache, emptied (same tensors, so compiled graphs and CUDA graphs stay valid)."""
        if role not in self.caches:
            self.caches[role] = StaticCache(config=self.model.config, max_cache_len=self.max_len)
        self.caches[role].reset()
        return self.caches[role]

    def forward(self, ids: list[int], start: int, cache: StaticCache, keep: int) -> torch.Tensor:
        """Logits of the last `keep` of `ids`, fed at positions start.., shape (keep, V)."""
        if start + len(ids) > self.max_len:
            raise ValueError(f"compiled decoding: {start + len(ids)} tokens exceed its static cache of {self.max_len}; "
                             "open it with a larger max_len (run_length sizes it to prompts and max_new_tokens).")
        x = torch.tensor([ids], device=self.device)
        positions = torch.arange(start, start + len(ids), device=self.device)
        if len(ids) > self.max_rows:  # prompts: one eager pass each, any length
            return static_pass(self.model, x, positions, cache, keep)[0]
        if (len(ids), keep) not in self.shapes:  # compiling takes seconds to a minute: say so
            self.shapes.add((len(ids), keep))
            log.info("compile=true: first %d-token pass of %s (%.0fM parameters) in this block: compiling it, unless "
                     "this process already did", len(ids),
                     type(self.model).__name__, sum(p.numel() for p in self.model.parameters()) / 1e6)
        if self.device.type != "cuda":
            return self.compiled(x, positions, cache, keep)[0]
        torch.compiler.cudagraph_mark_step_begin()  # a new step: the graph's output buffers get reused
        return self.compiled(x, positions, cache, keep)[0].clone()


def static_decoding(model) -> StaticDecoding | None:
    """The model's compiled decoding inside a `compiled_decoding` block, else None."""
    return _active.get(id(model))


class CompiledDecoding:
    """Static decodings for a set of models, kept between blocks (the same caches, so the same CUDA graphs):
    `with session.active(): ...` decodes through them."""

    def __init__(self, models, max_len: int, max_rows: int):
        if max_len < 2 or max_rows < 1:
            raise ValueError(f"compiled decoding needs max_len >= 2 and max_rows >= 1, got {max_len} and {max_rows}.")
        self.decodings = {id(m): StaticDecoding(m, max_len, max_rows) for m in models}
        if self.decodings:
            log.info("compile=true: %d model(s) decode through static caches of %d tokens; the first pass of each "
                     "shape compiles (torch.compile mode %s)", len(self.decodings), max_len,
                     compile_mode(next(iter(self.decodings.values())).device))

    @contextmanager
    def active(self):
        opened = [key for key in self.decodings if key not in _active]
        limit = torch._dynamo.config.recompile_limit
        # One graph per model and pass shape (about max_rows + 1 per model). Dynamo counts graphs per code object,
        # and every model's compiled forward shares one: allow what a process decoding a few models needs.
        torch._dynamo.config.recompile_limit = max(limit, 128)
        try:
            _active.update({key: self.decodings[key] for key in opened})
            yield self
        finally:
            torch._dynamo.config.recompile_limit = limit
            for key in opened:
                del _active[key]


def compiled_decoding(models, max_len: int, max_rows: int, enabled: bool = True):
    """A block in which `CachedLM`s of these models decode through static caches of `max_len` tokens and compiled
    passes of up to `max_rows` tokens. A no-op when `enabled` is False."""
    return CompiledDecoding(models, max_len, max_rows).active() if enabled else nullcontext()


def run_length(prompts: list[list[int]], max_new_tokens: int, gamma: int, multiple: int = 64) -> int:
    """A static cache length that fits every prompt, its new tokens and one verification pass past them."""
    need = max(map(len, prompts)) + max_new_tokens + gamma + 1
    return -(-need // multiple) * multiple
