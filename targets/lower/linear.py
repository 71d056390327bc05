"""Dense layers: Gemm and MatMul.

A Gemm, or a MatMul whose right operand is a constant, is a fully connected layer; both
go through ``_fc`` so the weights are packed once as [N][K] and one GEMM kernel with a
fused activation serves both. Only a MatMul of two run-time operands needs the batched
``es_matmul_f32``, and keeping the two ops together keeps that decision in one file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Ref, params
from .common import ACT, bcast_params, prod, take_act, unsupported
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer


@lowers("Gemm")
def gemm(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    w = L.const(node.input[1])
    if a.get("transA", 0) and x.shape[0] != 1:
        raise unsupported(node, "transA with a run-time A")
    if w is None:
        raise unsupported(node, "B computed at run time", "use MatMul")
    w = w.astype(np.float32)
    wn = w if a.get("transB", 0) else w.T  # [N][K]
    wn = wn * np.float32(a.get("alpha", 1.0))
    mrows = x.shape[0] if not a.get("transA", 0) else x.shape[1]
    nn, kk = wn.shape
    c = L.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    bias = np.zeros(nn, np.float32)
    extra = None
    if c is not None:
        c = c.astype(np.float32) * np.float32(a.get("beta", 1.0))
        if c.size in (1, nn) and (c.ndim < 2 or c.shape[0] == 1):
            bias = np.broadcast_to(c.reshape(-1), (nn,)).astype(np.float32)
        else:
            extra = c
    _fc(L, node, x, wn, bias, mrows, kk, (mrows, nn), extra)


@lowers("MatMul")
def matmul(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    w = L.const(node.input[1])
    if w is not None and w.ndim == 2 and len(x.shape) >= 2:
        kk, nn = w.shape
        mrows = prod(x.shape[:-1])
        _fc(L, node, x, np.ascontiguousarray(w.T.astype(np.float32)), np.zeros(nn, np.float32),
            mrows, kk, (*x.shape[:-1], nn), None)
        return
    if L.const(node.input[0]) is not None or w is not None:
        raise unsupported(node, "constant operand of this rank")
    b = L.f32(node.input[1])
    if len(x.shape) < 2 or len(b.shape) < 2:
        raise unsupported(node, "1-D operands")
    m, k = x.shape[-2:]
    k2, n = b.shape[-2:]
    ab, bb = prod(x.shape[:-2]), prod(b.shape[:-2])
    if k != k2 or not (ab == bb or ab == 1 or bb == 1):
        raise unsupported(node, f"batch broadcast {x.shape} x {b.shape}")
    lead = x.shape[:-2] if ab >= bb else b.shape[:-2]
    oshape = (*lead, m, n)
    y = L.new_tensor(node.output[0], oshape, "f32")
    L.add_step(node, [x.tensor, b.tensor], [y], [Call("es_matmul_f32", [
        Ref(x.tensor), Ref(b.tensor), Ref(y), params(
            "es_matmul_params", batch=max(ab, bb), M=m, K=k, N=n,
            a_stride=0 if ab == 1 else m * k, b_stride=0 if bb == 1 else k * n)])])
    L.bind(node.output[0], y, oshape)


def _fc(L, node, x, wn, bias, mrows, kk, oshape, extra) -> None:
    out = node.output[0]
    code, a0, a1 = ACT["none"], 0.0, 0.0
    if extra is None:
        code, a0, a1, out = take_act(L, out)
    y = L.new_tensor(out, oshape, "f32")
    wt = L.const_tensor(node.name + "_w", wn, "f32")
    bt = L.const_tensor(node.name + "_b", bias, "f32")
    # the plain loop is the oracle; the default takes four outputs per pass in vectors
    fn = "es_gemm_f32_ref" if L.kernels == "reference" else "es_gemm_f32"
    calls = [Call(fn, [Ref(x.tensor), Ref(wt), Ref(bt), Ref(y), params(
        "es_gemm_params", M=mrows, N=wn.shape[0], K=kk, act=code, a0=float(a0),
        a1=float(a1))])]
    if extra is not None:
        et = L.const_tensor(node.name + "_c", np.broadcast_to(extra, oshape), "f32")
        calls.append(Call("es_binary_f32", [Ref(y), Ref(et), Ref(y), "ES_B_ADD",
                                             bcast_params(oshape, oshape, oshape)]))
    L.add_step(node, [x.tensor], [y], calls)
    L.bind(out, y, oshape)
