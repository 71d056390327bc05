"""INT8 element-wise binary ops with NumPy broadcasting, TFLite's scheme:

    DQ(a), DQ(b) -> Add | Sub [-> Relu/Clip] -> Q   =>   es_add_i8 / es_add_i8_bcast
    DQ(a), DQ(b) -> Mul [-> Relu/Clip] -> Q          =>   es_mul_i8

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

from ..graph import Call, Ref
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
    y = out_tensor(L, m.qnode, m.oshape)
    L.add_step(node, m.inputs(), [y], [Call("es_mul_i8", [
        Ref(m.a.tensor), Ref(m.b.tensor), Ref(y), {**params, **_nested("bc", m.bcast)}])],
        inplace=m.inplace)
    finish(L, m.qnode, m.act, y, m.oshape)
    return True


LOWER_INT8.update({"Add": add_i8, "Sub": add_i8, "Mul": mul_i8})
