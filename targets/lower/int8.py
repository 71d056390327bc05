"""INT8 lowering: QDQ patterns -> integer kernels, TFLite's scheme.

A ``DequantizeLinear`` of an int8 activation is not run: its output is bound as a *float
view* of the int8 tensor (``Value.deq``). A compute node whose inputs are such views and
whose output goes (through an optional Relu/Clip) into a ``QuantizeLinear`` becomes one
integer kernel writing the Q's int8 tensor:

    DQ(x) -> Conv(DQ(w), DQ(b)) [-> Relu] -> Q   =>   es_conv2d_i8
    DQ(a), DQ(b) -> Add | Sub | Mul -> Q            =>   int8_eltwise.py (broadcasting)
    DQ(x) -> GlobalAveragePool / MaxPool -> Q       =>   es_global_avgpool_i8 / es_maxpool2d_i8
    DQ(x) -> Gemm | MatMul(DQ(w)) -> Q              =>   es_fc_i8

Anything else runs in float: the view is materialised by a dequantize step, the float
kernel runs, and the next Q quantizes again. Weights must be symmetric int8 (zero point
0), per tensor or per output channel.

Convolutions, Gemm and GlobalAveragePool rescale their int32 sums by a (mult, shift) pair,
real = mult * 2^(shift - 31), applied as ``L.requant`` says (ES_RQ_* in edgesmith_rt.h):
"fp32" (the default) multiplies in float32 by the scale x_scale * w_scale / y_scale
computed in float32 as onnxruntime's QLinearConv and XNNPACK compute it, and rounds half to
even; "fixed" is TFLite's integer-only Q31 multiplier, for cores without an FPU. Add and
Sub follow the mode too (int8_eltwise.py: onnxruntime's float DQ -> Add -> Q in fp32); Mul
and requantising copies are TFLite's integer arithmetic in both.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import LOWER, LOWER_INT8, Call, Lowerer, Ref, Value
from ..isa import VNNI
from .common import as2d, clip_bounds, conv_pads, conv_params, pool_geometry, prod

# "fast" (default): es_conv2d_i8_gemm (one group) / es_conv2d_i8_fast (grouped);
# "reference": es_conv2d_i8 only (the oracle; tests switch it with ``reference_kernels()``)
KERNEL = "fast"


def pack_pairs(w: np.ndarray) -> np.ndarray:
    """[M][C](1x1) int8 -> [M][ceil(C/2)] int32, each (w[m][2k] low, w[m][2k+1] high) as
    int16, the layout es_pointwise_i8's _mm256_madd_epi16 / vmlal path reads."""
    w2 = w.reshape(w.shape[0], -1).astype(np.int16)
    if w2.shape[1] % 2:
        w2 = np.concatenate([w2, np.zeros((w2.shape[0], 1), np.int16)], axis=1)
    lo = w2[:, 0::2].astype(np.uint16).astype(np.uint32)
    hi = w2[:, 1::2].astype(np.uint16).astype(np.uint32)
    return (lo | (hi << 16)).view(np.int32)


class reference_kernels:  # noqa: N801 - used as a context manager
    """``with reference_kernels(): lower(...)`` generates the portable reference kernels."""

    def __enter__(self):
        global KERNEL
        self._old, KERNEL = KERNEL, "reference"

    def __exit__(self, *exc):
        global KERNEL
        KERNEL = self._old


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


def _requant_pair(L: Lowerer, real32: np.float32, real: float) -> tuple[int, int]:
    """The (mult, shift) of one rescale for L.requant: the float32 scale itself (fp32), or
    TFLite's Q31 rounding of the exact ratio (fixed)."""
    return fp32_multiplier(real32) if L.requant == "fp32" else quantize_multiplier(real)


def _rq_mode(L: Lowerer) -> int:
    """ES_RQ_FIXED (0) or ES_RQ_FP32 (1), as the kernels take it"""
    return 1 if L.requant == "fp32" else 0


