"""INT8 kernel choice on a microcontroller (the deploying compiler targets a Cortex-M:
isa.is_mcu): the weights are flash, so every kernel there reads int8 weights, one byte a
weight. The int16-pair GEMM the CPUs use (packing.pack_pairs) would double the flash; on
an MCU one-group convolutions run as es_conv2d_i8_mcu instead, which widens int8 weights at
run time (SXTB16 + SMLAD with the DSP extension, Helium on the M55, plain C elsewhere).
Depthwise (es_dwconv2d_i8_hwc, int8 [KH][KW][C16]) and fully connected layers (es_fc_i8,
int8 [N][K]) already keep int8 weights and are left as they are.
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


def conv_kernel(L, node, w: np.ndarray, p: dict) -> tuple[Kernel, str] | None:
    """(es_conv2d_i8_mcu, its int8 quad-ordered weights) for a one-group conv when the
    deploying compiler targets a Cortex-M; None elsewhere (the CPU kernels apply)."""
    if not is_mcu(L.isa) or p["group"] != 1:
        return None
    wq = mcu_quads(w.reshape(p["M"], p["C"], p["KH"], p["KW"]))
    return CONV_I8_MCU, L.const_tensor(node.name + "_wq", wq, "i8")
