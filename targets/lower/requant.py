"""Rescaling int32 sums to int8: the (mult, shift) pairs every int8 kernel reads.

real = mult * 2^(shift - 31), applied as ``L.requant`` says (ES_RQ_* in edgesmith_rt.h):
"fp32" (the default) multiplies in float32 by the scale x_scale * w_scale / y_scale
computed in float32 as onnxruntime's QLinearConv and XNNPACK compute it, and rounds half
to even; "fixed" is TFLite's integer-only Q31 multiplier, for cores without an FPU. Kept
apart from the lowerings because the C side (es_mul_q, es_rq_scale) and the tests check
exactly these numbers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..ir import Lowerer


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real = mult * 2^(shift - 31), mult in [2^30, 2^31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    qf = int(round(q * (1 << 31)))
    if qf == (1 << 31):
        qf //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        shift, qf = 30, (1 << 31) - 1
    return qf, shift


def fp32_multiplier(scale: np.float32) -> tuple[int, int]:
    """(mult, shift) that hold the float32 ``scale`` exactly, for ES_RQ_FP32: mult is its
    24-bit significand times 2^31 (so es_rq_scale rebuilds the float's bits), shift its
    exponent. Zero and scales below float32's normal range (2^-126, no real model's) are
    (0, -126), which es_rq_scale reads as 0.0f."""
    q, shift = math.frexp(float(np.float32(scale)))
    if q == 0.0 or shift < -125:
        return 0, -126
    return int(q * (1 << 31)), shift


def requant_pair(L: Lowerer, real32: np.float32, real: float) -> tuple[int, int]:
    """The (mult, shift) of one rescale for L.requant: the float32 scale itself (fp32), or
    TFLite's Q31 rounding of the exact ratio (fixed)."""
    return fp32_multiplier(real32) if L.requant == "fp32" else quantize_multiplier(real)


def rq_mode(L: Lowerer) -> int:
    """ES_RQ_FIXED (0) or ES_RQ_FP32 (1), as the kernels take it"""
    return 1 if L.requant == "fp32" else 0


def requant_tables(L: Lowerer, node, s_x, s_w, s_y, m: int) -> tuple[str, str]:
    """Per-output-channel (mult, shift) constant tensors of a conv or dense layer."""
    s_w = np.broadcast_to(s_w, (m,))
    # float32 as onnxruntime computes it: (x_scale * w_scale) / y_scale, each step rounded
    f32 = np.float32
    ms = [requant_pair(L, f32(f32(s_x) * f32(sw)) / f32(s_y), float(s_x) * float(sw) / float(s_y))
          for sw in s_w]
    mult = L.const_tensor(node.name + "_mult", np.array([a for a, _ in ms], np.int32), "i32")
    shift = L.const_tensor(node.name + "_shift", np.array([b for _, b in ms], np.int32), "i32")
    return mult, shift
