"""INT8 element-wise binary ops with NumPy broadcasting, TFLite's scheme:

    DQ(a), DQ(b) -> Add | Sub [-> Relu/Clip] -> Q   =>   es_add_i8 / es_add_i8_bcast
    DQ(a), DQ(b) -> Mul [-> Relu/Clip] -> Q          =>   es_mul_i8
    DQ(x) -> Mul(DQ(x), DQ(Q(Sigmoid(DQ(x))))) -> Q  =>   es_lut_i8 (SiLU, one table)

An operand is an int8 activation seen through its DequantizeLinear (a ``Value.deq``
view) or a per-tensor int8 constant under a DequantizeLinear (a per-channel bias
[1,C,1,1], a scalar), kept as int8 in its own shape. Broadcasting is resolved here into
the float path's merged stride table (``common.bcast_params``); the kernels walk it and
never materialise the broadcast operand. Add/Sub is TFLite's reference add (both inputs
rescaled to twice the larger scale with 20 bits of headroom, summed, rescaled), or with
L.requant "fp32" the float arithmetic onnxruntime runs for an unfused DQ -> Add -> Q
(dequantize both, add, divide by the output scale, round half to even); Mul is TFLite's
reference mul ((a - a_zp) * (b - b_zp) in int32 times s_a * s_b / s_y). Anything else (a
per-axis or non-int8 constant, a plain float constant, no Q after the op) returns False
and runs in float between dequantize and quantize steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edgesmith.errors import UnsupportedOpError

from ..graph import Call, Ref, Step
from . import fuse_int8
from .common import bcast_params, prod
from .qdq import act_range, deq_input, finish, out_tensor, q_after, qparams
from .registry import LOWER_INT8
from .requant import quantize_multiplier, rq_mode

if TYPE_CHECKING:
    from ..ir import Lowerer

ADD_LEFT_SHIFT = 20  # TFLite's headroom for the rescaled inputs of an int8 add


@dataclass(frozen=True)
class Operand:
    """One int8 input of a binary op: an activation or a constant in weights.bin."""

    tensor: str
    shape: tuple[int, ...]
    scale: float
    zero_point: int
    activation: bool


def _operand(L: Lowerer, node, k: int) -> Operand | None:
    name = node.input[k]
    v = deq_input(L, name)
    if v is not None:
        t = L.tensors[v.tensor]
        return Operand(v.tensor, v.shape, float(t.scale), t.zero_point, True)
    dq = L.producer.get(name)
    while dq is not None and dq.op_type == "Identity":
        dq = L.producer.get(dq.input[0])
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    q, qp = L.const(dq.input[0]), qparams(L, dq)
    if q is None or q.dtype != np.int8 or qp is None:
        return None
    t = L.const_tensor(f"{node.name}_{'ab'[k]}", q, "i8")
    return Operand(t, tuple(int(d) for d in q.shape), qp[0], qp[1], False)


@dataclass(frozen=True)
class _Binary:
    """What every int8 binary lowering needs once the pattern has matched."""

    a: Operand
    b: Operand
    oshape: tuple[int, ...]
    bcast: dict  # es_bcast fields, adjacent dims that broadcast alike merged
    qnode: object
    act: object
    y_scale: float
    y_zp: int

    @property
    def contiguous(self) -> bool:
        """No broadcasting left once dims are merged: one run of both inputs."""
        bc = self.bcast
        return bc["ndim"] == 1 and bc["sa"][0] == 1 and bc["sb"][0] == 1

    def inputs(self) -> list[str]:
        """Activation inputs, a full-shape one first: the planner may write y over it."""
        acts = sorted((o for o in (self.a, self.b) if o.activation),
                      key=lambda o: o.shape != self.oshape)
        return [o.tensor for o in acts]

    @property
    def inplace(self) -> bool:
        """y may share inputs()[0]'s buffer: it has the output's shape, the other input
        is another buffer (the kernels load before they store, element by element)."""
        return self.a.tensor != self.b.tensor and any(
            o.activation and o.shape == self.oshape for o in (self.a, self.b))


def _match(L: Lowerer, node) -> _Binary | None:
    pat = q_after(L, node.output[0])
    if pat is None:
        return None
    a, b = _operand(L, node, 0), _operand(L, node, 1)
    if a is None or b is None:
        return None
    oshape = tuple(int(d) for d in np.broadcast_shapes(a.shape, b.shape))
    try:
        bc = bcast_params(oshape, a.shape, b.shape)
    except UnsupportedOpError:  # more than ES_MAX_DIMS dims after merging
        return None
    qnode, act = pat
    s_y, zp_y = qparams(L, qnode)
    return _Binary(a, b, oshape, bc, qnode, act, s_y, zp_y)


def _nested(prefix: str, fields: dict) -> dict:
    """Fields of a struct member as C99 nested designators (``.bc.ndim = ...``)."""
    return {f"{prefix}.{k}": v for k, v in fields.items() if k != "__struct__"}


def add_params(sa: float, sb: float, sy: float, a_zp: int, b_zp: int, y_zp: int,
               qmin: int = -128, qmax: int = 127, sub: bool = False, rq: int = 0) -> dict:
    """es_qadd_params for input scales sa, sb and output sy: TFLite's reference add
    (rq 0, ES_RQ_FIXED), or (rq 1, ES_RQ_FP32) the float arithmetic of onnxruntime's
    DequantizeLinear -> Add -> QuantizeLinear, from the float32 scales themselves."""
    twice_max = 2 * max(sa, sb)
    am, ash = quantize_multiplier(sa / twice_max)
    bm, bsh = quantize_multiplier(sb / twice_max)
    ym, ysh = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * sy))
    return {"__struct__": "es_qadd_params", "a_zp": a_zp, "b_zp": b_zp, "y_zp": y_zp,
            "left_shift": ADD_LEFT_SHIFT, "a_mult": am, "a_shift": ash, "b_mult": bm,
            "b_shift": bsh, "y_mult": ym, "y_shift": ysh, "qmin": qmin, "qmax": qmax,
            "sub": int(sub), "rq": rq, "a_scale": float(np.float32(sa)),
            "b_scale": float(np.float32(sb)), "y_scale": float(np.float32(sy))}


def add_i8(L: Lowerer, node) -> bool:
    m = _match(L, node)
    if m is None:
        return False
    qmin, qmax = act_range(L, m.act, m.y_scale, m.y_zp)
    params = add_params(m.a.scale, m.b.scale, m.y_scale, m.a.zero_point, m.b.zero_point,
                        m.y_zp, qmin, qmax, node.op_type == "Sub", rq_mode(L))
    y = out_tensor(L, m.qnode, m.oshape)
    if m.contiguous:
        call = Call("es_add_i8", [Ref(m.a.tensor), Ref(m.b.tensor), Ref(y), prod(m.oshape),
                                  params])
    else:
        call = Call("es_add_i8_bcast", [Ref(m.a.tensor), Ref(m.b.tensor), Ref(y), {
            "__struct__": "es_qadd_bcast_params", **_nested("q", params),
            **_nested("bc", m.bcast)}])
    L.add_step(node, m.inputs(), [y], [call], inplace=m.inplace)
    finish(L, m.qnode, m.act, y, m.oshape)
    return True


def mul_params(sa: float, sb: float, sy: float, a_zp: int, b_zp: int, y_zp: int,
               qmin: int = -128, qmax: int = 127) -> dict:
    """es_qmul_params fields (without the broadcast) of TFLite's reference mul."""
    mult, shift = quantize_multiplier(sa * sb / sy)
    return {"__struct__": "es_qmul_params", "a_zp": a_zp, "b_zp": b_zp, "y_zp": y_zp,
            "mult": mult, "shift": shift, "qmin": qmin, "qmax": qmax}