def _qparams(L: Lowerer, node) -> tuple[float, int] | None:
    """Per-tensor (scale, zero point) of a Q/DQ node, or None (per-axis or not int8)."""
    s = L.const(node.input[1])
    z = L.const(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.int8)
    if s is None or z is None or s.size != 1 or z.dtype != np.int8:
        return None
    return float(s.reshape(-1)[0]), int(z.reshape(-1)[0])


def shift_uint8_to_int8(model) -> int:
    """Rewrite uint8 Q/DQ (asymmetric activations, as NNCF's QAT export has them) into the
    int8 form in place: ``q_s8 = q_u8 - 128`` and ``zp_s8 = zp_u8 - 128``. Bit-exact: the
    dequantized value ``(q - zp) * s`` is unchanged and ``clip(round(x/s) + zp, 0, 255) - 128
    == clip(round(x/s) + zp - 128, -128, 127)``. Constant uint8 data feeding a DQ is
    shifted too. Returns the number of Q/DQ nodes rewritten."""
    from onnx import numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    consts = {n.output[0]: n for n in g.node if n.op_type == "Constant"}

    def value(name):
        if name in inits:
            return numpy_helper.to_array(inits[name])
        if name in consts:
            a = next((x for x in consts[name].attribute if x.name == "value"), None)
            return numpy_helper.to_array(a.t) if a is not None else None
        return None

    def replace(name, arr, new_name):
        g.initializer.append(numpy_helper.from_array(arr, new_name))
        return new_name

    count = 0
    for k, node in enumerate(list(g.node)):
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        zp = value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if node.op_type == "QuantizeLinear" and zp is None:
            if len(node.input) > 2 and node.input[2]:
                continue  # zero point computed at run time: leave it to the checks
            zp = np.zeros((), np.uint8)  # ONNX default: uint8, zero point 0
        if node.op_type == "DequantizeLinear":
            data = value(node.input[0])
            if zp is None or zp.dtype != np.uint8:
                if data is None or data.dtype != np.uint8:
                    continue
                zp = np.zeros((), np.uint8) if zp is None else zp
            if data is not None:
                if data.dtype != np.uint8:
                    continue
                node.input[0] = replace(node.input[0], (data.astype(np.int16) - 128)
                                        .astype(np.int8), f"{node.input[0]}__s8_{k}")
        elif zp.dtype != np.uint8:
            continue
        old = node.input[2] if len(node.input) > 2 and node.input[2] else f"{node.name}_zp"
        while len(node.input) < 3:
            node.input.append("")
        node.input[2] = replace(old, (zp.astype(np.int16) - 128).astype(np.int8),
                                f"{old}__s8_{k}")
        count += 1
    if count:
        # uint8 value infos would now lie about the type: drop them
        keep = [v for v in g.value_info if v.type.tensor_type.elem_type != 2]
        del g.value_info[:]
        g.value_info.extend(keep)
        for v in list(g.output):
            if v.type.tensor_type.elem_type == 2:
                v.type.tensor_type.elem_type = 3
    return count


def materialize_dequant(L: Lowerer, name: str, v: Value) -> Value:
    t = L.tensors[v.tensor]
    cached = L._deq_cache.get(v.tensor)
    if cached is None:
        cached = L.new_tensor(v.tensor + "_f", t.shape, "f32")
        L.steps.append(_step(f"dequantize_{v.tensor}", "DequantizeLinear", [v.tensor], [cached],
                             [Call("es_dequantize_i8_f32", [Ref(v.tensor), Ref(cached), t.size,
                                                            float(t.scale), t.zero_point])]))
        L._deq_cache[v.tensor] = cached
    return Value(cached, v.shape)


def _step(name, op, ins, outs, calls, scratch=0):
    from ..ir import Step

    return Step(name, op, ins, outs, calls, False, scratch)


