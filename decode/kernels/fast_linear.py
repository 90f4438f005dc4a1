"""Small-batch linear layers on CPU: per number of rows, the fastest of three ways to compute the same product.

Decoding feeds each linear layer 1 to gamma+1 rows at a time, so a decode step is a stream of weight reads.
The three layouts, all `x @ W.T + b` to float32 rounding:
- `torch`: `F.linear`. Some BLAS builds (MKL on the development CPU) read the weights slowly for a few rows.
- `rows_first`: `(W @ x.T).T`, one row padded to two.
- `prepacked`: oneDNN's linear on a copy of the weights reordered into oneDNN's blocked layout when a block first
  needs it (`torch.ops.mkldnn`, what torch.compile's CPU backend uses); its cost barely grows with the row count.
  The copy costs the weights' size in memory again, kept while the weights live unchanged.
Measured timings: docs/results.md.

Which wins depends on the CPU, the BLAS and the row count, so `auto` measures: `fast_cpu_linears(models,
max_rows)` times the layouts over each model's own weights for 1..max_rows rows (taking turns pass by pass and
keeping each layout's fastest pass, so load from elsewhere on a shared machine does not decide). Inside the block,
every plain `nn.Linear` uses the fastest layout for each row count. Nothing changes outside the block, nor for anything
that needs gradients or runs on a GPU.

    with fast_cpu_linears([target, draft], max_rows=gamma + 1) as plan:
        generate(target, DraftModelProposer(draft), prompt, gamma, 128)
"""

from __future__ import annotations

import logging
import weakref
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from decode.kernels.timing import fastest_ms

log = logging.getLogger(__name__)
LAYOUTS = ("torch", "rows_first", "prepacked")
MODES = ("auto", *LAYOUTS)
_plans: dict[tuple, dict] = {}  # calibrations, by the weights' shapes, dtype and thread count
_packs: dict[int, tuple] = {}  # id(weight) -> (weak reference to it, its version, its prepacked copy)


def rows_first_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` computed as `(weight @ x.T).T`; a single row is padded to two."""
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if n == 1:
        rows = torch.cat([rows, rows])
    out = torch.mm(weight, rows.t()) if bias is None else torch.addmm(bias.unsqueeze(1), weight, rows.t())
    return out.t()[:n].contiguous().reshape(*x.shape[:-1], weight.shape[0])


def can_prepack(weight: torch.Tensor) -> bool:
    """oneDNN's reordered weights: CPU tensors of a torch built with oneDNN."""
    return (weight.device.type == "cpu" and torch.backends.mkldnn.is_available()
            and weight.dtype in (torch.float32, torch.bfloat16))


def prepack(weight: torch.Tensor) -> torch.Tensor:
    """A copy of `weight` in oneDNN's blocked layout, for `prepacked_linear` (any number of rows)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def packed_weight(weight: torch.Tensor) -> torch.Tensor:
    """`prepack(weight)`, kept while the weight lives unchanged (its version counter), so that a block entered per
    prompt does not reorder the target's weights every time."""
    key, version = id(weight), _version(weight)
    hit = _packs.get(key)
    if hit is None or hit[0]() is not weight or version is None or hit[1] != version:
        def forget(_ref, key=key):  # the weight is gone: so is its pack
            _packs.pop(key, None)
        hit = _packs[key] = (weakref.ref(weight, forget), version, prepack(weight))
    return hit[2]


def _version(weight: torch.Tensor) -> int | None:
    try:
        return weight._version
    except RuntimeError:  # inference tensors keep no version counter: never reuse their packs
        return None


def prepacked_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` with `packed = prepack(weight)`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class FastLinear(nn.Linear):
    """An nn.Linear that, without gradients, takes the layout its plan chose for the number of rows it gets."""

    _layout: dict = {}  # rows -> "rows_first" | "prepacked"; absent: torch
    _packed: torch.Tensor | None = None

    def forward(self, x):
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        layout = self._layout.get(rows)
        if layout is None or (torch.is_grad_enabled() and (self.weight.requires_grad or x.requires_grad)):
            return super().forward(x)
        if layout == "prepacked" and not torch.compiler.is_compiling():  # dynamo can't trace oneDNN's packed weights
            return prepacked_linear(x, self._packed, self.bias)
        return rows_first_linear(x, self.weight, self.bias)


