"""Quantize / Dequantize nodes, and the pattern helpers the INT8 lowerings share.

A ``DequantizeLinear`` of an int8 activation is not run: its output is bound as a *float
view* of the int8 tensor (``Value.deq``). A quantized op lowering (``int8``,
``int8_conv``, ``int8_eltwise``) that finds such views on its inputs and a
``QuantizeLinear`` after its output (``q_after``) fuses the group into one integer
kernel. Anything else materialises the view with a dequantize step (``materialize_dequant``)
and runs in float. uint8 Q/DQ models are shifted to int8 first (``shift_uint8_to_int8``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Ref, Step, Value, params
from .common import clip_bounds, prod, unsupported
from .registry import LOWER, LOWER_INT8
from .requant import quantize_multiplier

if TYPE_CHECKING:
    from ..ir import Lowerer


def qparams(L: Lowerer, node) -> tuple[float, int] | None:
    """Per-tensor (scale, zero point) of a Q/DQ node, or None (per-axis or not int8)."""
    s = L.const(node.input[1])
    z = L.const(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.int8)
    if s is None or z is None or s.size != 1 or z.dtype != np.int8:
        return None
    return float(s.reshape(-1)[0]), int(z.reshape(-1)[0])


# -- uint8 -> int8 ----------------------------------------------------------------------------
def shift_uint8_to_int8(model) -> int:
    """Rewrite uint8 Q/DQ (asymmetric activations, as NNCF's QAT export has them) into the
    int8 form in place: ``q_s8 = q_u8 - 128`` and ``zp_s8 = zp_u8 - 128``. Bit-exact: the
    dequantized value ``(q - zp) * s`` is unchanged and ``clip(round(x/s) + zp, 0, 255) - 128
    == clip(round(x/s) + zp - 128, -128, 127)``. Constant uint8 data feeding a DQ is
    shifted too. Returns the number of Q/DQ nodes rewritten."""
    g = model.graph
    values = _ConstValues(g)
    count = 0
    for k, node in enumerate(list(g.node)):
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            count += _shift_node(g, values, k, node)
    if count:
        _drop_uint8_value_infos(g)
    return count


class _ConstValues:
    """Initializers and Constant outputs of a graph, by name, as arrays."""

    def __init__(self, g):
        self.inits = {i.name: i for i in g.initializer}
        self.consts = {n.output[0]: n for n in g.node if n.op_type == "Constant"}

    def __call__(self, name: str):
        from onnx import numpy_helper

        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        if name in self.consts:
            a = next((x for x in self.consts[name].attribute if x.name == "value"), None)
            return numpy_helper.to_array(a.t) if a is not None else None
        return None


def _add_init(g, arr: np.ndarray, name: str) -> str:
    from onnx import numpy_helper

    g.initializer.append(numpy_helper.from_array(arr, name))
    return name


def _to_s8(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.int16) - 128).astype(np.int8)


def _shift_node(g, value: _ConstValues, k: int, node) -> int:
    """Shift one Q/DQ node's uint8 zero point (and a DQ's constant uint8 data); 1 if it
    was rewritten, 0 if it is not a uint8 node."""
    zp = value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if node.op_type == "QuantizeLinear" and zp is None:
        if len(node.input) > 2 and node.input[2]:
            return 0  # zero point computed at run time: leave it to the checks
        zp = np.zeros((), np.uint8)  # ONNX default: uint8, zero point 0
    if node.op_type == "DequantizeLinear":
        data = value(node.input[0])
        if zp is None or zp.dtype != np.uint8:
            if data is None or data.dtype != np.uint8:
                return 0
            zp = np.zeros((), np.uint8) if zp is None else zp
        if data is not None:
            if data.dtype != np.uint8:
                return 0
            node.input[0] = _add_init(g, _to_s8(data), f"{node.input[0]}__s8_{k}")
    elif zp.dtype != np.uint8:
        return 0
    old = node.input[2] if len(node.input) > 2 and node.input[2] else f"{node.name}_zp"
    while len(node.input) < 3:
        node.input.append("")
    node.input[2] = _add_init(g, _to_s8(zp), f"{old}__s8_{k}")
    return 1


def _drop_uint8_value_infos(g) -> None:
    """uint8 value infos would now lie about the type: drop them, retype outputs."""
    keep = [v for v in g.value_info if v.type.tensor_type.elem_type != 2]
    del g.value_info[:]
    g.value_info.extend(keep)
    for v in list(g.output):
        if v.type.tensor_type.elem_type == 2:
            v.type.tensor_type.elem_type = 3


# -- Q / DQ themselves (both precisions) -----------------------------------------------------
def materialize_dequant(L: Lowerer, name: str, v: Value) -> Value:
    """A float32 copy of the int8 tensor behind the view ``v`` (made once per tensor)."""
    t = L.tensors[v.tensor]
    cached = L._deq_cache.get(v.tensor)
    if cached is None:
        cached = L.new_tensor(v.tensor + "_f", t.shape, "f32")
        L.steps.append(Step(f"dequantize_{v.tensor}", "DequantizeLinear", [v.tensor], [cached],
                            [Call("es_dequantize_i8_f32", [Ref(v.tensor), Ref(cached), t.size,
                                                           float(t.scale), t.zero_point])]))
        L._deq_cache[v.tensor] = cached
    return Value(cached, v.shape)


def quantize_linear(L: Lowerer, node) -> bool:
    qp = qparams(L, node)
    if qp is None:
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
            Ref(v.tensor), Ref(y), params("es_requant_params", n=prod(v.shape),
                                          x_zp=t.zero_point, y_zp=zp, mult=mult, shift=shift,
                                          qmin=-128, qmax=127)])])
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
    qp = qparams(L, node)
    if t.dtype != "i8" or qp is None:
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


LOWER["QuantizeLinear"] = lambda L, n: quantize_linear(L, n) or None
LOWER["DequantizeLinear"] = lambda L, n: dequantize_linear(L, n) or None
LOWER_INT8["QuantizeLinear"] = quantize_linear
LOWER_INT8["DequantizeLinear"] = dequantize_linear


# -- pattern helpers -------------------------------------------------------------------------
def q_after(L: Lowerer, out: str):
    """(Q node, activation node or None) when ``out`` flows into exactly one Q."""
    nxt = L.single_consumer(out)
    act = None
    if nxt is not None and nxt.op_type in ("Relu", "Clip"):
        act, nxt = nxt, L.single_consumer(nxt.output[0])
    if nxt is None or nxt.op_type != "QuantizeLinear" or qparams(L, nxt) is None:
        return None
    return nxt, act


def act_range(L: Lowerer, act, scale: float, zp: int) -> tuple[int, int]:
    """[qmin, qmax] of a fused Relu / Clip in the output's int8 domain."""
    lo, hi = -128, 127
    if act is None:
        return lo, hi
    if act.op_type == "Relu":
        return max(lo, zp), hi
    a, b = clip_bounds(L, act)
    return max(lo, zp + int(round(a / scale))), min(hi, zp + int(round(b / scale)))


def deq_input(L: Lowerer, name: str) -> Value | None:
    """The int8 view behind ``name`` when it is a not yet run DequantizeLinear."""
    name = L.alias.get(name, name)
    v = L.env.get(name)
    return v if v is not None and v.deq else None


def const_weight(L: Lowerer, name: str):
    """(int8 weights, per-channel scales, axis) of DQ(const int8) feeding ``name``, else
    None."""
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


def out_tensor(L: Lowerer, qnode, shape) -> str:
    """The int8 tensor a fused group writes: the Q node's output, with its parameters."""
    scale, zp = qparams(L, qnode)
    return L.new_tensor(qnode.output[0], shape, "i8", scale=np.float32(scale), zero_point=zp)


def finish(L: Lowerer, qnode, act, y: str, shape) -> None:
    """Mark the fused Q (and activation) done and bind the Q's output to ``y``."""
    L.done.add(id(qnode))
    if act is not None:
        L.done.add(id(act))
    L.bind(qnode.output[0], y, shape)
