"""INT8 convolution: DQ(x) -> Conv(DQ(w), DQ(b)) [-> Relu/Clip] -> Q as one integer kernel.

The pattern is matched and the geometry, bias and requantisation tables are computed once
(``conv_i8``); ``_choose`` then picks the kernel for the deploying compiler and packs the
weights in that kernel's layout (``packing``), with its scratch from ``kernels``:

    reference kernels       es_conv2d_i8 (the portable oracle)
    under 4 channels, VNNI  es_conv2d_i8_stem (whole patches, four taps to a word)
    one group, AVX-512 VNNI es_conv2d_i8_cl (small planes) or es_conv2d_i8_dot
    one group               es_conv2d_i8_gemm (im2col + int16-pair GEMM)
    depthwise               es_dwconv2d_i8_hwc (16-channel HWC blocks)
    other groupings         es_conv2d_i8_fast
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Kernel, Ref
from ..isa import VNNI
from . import fuse_int8, int8_mcu
from . import kernels as K
from .common import as2d, conv_pads, conv_params
from .packing import bias_values, blocked_weights, depthwise_hwc, dot_operands, pack_pairs
from .qdq import act_range, const_weight, deq_input, finish, out_tensor, q_after, qparams
from .registry import LOWER_INT8
from .requant import requant_tables, rq_mode

if TYPE_CHECKING:
    from ..ir import Lowerer


def conv_i8(L: Lowerer, node) -> bool:
    x = deq_input(L, node.input[0])
    wq = const_weight(L, node.input[1])
    pat = q_after(L, node.output[0])
    if x is None or wq is None or pat is None or len(x.shape) not in (3, 4):
        return False
    w, s_w, axis = wq
    m = w.shape[0]
    if s_w.size not in (1, m) or (s_w.size > 1 and axis != 0):
        return False
    qnode, act = pat
    tx = L.tensors[x.tensor]
    s_y, zp_y = qparams(L, qnode)
    params, oshape = _geometry(L, node, x.shape, w, tx.zero_point, zp_y,
                               act_range(L, act, s_y, zp_y))
    y = out_tensor(L, qnode, oshape)
    bias = bias_values(L, node, 2, tx.scale, s_w, m)
    mult, shift = requant_tables(L, node, tx.scale, s_w, s_y, m)
    kernel, wt, bias = _choose(L, node, w, bias, tx.zero_point, params)
    bt = L.const_tensor(node.name + ("_bias_u8" if kernel in K.U8_KERNELS else "_bias"),
                        bias, "i32")
    n, c, plane = x.shape[0], params["C"], params["OH"] * params["OW"]
    calls = [Call(kernel.fn, [Ref(x.tensor, i * c * params["H"] * params["W"]), Ref(wt),
                              Ref(bt), Ref(mult), Ref(shift), Ref("__scratch"),
                              Ref(y, i * m * plane), params], kernel) for i in range(n)]
    L.add_step(node, [x.tensor], [y], calls, scratch=kernel.scratch(params))
    finish(L, qnode, act, y, oshape)
    return True


def _geometry(L: Lowerer, node, xshape, w, x_zp: int, y_zp: int, qrange):
    """(es_conv_params, output shape) of an int8 conv; 1-D convs as 2-D with H = 1."""
    a = L.attrs(node)
    nsp = len(xshape) - 2
    k = list(w.shape[2:])
    s = list(a.get("strides", [1] * nsp))
    d = list(a.get("dilations", [1] * nsp))
    pads = conv_pads(a, xshape[2:], k, s, d)
    sp, kk, ss, dd, pp = as2d(xshape[2:], k, s, d, pads)
    osp = [(sp[i] + pp[i] + pp[i + 2] - dd[i] * (kk[i] - 1) - 1) // ss[i] + 1 for i in range(2)]
    m = w.shape[0]
    oshape = (xshape[0], m, *([osp[1]] if nsp == 1 else osp))
    params = conv_params(xshape[1], sp, m, osp, kk, ss, pp, dd, int(a.get("group", 1)), 0,
                         0.0, 0.0, x_zp=x_zp, y_zp=y_zp, qmin=qrange[0], qmax=qrange[1],
                         rq=rq_mode(L))
    return params, oshape


def _choose(L: Lowerer, node, w: np.ndarray, bias: np.ndarray, x_zp: int,
            p: dict) -> tuple[Kernel, str, np.ndarray]:
    """(kernel, its packed weight tensor, the bias it takes) for conv params ``p``."""
    m, c, group, kk = p["M"], p["C"], p["group"], (p["KH"], p["KW"])
    if L.kernels == "reference":
        return K.CONV_I8, L.const_tensor(node.name + "_w", w, "i8"), bias
    if (mcu := int8_mcu.conv_kernel(L, node, w, p)) is not None:
        return (*mcu, bias)  # a Cortex-M: int8 weights in flash, widened at run time
    if K.use_stem(p) and L.isa >= VNNI and not fuse_int8.disabled() and (
            dot := dot_operands(w.reshape(m, -1, 1, 1), bias, x_zp)):
        # a stem (RGB): the reduction over whole patches, taps in (c, kh, kw) order four to a
        # word, weights [M8][K4][8][4]; scratch: one output row's im2col block and the padded
        # input rows split by column phase
        wt = L.const_tensor(node.name + "_ws", blocked_weights(dot[0], 8), "i8")
        return K.CONV_I8_STEM, wt, dot[1]
    if group == 1 and L.isa >= VNNI and (dot := dot_operands(w.reshape(m, c, *kk), bias, x_zp)):
        # u8 x s8 dot-product GEMM (vpdpbusd): int8 weights tap-major in channel quads, the
        # u8 shift folded into the bias; scratch: the padded input as channel-quad planes
        # (+ an im2col block and partial sums where taps cannot be read in place)
        if K.use_cl(p):
            # the same products with output channels in the lanes (small planes): weights
            # [M16][KH][KW][C4][16][4]; scratch: the padded input as HWC uint8 quads
            wt = L.const_tensor(node.name + "_wc", blocked_weights(dot[0], 16), "i8")
            return K.CONV_I8_CL, wt, dot[1]
        wt = L.const_tensor(node.name + "_w8", blocked_weights(dot[0], 8), "i8")
        return K.CONV_I8_DOT, wt, dot[1]
    if group == 1:
        # im2col tiles + a 4x16 register-blocked GEMM; weights packed as int16 pairs over
        # C*KH*KW for madd / vmlal; scratch = one int16 im2col tile of KB2 pairs, plus int32
        # partial sums [M][16] when the reduction is blocked (ES_I8_GEMM_SCRATCH)
        return K.CONV_I8_GEMM, L.const_tensor(node.name + "_wp", pack_pairs(w), "i32"), bias
    if group == c == m:
        # depthwise in blocks of 16 channels, channel-innermost (XNNPACK's layout) between
        # two transposes: weights [KH][KW][C rounded up to 16]
        wd = depthwise_hwc(w, c, *kk)
        return K.DWCONV_I8_HWC, L.const_tensor(node.name + "_wd", wd, "i8"), bias
    return K.CONV_I8_FAST, L.const_tensor(node.name + "_w", w, "i8"), bias


LOWER_INT8["Conv"] = conv_i8