# -- Q / DQ themselves (both precisions) -----------------------------------------------------
def quantize_linear(L: Lowerer, node) -> bool:
    qp = _qparams(L, node)
    if qp is None:
        from .common import unsupported

        raise unsupported(node, "per-axis or non-int8 activation quantization")
    scale, zp = qp
    v = L.value(node.input[0])
    if v.deq:  # DQ -> (views) -> Q: same int8 data, maybe new scale
        t = L.tensors[v.tensor]
        if abs(float(t.scale) - scale) <= 1e-9 * scale and t.zero_point == zp:
            L.bind(node.output[0], v.tensor, v.shape)
            return True
        y = L.new_tensor(node.output[0], v.shape, "i8", scale=np.float32(scale), zero_point=zp)
        mult, shift = quantize_multiplier(float(t.scale) / scale)
        L.add_step(node, [v.tensor], [y], [Call("es_requant_i8", [
            Ref(v.tensor), Ref(y), prod(v.shape), t.zero_point, zp, mult, shift, -128, 127])])
        L.bind(node.output[0], y, v.shape)
        return True
    x = L.f32(node.input[0])
    y = L.new_tensor(node.output[0], x.shape, "i8", scale=np.float32(scale), zero_point=zp)
    L.add_step(node, [x.tensor], [y], [Call("es_quantize_f32_i8", [
        Ref(x.tensor), Ref(y), prod(x.shape), float(scale), zp])])
    L.bind(node.output[0], y, x.shape)
    return True


def dequantize_linear(L: Lowerer, node) -> bool:
    v = L.value(node.input[0])
    t = L.tensors[v.tensor]
    qp = _qparams(L, node)
    if t.dtype != "i8" or qp is None:
        from .common import unsupported

        raise unsupported(node, "dequantizing a non-int8 or per-axis activation")
    scale, zp = qp
    if t.scale is None or abs(float(t.scale) - scale) > 1e-9 * scale or t.zero_point != zp:
        # a DQ with its own parameters: dequantize explicitly
        y = L.new_tensor(node.output[0], v.shape, "f32")
        L.add_step(node, [v.tensor], [y], [Call("es_dequantize_i8_f32", [
            Ref(v.tensor), Ref(y), prod(v.shape), float(scale), zp])])
        L.bind(node.output[0], y, v.shape)
        return True
    L.bind(node.output[0], v.tensor, v.shape, deq=True)
    return True


for _d in (LOWER, LOWER_INT8):
    _d["QuantizeLinear"] = lambda L, n: quantize_linear(L, n) or None
    _d["DequantizeLinear"] = lambda L, n: dequantize_linear(L, n) or None
LOWER_INT8["QuantizeLinear"] = quantize_linear
LOWER_INT8["DequantizeLinear"] = dequantize_linear


# -- pattern helpers -------------------------------------------------------------------------
def _q_after(L: Lowerer, out: str):
    """(Q node, activation node or None) when ``out`` flows into exactly one Q."""
    nxt = L.single_consumer(out)
    act = None
    if nxt is not None and nxt.op_type in ("Relu", "Clip"):
        act, nxt = nxt, L.single_consumer(nxt.output[0])
    if nxt is None or nxt.op_type != "QuantizeLinear" or _qparams(L, nxt) is None:
        return None
    return nxt, act


def _act_range(L: Lowerer, act, scale: float, zp: int) -> tuple[int, int]:
    lo, hi = -128, 127
    if act is None:
        return lo, hi
    if act.op_type == "Relu":
        return max(lo, zp), hi
    a, b = clip_bounds(L, act)
    return max(lo, zp + int(round(a / scale))), min(hi, zp + int(round(b / scale)))


def _deq_input(L: Lowerer, name: str) -> Value | None:
    name = L.alias.get(name, name)
    v = L.env.get(name)
    return v if v is not None and v.deq else None


def _const_weight(L: Lowerer, name: str):
    """(int8 weights, per-channel scales) of DQ(const int8) feeding ``name``, else None."""
    node = L.producer.get(name)
    while node is not None and node.op_type == "Identity":
        node = L.producer.get(node.input[0])
    if node is None or node.op_type != "DequantizeLinear":
        return None
    w = L.const(node.input[0])
    s = L.const(node.input[1])
    z = L.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if w is None or s is None or w.dtype != np.int8 or (z is not None and np.any(z != 0)):
        return None
    axis = L.attrs(node).get("axis", 1)
    return w, s.astype(np.float64).reshape(-1), axis


