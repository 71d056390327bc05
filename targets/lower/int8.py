"""INT8 lowering: QDQ patterns -> integer kernels, TFLite's scheme.

A ``DequantizeLinear`` of an int8 activation is not run: its output is bound as a *float
view* of the int8 tensor (``Value.deq``). A compute node whose inputs are such views and
whose output goes (through an optional Relu/Clip) into a ``QuantizeLinear`` becomes one
integer kernel writing the Q's int8 tensor:

    DQ(x) -> Conv(DQ(w), DQ(b)) [-> Relu] -> Q   =>   int8_conv.py (es_conv2d_i8_*)
    DQ(a), DQ(b) -> Add | Sub | Mul -> Q            =>   int8_eltwise.py (broadcasting)
    DQ(x) -> GlobalAveragePool / MaxPool -> Q       =>   es_global_avgpool_i8 / es_maxpool2d_i8
    DQ(x) -> Gemm | MatMul(DQ(w)) -> Q              =>   es_fc_i8
    DQ(x) -> HardSwish | Sigmoid | Tanh | ... -> Q  =>   es_lut_i8 (a 256-entry table)

Anything else runs in float: the view is materialised by a dequantize step, the float
kernel runs, and the next Q quantizes again. Weights must be symmetric int8 (zero point
0), per tensor or per output channel.

Convolutions, Gemm and GlobalAveragePool rescale their int32 sums by a (mult, shift) pair
(requant.py), real = mult * 2^(shift - 31), applied as ``L.requant`` says (ES_RQ_*):
"fp32" (the default) multiplies in float32 by the scale x_scale * w_scale / y_scale
computed in float32 as onnxruntime's QLinearConv and XNNPACK compute it, and rounds half to
even; "fixed" is TFLite's integer-only Q31 multiplier, for cores without an FPU. Add and
Sub follow the mode too (int8_eltwise.py: onnxruntime's float DQ -> Add -> Q in fp32); Mul
and requantising copies are TFLite's integer arithmetic in both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Ref, params
from ..isa import VNNI
from . import kernels as K
from .common import conv_params, pool_geometry, prod
from .packing import bias_values, blocked_weights, dot_operands
from .qdq import act_range, const_weight, deq_input, finish, out_tensor, q_after, qparams
from .registry import LOWER_INT8
from .requant import quantize_multiplier, requant_pair, requant_tables, rq_mode

if TYPE_CHECKING:
    from ..ir import Lowerer


def fc_i8(L: Lowerer, node) -> bool:
    x = deq_input(L, node.input[0])
    wq = const_weight(L, node.input[1])
    pat = q_after(L, node.output[0])
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
    s_y, zp_y = qparams(L, qnode)
    mrows = prod(x.shape[:-1])
    oshape = (*x.shape[:-1], nn)
    qmin, qmax = act_range(L, act, s_y, zp_y)
    y = out_tensor(L, qnode, oshape)
    bias = bias_values(L, node, 2, tx.scale, s_w, nn) if node.op_type == "Gemm" else \
        np.zeros(nn, np.int32)
    mult, shift = requant_tables(L, node, tx.scale, s_w, s_y, nn)
    if _fc_as_dot(L, node, x, wn, bias, (mult, shift), y, (zp_y, qmin, qmax)):
        finish(L, qnode, act, y, oshape)
        return True
    wt = L.const_tensor(node.name + "_w", np.ascontiguousarray(wn), "i8")
    bt = L.const_tensor(node.name + "_bias", bias, "i32")
    fn = "es_fc_i8_ref" if L.kernels == "reference" else "es_fc_i8"
    L.add_step(node, [x.tensor], [y], [Call(fn, [
        Ref(x.tensor), Ref(wt), Ref(bt), Ref(mult), Ref(shift), Ref(y), params(
            "es_fc_params", M=mrows, N=nn, K=kk, x_zp=tx.zero_point, y_zp=zp_y, qmin=qmin,
            qmax=qmax, rq=rq_mode(L))])])
    finish(L, qnode, act, y, oshape)
    return True


def _fc_as_dot(L: Lowerer, node, x, wn: np.ndarray, bias: np.ndarray, rq: tuple[str, str],
               y: str, out: tuple[int, int, int]) -> bool:
    """With AVX-512 VNNI, each row of a dense layer as a 1x1 conv on a 1x1 plane in
    es_conv2d_i8_cl, the u8 x s8 dot-product kernel with output channels in the lanes: a
    GEMV of one vpdpbusd per 16 outputs x 4 inputs, the weights packed [N/16][K/4][16][4]
    and the u8 shift folded into the bias. False (es_fc_i8 instead) without VNNI, with
    reference kernels, or where the folded sums could leave int32."""
    nn, kk = wn.shape
    tx = L.tensors[x.tensor]
    if L.kernels == "reference" or not L.isa >= VNNI:
        return False
    dot = dot_operands(wn.reshape(nn, kk, 1, 1), bias, tx.zero_point)
    if dot is None:
        return False
    p = conv_params(kk, [1, 1], nn, [1, 1], [1, 1], [1, 1], [0, 0, 0, 0], [1, 1], 1, 0, 0.0,
                    0.0, x_zp=tx.zero_point, y_zp=out[0], qmin=out[1], qmax=out[2],
                    rq=rq_mode(L))
    wt = L.const_tensor(node.name + "_wc", blocked_weights(dot[0], 16), "i8")
    bt = L.const_tensor(node.name + "_bias_u8", dot[1], "i32")
    rows = prod(x.shape[:-1])
    L.add_step(node, [x.tensor], [y], [
        Call(K.CONV_I8_CL.fn, [Ref(x.tensor, i * kk), Ref(wt), Ref(bt), Ref(rq[0]),
                               Ref(rq[1]), Ref("__scratch"), Ref(y, i * nn), p], K.CONV_I8_CL)
        for i in range(rows)], scratch=K.CONV_I8_CL.scratch(p))
    return True


def gap_i8(L: Lowerer, node) -> bool:
    x = deq_input(L, node.input[0])
    pat = q_after(L, node.output[0])
    if x is None or pat is None or pat[1] is not None:
        return False
    qnode = pat[0]
    tx = L.tensors[x.tensor]
    s_y, zp_y = qparams(L, qnode)
    hw = prod(x.shape[2:])
    oshape = (*x.shape[:2], *([1] * (len(x.shape) - 2)))
    # onnxruntime's QLinearGlobalAveragePool: x_scale / (y_scale * HW) in float32
    f32 = np.float32
    mult, shift = requant_pair(L, f32(tx.scale) / (f32(s_y) * f32(hw)),
                                float(tx.scale) / (s_y * hw))
    y = out_tensor(L, qnode, oshape)
    L.add_step(node, [x.tensor], [y], [Call("es_global_avgpool_i8", [
        Ref(x.tensor), Ref(y), params("es_gavgpool_params", C=x.shape[0] * x.shape[1], HW=hw,
                                      x_zp=tx.zero_point, y_zp=zp_y, mult=mult, shift=shift,
                                      rq=rq_mode(L))])])
    finish(L, qnode, None, y, oshape)
    return True


def pool_i8(L: Lowerer, node) -> bool:
    x = deq_input(L, node.input[0])
    pat = q_after(L, node.output[0])
    if x is None or pat is None or pat[1] is not None or len(node.output) > 1:
        return False
    qnode = pat[0]
    tx = L.tensors[x.tensor]
    s_y, zp_y = qparams(L, qnode)
    geo, oshape = pool_geometry(L, node, x)
    if node.op_type == "MaxPool":
        if abs(float(tx.scale) - s_y) > 1e-9 * s_y or tx.zero_point != zp_y:
            return False
        # the window clipped once per row and border column, or (reference kernels) per tap
        fn = "es_maxpool2d_i8_ref" if L.kernels == "reference" else "es_maxpool2d_i8"
    else:
        if geo["DH"] != 1 or geo["DW"] != 1 or geo["PB"] or geo["PR"] or geo["PT"] \
                or geo["PL"]:
            return False
        mult, shift = quantize_multiplier(float(tx.scale) / s_y)
        geo.update(x_zp=tx.zero_point, y_zp=zp_y, mult=mult, shift=shift)
        fn = "es_avgpool2d_i8"
    y = out_tensor(L, qnode, oshape)
    L.add_step(node, [x.tensor], [y], [Call(fn, [Ref(x.tensor), Ref(y), geo])])
    finish(L, qnode, None, y, oshape)
    return True


def act_i8(L: Lowerer, node) -> bool:
    """DQ -> Relu/Clip -> Q left unfused by the quantizer: a clamped requantisation."""
    x = deq_input(L, node.input[0])
    nxt = L.single_consumer(node.output[0])
    if x is None or nxt is None or nxt.op_type != "QuantizeLinear" or qparams(L, nxt) is None:
        return False
    tx = L.tensors[x.tensor]
    s_y, zp_y = qparams(L, nxt)
    qmin, qmax = act_range(L, node, s_y, zp_y)
    mult, shift = quantize_multiplier(float(tx.scale) / s_y)
    y = out_tensor(L, nxt, x.shape)
    L.add_step(node, [x.tensor], [y], [Call("es_requant_i8", [
        Ref(x.tensor), Ref(y), params("es_requant_params", n=prod(x.shape), x_zp=tx.zero_point,
                                      y_zp=zp_y, mult=mult, shift=shift, qmin=qmin,
                                      qmax=qmax)])])
    finish(L, nxt, None, y, x.shape)
    return True


# element-wise functions of one tensor that lut_i8 tabulates; the ONNX reference evaluator
# computes each (attributes and all), so adding one is adding its name
LUT_OPS = ("HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Gelu", "Erf", "Elu", "Selu", "Celu",
           "LeakyRelu", "ThresholdedRelu", "Softplus", "Softsign", "Mish", "Exp", "Neg", "Abs")


def lut_table(L: Lowerer, node, x_scale: float, x_zp: int, y_scale: float, y_zp: int,
              qmin: int = -128, qmax: int = 127) -> np.ndarray:
    """The 256 int8 results of DQ -> ``node`` -> Q, entry u for the input code (int8)u:
    each code dequantized in float32 as onnxruntime's DequantizeLinear does, the node
    evaluated by ONNX's reference evaluator in float32, then quantized as QuantizeLinear
    does (divided by the scale, rounded half to even, + zero point, saturated) and clamped
    to a fused activation's [qmin, qmax]. A NaN result maps to the zero point."""
    from onnx.reference import ReferenceEvaluator

    f32 = np.float32
    codes = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int32)
    v = (codes - x_zp).astype(f32) * f32(x_scale)
    h = L.onnx.helper
    ins = [i for i in node.input[1:] if i]
    feeds = {"x": v, **{i: L.const(i) for i in ins}}
    n = h.make_node(node.op_type, ["x", *node.input[1:]], ["y"], domain=node.domain,
                    **L.attrs(node))
    g = h.make_graph([n], "lut", [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(
        a.dtype), a.shape) for k, a in feeds.items()], [h.make_tensor_value_info("y", 1, None)])
    m = h.make_model(g, opset_imports=list(L.model.opset_import))
    m.ir_version = L.model.ir_version
    with np.errstate(all="ignore"):
        fy = np.asarray(ReferenceEvaluator(m).run(None, feeds)[0], f32).reshape(256)
        q = np.rint(fy / f32(y_scale))
    q = np.where(np.isnan(q), 0.0, q) + y_zp
    return np.clip(q, max(qmin, -128), min(qmax, 127)).astype(np.int8)


