"""Weight and bias packing for the int8 kernels: the layouts each kernel reads, made once
at generation time so the kernels never reorder constants at run time.

Each function here mirrors one kernel's reading order in runtime/kernels/ (named in its
docstring); a packing and its kernel change together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..ir import Lowerer


def pack_pairs(w: np.ndarray) -> np.ndarray:
    """[M][C*KH*KW] int8 -> [M][ceil(K/2)] int32, each (w[m][2k] low, w[m][2k+1] high) as
    int16, the layout es_conv2d_i8_gemm's _mm256_madd_epi16 / vmlal path reads."""
    w2 = w.reshape(w.shape[0], -1).astype(np.int16)
    if w2.shape[1] % 2:
        w2 = np.concatenate([w2, np.zeros((w2.shape[0], 1), np.int16)], axis=1)
    lo = w2[:, 0::2].astype(np.uint16).astype(np.uint32)
    hi = w2[:, 1::2].astype(np.uint16).astype(np.uint32)
    return (lo | (hi << 16)).view(np.int32)


def dot_operands(w: np.ndarray, bias: np.ndarray, x_zp: int):
    """(weights [M][KH][KW][C4*4] int8, bias_u8) for the VNNI kernels (their packings
    start from these weights: blocked_weights), or None when the
    folded bias bias - (x_zp + 128) * sum w or the u8 x s8 sums could leave int32."""
    m, c, kh, kw = w.shape
    c4 = (c + 3) // 4
    w4 = np.zeros((m, kh, kw, c4 * 4), np.int8)
    w4[..., :c] = w.transpose(0, 2, 3, 1)
    bu = bias.astype(np.int64) - (int(x_zp) + 128) * w.reshape(m, -1).astype(np.int64).sum(1)
    if np.abs(bu).max(initial=0) >= 2**31 or 255 * 127 * kh * kw * c4 * 4 >= 2**31:
        return None
    return w4, bu.astype(np.int32)


def blocked_weights(w4: np.ndarray, block: int) -> np.ndarray:
    """[M][KH][KW][C4*4] (dot_operands' weights) -> [M/block][KH][KW][C4][block][4]: the
    output channels one micro-kernel step multiplies side by side, so each step of the
    reduction reads block * 4 contiguous bytes; channels past M are zero. block 8 is
    es_conv2d_i8_dot's packing (8 rows per call, one pointer instead of 8), block 16
    es_conv2d_i8_cl's (the 64 bytes one vpdpbusd multiplies, 16 channels in the lanes)."""
    m, kh, kw, c = w4.shape
    mb = -(-m // block)
    wp = np.zeros((mb * block, kh, kw, c), np.int8)
    wp[:m] = w4
    return np.ascontiguousarray(
        wp.reshape(mb, block, kh, kw, c // 4, 4).transpose(0, 2, 3, 4, 1, 5))


def depthwise_hwc(w: np.ndarray, c: int, kh: int, kw: int) -> np.ndarray:
    """[C][1][KH][KW] int8 -> [KH][KW][C rounded up to 16], zero-padded: es_dwconv2d_i8_hwc
    multiplies 16 channels of one tap at once (XNNPACK's channel-innermost layout)."""
    cp = -(-c // 16) * 16
    wd = np.zeros((kh, kw, cp), np.int8)
    wd[..., :c] = w.reshape(c, kh, kw).transpose(1, 2, 0)
    return wd


def bias_values(L: Lowerer, node, idx: int, s_x, s_w, m: int) -> np.ndarray:
    """The float bias input ``idx`` of ``node`` quantized to int32 at x_scale * w_scale."""
    b = L.const(node.input[idx]) if len(node.input) > idx and node.input[idx] else None
    b = np.zeros(m, np.float64) if b is None else b.astype(np.float64).reshape(-1)
    bq = np.round(np.broadcast_to(b, (m,)) / (float(s_x) * np.broadcast_to(s_w, (m,))))
    return np.clip(bq, -2**31, 2**31 - 1).astype(np.int32)


def bias_i32(L: Lowerer, node, idx: int, s_x, s_w, m: int) -> str:
    return L.const_tensor(node.name + "_bias", bias_values(L, node, idx, s_x, s_w, m), "i32")


def mcu_quads(w: np.ndarray) -> np.ndarray:
    """[M][C][KH][KW] int8 -> [M][K4] int8 for es_conv2d_i8_mcu: each row the reference's
    (c, kh, kw) order zero-padded to K4 = C*KH*KW rounded up to 4, each quad stored as
    (w0, w2, w1, w3) so that SXTB16 of the word widens (w0, w1) and SXTB16 of the word
    rotated by 8 widens (w2, w3). Still one byte a weight: flash holds int8, as on the
    device's reference (CMSIS-NN's kernels also widen at run time)."""
    w2 = w.reshape(w.shape[0], -1)
    k4 = -(-w2.shape[1] // 4) * 4
    wq = np.zeros((w2.shape[0], k4), np.int8)
    wq[:, :w2.shape[1]] = w2
    return np.ascontiguousarray(wq.reshape(-1, k4 // 4, 4)[:, :, [0, 2, 1, 3]].reshape(-1, k4))
