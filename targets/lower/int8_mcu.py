"""INT8 kernel choice on a microcontroller (the deploying compiler targets a Cortex-M:
isa.is_mcu): the weights are flash, so every kernel there reads int8 weights, one byte a
weight. The int16-pair GEMM the CPUs use (packing.pack_pairs) would double the flash; on
an MCU one-group convolutions run as es_conv2d_i8_mcu instead, which widens int8 weights at
run time (SXTB16 + SMLAD with the DSP extension, Helium on the M55, plain C elsewhere).
Depthwise convolutions run as es_dwconv2d_i8_mcu: weights [C][KH][KW] exactly as ONNX has
them (the CPU's es_dwconv2d_i8_hwc pads C to 16 and needs two transposed planes of scratch;
this one needs one padded int16 plane of a channel), tap pairs by SMLAD. Fully connected
layers (es_fc_i8, int8 [N][K]) already keep int8 weights and are left as they are.
"""

from __future__ import annotations

import numpy as np

from ..graph import Kernel
from ..isa import is_mcu
from .packing import mcu_quads

# int8, one group, MCU: two int16 im2col columns of K rounded up to 4 taps
CONV_I8_MCU = Kernel(
    "es_conv2d_i8_mcu", lambda p: 4 * (-(-(p["C"] * p["KH"] * p["KW"]) // 4) * 4),
    lambda p: f"ES_I8_MCU_SCRATCH({p['C'] * p['KH'] * p['KW']})")

_DW_GEO = ("OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW")
MAX_PAIRS = 64  # ES_I8_DW_MCU_MAX_PAIRS: KH * (KW // 2) widened on the stack


def dw_scratch(p: dict) -> int:
    """Bytes of es_dwconv2d_i8_mcu scratch: one padded int16 input plane of a channel, as
    much as the outputs read; mirrors ES_I8_DW_MCU_SCRATCH."""
    hp = (p["OH"] - 1) * p["SH"] + (p["KH"] - 1) * p["DH"] + 1
    wp = (p["OW"] - 1) * p["SW"] + (p["KW"] - 1) * p["DW"] + 1
    return 2 * hp * wp


# int8, depthwise, MCU: int8 weights [C][KH*KW], one padded int16 plane of scratch
DWCONV_I8_MCU = Kernel(
    "es_dwconv2d_i8_mcu", dw_scratch,
    lambda p: "ES_I8_DW_MCU_SCRATCH(" + ", ".join(str(int(p[k])) for k in _DW_GEO) + ")")


def conv_kernel(L, node, w: np.ndarray, p: dict) -> tuple[Kernel, str] | None:
    """(kernel, its int8 weights) for a one-group conv (es_conv2d_i8_mcu, quad-ordered) or
    a depthwise one (es_dwconv2d_i8_mcu, ONNX order) when the deploying compiler targets a
    Cortex-M; None elsewhere (the CPU kernels apply)."""
    if not is_mcu(L.isa):
        return None
    if p["group"] == 1:
        wq = mcu_quads(w.reshape(p["M"], p["C"], p["KH"], p["KW"]))
        return CONV_I8_MCU, L.const_tensor(node.name + "_wq", wq, "i8")
    if p["group"] == p["C"] == p["M"] and p["KH"] * (p["KW"] // 2) <= MAX_PAIRS:
        wd = np.ascontiguousarray(w.reshape(p["C"], p["KH"] * p["KW"]).astype(np.int8))
        return DWCONV_I8_MCU, L.const_tensor(node.name + "_wm", wd, "i8")
    return None
