"""Int8 weights for the draft on CPU: a cheaper draft step, with the target untouched (output stays lossless).

A draft step at batch size 1 reads every weight once, and the default draft's largest weight is its 49,152 x 576
LM head. Stored as int8 (one scale per output row) and multiplied by torch's weight-only int8 kernel
(`aten._weight_int8pack_mm`, bfloat16 activations), a pass over them reads a quarter of the bytes (measured
effect: docs/results.md).

Feature drafts (decode/drafts/feature_drafts.py) are quantized the same way: their own layers and their cut head; the
target's embeddings and full LM head, which they share, never. Only the draft is quantized, and only for decoding: the target's logits decide what is emitted, so greedy output
still equals the target's own and rejection sampling stays exact. What can change is how often the target agrees
with the draft (alpha); eval/speculate.py measures it. The exported checkpoint is never quantized.

`draft_quant=auto` quantizes when the draft is on a CPU and the int8 kernel is at least 5% faster there than the
float weights (timed once per process, as in decode/kernels/fast_linear.py); `int8` always on CPU; `none` never.
`int4` stores 4-bit weights in groups of 32-128 input columns, each group with its own scale and offset, and multiplies
them with `aten._weight_int4pack_mm_for_cpu`: half the bytes of int8 again, at a larger rounding error, so it is
chosen explicitly (never by auto), and its effect on acceptance is measured like any other draft's. A layer whose
input width no group size divides stays float.

    draft, plan = quantize_draft(draft, "auto")
"""

from __future__ import annotations

import logging
from copy import deepcopy

import torch
import torch.nn.functional as F
from torch import nn

from decode.kernels.timing import fastest_ms
from decode.drafts.draft_vocab import SubsetHead
from decode.drafts.feature_drafts import is_feature_draft
from decode.kernels.fast_linear import rows_first_linear

log = logging.getLogger(__name__)
MODES = ("auto", "int8", "int4", "none")
INT4_GROUPS = (128, 64, 32)  # group sizes tried, largest first: the first that divides a layer's input width
_decisions: dict[tuple, dict] = {}  # timings, by the weights' shapes, dtype and thread count


def int8_kernel_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int8pack_mm")


def int4_kernel_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


def int4_group(in_features: int) -> int | None:
    return next((g for g in INT4_GROUPS if in_features % g == 0), None)


