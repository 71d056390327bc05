"""Element-wise ops: one opcode of ``es_unary_f32`` / ``es_binary_f32`` each.

Table-driven on purpose: adding an activation or a binary op is a row in ``UNARY`` /
``BINARY`` and a case in the C kernel, not a new lowerer or a new kernel. Broadcasting is
resolved here, at generation time, into merged strides (``bcast_params``), so the C loop
never interprets shapes at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Ref, params
from .common import ACT, bcast_params, clip_bounds, fusable_act, prod, take_act
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer

UNARY = {"Relu": "ES_U_RELU", "Clip": "ES_U_CLIP", "LeakyRelu": "ES_U_LEAKY",
         "Sigmoid": "ES_U_SIGMOID", "HardSigmoid": "ES_U_HARDSIGMOID",
         "HardSwish": "ES_U_HARDSWISH", "Tanh": "ES_U_TANH", "Elu": "ES_U_ELU",
         "Selu": "ES_U_SELU", "Softplus": "ES_U_SOFTPLUS", "Softsign": "ES_U_SOFTSIGN",
         "Exp": "ES_U_EXP", "Neg": "ES_U_NEG", "Abs": "ES_U_ABS", "Sqrt": "ES_U_SQRT",
         "Log": "ES_U_LOG", "Reciprocal": "ES_U_RECIPROCAL", "Erf": "ES_U_ERF",
         "Floor": "ES_U_FLOOR", "Ceil": "ES_U_CEIL", "Identity": None, "Dropout": None}
BINARY = {"Add": "ES_B_ADD", "Sub": "ES_B_SUB", "Mul": "ES_B_MUL", "Div": "ES_B_DIV",
          "Pow": "ES_B_POW", "Max": "ES_B_MAX", "Min": "ES_B_MIN", "PRelu": "ES_B_PRELU"}


@lowers(*UNARY)
def unary(L: Lowerer, node) -> None:
    a = L.attrs(node)
    op = node.op_type
    v = L.value(node.input[0])
    if UNARY[op] is None:  # Identity, Dropout (inference): a view
        L.bind(node.output[0], v.tensor, v.shape, v.deq)
        return
    x = L.f32(node.input[0])
    p0, p1 = 0.0, 0.0
    if op == "Clip":
        p0, p1 = clip_bounds(L, node)
    elif op == "LeakyRelu":
        p0 = a.get("alpha", 0.01)
    elif op == "HardSigmoid":
        p0, p1 = a.get("alpha", 0.2), a.get("beta", 0.5)
    elif op == "Elu":
        p0 = a.get("alpha", 1.0)
    elif op == "Selu":
        p0, p1 = a.get("alpha", 1.67326319217681884765625), a.get("gamma",
                                                                  1.05070102214813232421875)
    y = L.new_tensor(node.output[0], x.shape, "f32")
    L.add_step(node, [x.tensor], [y], [Call("es_unary_f32", [
        Ref(x.tensor), Ref(y), params("es_unary_params", n=prod(x.shape), op=UNARY[op],
                                      p0=float(p0), p1=float(p1))])], inplace=True)
    L.bind(node.output[0], y, x.shape)


@lowers(*BINARY)
def binary(L: Lowerer, node) -> None:
    op = node.op_type
    ca, cb = L.const(node.input[0]), L.const(node.input[1])
    refs, shapes, ins = [], [], []
    for name, c in ((node.input[0], ca), (node.input[1], cb)):
        if c is not None:
            if op == "PRelu" and c.ndim >= 1 and name == node.input[1]:
                pass
            t = L.const_tensor(node.name + "_k", c.astype(np.float32), "f32")
            refs.append(Ref(t))
            shapes.append(tuple(c.shape))
        else:
            v = L.f32(name)
            refs.append(Ref(v.tensor))
            shapes.append(v.shape)
            ins.append(v.tensor)
    if op == "PRelu":  # slope broadcasts unidirectionally; legacy exports give [C] for NCHW
        if len(shapes[1]) == 1 and len(shapes[0]) > 2 and shapes[1][0] == shapes[0][1] \
                and shapes[0][1] != shapes[0][-1]:
            shapes[1] = (shapes[1][0],) + (1,) * (len(shapes[0]) - 2)
    oshape = tuple(np.broadcast_shapes(shapes[0], shapes[1]))
    code, out = BINARY[op], node.output[0]
    act = fusable_act(L, out) if op == "Add" else None
    if act and act[0] == ACT["relu"]:  # a residual sum and its Relu: one pass, not two
        code, out = "ES_B_ADD_RELU", take_act(L, out)[3]
    y = L.new_tensor(out, oshape, "f32")
    inplace = bool(ins) and ins[0] == refs[0].name and shapes[0] == oshape
    L.add_step(node, ins, [y], [Call("es_binary_f32", [
        refs[0], refs[1], Ref(y), code, bcast_params(oshape, shapes[0], shapes[1])])],
        inplace=inplace)
    L.bind(out, y, oshape)
