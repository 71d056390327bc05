"""Convolutions: Conv, BatchNormalization and ConvTranspose.

These live together because convolution is where generation time does the most work
for the runtime: weights are packed once into the layout the kernel reads (OIHW, or
16-channel k-major blocks for the one-group GEMM: pack_f32_gemm), a
following BatchNormalization and activation are folded into the weights and the kernel's
epilogue (so a standalone BatchNormalization is only the fallback), and the choice
between the reference and the fast im2col / depthwise kernels is made here, following
the Lowerer's ``kernels`` option so one switch covers both precisions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Ref
from ..isa import MCU_ARCHS
from . import kernels as K
from .common import as2d, conv_pads, conv_params, prod, take_act, unsupported
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer


@lowers("Conv")
def conv(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    w = L.const(node.input[1])
    if w is None:
        raise unsupported(node, "weights computed at run time")
    b = L.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    nsp = len(x.shape) - 2
    if nsp not in (1, 2):
        raise unsupported(node, f"{nsp}-D convolution", "the C runtime has 1-D and 2-D conv")
    w = w.astype(np.float32)
    m = w.shape[0]
    b = np.zeros(m, np.float32) if b is None else b.astype(np.float32).reshape(m)
    k = list(w.shape[2:])
    s = list(a.get("strides", [1] * nsp))
    d = list(a.get("dilations", [1] * nsp))
    pads = conv_pads(a, x.shape[2:], k, s, d)
    group = int(a.get("group", 1))
    out = node.output[0]
    # fold a following BatchNormalization, then a following activation
    nxt = L.single_consumer(out)
    if nxt is not None and nxt.op_type == "BatchNormalization" and len(nxt.output) == 1:
        sc, sh = bn_affine(L, nxt)
        if sc is not None:
            w = w * sc.reshape(-1, *([1] * (w.ndim - 1)))
            b = b * sc + sh
            L.done.add(id(nxt))
            out = nxt.output[0]
    code, a0, a1, out = take_act(L, out)
    sp, kk, ss, dd, pp = as2d(x.shape[2:], k, s, d, pads)
    osp = [(sp[i] + pp[i] + pp[i + 2] - dd[i] * (kk[i] - 1) - 1) // ss[i] + 1 for i in range(2)]
    n, c = x.shape[0], x.shape[1]
    oshape = (n, m, *([osp[1]] if nsp == 1 else osp))
    y = L.new_tensor(out, oshape, "f32")
    params = conv_params(c, sp, m, osp, kk, ss, pp, dd, group, code, a0, a1)
    kernel = _f32_kernel(L, params)
    if kernel is K.CONV_F32_GEMM:
        w = pack_f32_gemm(w)
    elif kernel is K.CONV_F32_WINO:
        w = pack_f32_wino(w)
    wt = L.const_tensor(node.name + "_w" if node.name else out + "_w", w, "f32")
    bt = L.const_tensor(node.name + "_b" if node.name else out + "_b", b, "f32")
    sc = [Ref("__scratch")] if kernel.scratch else []
    calls = [Call(kernel.fn, [Ref(x.tensor, i * c * sp[0] * sp[1]), Ref(wt), Ref(bt), *sc,
                              Ref(y, i * m * osp[0] * osp[1]), params], kernel)
             for i in range(n)]
    scratch = kernel.scratch(params) if kernel.scratch else 0
    L.add_step(node, [x.tensor], [y], calls, scratch=scratch)
    L.bind(out, y, oshape)


def _f32_kernel(L: Lowerer, p: dict):
    """es_conv2d_f32 (the reference), or for one group the im2col tiles + 8x32 micro-kernel
    on packed weights (ES_F32_GEMM_SCRATCH), or the depthwise kernel on a padded plane."""
    if L.kernels == "reference":
        return K.CONV_F32
    if p["group"] == 1:
        return K.CONV_F32_WINO if use_wino(L, p) else K.CONV_F32_GEMM
    if p["group"] == p["C"] == p["M"]:
        return K.DWCONV_F32
    return K.CONV_F32


F32_WB = 16  # output channels per packed block: ES_F32_WB in conv_f32_fast.c


def use_wino(L: Lowerer, p: dict) -> bool:
    """Whether a one-group conv runs as Winograd F(2 x 2, 3 x 3) (es_conv2d_f32_wino): 3 x 3,
    stride 1, undilated, 2-D, with at least WINO_MIN_C input and output channels (below
    that the transforms, O(C T) and O(M T), stop being small beside the GEMMs' O(M C T)),
    more than WINO_MIN_TILES tiles, and not on a microcontroller, whose flash would hold
    16 / 9 of these weights.

    Kernel alone, ResNet-18's 3 x 3 convs with ReLU, random weights, Intel Xeon (AVX-512),
    best of 5 alternating rounds, Winograd over the GEMM: 64 -> 64 at 56 x 56 0.69,
    128 -> 128 at 28 x 28 0.64, 256 -> 256 at 14 x 14 0.70, 512 -> 512 at 7 x 7 0.90. The
    7 x 7 plane is 16 tiles (64 outputs computed for 49) and its U, 16.8 MB against the
    GEMM's 9.4 MB of weights, is streamed from memory once per call: a tenth faster for
    1.8 times the weights, so planes that small keep the GEMM."""
    th, tw, _, _ = K.wino_f32_geometry(p["OH"], p["OW"])
    return (p["KH"] == p["KW"] == 3 and p["SH"] == p["SW"] == 1 and p["DH"] == p["DW"] == 1
            and p["C"] >= WINO_MIN_C and p["M"] >= WINO_MIN_C and p["H"] > 1
            and th * tw > WINO_MIN_TILES and not (L.isa & MCU_ARCHS))


WINO_MIN_C = 16
WINO_MIN_TILES = 16

# G of F(2, 3) and its use: U = G g G^T, 4 x 4 from each 3 x 3 kernel g
WINO_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def pack_f32_wino(w: np.ndarray) -> np.ndarray:
    """OIHW 3 x 3 weights as es_conv2d_f32_wino reads them: U = G g G^T for each (m, c),
    computed in float64 and rounded once, packed like pack_f32_gemm for each of the 16
    positions xi of the 4 x 4 transformed kernel: u[mb][xi][c][r] = U[16 mb + r][c][xi],
    channels past M zero. 16 / 9 of the weights' size."""
    m, c = w.shape[:2]
    u = np.einsum("ik,mckl,jl->mcij", WINO_G, w.astype(np.float64), WINO_G)
    nb = -(-m // F32_WB)
    flat = np.zeros((nb * F32_WB, c, 16), np.float64)
    flat[:m] = u.reshape(m, c, 16)
    return np.ascontiguousarray(
        flat.reshape(nb, F32_WB, c, 16).transpose(0, 3, 2, 1).astype(np.float32))


def pack_f32_gemm(w: np.ndarray) -> np.ndarray:
    """OIHW (or OIW) weights in the order es_conv2d_f32_gemm streams them: blocks of F32_WB
    output channels, k-major inside a block (packed[b][k][r] = w[F32_WB b + r][k], k over
    C KH KW), channels past M zero. Each step of the micro-kernel then reads its weights
    from one cache line instead of rows K floats apart, as XNNPACK's
    xnn_pack_f32_gemm_goi_w does for its GEMMs; 16 wide so the small-plane kernel's
    16-channel vectors are single loads (the 8-channel pixel kernel reads half a row)."""
    m = w.shape[0]
    nb = -(-m // F32_WB)
    flat = np.zeros((nb * F32_WB, int(np.prod(w.shape[1:]))), np.float32)
    flat[:m] = w.reshape(m, -1)
    return np.ascontiguousarray(flat.reshape(nb, F32_WB, -1).transpose(0, 2, 1))


def bn_affine(L: Lowerer, node):
    a = L.attrs(node)
    vals = [L.const(i) for i in node.input[1:5]]
    if any(v is None for v in vals):
        return None, None
    gamma, beta, mean, var = (v.astype(np.float64) for v in vals)
    sc = gamma / np.sqrt(var + a.get("epsilon", 1e-5))
    return sc.astype(np.float32), (beta - mean * sc).astype(np.float32)


@lowers("BatchNormalization")
def batchnorm(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    sc, sh = bn_affine(L, node)
    if sc is None:
        raise unsupported(node, "statistics computed at run time")
    y = L.new_tensor(node.output[0], x.shape, "f32")
    st, bt = L.const_tensor(node.name + "_scale", sc, "f32"), L.const_tensor(
        node.name + "_shift", sh, "f32")
    c = x.shape[1]
    inner = prod(x.shape[2:])
    L.add_step(node, [x.tensor], [y], [Call("es_channel_affine_f32", [
        Ref(x.tensor), Ref(st), Ref(bt), Ref(y), x.shape[0], c, inner])], inplace=True)
    L.bind(node.output[0], y, x.shape)


@lowers("ConvTranspose")
def conv_transpose(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    w = L.const(node.input[1])
    if w is None:
        raise unsupported(node, "weights computed at run time")
    nsp = len(x.shape) - 2
    if nsp not in (1, 2):
        raise unsupported(node, f"{nsp}-D transposed convolution")
    group = int(a.get("group", 1))
    c = x.shape[1]
    m = w.shape[1] * group
    b = L.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    b = np.zeros(m, np.float32) if b is None else b.astype(np.float32)
    k = list(w.shape[2:])
    s = list(a.get("strides", [1] * nsp))
    d = list(a.get("dilations", [1] * nsp))
    opad = list(a.get("output_padding", [0] * nsp))
    pads = list(a.get("pads", [0] * (2 * nsp)))
    if "output_shape" in a:
        raise unsupported(node, "output_shape attribute", "export with explicit pads")
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise unsupported(node, "auto_pad SAME", "export with explicit pads")
    osp = [s[i] * (x.shape[2 + i] - 1) + opad[i] + ((k[i] - 1) * d[i] + 1) - pads[i]
           - pads[i + nsp] for i in range(nsp)]
    sp, kk, ss, dd, pp = as2d(x.shape[2:], k, s, d, pads)
    osp2 = [1, osp[0]] if nsp == 1 else osp
    n = x.shape[0]
    oshape = (n, m, *osp)
    y = L.new_tensor(node.output[0], oshape, "f32")
    wt = L.const_tensor(node.name + "_w", w.astype(np.float32), "f32")
    bt = L.const_tensor(node.name + "_b", b.reshape(m), "f32")
    params = conv_params(c, sp, m, osp2, kk, ss, pp, dd, group, 0, 0.0, 0.0)
    calls = [Call("es_conv_transpose2d_f32", [
        Ref(x.tensor, i * prod(x.shape[1:])), Ref(wt), Ref(bt), Ref(y, i * prod(oshape[1:])),
        params]) for i in range(n)]
    L.add_step(node, [x.tensor], [y], calls)
    L.bind(node.output[0], y, oshape)