def quantize_groups(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit per group of `group` input columns: weight ~= (q - 8) * scale + zero, 0 <= q <= 15, with
    scale and zero per (row, group). Returns q (int32, rows x columns), scale and zero (rows x groups)."""
    w = weight.detach().float().reshape(weight.shape[0], -1, group)
    low, high = w.amin(dim=-1), w.amax(dim=-1)
    scale = ((high - low) / 15.0).clamp(min=1e-12)
    q = torch.round((w - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32)
    return q.reshape(weight.shape), scale, low + 8 * scale


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output row: weight ~= q * scale[:, None], |q| <= 127."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8Linear(nn.Module):
    """y = x @ (q * scale).T + bias, with int8 `q`: the input is cast to bfloat16 for the kernel and the output
    back to the input's dtype. Inference only (no gradients flow to the int8 weights)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        q, scale = quantize_rows(linear.weight)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", q.to(linear.weight.device))
        self.register_buffer("scale", scale.to(device=linear.weight.device, dtype=torch.bfloat16))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        y = torch.ops.aten._weight_int8pack_mm(rows, self.qweight, self.scale).to(x.dtype)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"


class Int4Linear(nn.Module):
    """y = x @ dequant(q).T + bias with 4-bit groups (`quantize_groups`), packed for torch's CPU int4 kernel; the
    input is cast to bfloat16 for it and the output back. Inference only."""

    def __init__(self, linear: nn.Linear, group: int):
        super().__init__()
        weight = linear.weight.detach()
        pad = -weight.shape[0] % 16  # the kernel packs rows in sixteens: zero rows pad, the output drops them
        q, scale, zero = quantize_groups(F.pad(weight, (0, 0, 0, pad)), group)
        self.in_features, self.out_features, self.group = linear.in_features, linear.out_features, group
        device = linear.weight.device
        self.register_buffer("qweight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(device), 1))
        scales_zeros = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous()  # groups x rows x 2
        self.register_buffer("scales_zeros", scales_zeros.to(device=device, dtype=torch.bfloat16))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.qweight, self.group, self.scales_zeros)
        y = y[:, :self.out_features].to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 weights, group={self.group}"


def _own_cut_head(model) -> nn.Module | None:
    """A feature draft's cut head (decode/drafts/draft_vocab.py's SubsetHead, made for this draft alone), or None. A feature
    draft holds its head outside its submodules (decode/drafts/feature_drafts.py): uncut, that head is the target's own,
    which is never quantized (the target's logits decide what is emitted)."""
    if not is_feature_draft(model):
        return None
    head = model.get_output_embeddings()
    return head if isinstance(head, SubsetHead) else None


def _linears(model) -> list[tuple[nn.Module, str, nn.Linear]]:
    """(parent, attribute name, layer) of every plain nn.Linear, a feature draft's cut head's included; a layer
    shared by two parents is listed twice."""
    parents = list(model.modules()) + ([_own_cut_head(model)] if _own_cut_head(model) is not None else [])
    return [(parent, name, child) for parent in parents for name, child in parent.named_children()
            if type(child) is nn.Linear]


@torch.inference_mode()
def time_int8(model) -> dict:
    """One 1-row pass over the model's linear weights (what a draft step reads): the float weights in the faster of
    decode/kernels/fast_linear.py's two layouts, against int8. Cached per process."""
    weights = list({id(layer.weight): layer.weight for _, _, layer in _linears(model)}.values())
    key = (tuple(tuple(w.shape) for w in weights), weights[0].dtype, torch.get_num_threads())
    if key not in _decisions:
        xs = {w.shape[1]: torch.randn(1, w.shape[1], dtype=w.dtype) for w in weights}
        packed = [(q, s.to(torch.bfloat16), xs[w.shape[1]]) for w in weights for q, s in [quantize_rows(w)]]

        def float_pass(linear):
            for w in weights:
                linear(xs[w.shape[1]], w)

        def int8_pass():
            for q, s, x in packed:
                torch.ops.aten._weight_int8pack_mm(x.to(torch.bfloat16), q, s)

        ms = fastest_ms({"torch": lambda: float_pass(F.linear), "rows_first": lambda: float_pass(rows_first_linear),
                         "int8": int8_pass}, 5)
        _decisions[key] = {"float_ms": min(ms["torch"], ms["rows_first"]), "int8_ms": ms["int8"]}
        log.info("draft_quant=auto, %s (%.1fM linear weights): one 1-row pass over them, float %.2f ms, int8 %.2f ms",
                 type(model).__name__, sum(w.numel() for w in weights) / 1e6, _decisions[key]["float_ms"],
                 _decisions[key]["int8_ms"])
    return _decisions[key]


def plan_quant(model, mode: str = "auto") -> dict:
    """Whether `quantize_draft(model, mode)` would quantize: {"mode", "quantized", and the timings if auto}."""
    if mode not in MODES:
        raise ValueError(f"draft_quant must be one of {MODES}, got '{mode}'.")
    device = next(model.parameters()).device
    plan = {"mode": mode, "quantized": False}
    if mode == "none" or not _linears(model):
        return plan
    if device.type != "cpu":
        if mode in ("int8", "int4"):
            raise ValueError(f"draft_quant={mode} runs on CPU only (the draft is on {device}). Fix: draft_quant=auto "
                             "or none on GPUs.")
        return plan
    if mode == "int4":
        if not int4_kernel_available():
            raise ValueError(f"draft_quant=int4 needs torch's aten._weight_int4pack_mm_for_cpu, missing in torch "
                             f"{torch.__version__}. Fix: draft_quant=int8, or the torch version this project pins.")
        return {**plan, "quantized": True}
    if not int8_kernel_available():
        if mode == "int8":
            raise ValueError(f"draft_quant=int8 needs torch's aten._weight_int8pack_mm, missing in torch "
                             f"{torch.__version__}. Fix: draft_quant=none, or the torch version this project pins.")
        return plan
    if mode == "auto":
        plan.update(time_int8(model))
        plan["quantized"] = plan["int8_ms"] < 0.95 * plan["float_ms"]
        return plan
    return {**plan, "quantized": True}


def _quantized(layer: nn.Linear, mode: str) -> nn.Module:
    if mode != "int4":
        return Int8Linear(layer)
    group = int4_group(layer.in_features)
    return layer if group is None else Int4Linear(layer, group)


def weights_label(plan: dict) -> str | None:
    """What the draft's weights were while decoding, for recorded conditions: "int8", "int4" or None (as trained)."""
    return ("int4" if plan.get("mode") == "int4" else "int8") if plan.get("quantized") else None


def quantize_draft(model, mode: str = "auto", copy: bool = False) -> tuple[nn.Module, dict]:
    """Replace the model's plain nn.Linear layers with Int8Linear (Int4Linear for mode int4) where `plan_quant` says
    so: in place, or in a deep copy with copy=True (the original is returned untouched when nothing is quantized).
    Returns the model to decode with and the plan, for the run's recorded conditions."""
    plan = plan_quant(model, mode)
    if not plan["quantized"]:
        return model, plan
    if copy:
        model = deepcopy(model)
        if _own_cut_head(model) is not None:  # the copy shares the original's head holder: give it its own head
            model.set_output_embeddings(deepcopy(model.get_output_embeddings()))
    shared: dict[int, nn.Module] = {}  # a layer reachable twice is quantized once
    for parent, name, layer in _linears(model):
        if id(layer) not in shared:
            shared[id(layer)] = _quantized(layer, mode)
        setattr(parent, name, shared[id(layer)])
    return model, plan