def _out_tensor(L: Lowerer, qnode, shape) -> str:
    scale, zp = _qparams(L, qnode)
    return L.new_tensor(qnode.output[0], shape, "i8", scale=np.float32(scale), zero_point=zp)


def _finish(L: Lowerer, qnode, act, y: str, shape) -> None:
    L.done.add(id(qnode))
    if act is not None:
        L.done.add(id(act))
    L.bind(qnode.output[0], y, shape)


def _requant_tables(L, node, s_x, s_w, s_y, m):
    s_w = np.broadcast_to(s_w, (m,))
    # float32 as onnxruntime computes it: (x_scale * w_scale) / y_scale, each step rounded
    f32 = np.float32
    ms = [_requant_pair(L, f32(f32(s_x) * f32(sw)) / f32(s_y), float(s_x) * float(sw) / float(s_y))
          for sw in s_w]
    mult = L.const_tensor(node.name + "_mult", np.array([a for a, _ in ms], np.int32), "i32")
    shift = L.const_tensor(node.name + "_shift", np.array([b for _, b in ms], np.int32), "i32")
    return mult, shift


def _bias_values(L, node, idx, s_x, s_w, m) -> np.ndarray:
    b = L.const(node.input[idx]) if len(node.input) > idx and node.input[idx] else None
    b = np.zeros(m, np.float64) if b is None else b.astype(np.float64).reshape(-1)
    bq = np.round(np.broadcast_to(b, (m,)) / (float(s_x) * np.broadcast_to(s_w, (m,))))
    return np.clip(bq, -2**31, 2**31 - 1).astype(np.int32)


def _bias_i32(L, node, idx, s_x, s_w, m) -> str:
    return L.const_tensor(node.name + "_bias", _bias_values(L, node, idx, s_x, s_w, m), "i32")


