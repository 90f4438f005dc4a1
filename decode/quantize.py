"""Int8 weights for the draft on CPU: a cheaper draft step, with the target untouched (output stays lossless).

A draft step at batch size 1 reads every weight once, and the default draft's largest weight is its 49,152 x 576
LM head. Stored as int8 (one scale per output row) and multiplied by torch's weight-only int8 kernel
(`aten._weight_int8pack_mm`, bfloat16 activations), a pass over them reads a quarter of the bytes (measured
effect: docs/results.md).

Feature drafts (decode/feature_drafts.py) are quantized the same way: their own layers and their cut head; the
target's embeddings and full LM head, which they share, never. Only the draft is quantized, and only for decoding: the target's logits decide what is emitted, so greedy output
still equals the target's own and rejection sampling stays exact. What can change is how often the target agrees
with the draft (alpha); eval/speculate.py measures it. The exported checkpoint is never quantized.

`draft_quant=auto` quantizes when the draft is on a CPU and the int8 kernel is at least 5% faster there than the
float weights (timed once per process, as in decode/fast_linear.py); `int8` always on CPU; `none` never.

    draft, plan = quantize_draft(draft, "auto")
"""

from __future__ import annotations

import logging
from copy import deepcopy

import torch
import torch.nn.functional as F
from torch import nn

from decode.costs import fastest_ms
from decode.draft_vocab import SubsetHead
from decode.feature_drafts import is_feature_draft
from decode.fast_linear import rows_first_linear

log = logging.getLogger(__name__)
MODES = ("auto", "int8", "none")
_decisions: dict[tuple, dict] = {}  # timings, by the weights' shapes, dtype and thread count


def int8_kernel_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int8pack_mm")


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


def _own_cut_head(model) -> nn.Module | None:
    """A feature draft's cut head (decode/draft_vocab.py's SubsetHead, made for this draft alone), or None. A feature
    draft holds its head outside its submodules (decode/feature_drafts.py): uncut, that head is the target's own,
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
    decode/fast_linear.py's two layouts, against int8. Cached per process."""
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
        if mode == "int8":
            raise ValueError(f"draft_quant=int8 runs on CPU only (the draft is on {device}). Fix: draft_quant=auto "
                             "or none on GPUs.")
        return plan
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


def quantize_draft(model, mode: str = "auto", copy: bool = False) -> tuple[nn.Module, dict]:
    """Replace the model's plain nn.Linear layers with Int8Linear where `plan_quant` says so: in place, or in a
    deep copy with copy=True (the original is returned untouched when nothing is quantized). Returns the model
    to decode with and the plan, for the run's recorded conditions."""
    plan = plan_quant(model, mode)
    if not plan["quantized"]:
        return model, plan
    if copy:
        model = deepcopy(model)
        if _own_cut_head(model) is not None:  # the copy shares the original's head holder: give it its own head
            model.set_output_embeddings(deepcopy(model.get_output_embeddings()))
    shared: dict[int, Int8Linear] = {}  # a layer reachable twice is quantized once
    for parent, name, layer in _linears(model):
        setattr(parent, name, shared.setdefault(id(layer), Int8Linear(layer)))
    return model, plan
