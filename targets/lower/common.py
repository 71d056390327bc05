"""Helpers shared by more than one lowering family, and by the INT8 lowering.

Conv, ConvTranspose and pooling must agree on padding and window geometry, and the INT8
integer kernels reuse the float path's geometry so both precisions compute the same
output shapes; keeping these in one place is what guarantees that agreement. Everything
else here (error construction, activation fusion, broadcast strides, axes attributes)
was needed by two or more families and would otherwise be imported sideways between them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from edgesmith.errors import UnsupportedOpError

if TYPE_CHECKING:
    from ..ir import Lowerer

MAX_DIMS = 6
ACT = {"none": 0, "relu": 1, "clip": 2, "leaky": 3, "hardswish": 4, "sigmoid": 5, "silu": 6,
       "hardsigmoid": 7}  # edgesmith_rt.h ES_ACT_*


def unsupported(node, why: str, fix: str = "") -> UnsupportedOpError:
    return UnsupportedOpError(f"{node.op_type} node {node.name!r}: {why}",
                              where=node.name or node.op_type,
                              fix=fix or "change the model or use another target for it")


def prod(xs) -> int:
    return int(np.prod(xs, dtype=np.int64)) if len(xs) else 1


def clip_bounds(L: Lowerer, node) -> tuple[float, float]:
    a = L.attrs(node)
    lo, hi = a.get("min", -3.4e38), a.get("max", 3.4e38)
    if len(node.input) > 1 and node.input[1]:
        c = L.const(node.input[1])
        if c is None:
            raise unsupported(node, "runtime min bound")
        lo = float(c)
    if len(node.input) > 2 and node.input[2]:
        c = L.const(node.input[2])
        if c is None:
            raise unsupported(node, "runtime max bound")
        hi = float(c)
    return float(lo), float(hi)


def fusable_act(L: Lowerer, out: str):
    """(act code, a0, a1, node) when ``out`` feeds exactly one fusable activation, or is
    the x of a SiLU written as Mul(x, Sigmoid(x)) (node: the Mul; the caller also marks
    the Sigmoid done through ``silu_nodes``). The kernels apply it in registers, where a
    separate HardSwish or Sigmoid step was one more pass over the plane, and a scalar
    expf per element at that."""
    silu = silu_nodes(L, out)
    if silu is not None:
        return ACT["silu"], 0.0, 0.0, silu[1]
    nxt = L.single_consumer(out)
    if nxt is None:
        return None
    if nxt.op_type == "HardSwish":
        return ACT["hardswish"], 0.0, 0.0, nxt
    if nxt.op_type == "Sigmoid":
        return ACT["sigmoid"], 0.0, 0.0, nxt
    if nxt.op_type == "HardSigmoid":
        a = L.attrs(nxt)
        return ACT["hardsigmoid"], float(a.get("alpha", 0.2)), float(a.get("beta", 0.5)), nxt
    if nxt.op_type == "Relu":
        return ACT["relu"], 0.0, 0.0, nxt
    if nxt.op_type == "Clip":
        try:
            lo, hi = clip_bounds(L, nxt)
        except UnsupportedOpError:
            return None
        return ACT["clip"], lo, hi, nxt
    if nxt.op_type == "LeakyRelu":
        return ACT["leaky"], float(L.attrs(nxt).get("alpha", 0.01)), 0.0, nxt
    return None


def silu_nodes(L: Lowerer, out: str):
    """(Sigmoid, Mul) when ``out`` is read by exactly a Sigmoid and a Mul of ``out`` by
    that Sigmoid's output, which nothing else reads: x * sigmoid(x), as torch exports
    nn.SiLU. None otherwise, or when ``out`` is also a graph output."""
    cs = L.consumers.get(out, [])
    if len(cs) != 2 or out in L.graph_outputs:
        return None
    sig = next((n for n in cs if n.op_type == "Sigmoid"), None)
    mul = next((n for n in cs if n.op_type == "Mul"), None)
    if sig is None or mul is None or L.single_consumer(sig.output[0]) is not mul:
        return None
    if sorted(mul.input) != sorted([out, sig.output[0]]):
        return None
    return sig, mul


def take_act(L: Lowerer, out: str):
    """The fused activation of ``out`` (fusable_act) as (code, a0, a1, the tensor the
    activation writes), its nodes marked done; (none, 0, 0, out) when there is none."""
    act = fusable_act(L, out)
    if not act:
        return ACT["none"], 0.0, 0.0, out
    code, a0, a1, anode = act
    if code == ACT["silu"]:
        L.done.add(id(silu_nodes(L, out)[0]))
    L.done.add(id(anode))
    return code, a0, a1, anode.output[0]


def conv_pads(a: dict, in_sp, k, s, d) -> list[int]:
    """[begin..., end...] pads honouring auto_pad."""
    n = len(in_sp)
    mode = a.get("auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            out = -(-in_sp[i] // s[i])
            total = max(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i])
            lo = total // 2 if mode == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + n] = lo, total - lo
        return pads
    if mode == "VALID":
        return [0] * (2 * n)
    return list(a.get("pads", [0] * (2 * n)))


def as2d(shape_sp, k, s, d, pads):
    """Promote 1-D spatial parameters to 2-D (H=1)."""
    if len(shape_sp) == 1:
        return [1, shape_sp[0]], [1, k[0]], [1, s[0]], [1, d[0]], [0, pads[0], 0, pads[1]]
    return list(shape_sp), list(k), list(s), list(d), list(pads)


def conv_params(c, sp, m, osp, kk, ss, pp, dd, group, act, a0, a1, **q) -> dict:
    p = {"C": c, "H": sp[0], "W": sp[1], "M": m, "OH": osp[0], "OW": osp[1], "KH": kk[0],
         "KW": kk[1], "SH": ss[0], "SW": ss[1], "PT": pp[0], "PL": pp[1], "DH": dd[0],
         "DW": dd[1], "group": group, "act": act, "a0": float(a0), "a1": float(a1)}
    p.update(q)
    return {"__struct__": "es_conv_params", **p}


def pool_geometry(L: Lowerer, node, x):
    a = L.attrs(node)
    nsp = len(x.shape) - 2
    if nsp not in (1, 2):
        raise unsupported(node, f"{nsp}-D pooling")
    k = list(a["kernel_shape"])
    s = list(a.get("strides", [1] * nsp))
    d = list(a.get("dilations", [1] * nsp))
    pads = conv_pads(a, x.shape[2:], k, s, d)
    sp, kk, ss, dd, pp = as2d(x.shape[2:], k, s, d, pads)
    osp = []
    for i in range(2):
        eff = dd[i] * (kk[i] - 1) + 1
        num = sp[i] + pp[i] + pp[i + 2] - eff
        o = (-(-num // ss[i]) if a.get("ceil_mode", 0) else num // ss[i]) + 1
        if a.get("ceil_mode", 0) and (o - 1) * ss[i] >= sp[i] + pp[i]:
            o -= 1
        osp.append(o)
    c = x.shape[1] * x.shape[0]
    params = {"__struct__": "es_pool_params", "C": c, "H": sp[0], "W": sp[1], "OH": osp[0],
              "OW": osp[1], "KH": kk[0], "KW": kk[1], "SH": ss[0], "SW": ss[1], "PT": pp[0],
              "PL": pp[1], "PB": pp[2], "PR": pp[3], "DH": dd[0], "DW": dd[1],
              "count_pad": int(a.get("count_include_pad", 0))}
    oshape = (x.shape[0], x.shape[1], *([osp[1]] if nsp == 1 else osp))
    return params, oshape


def bcast_params(oshape, ashape, bshape) -> dict:
    """Strides (elements) of a and b over the output dims, adjacent dims merged."""
    nd = len(oshape)
    ashape = (1,) * (nd - len(ashape)) + tuple(ashape)
    bshape = (1,) * (nd - len(bshape)) + tuple(bshape)
    dims = []
    for o, x, y in zip(oshape, ashape, bshape, strict=False):
        if o == 1:
            continue
        dims.append([o, x == o, y == o])
    merged: list[list] = []
    for dm in dims:
        if merged and merged[-1][1] == dm[1] and merged[-1][2] == dm[2]:
            merged[-1][0] *= dm[0]
        else:
            merged.append(list(dm))
    if not merged:
        merged = [[1, True, True]]
    if len(merged) > MAX_DIMS:
        raise UnsupportedOpError(f"broadcast over {len(merged)} dims", fix="reshape the model")
    shape = [m[0] for m in merged]
    sa, sb = [0] * len(shape), [0] * len(shape)
    ra = rb = 1
    for i in range(len(shape) - 1, -1, -1):
        if merged[i][1]:
            sa[i], ra = ra, ra * shape[i]
        if merged[i][2]:
            sb[i], rb = rb, rb * shape[i]
    pad = MAX_DIMS - len(shape)
    return {"__struct__": "es_bcast", "ndim": len(shape), "shape": shape + [1] * pad,
            "sa": sa + [0] * pad, "sb": sb + [0] * pad}


def _axes(L: Lowerer, node, ndim):
    a = L.attrs(node)
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        c = L.const(node.input[1])
        if c is None:
            raise unsupported(node, "axes computed at run time")
        axes = [int(x) for x in c.reshape(-1)]
    return None if axes is None else [x + ndim if x < 0 else x for x in axes]