def _linears(model) -> list[nn.Linear]:
    return [m for m in model.modules() if type(m) is nn.Linear]


def _sweep_ms(ways: dict, rows: int, repeats: int) -> dict[str, float]:
    """Per layout, its fastest of `repeats` passes over every weight (what one decode step reads), the layouts
    taking turns (decode.kernels.timing.fastest_ms: a burst of load from elsewhere does not pick the layout)."""
    originals = ways["torch"][0]  # every way holds the same weights (a prepacked way: reordered copies), in order
    by_width = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype, device=w.device) for w in originals}
    xs = [by_width[w.shape[1]] for w in originals]

    def sweep(weights, fn):
        for x, w in zip(xs, weights):
            fn(x, w)

    return fastest_ms({name: partial(sweep, weights, fn) for name, (weights, fn) in ways.items()}, repeats)


@torch.inference_mode()
def calibrate(model, max_rows: int, repeats: int = 5, margin: float = 0.95) -> dict:
    """Time each layout over the model's linear weights for 1..max_rows rows. Per row count, the fastest layout
    is taken if it took less than `margin` of torch's time, else torch's. Cached per process."""
    weights = list({id(m.weight): m.weight for m in _linears(model)}.values())  # tied weights once
    if not weights:
        return {"layout": [], "ms": {}}
    key = (tuple(tuple(w.shape) for w in weights), weights[0].dtype, torch.get_num_threads(), max_rows)
    if key not in _plans:
        ways = {"torch": (weights, F.linear), "rows_first": (weights, rows_first_linear)}
        if all(can_prepack(w) for w in weights):
            ways["prepacked"] = ([prepack(w) for w in weights], prepacked_linear)
        by_rows = [_sweep_ms(ways, r, repeats) for r in range(1, max_rows + 1)]
        ms = {name: [timing[name] for timing in by_rows] for name in ways}
        layout = []
        for i in range(max_rows):
            best = min(ms, key=lambda name: ms[name][i])
            layout.append(best if ms[best][i] < margin * ms["torch"][i] else "torch")
        _plans[key] = {"layout": layout, "ms": ms}
        log.info("cpu_matmul=auto, %s (%.1fM linear weights): one pass over them for 1..%d rows, in ms: %s; "
                 "chosen: %s", type(model).__name__, sum(w.numel() for w in weights) / 1e6, max_rows,
                 "; ".join(f"{name} {v}" for name, v in ms.items()), layout)
    return _plans[key]


def plan_for(model, max_rows: int, mode: str = "auto") -> dict:
    """The layout per row count 1..max_rows for this model (`plan["layout"]`; all torch on GPUs or mode=torch)."""
    if mode not in MODES:
        raise ValueError(f"cpu_matmul must be one of {MODES}, got '{mode}'.")
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}.")
    device = next(model.parameters()).device
    if mode == "torch" or device.type != "cpu":
        return {"mode": mode, "layout": ["torch"] * max_rows}
    if mode == "prepacked" and not all(can_prepack(m.weight) for m in _linears(model)):
        raise ValueError("cpu_matmul=prepacked needs a torch built with oneDNN (torch.backends.mkldnn) and float32 "
                         "or bfloat16 weights; use cpu_matmul=auto.")
    if mode != "auto":
        return {"mode": mode, "layout": [mode] * max_rows}
    return {"mode": mode, **calibrate(model, max_rows)}


@contextmanager
def fast_cpu_linears(models, max_rows: int, mode: str = "auto"):
    """Within the block, the models' plain nn.Linear layers use the fastest layout per row count (see the
    module docstring). Yields one plan per model (for the run's recorded conditions); restores the layers on exit."""
    swapped, plans = [], []
    try:
        for model in models:
            plan = plan_for(model, max_rows, mode)
            plans.append(plan)
            chosen = {rows: name for rows, name in enumerate(plan["layout"], 1) if name != "torch"}
            for layer in _linears(model) if chosen else []:
                layer.__class__ = FastLinear
                layer._layout = chosen
                if "prepacked" in chosen.values():
                    layer._packed = packed_weight(layer.weight)  # tied weights: packed once
                swapped.append(layer)
        yield plans
    finally:
        for layer in swapped:
            layer.__class__ = nn.Linear
            del layer._layout
            layer.__dict__.pop("_packed", None)
