"""Pooling and reductions.

Global pooling is lowered as a reduction over the spatial axes, so pooling and the
Reduce* ops share the ``es_reduce_f32`` kernel and belong together; windowed pooling's
geometry lives in ``common`` because the INT8 max-pool uses the same computation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..graph import Call, Ref, params
from .common import _axes, pool_geometry, prod, unsupported
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer


@lowers("MaxPool", "AveragePool")
def pool(L: Lowerer, node) -> None:
    if len(node.output) > 1 and node.output[1]:
        raise unsupported(node, "the Indices output")
    x = L.f32(node.input[0])
    geo, oshape = pool_geometry(L, node, x)
    if node.op_type == "AveragePool" and (geo["DH"] != 1 or geo["DW"] != 1):
        raise unsupported(node, "dilated average pooling")
    y = L.new_tensor(node.output[0], oshape, "f32")
    fn = "es_maxpool2d_f32" if node.op_type == "MaxPool" else "es_avgpool2d_f32"
    if fn == "es_maxpool2d_f32" and L.kernels == "reference":
        fn = "es_maxpool2d_f32_ref"  # every tap bounds-checked: the oracle of the fast one
    L.add_step(node, [x.tensor], [y], [Call(fn, [Ref(x.tensor), Ref(y), geo])])
    L.bind(node.output[0], y, oshape)


@lowers("GlobalAveragePool", "GlobalMaxPool")
def global_pool(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    oshape = (*x.shape[:2], *([1] * (len(x.shape) - 2)))
    y = L.new_tensor(node.output[0], oshape, "f32")
    op = "ES_R_MEAN" if node.op_type == "GlobalAveragePool" else "ES_R_MAX"
    L.add_step(node, [x.tensor], [y], [Call("es_reduce_f32", [
        Ref(x.tensor), Ref(y), params("es_reduce_params", outer=x.shape[0] * x.shape[1],
                                      n=prod(x.shape[2:]), inner=1, op=op)])])
    L.bind(node.output[0], y, oshape)


@lowers("ReduceMean", "ReduceSum", "ReduceMax")
def reduce(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    nd = len(x.shape)
    axes = _axes(L, node, nd)
    if axes is None:
        axes = list(range(nd))
    axes = sorted(axes)
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise unsupported(node, "non-contiguous reduction axes")
    keep = L.attrs(node).get("keepdims", 1)
    oshape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keep else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    op = {"ReduceMean": "ES_R_MEAN", "ReduceSum": "ES_R_SUM", "ReduceMax": "ES_R_MAX"}
    y = L.new_tensor(node.output[0], oshape, "f32")
    L.add_step(node, [x.tensor], [y], [Call("es_reduce_f32", [
        Ref(x.tensor), Ref(y), params("es_reduce_params", outer=prod(x.shape[:axes[0]]),
                                      n=prod(x.shape[axes[0]:axes[-1] + 1]),
                                      inner=prod(x.shape[axes[-1] + 1:]),
                                      op=op[node.op_type])])])
    L.bind(node.output[0], y, oshape)
