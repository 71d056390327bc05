"""LayerNormalization: the transformer's normalisation, one kernel over the last axes.

Unlike BatchNormalization, its mean and variance are those of each row at run time, so
nothing folds into a neighbouring kernel; unlike Softmax (``normalize``), it also takes
two constant vectors (scale, bias) packed into weights.bin, which is why it has its own
module. ONNX's optional Mean and InvStdDev outputs are training-time values: a model
that reads them is refused with the node named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Ref, params
from .common import prod, unsupported
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer


@lowers("LayerNormalization")
def layernorm(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    a = L.attrs(node)
    nd = len(x.shape)
    ax = a.get("axis", -1)
    ax = ax + nd if ax < 0 else ax
    if any(o and (o in L.consumers or o in L.graph_outputs) for o in node.output[1:]):
        raise unsupported(node, "its Mean / InvStdDev outputs are used",
                          "export the model in eval mode (inference needs Y only)")
    n = prod(x.shape[ax:])
    scale = _vector(L, node, 1, n, 1.0)
    bias = _vector(L, node, 2, n, 0.0)
    st = L.const_tensor(node.name + "_scale", scale, "f32")
    bt = L.const_tensor(node.name + "_bias", bias, "f32")
    y = L.new_tensor(node.output[0], x.shape, "f32")
    L.add_step(node, [x.tensor], [y], [Call("es_layernorm_f32", [
        Ref(x.tensor), Ref(st), Ref(bt), Ref(y),
        params("es_layernorm_params", rows=prod(x.shape[:ax]), n=n,
               eps=float(a.get("epsilon", 1e-5)))])])
    L.bind(node.output[0], y, x.shape)


def _vector(L: Lowerer, node, i: int, n: int, default: float) -> np.ndarray:
    """Input ``i`` (Scale or B) broadcast to the n normalised elements; ``default`` when
    the optional input is absent. A run-time scale or bias is refused."""
    if len(node.input) <= i or not node.input[i]:
        return np.full(n, default, np.float32)
    c = L.const(node.input[i])
    if c is None:
        raise unsupported(node, f"input {i} ({'scale' if i == 1 else 'bias'}) computed at "
                                "run time", "make scale and bias initializers")
    c = c.astype(np.float32).reshape(-1)
    if c.size not in (1, n):
        raise unsupported(node, f"{'scale' if i == 1 else 'bias'} of {c.size} elements does "
                                f"not broadcast over the {n} normalised elements")
    return np.ascontiguousarray(np.broadcast_to(c, (n,)))
