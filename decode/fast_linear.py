"""Small-batch linear layers on CPU: per number of rows, the faster of two ways to write the same product.

Decoding feeds each linear layer 1 to gamma+1 rows at a time, so a decode step is a stream of weight reads.
torch computes `x @ W.T`. On this repository's CPU (2-core AMD EPYC, torch 2.13's MKL), one pass of that layout
over the default target's 134M linear weights took 42-45 ms for one row and 74-97 ms for two or three rows. The
same product written `(W @ x.T).T` took 19-20 ms for one or two rows: one row is padded to two, which costs less
than the one-row path. Both compute the same dot products; results agree to float32 rounding.

Whether it pays depends on the CPU and the BLAS, so `auto` measures it: `fast_cpu_linears(models, max_rows)`
times both layouts over each model's own weights for 1..max_rows rows. Inside the block, every plain
`nn.Linear` uses the faster layout for the row counts where it won. Nothing changes outside the block, nor for
anything that needs gradients or runs on a GPU.

    with fast_cpu_linears([target, draft], max_rows=gamma + 1) as plan:
        generate(target, DraftModelProposer(draft), prompt, gamma, 128)
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from decode.costs import median_seconds

log = logging.getLogger(__name__)
MODES = ("auto", "rows_first", "torch")
_plans: dict[tuple, dict] = {}  # calibrations, by the weights' shapes, dtype and thread count


def rows_first_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` computed as `(weight @ x.T).T`; a single row is padded to two."""
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if n == 1:
        rows = torch.cat([rows, rows])
    out = torch.mm(weight, rows.t()) if bias is None else torch.addmm(bias.unsqueeze(1), weight, rows.t())
    return out.t()[:n].contiguous().reshape(*x.shape[:-1], weight.shape[0])


class RowsFirstLinear(nn.Linear):
    """An nn.Linear that, without gradients, takes `rows_first_linear` for the row counts in `_rows_first`."""

    _rows_first: frozenset = frozenset()

    def forward(self, x):
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if rows in self._rows_first and not (torch.is_grad_enabled() and (self.weight.requires_grad
                                                                         or x.requires_grad)):
            return rows_first_linear(x, self.weight, self.bias)
        return super().forward(x)


def _linears(model) -> list[nn.Linear]:
    return [m for m in model.modules() if type(m) is nn.Linear]


def _sweep_seconds(weights: list[torch.Tensor], rows: int, fn, repeats: int) -> float:
    """Median seconds of one pass of `fn` over every weight (what one decode step reads), after a warm-up."""
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype, device=w.device) for w in weights}

    def sweep():
        for w in weights:
            fn(inputs[w.shape[1]], w)

    return median_seconds(sweep, repeats)


@torch.inference_mode()
def calibrate(model, max_rows: int, repeats: int = 5, margin: float = 0.95) -> dict:
    """Time torch's layout and the rows-first layout over the model's linear weights for 1..max_rows rows.
    Rows-first is chosen where it took less than `margin` of torch's time. Cached per process."""
    weights = list({id(m.weight): m.weight for m in _linears(model)}.values())  # tied weights once
    if not weights:
        return {"rows_first": [], "torch_ms": [], "rows_first_ms": []}
    key = (tuple(tuple(w.shape) for w in weights), weights[0].dtype, torch.get_num_threads(), max_rows)
    if key not in _plans:
        torch_s = [_sweep_seconds(weights, r, F.linear, repeats) for r in range(1, max_rows + 1)]
        rows_s = [_sweep_seconds(weights, r, rows_first_linear, repeats) for r in range(1, max_rows + 1)]
        _plans[key] = {"rows_first": [r for r, (a, b) in enumerate(zip(torch_s, rows_s), 1) if b < margin * a],
                       "torch_ms": [round(s * 1e3, 2) for s in torch_s],
                       "rows_first_ms": [round(s * 1e3, 2) for s in rows_s]}
        log.info("cpu_matmul=auto, %s (%.1fM linear weights): one pass over them, torch layout %s ms, rows-first %s "
                 "ms for 1..%d rows: rows-first for %s rows", type(model).__name__,
                 sum(w.numel() for w in weights) / 1e6, _plans[key]["torch_ms"],
                 _plans[key]["rows_first_ms"], max_rows, _plans[key]["rows_first"] or "no")
    return _plans[key]


def plan_for(model, max_rows: int, mode: str = "auto") -> dict:
    """Which row counts take the rows-first layout for this model (nothing on GPUs or with mode=torch)."""
    if mode not in MODES:
        raise ValueError(f"cpu_matmul must be one of {MODES}, got '{mode}'.")
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}.")
    device = next(model.parameters()).device
    if mode == "torch" or device.type != "cpu":
        return {"mode": mode, "rows_first": []}
    if mode == "rows_first":
        return {"mode": mode, "rows_first": list(range(1, max_rows + 1))}
    return {"mode": mode, **calibrate(model, max_rows)}


@contextmanager
def fast_cpu_linears(models, max_rows: int, mode: str = "auto"):
    """Within the block, the models' plain nn.Linear layers use the faster layout per row count (see the module
    docstring). Yields one plan per model (for the run's recorded conditions); restores the layers on exit."""
    swapped, plans = [], []
    try:
        for model in models:
            plan = plan_for(model, max_rows, mode)
            plans.append(plan)
            for layer in _linears(model) if plan["rows_first"] else []:
                layer.__class__ = RowsFirstLinear
                layer._rows_first = frozenset(plan["rows_first"])
                swapped.append(layer)
        yield plans
    finally:
        for layer in swapped:
            layer.__class__ = nn.Linear
            del layer._rows_first
