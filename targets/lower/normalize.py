"""Softmax, LogSoftmax and LRN.

Normalisations over an axis: each output element depends on a whole run-time sum, so,
unlike BatchNormalization, they cannot be folded into a neighbouring kernel at generation
time, and unlike the element-wise ops they are not a per-element opcode. Each maps to one
dedicated kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..graph import Call, Ref, params
from .common import prod
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer


@lowers("Softmax", "LogSoftmax")
def softmax(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    nd = len(x.shape)
    legacy = L.opset < 13
    ax = L.attrs(node).get("axis", 1 if legacy else -1)
    ax = ax + nd if ax < 0 else ax
    if legacy:
        outer, n, inner = prod(x.shape[:ax]), prod(x.shape[ax:]), 1
    else:
        outer, n, inner = prod(x.shape[:ax]), x.shape[ax], prod(x.shape[ax + 1:])
    y = L.new_tensor(node.output[0], x.shape, "f32")
    L.add_step(node, [x.tensor], [y], [Call("es_softmax_f32", [
        Ref(x.tensor), Ref(y), params("es_softmax_params", outer=outer, n=n, inner=inner,
                                      is_log=int(node.op_type == "LogSoftmax"))])])
    L.bind(node.output[0], y, x.shape)


@lowers("LRN")
def lrn(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    y = L.new_tensor(node.output[0], x.shape, "f32")
    p = params("es_lrn_params", C=x.shape[1], inner=prod(x.shape[2:]), size=int(a["size"]),
               alpha=float(a.get("alpha", 1e-4)), beta=float(a.get("beta", 0.75)),
               bias=float(a.get("bias", 1.0)))
    calls = [Call("es_lrn_f32", [Ref(x.tensor, i * prod(x.shape[1:])),
                                 Ref(y, i * prod(x.shape[1:])), p]) for i in range(x.shape[0])]
    L.add_step(node, [x.tensor], [y], calls)
    L.bind(node.output[0], y, x.shape)
