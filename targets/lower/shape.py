"""Shape ops and data movement.

Kept apart from the arithmetic because most of these cost nothing at run time: the C
runtime keeps ONNX's own NCHW row-major layout, so Reshape, Flatten, Squeeze, Unsqueeze,
Cast and a Transpose that only moves size-1 axes are views of their input buffer and emit
no step. The rest (Transpose, Concat, Split, Pad) are plain copies that never look at
values, which is why Transpose also serves int8 tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Ref, params
from .common import MAX_DIMS, _axes, prod, unsupported
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer


def _view(L: Lowerer, node, shape) -> None:
    v = L.value(node.input[0])
    if prod(shape) != prod(v.shape):
        raise unsupported(node, f"cannot view {v.shape} as {tuple(shape)}")
    L.bind(node.output[0], v.tensor, shape, v.deq)


@lowers("Reshape")
def reshape(L: Lowerer, node) -> None:
    v = L.value(node.input[0])
    shape = L.const(node.input[1]) if len(node.input) > 1 else None
    if shape is None:
        shape = L.attrs(node).get("shape")
    if shape is None:
        raise unsupported(node, "target shape computed at run time")
    shape = [int(s) for s in np.asarray(shape).reshape(-1)]
    allowzero = L.attrs(node).get("allowzero", 0)
    shape = [v.shape[i] if s == 0 and not allowzero else s for i, s in enumerate(shape)]
    if -1 in shape:
        i = shape.index(-1)
        shape[i] = prod(v.shape) // max(1, prod([s for s in shape if s != -1]))
    _view(L, node, shape)


@lowers("Flatten")
def flatten(L: Lowerer, node) -> None:
    v = L.value(node.input[0])
    ax = L.attrs(node).get("axis", 1)
    ax = ax + len(v.shape) if ax < 0 else ax
    _view(L, node, (prod(v.shape[:ax]), prod(v.shape[ax:])))


@lowers("Squeeze")
def squeeze(L: Lowerer, node) -> None:
    v = L.value(node.input[0])
    axes = _axes(L, node, len(v.shape))
    shape = [d for i, d in enumerate(v.shape) if not ((axes is None and d == 1) or
                                                     (axes is not None and i in axes))]
    _view(L, node, shape)


@lowers("Unsqueeze")
def unsqueeze(L: Lowerer, node) -> None:
    v = L.value(node.input[0])
    n = len(v.shape) + len(_axes(L, node, 0) or [])
    axes = sorted(_axes(L, node, n))
    shape = list(v.shape)
    for ax in axes:
        shape.insert(ax, 1)
    _view(L, node, shape)


@lowers("Cast")
def cast(L: Lowerer, node) -> None:
    if L.attrs(node).get("to") != 1:
        raise unsupported(node, "cast to a non-float type")
    v = L.value(node.input[0])
    L.bind(node.output[0], v.tensor, v.shape, v.deq)


@lowers("Transpose")
def transpose(L: Lowerer, node) -> None:
    v = L.value(node.input[0])
    nd = len(v.shape)
    perm = list(L.attrs(node).get("perm", list(range(nd))[::-1]))
    oshape = tuple(v.shape[p] for p in perm)
    real = [p for p in perm if v.shape[p] != 1]
    if real == sorted(real):  # only size-1 axes move: a view
        L.bind(node.output[0], v.tensor, oshape, v.deq)
        return
    if nd > MAX_DIMS:
        raise unsupported(node, f"{nd}-D transpose")
    src = L.tensors[v.tensor]
    dtype = src.dtype
    y = L.new_tensor(node.output[0], oshape, dtype, scale=src.scale, zero_point=src.zero_point)
    pad = MAX_DIMS - nd
    table = params("es_perm", ndim=nd, shape=list(v.shape) + [1] * pad,
                   perm=perm + list(range(nd, MAX_DIMS)))
    L.add_step(node, [v.tensor], [y], [Call("es_transpose", [
        Ref(v.tensor), Ref(y), np.dtype(_np(dtype)).itemsize, table])])
    L.bind(node.output[0], y, oshape, v.deq)


def rows(n: int, row_bytes: int, dst_stride: int, src_stride: int) -> dict:
    """es_copy_rows' block: n rows of row_bytes bytes, strides in bytes (Concat, Split)."""
    return params("es_copy_rows_params", rows=n, row_bytes=row_bytes, dst_stride=dst_stride,
                  src_stride=src_stride)


def _np(dtype):
    from ..ir import DTYPES

    return DTYPES[dtype][0]


def _src(L: Lowerer, node, name):
    """Ref, shape and dtype of an input that may be a constant."""
    c = L.const(name)
    if c is not None:
        t = L.const_tensor(node.name + "_k", c.astype(np.float32), "f32")
        return Ref(t), tuple(c.shape), "f32", None
    v = L.value(name)
    return Ref(v.tensor), v.shape, L.tensors[v.tensor].dtype, v