def lut_i8(L: Lowerer, node) -> bool:
    """DQ -> an element-wise function (LUT_OPS) [-> Relu/Clip] -> Q as one table lookup per
    byte, the function and the activation tabulated at generation time."""
    x = deq_input(L, node.input[0])
    pat = q_after(L, node.output[0])
    if x is None or pat is None or len(node.output) != 1 or any(
            L.const(i) is None for i in node.input[1:] if i):
        return False
    qnode, act = pat
    tx = L.tensors[x.tensor]
    s_y, zp_y = qparams(L, qnode)
    table = lut_table(L, node, float(tx.scale), tx.zero_point, s_y, zp_y,
                      *act_range(L, act, s_y, zp_y))
    tt = L.const_tensor(node.name + "_lut", table, "i8")
    y = out_tensor(L, qnode, x.shape)
    L.add_step(node, [x.tensor], [y], [Call("es_lut_i8", [
        Ref(x.tensor), Ref(y), Ref(tt), prod(x.shape)])], inplace=True)
    finish(L, qnode, act, y, x.shape)
    return True


LOWER_INT8.update({op: lut_i8 for op in LUT_OPS})
LOWER_INT8.update({"Gemm": fc_i8, "MatMul": fc_i8, "GlobalAveragePool": gap_i8,
                   "MaxPool": pool_i8, "AveragePool": pool_i8, "Relu": act_i8, "Clip": act_i8})
