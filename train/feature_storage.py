"""How a feature cache stores the target's hidden states: float16 (2 bytes a value), or int8 with one float16 scale
per row and layer (`feature_cache_storage=int8`: a byte a value, half the disk and half the reading).

A row is one token's hidden state of one layer (H values); its scale is max|x| / 127, so every value comes back
within half a step (scale / 2) of what the target computed.

    q, scale = quantize_rows(x, groups=3)      # x (..., 3H) float -> int8 (..., 3H), float16 (..., 3)
    x_back = dequantize_rows(q, scale)         # (..., 3H) float32
"""

from __future__ import annotations

import torch

STORAGES = ("float16", "int8")
SCALE = "_scale"  # a stored key's scales ride beside it as key + SCALE


def quantize_rows(x: torch.Tensor, groups: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 values and float16 scales of `x` (..., groups * H), each of the `groups` rows of H values scaled by its
    own max |x| / 127."""
    rows = x.float().reshape(*x.shape[:-1], groups, x.shape[-1] // groups)
    exact = rows.abs().amax(-1, keepdim=True) / 127
    half = exact.to(torch.float16)
    half = torch.where(half.float() < exact, torch.nextafter(half, torch.full_like(half, float("inf"))), half)
    scale = half.float()  # the scale as it is read, never below max|x| / 127: no value is clipped
    q = (rows / torch.where(scale > 0, scale, 1.0)).round().clamp(-127, 127).to(torch.int8)
    return q.reshape(x.shape), half.squeeze(-1)


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float32 values of int8 `q` (..., G * H) with its float16 scales (..., G)."""
    groups = scale.shape[-1]
    rows = q.float().reshape(*q.shape[:-1], groups, q.shape[-1] // groups) * scale.float().unsqueeze(-1)
    return rows.reshape(q.shape)


def stored(values: torch.Tensor, key: str, storage: str, groups: int = 1) -> dict[str, torch.Tensor]:
    """{key: values} as the cache keeps them: float16, or int8 beside key + SCALE."""
    if storage == "float16":
        return {key: values.to(torch.float16)}
    q, scale = quantize_rows(values, groups)
    return {key: q, key + SCALE: scale}


def read(batch: dict, key: str) -> torch.Tensor | None:
    """The cached `key` of a batch as float32 (dequantized when stored as int8), None when absent."""
    if key not in batch:
        return None
    if key + SCALE in batch:
        return dequantize_rows(batch[key], batch[key + SCALE])
    return batch[key].float()


def bytes_per_value(storage: str, hidden: int) -> float:
    """Disk per stored value, the scales included."""
    if storage not in STORAGES:
        raise ValueError(f"feature_cache_storage must be one of {', '.join(STORAGES)}, got {storage!r}.")
    return 2.0 if storage == "float16" else 1.0 + 2.0 / hidden