@lowers("Concat")
def concat(L: Lowerer, node) -> None:
    srcs = []
    for name in node.input:
        r, shape, dtype, v = _src(L, node, name)
        if v is not None and v.deq:
            v = L.f32(name)
            r, shape, dtype = Ref(v.tensor), v.shape, "f32"
        srcs.append((r, shape, dtype))
    nd = len(srcs[0][1])
    ax = L.attrs(node)["axis"]
    ax = ax + nd if ax < 0 else ax
    oshape = list(srcs[0][1])
    oshape[ax] = sum(s[1][ax] for s in srcs)
    y = L.new_tensor(node.output[0], oshape, "f32")
    outer, inner = prod(oshape[:ax]), prod(oshape[ax + 1:])
    calls, off = [], 0
    for r, shape, _ in srcs:
        row = shape[ax] * inner
        calls.append(Call("es_copy_rows", [Ref(y, off), r, rows(outer, row * 4,
                                                                 oshape[ax] * inner * 4, row * 4)]))
        off += row
    L.add_step(node, [r.name for r, _, _ in srcs if r.name in L.tensors and
                      L.tensors[r.name].kind != "const"], [y], calls)
    L.bind(node.output[0], y, oshape)


@lowers("Gather")
def gather(L: Lowerer, node) -> None:
    """Gather of an activation at constant indices (a ViT's class token ``x[:, 0]``, its
    ``qkv[0]``): one row copy per index, the bytes moved as they are, so an int8 tensor
    keeps its scale and stays quantized. A Gather whose inputs are all constant (shape
    arithmetic) never gets here: it folds at generation time."""
    idx = L.const(node.input[1])
    if idx is None:
        raise unsupported(node, "indices computed at run time",
                          "index with constants (the C runtime plans every copy ahead)")
    v = L.value(node.input[0])
    nd = len(v.shape)
    ax = L.attrs(node).get("axis", 0)
    ax = ax + nd if ax < 0 else ax
    dim = v.shape[ax]
    flat = [int(i) + dim if int(i) < 0 else int(i) for i in np.asarray(idx).reshape(-1)]
    if any(not 0 <= i < dim for i in flat):
        raise unsupported(node, f"index out of range for axis {ax} of size {dim}: "
                                f"{np.asarray(idx).reshape(-1).tolist()}")
    oshape = (*v.shape[:ax], *np.shape(idx), *v.shape[ax + 1:])
    src = L.tensors[v.tensor]
    y = L.new_tensor(node.output[0], oshape, src.dtype, scale=src.scale,
                     zero_point=src.zero_point)
    size = np.dtype(_np(src.dtype)).itemsize
    outer, inner = prod(v.shape[:ax]), prod(v.shape[ax + 1:])
    calls = [Call("es_copy_rows", [Ref(y, k * inner), Ref(v.tensor, i * inner),
                                   rows(outer, inner * size, len(flat) * inner * size,
                                        dim * inner * size)])
             for k, i in enumerate(flat)]
    L.add_step(node, [v.tensor], [y], calls)
    L.bind(node.output[0], y, oshape, v.deq)


@lowers("Split")
def split(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    a = L.attrs(node)
    nd = len(x.shape)
    ax = a.get("axis", 0)
    ax = ax + nd if ax < 0 else ax
    sizes = a.get("split")
    if sizes is None and len(node.input) > 1 and node.input[1]:
        sizes = [int(s) for s in L.const(node.input[1]).reshape(-1)]
    n_out = len(node.output)
    if sizes is None:
        step = -(-x.shape[ax] // n_out)
        sizes = [min(step, x.shape[ax] - i * step) for i in range(n_out)]
    outer, inner = prod(x.shape[:ax]), prod(x.shape[ax + 1:])
    outs, calls, off = [], [], 0
    for name, sz in zip(node.output, sizes, strict=False):
        shape = list(x.shape)
        shape[ax] = sz
        y = L.new_tensor(name, shape, "f32")
        calls.append(Call("es_copy_rows", [Ref(y), Ref(x.tensor, off), rows(
            outer, sz * inner * 4, sz * inner * 4, x.shape[ax] * inner * 4)]))
        off += sz * inner
        outs.append(y)
        L.bind(name, y, shape)
    L.add_step(node, [x.tensor], outs, calls)


@lowers("Pad")
def pad(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    nd = len(x.shape)
    value = 0.0
    if L.opset < 11:
        pads = list(a.get("pads", a.get("paddings", [])))
        value = a.get("value", 0.0)
    else:
        pads = L.const(node.input[1])
        if pads is None:
            raise unsupported(node, "pads computed at run time")
        pads = [int(p) for p in pads.reshape(-1)]
        if len(node.input) > 2 and node.input[2]:
            value = float(L.const(node.input[2]).reshape(-1)[0])
        if len(node.input) > 3 and node.input[3]:
            axes = [int(v) % nd for v in L.const(node.input[3]).reshape(-1)]
            full = [0] * (2 * nd)
            for i, ax in enumerate(axes):
                full[ax], full[ax + nd] = pads[i], pads[i + len(axes)]
            pads = full
    if any(p < 0 for p in pads):
        raise unsupported(node, "negative pads (cropping)")
    if nd > MAX_DIMS:
        raise unsupported(node, f"{nd}-D pad")
    mode = {"constant": 0, "reflect": 1, "edge": 2}.get(a.get("mode", "constant"))
    if mode is None:
        raise unsupported(node, f"mode {a.get('mode')}")
    oshape = [x.shape[i] + pads[i] + pads[i + nd] for i in range(nd)]
    y = L.new_tensor(node.output[0], oshape, "f32")
    k = MAX_DIMS - nd
    table = params("es_pad_params", ndim=nd, **{"in": list(x.shape) + [1] * k},
                   out=oshape + [1] * k, before=pads[:nd] + [0] * k, mode=mode,
                   value=float(value))
    L.add_step(node, [x.tensor], [y], [Call("es_pad_f32", [Ref(x.tensor), Ref(y), table])])
    L.bind(node.output[0], y, oshape)