def mul_i8(L: Lowerer, node) -> bool:
    m = _match(L, node)
    if m is None:
        return False
    qmin, qmax = act_range(L, m.act, m.y_scale, m.y_zp)
    params = mul_params(m.a.scale, m.b.scale, m.y_scale, m.a.zero_point, m.b.zero_point,
                        m.y_zp, qmin, qmax)
    if _silu_lut(L, node, m, params):
        return True
    y = out_tensor(L, m.qnode, m.oshape)
    L.add_step(node, m.inputs(), [y], [Call("es_mul_i8", [
        Ref(m.a.tensor), Ref(m.b.tensor), Ref(y), {**params, **_nested("bc", m.bcast)}])],
        inplace=m.inplace)
    finish(L, m.qnode, m.act, y, m.oshape)
    return True


def _sigmoid_step(L: Lowerer, node, k: int, x: str) -> Step | None:
    """The step of a Sigmoid whose int8 output Mul ``node`` reads as input k, when it is a
    table lookup (es_lut_i8) over int8 tensor ``x`` and its output reaches the Mul through
    Q -> DQ and nothing else; None otherwise."""
    dq = L.producer.get(node.input[k])
    q = L.producer.get(dq.input[0]) if dq is not None else None
    sig = L.producer.get(q.input[0]) if q is not None else None
    view = deq_input(L, node.input[k])
    if (view is None or dq is None or dq.op_type != "DequantizeLinear" or q is None
            or q.op_type != "QuantizeLinear" or sig is None or sig.op_type != "Sigmoid"
            or L.single_consumer(sig.output[0]) is not q
            or L.single_consumer(q.output[0]) is not dq
            or L.single_consumer(dq.output[0]) is not node):
        return None
    for st in L.steps:
        if st.outputs == [view.tensor]:
            ok = len(st.calls) == 1 and st.calls[0].fn == "es_lut_i8" and \
                st.calls[0].args[0] == Ref(x)
            return st if ok else None
    return None