# -- quantized ops ---------------------------------------------------------------------------
def conv_i8(L: Lowerer, node) -> bool:
    x = _deq_input(L, node.input[0])
    wq = _const_weight(L, node.input[1])
    pat = _q_after(L, node.output[0])
    if x is None or wq is None or pat is None or len(x.shape) not in (3, 4):
        return False
    w, s_w, axis = wq
    m = w.shape[0]
    if s_w.size not in (1, m) or (s_w.size > 1 and axis != 0):
        return False
    qnode, act = pat
    a = L.attrs(node)
    tx = L.tensors[x.tensor]
    s_y, zp_y = _qparams(L, qnode)
    nsp = len(x.shape) - 2
    k = list(w.shape[2:])
    s = list(a.get("strides", [1] * nsp))
    d = list(a.get("dilations", [1] * nsp))
    pads = conv_pads(a, x.shape[2:], k, s, d)
    sp, kk, ss, dd, pp = as2d(x.shape[2:], k, s, d, pads)
    osp = [(sp[i] + pp[i] + pp[i + 2] - dd[i] * (kk[i] - 1) - 1) // ss[i] + 1 for i in range(2)]
    n, c = x.shape[0], x.shape[1]
    oshape = (n, m, *([osp[1]] if nsp == 1 else osp))
    qmin, qmax = _act_range(L, act, s_y, zp_y)
    y = _out_tensor(L, qnode, oshape)
    group = int(a.get("group", 1))
    bias = _bias_values(L, node, 2, tx.scale, s_w, m)
    mult, shift = _requant_tables(L, node, tx.scale, s_w, s_y, m)
    params = conv_params(c, sp, m, osp, kk, ss, pp, dd, group, 0, 0.0, 0.0,
                         x_zp=tx.zero_point, y_zp=zp_y, qmin=qmin, qmax=qmax, rq=_rq_mode(L))
    plane = osp[0] * osp[1]
    if KERNEL == "reference":
        fn, wt, scratch = "es_conv2d_i8", L.const_tensor(node.name + "_w", w, "i8"), 4 * plane
    elif group == 1 and L.isa >= VNNI and (dot := _dot_operands(w.reshape(m, c, *kk), bias,
                                                                 tx.zero_point)):
        # u8 x s8 dot-product GEMM (vpdpbusd): int8 weights tap-major in channel quads, the
        # u8 shift folded into the bias; scratch: the padded input as channel-quad planes
        # (+ an im2col block and partial sums where taps cannot be read in place)
        if use_cl(params):
            # the same products with output channels in the lanes (small planes): weights
            # [M16][KH][KW][C4][16][4]; scratch: the padded input as HWC uint8 quads
            fn, scratch = "es_conv2d_i8_cl", cl_i8_scratch(params)
            wt = L.const_tensor(node.name + "_wc", _blocked_weights(dot[0], 16), "i8")
        else:
            fn, scratch = "es_conv2d_i8_dot", dot_i8_scratch(params)
            wt = L.const_tensor(node.name + "_w8", _blocked_weights(dot[0], 8), "i8")
        bias = dot[1]
    elif group == 1:
        # im2col tiles + a 4x16 register-blocked GEMM; weights packed as int16 pairs over
        # C*KH*KW for madd / vmlal; scratch = one int16 im2col tile of KB2 pairs, plus int32
        # partial sums [M][16] when the reduction is blocked (ES_I8_GEMM_SCRATCH)
        fn, wt = "es_conv2d_i8_gemm", L.const_tensor(node.name + "_wp", pack_pairs(w), "i32")
        scratch = gemm_i8_scratch(c * kk[0] * kk[1], m)
    elif group == c == m:
        # depthwise in blocks of 16 channels, channel-innermost (XNNPACK's layout) between
        # two transposes: weights [KH][KW][C rounded up to 16]
        cp = -(-c // 16) * 16
        wd = np.zeros((kk[0], kk[1], cp), np.int8)
        wd[..., :c] = w.reshape(c, kk[0], kk[1]).transpose(1, 2, 0)
        fn, wt = "es_dwconv2d_i8_hwc", L.const_tensor(node.name + "_wd", wd, "i8")
        scratch = dw_hwc_scratch(params)
    else:
        fn, wt = "es_conv2d_i8_fast", L.const_tensor(node.name + "_w", w, "i8")
        scratch = 16 * plane + 2 * c * sp[0] * sp[1] + 4
    bt = L.const_tensor(node.name + ("_bias_u8" if fn in U8_KERNELS else "_bias"),
                        bias, "i32")
    calls = [Call(fn, [Ref(x.tensor, i * c * sp[0] * sp[1]), Ref(wt), Ref(bt),
                       Ref(mult), Ref(shift), Ref("__scratch"),
                       Ref(y, i * m * plane), params]) for i in range(n)]
    L.add_step(node, [x.tensor], [y], calls, scratch=scratch)
    _finish(L, qnode, act, y, oshape)
    return True


def _dot_operands(w: np.ndarray, bias: np.ndarray, x_zp: int):
    """(weights [M][KH][KW][C4*4] int8, bias_u8) for the VNNI kernels (their packings
    start from these weights: _blocked_weights), or None when the
    folded bias bias - (x_zp + 128) * sum w or the u8 x s8 sums could leave int32."""
    m, c, kh, kw = w.shape
    c4 = (c + 3) // 4
    w4 = np.zeros((m, kh, kw, c4 * 4), np.int8)
    w4[..., :c] = w.transpose(0, 2, 3, 1)
    bu = bias.astype(np.int64) - (int(x_zp) + 128) * w.reshape(m, -1).astype(np.int64).sum(1)
    if np.abs(bu).max(initial=0) >= 2**31 or 255 * 127 * kh * kw * c4 * 4 >= 2**31:
        return None
    return w4, bu.astype(np.int32)


U8_KERNELS = ("es_conv2d_i8_dot", "es_conv2d_i8_cl")  # take bias_u8 (u8 shift folded in)


def use_cl(p: dict) -> bool:
    """Whether es_conv2d_i8_cl (output channels in lanes) beats es_conv2d_i8_dot (pixels in
    lanes) for conv params ``p``: on every spatial kernel and on 1x1 convs over planes of at
    most 16 pixels, unless rounding M up to its 32-channel tiles wastes over a third (M = 16
    computes 32). Measured per conv, both kernels in one binary (issue 6 note): 3x3 64->64
    on 4x4 3.0 vs 5.7 us, 3x3 32->32 on 8x8 3.4 vs 5.4 us, 1x1 192->64 on 4x4 1.3 vs 2.1 us;
    1x1 convs on 8x8 and larger planes are faster as pixel lanes (2.2 vs 2.5 us at 64->64),
    and so is M = 16 (3->16 stem on 64x64, 10.6 vs 23 us)."""
    m32 = -(-p["M"] // 32) * 32
    return 3 * m32 <= 4 * p["M"] and (p["KH"] * p["KW"] > 1 or p["OH"] * p["OW"] <= 16)


def _blocked_weights(w4: np.ndarray, block: int) -> np.ndarray:
    """[M][KH][KW][C4*4] (_dot_operands' weights) -> [M/block][KH][KW][C4][block][4]: the
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


def cl_i8_scratch(p: dict) -> int:
    """Bytes of es_conv2d_i8_cl scratch; mirrors es_i8_cl_scratch: the padded input (the
    rows and columns the taps read) as HWC uint8 channel quads."""
    hp = (p["OH"] - 1) * p["SH"] + (p["KH"] - 1) * p["DH"] + 1
    wp = (p["OW"] - 1) * p["SW"] + (p["KW"] - 1) * p["DW"] + 1
    return 4 * hp * wp * ((p["C"] + 3) // 4)


def fc_i8(L: Lowerer, node) -> bool:
    x = _deq_input(L, node.input[0])
    wq = _const_weight(L, node.input[1])
    pat = _q_after(L, node.output[0])
    if x is None or wq is None or pat is None or len(x.shape) < 2:
        return False
    a = L.attrs(node) if node.op_type == "Gemm" else {}
    if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
        return False
    w, s_w, axis = wq
    if w.ndim != 2:
        return False
    trans_b = bool(a.get("transB", 0))
    wn = w if trans_b else w.T  # [N][K]
    nn, kk = wn.shape
    out_axis = 0 if trans_b else 1
    if s_w.size not in (1, nn) or (s_w.size > 1 and axis != out_axis):
        return False
    if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]:
        c = L.const(node.input[2])
        if c is None or c.size not in (1, nn):
            return False
    qnode, act = pat
    tx = L.tensors[x.tensor]
    s_y, zp_y = _qparams(L, qnode)
    mrows = prod(x.shape[:-1])
    oshape = (*x.shape[:-1], nn)
    qmin, qmax = _act_range(L, act, s_y, zp_y)
    y = _out_tensor(L, qnode, oshape)
    wt = L.const_tensor(node.name + "_w", np.ascontiguousarray(wn), "i8")
    bt = _bias_i32(L, node, 2, tx.scale, s_w, nn) if node.op_type == "Gemm" else \
        L.const_tensor(node.name + "_bias", np.zeros(nn, np.int32), "i32")
    mult, shift = _requant_tables(L, node, tx.scale, s_w, s_y, nn)
    L.add_step(node, [x.tensor], [y], [Call("es_fc_i8", [
        Ref(x.tensor), Ref(wt), Ref(bt), Ref(mult), Ref(shift), Ref(y), mrows, nn, kk,
        tx.zero_point, zp_y, qmin, qmax, _rq_mode(L)])])
    _finish(L, qnode, act, y, oshape)
    return True


def gemm_i8_scratch(k: int, m: int) -> int:
    """Bytes of es_conv2d_i8_gemm scratch; mirrors ES_I8_GEMM_KB2 / ES_I8_GEMM_SCRATCH."""
    k2 = (k + 1) // 2
    kb2 = 64 if k2 > 64 and 64 + m < k2 else k2
    return 64 * kb2 + (64 * m if kb2 < k2 else 0)


def dot_i8_scratch(p: dict) -> int:
    """Bytes of es_conv2d_i8_dot scratch for conv params ``p`` (conv_params' fields);
    mirrors es_i8_dot_plan / es_i8_dot_scratch in edgesmith_rt.h: stride-1 and stride-2
    convs with at most 7x7 taps read the (2x2-phase split) padded input in place, unless
    the dropped padded columns cost over 1/4 more tiles; the rest add an im2col block,
    blocked by the fewest taps that fill 32 words when that plus the [M][16] int32
    partial sums is the smaller."""
    hp = (p["OH"] - 1) * p["SH"] + (p["KH"] - 1) * p["DH"] + 1
    wp = (p["OW"] - 1) * p["SW"] + (p["KW"] - 1) * p["DW"] + 1
    c4, taps = (p["C"] + 3) // 4, p["KH"] * p["KW"]
    s = p["SH"] if p["SH"] == p["SW"] and p["SH"] <= 2 else 0
    hq, wq = -(-hp // max(s, 1)), -(-wp // max(s, 1))
    tiles = -(-(p["OH"] * p["OW"]) // 16)
    direct = s > 0 and taps <= 49 and 4 * -(-((p["OH"] - 1) * wq + p["OW"]) // 16) <= 5 * tiles
    if not direct:
        s, hq, wq = 1, hp, wp
    tb = min(-(-32 // c4), taps)
    kt = tb if not direct and tb * c4 + p["M"] < taps * c4 else taps
    n = (0 if p.get("x_quads") else 4 * s * s * hq * wq * c4 + 64) + (4 * wp if s > 1 else 0)
    if not direct:
        n += 64 * kt * c4
    return n + (64 * p["M"] if kt < taps else 0)


def hand_over_quads(g) -> int:
    """Depthwise conv -> 1x1 conv pairs (an inverted residual block's middle) that keep the
    tensor between them in es_conv2d_i8_dot's input layout, uint8 channel-quad planes
    (es_conv_params y_quads / x_quads): the depthwise kernel writes them in one dword
    transpose per 16 pixels instead of transposing to CHW, and the 1x1 conv skips turning
    CHW back into planes. Only where the 1x1 conv is the tensor's one reader and reads it
    in place (stride 1, unpadded, batch 1) and the channels fill whole quads. The tensor
    gets 64 bytes of slack, which the dot kernel's last tile may read. Returns the count."""
    readers: dict[str, int] = {}
    for st in g.steps:
        for t in st.inputs:
            readers[t] = readers.get(t, 0) + 1
    producer = {t: st for st in g.steps for t in st.outputs}
    n = 0
    for st in g.steps:
        if len(st.calls) != 1 or st.calls[0].fn != "es_conv2d_i8_dot":
            continue
        p = st.calls[0].args[-1]
        x = st.inputs[0]
        src = producer.get(x)
        if (src is None or len(src.calls) != 1 or src.calls[0].fn != "es_dwconv2d_i8_hwc"
                or readers.get(x) != 1 or g.tensors[x].kind != "act" or p["C"] % 4
                or (p["KH"], p["KW"], p["SH"], p["SW"], p["PT"], p["PL"]) != (1, 1, 1, 1, 0, 0)
                or (p["OH"], p["OW"]) != (p["H"], p["W"])):
            continue
        p["x_quads"] = 1
        src.calls[0].args[-1]["y_quads"] = 1
        st.scratch = dot_i8_scratch(p)
        g.tensors[x].slack = 64
        n += 1
    return n


def dw_hwc_scratch(p: dict) -> int:
    """Bytes of es_dwconv2d_i8_hwc scratch for conv params ``p``; mirrors
    ES_I8_DW_HWC_SCRATCH: a ring of KH + B - 1 transposed input rows (B rows of a narrow
    plane transposed at once), a byte row when DW > 1, the output columns, the block's
    weights and row sums. It does not grow with the channel count."""
    kh, kw, dh, dw, w, ow = p["KH"], p["KW"], p["DH"], p["DW"], p["W"], p["OW"]
    wp = (ow - 1) * p["SW"] + (kw - 1) * dw + 1
    b = 16 // w if dh == 1 and (dw == 1 or kw == 1) and w < 16 else 1
    obc = ((ow if ow >= 16 else (15 + ow) // ow * ow) + 15) // 16 * 16
    return (64 * (kh + b - 1) * wp + (16 * ((wp + 3 * dw + 15) // 16 * 16) if dw > 1 else 0)
            + 16 * obc + 64 * kh * ((kw + 1) // 2 + 1) + 4 * (3 * kh + b - 1))


def gap_i8(L: Lowerer, node) -> bool:
    x = _deq_input(L, node.input[0])
    pat = _q_after(L, node.output[0])
    if x is None or pat is None or pat[1] is not None:
        return False
    qnode = pat[0]
    tx = L.tensors[x.tensor]
    s_y, zp_y = _qparams(L, qnode)
    hw = prod(x.shape[2:])
    oshape = (*x.shape[:2], *([1] * (len(x.shape) - 2)))
    # onnxruntime's QLinearGlobalAveragePool: x_scale / (y_scale * HW) in float32
    f32 = np.float32
    mult, shift = _requant_pair(L, f32(tx.scale) / (f32(s_y) * f32(hw)),
                                float(tx.scale) / (s_y * hw))
    y = _out_tensor(L, qnode, oshape)
    L.add_step(node, [x.tensor], [y], [Call("es_global_avgpool_i8", [
        Ref(x.tensor), Ref(y), x.shape[0] * x.shape[1], hw, tx.zero_point, zp_y, mult, shift,
        _rq_mode(L)])])
    _finish(L, qnode, None, y, oshape)
    return True


def pool_i8(L: Lowerer, node) -> bool:
    x = _deq_input(L, node.input[0])
    pat = _q_after(L, node.output[0])
    if x is None or pat is None or pat[1] is not None or len(node.output) > 1:
        return False
    qnode = pat[0]
    tx = L.tensors[x.tensor]
    s_y, zp_y = _qparams(L, qnode)
    params, oshape = pool_geometry(L, node, x)
    if node.op_type == "MaxPool":
        if abs(float(tx.scale) - s_y) > 1e-9 * s_y or tx.zero_point != zp_y:
            return False
        fn = "es_maxpool2d_i8"
    else:
        if params["DH"] != 1 or params["DW"] != 1 or params["PB"] or params["PR"] \
                or params["PT"] or params["PL"]:
            return False
        mult, shift = quantize_multiplier(float(tx.scale) / s_y)
        params.update(x_zp=tx.zero_point, y_zp=zp_y, mult=mult, shift=shift)
        fn = "es_avgpool2d_i8"
    y = _out_tensor(L, qnode, oshape)
    L.add_step(node, [x.tensor], [y], [Call(fn, [Ref(x.tensor), Ref(y), params])])
    _finish(L, qnode, None, y, oshape)
    return True


def act_i8(L: Lowerer, node) -> bool:
    """DQ -> Relu/Clip -> Q left unfused by the quantizer: a clamped requantisation."""
    x = _deq_input(L, node.input[0])
    nxt = L.single_consumer(node.output[0])
    if x is None or nxt is None or nxt.op_type != "QuantizeLinear" or _qparams(L, nxt) is None:
        return False
    tx = L.tensors[x.tensor]
    s_y, zp_y = _qparams(L, nxt)
    qmin, qmax = _act_range(L, node, s_y, zp_y)
    mult, shift = quantize_multiplier(float(tx.scale) / s_y)
    y = _out_tensor(L, nxt, x.shape)
    L.add_step(node, [x.tensor], [y], [Call("es_requant_i8", [
        Ref(x.tensor), Ref(y), prod(x.shape), tx.zero_point, zp_y, mult, shift, qmin, qmax])])
    _finish(L, nxt, None, y, x.shape)
    return True


LOWER_INT8.update({"Conv": conv_i8, "Gemm": fc_i8, "MatMul": fc_i8,
                   "GlobalAveragePool": gap_i8, "MaxPool": pool_i8,
                   "AveragePool": pool_i8, "Relu": act_i8, "Clip": act_i8})