def mul_q_codes(prod_: np.ndarray, mult: int, shift: int) -> np.ndarray:
    """es_mul_q (edgesmith_rt.h) on int64 arrays: (x * mult + 2^(total - 1)) >> total,
    total = 31 - shift, saturated to int32 (Python's >> is arithmetic, as the C's)."""
    total = 31 - shift
    v = (prod_ * mult + (1 << (total - 1))) >> total
    return np.clip(v, -(1 << 31), (1 << 31) - 1)


def _silu_lut(L: Lowerer, node, m: _Binary, params: dict) -> bool:
    """x * Sigmoid(x) as one table lookup per byte: a quantized SiLU (EfficientNet's
    activation) is DQ(x) -> Sigmoid -> Q -> DQ -> Mul(DQ(x), .) -> Q, two int8 steps (a
    table, then TFLite's mul) whose result is a function of x's code alone. The table
    composes them code by code, es_mul_i8's own integer arithmetic (mul1) on the Sigmoid
    table's entries, so the bytes are the two steps' bytes; the Sigmoid step, read by this
    Mul only, is dropped. One pass over x instead of three (the table, then the Mul
    reading two tensors). Not with reference kernels (the tests' unfused oracle) or
    ES_NO_FUSE."""
    if (L.kernels == "reference" or fuse_int8.disabled() or not m.contiguous
            or m.a.shape != m.b.shape or not (m.a.activation and m.b.activation)
            or not 1 <= 31 - params["shift"] <= 62):
        return False
    for k, x, s in ((1, m.a, m.b), (0, m.b, m.a)):
        st = _sigmoid_step(L, node, k, x.tensor)
        if st is not None and st.outputs[0] == s.tensor:
            break
    else:
        return False
    sig = L.tensors[st.calls[0].args[2].name].data.astype(np.int64)  # indexed by uint8 code
    codes = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int64)
    v = mul_q_codes((codes - x.zero_point) * (sig - s.zero_point), params["mult"],
                    params["shift"])
    table = np.clip(v + params["y_zp"], params["qmin"], params["qmax"]).astype(np.int8)
    L.steps.remove(st)
    tt = L.const_tensor(node.name + "_silu_lut", table, "i8")
    y = out_tensor(L, m.qnode, m.oshape)
    L.add_step(node, [x.tensor], [y], [Call("es_lut_i8", [
        Ref(x.tensor), Ref(y), Ref(tt), prod(m.oshape)])], inplace=True)
    finish(L, m.qnode, m.act, y, m.oshape)
    return True


LOWER_INT8.update({"Add": add_i8, "Sub": add_i8, "Mul": mul_i8})
