"""Float32 lowering: one function per ONNX op (family), each emitting C calls.

Layout is ONNX's own (NCHW, row-major), so shape-only ops are free. Weights are packed
here, once, into what each kernel reads: conv OIHW with BN folded in, FC as [N][K].
"""

from __future__ import annotations

import math

import numpy as np

from edgesmith.errors import UnsupportedOpError

from .ir import Call, Lowerer, Ref, lowers

MAX_DIMS = 6
ACT = {"none": 0, "relu": 1, "clip": 2, "leaky": 3}
UNARY = {"Relu": "ES_U_RELU", "Clip": "ES_U_CLIP", "LeakyRelu": "ES_U_LEAKY",
         "Sigmoid": "ES_U_SIGMOID", "HardSigmoid": "ES_U_HARDSIGMOID",
         "HardSwish": "ES_U_HARDSWISH", "Tanh": "ES_U_TANH", "Elu": "ES_U_ELU",
         "Selu": "ES_U_SELU", "Softplus": "ES_U_SOFTPLUS", "Softsign": "ES_U_SOFTSIGN",
         "Exp": "ES_U_EXP", "Neg": "ES_U_NEG", "Abs": "ES_U_ABS", "Sqrt": "ES_U_SQRT",
         "Log": "ES_U_LOG", "Reciprocal": "ES_U_RECIPROCAL", "Erf": "ES_U_ERF",
         "Floor": "ES_U_FLOOR", "Ceil": "ES_U_CEIL", "Identity": None, "Dropout": None}
BINARY = {"Add": "ES_B_ADD", "Sub": "ES_B_SUB", "Mul": "ES_B_MUL", "Div": "ES_B_DIV",
          "Pow": "ES_B_POW", "Max": "ES_B_MAX", "Min": "ES_B_MIN", "PRelu": "ES_B_PRELU"}


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
    """(act code, a0, a1, node) when ``out`` feeds exactly one fusable activation."""
    nxt = L.single_consumer(out)
    if nxt is None:
        return None
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


# -- convolution ---------------------------------------------------------------------------
@lowers("Conv")
def conv(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    w = L.const(node.input[1])
    if w is None:
        raise unsupported(node, "weights computed at run time")
    b = L.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    nsp = len(x.shape) - 2
    if nsp not in (1, 2):
        raise unsupported(node, f"{nsp}-D convolution", "the C runtime has 1-D and 2-D conv")
    w = w.astype(np.float32)
    m = w.shape[0]
    b = np.zeros(m, np.float32) if b is None else b.astype(np.float32).reshape(m)
    k = list(w.shape[2:])
    s = list(a.get("strides", [1] * nsp))
    d = list(a.get("dilations", [1] * nsp))
    pads = conv_pads(a, x.shape[2:], k, s, d)
    group = int(a.get("group", 1))
    out = node.output[0]
    # fold a following BatchNormalization, then a following activation
    nxt = L.single_consumer(out)
    if nxt is not None and nxt.op_type == "BatchNormalization" and len(nxt.output) == 1:
        sc, sh = bn_affine(L, nxt)
        if sc is not None:
            w = w * sc.reshape(-1, *([1] * (w.ndim - 1)))
            b = b * sc + sh
            L.done.add(id(nxt))
            out = nxt.output[0]
    act = fusable_act(L, out)
    code, a0, a1 = ACT["none"], 0.0, 0.0
    if act:
        code, a0, a1, anode = act
        L.done.add(id(anode))
        out = anode.output[0]
    sp, kk, ss, dd, pp = as2d(x.shape[2:], k, s, d, pads)
    osp = [(sp[i] + pp[i] + pp[i + 2] - dd[i] * (kk[i] - 1) - 1) // ss[i] + 1 for i in range(2)]
    n, c = x.shape[0], x.shape[1]
    oshape = (n, m, *([osp[1]] if nsp == 1 else osp))
    y = L.new_tensor(out, oshape, "f32")
    wt = L.const_tensor(node.name + "_w" if node.name else out + "_w", w, "f32")
    bt = L.const_tensor(node.name + "_b" if node.name else out + "_b", b, "f32")
    params = conv_params(c, sp, m, osp, kk, ss, pp, dd, group, code, a0, a1)
    from . import ops_int8  # KERNEL: "reference" switches both precisions to the oracle

    fn, scratch = "es_conv2d_f32", 0
    if ops_int8.KERNEL != "reference" and group == 1:
        # im2col tiles of 32 pixels + 4x16 FMA micro-kernel (ES_F32_GEMM_SCRATCH)
        fn, scratch = "es_conv2d_f32_gemm", 4 * 32 * c * kk[0] * kk[1]
    elif ops_int8.KERNEL != "reference" and group == c == m:
        hp = (osp[0] - 1) * ss[0] + (kk[0] - 1) * dd[0] + 1
        wp = (osp[1] - 1) * ss[1] + (kk[1] - 1) * dd[1] + 1
        fn, scratch = "es_dwconv2d_f32", 4 * hp * wp + 64
    sc = [Ref("__scratch")] if scratch else []
    calls = [Call(fn, [Ref(x.tensor, i * c * sp[0] * sp[1]), Ref(wt), Ref(bt), *sc,
                       Ref(y, i * m * osp[0] * osp[1]), params])
             for i in range(n)]
    L.add_step(node, [x.tensor], [y], calls, scratch=scratch)
    L.bind(out, y, oshape)


def conv_params(c, sp, m, osp, kk, ss, pp, dd, group, act, a0, a1, **q) -> dict:
    p = {"C": c, "H": sp[0], "W": sp[1], "M": m, "OH": osp[0], "OW": osp[1], "KH": kk[0],
         "KW": kk[1], "SH": ss[0], "SW": ss[1], "PT": pp[0], "PL": pp[1], "DH": dd[0],
         "DW": dd[1], "group": group, "act": act, "a0": float(a0), "a1": float(a1)}
    p.update(q)
    return {"__struct__": "es_conv_params", **p}


def bn_affine(L: Lowerer, node):
    a = L.attrs(node)
    vals = [L.const(i) for i in node.input[1:5]]
    if any(v is None for v in vals):
        return None, None
    gamma, beta, mean, var = (v.astype(np.float64) for v in vals)
    sc = gamma / np.sqrt(var + a.get("epsilon", 1e-5))
    return sc.astype(np.float32), (beta - mean * sc).astype(np.float32)


@lowers("BatchNormalization")
def batchnorm(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    sc, sh = bn_affine(L, node)
    if sc is None:
        raise unsupported(node, "statistics computed at run time")
    y = L.new_tensor(node.output[0], x.shape, "f32")
    st, bt = L.const_tensor(node.name + "_scale", sc, "f32"), L.const_tensor(
        node.name + "_shift", sh, "f32")
    c = x.shape[1]
    inner = prod(x.shape[2:])
    L.add_step(node, [x.tensor], [y], [Call("es_channel_affine_f32", [
        Ref(x.tensor), Ref(st), Ref(bt), Ref(y), x.shape[0], c, inner])], inplace=True)
    L.bind(node.output[0], y, x.shape)


@lowers("ConvTranspose")
def conv_transpose(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    w = L.const(node.input[1])
    if w is None:
        raise unsupported(node, "weights computed at run time")
    nsp = len(x.shape) - 2
    if nsp not in (1, 2):
        raise unsupported(node, f"{nsp}-D transposed convolution")
    group = int(a.get("group", 1))
    c = x.shape[1]
    m = w.shape[1] * group
    b = L.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    b = np.zeros(m, np.float32) if b is None else b.astype(np.float32)
    k = list(w.shape[2:])
    s = list(a.get("strides", [1] * nsp))
    d = list(a.get("dilations", [1] * nsp))
    opad = list(a.get("output_padding", [0] * nsp))
    pads = list(a.get("pads", [0] * (2 * nsp)))
    if "output_shape" in a:
        raise unsupported(node, "output_shape attribute", "export with explicit pads")
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise unsupported(node, "auto_pad SAME", "export with explicit pads")
    osp = [s[i] * (x.shape[2 + i] - 1) + opad[i] + ((k[i] - 1) * d[i] + 1) - pads[i]
           - pads[i + nsp] for i in range(nsp)]
    sp, kk, ss, dd, pp = as2d(x.shape[2:], k, s, d, pads)
    osp2 = [1, osp[0]] if nsp == 1 else osp
    n = x.shape[0]
    oshape = (n, m, *osp)
    y = L.new_tensor(node.output[0], oshape, "f32")
    wt = L.const_tensor(node.name + "_w", w.astype(np.float32), "f32")
    bt = L.const_tensor(node.name + "_b", b.reshape(m), "f32")
    params = conv_params(c, sp, m, osp2, kk, ss, pp, dd, group, 0, 0.0, 0.0)
    calls = [Call("es_conv_transpose2d_f32", [
        Ref(x.tensor, i * prod(x.shape[1:])), Ref(wt), Ref(bt), Ref(y, i * prod(oshape[1:])),
        params]) for i in range(n)]
    L.add_step(node, [x.tensor], [y], calls)
    L.bind(node.output[0], y, oshape)


# -- dense -----------------------------------------------------------------------------------
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
        Ref(x.tensor), Ref(b.tensor), Ref(y), max(ab, bb), m, k, n,
        0 if ab == 1 else m * k, 0 if bb == 1 else k * n])])
    L.bind(node.output[0], y, oshape)


def _fc(L, node, x, wn, bias, mrows, kk, oshape, extra) -> None:
    out = node.output[0]
    code, a0, a1 = ACT["none"], 0.0, 0.0
    act = fusable_act(L, out) if extra is None else None
    if act:
        code, a0, a1, anode = act
        L.done.add(id(anode))
        out = anode.output[0]
    y = L.new_tensor(out, oshape, "f32")
    wt = L.const_tensor(node.name + "_w", wn, "f32")
    bt = L.const_tensor(node.name + "_b", bias, "f32")
    calls = [Call("es_gemm_f32", [Ref(x.tensor), Ref(wt), Ref(bt), Ref(y), mrows,
                                  wn.shape[0], kk, code, a0, a1])]
    if extra is not None:
        et = L.const_tensor(node.name + "_c", np.broadcast_to(extra, oshape), "f32")
        calls.append(Call("es_binary_f32", [Ref(y), Ref(et), Ref(y), "ES_B_ADD",
                                             bcast_params(oshape, oshape, oshape)]))
    L.add_step(node, [x.tensor], [y], calls)
    L.bind(out, y, oshape)


# -- element-wise ----------------------------------------------------------------------------
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
        Ref(x.tensor), Ref(y), prod(x.shape), UNARY[op], float(p0), float(p1)])], inplace=True)
    L.bind(node.output[0], y, x.shape)


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
    y = L.new_tensor(node.output[0], oshape, "f32")
    inplace = bool(ins) and ins[0] == refs[0].name and shapes[0] == oshape
    L.add_step(node, ins, [y], [Call("es_binary_f32", [
        refs[0], refs[1], Ref(y), BINARY[op], bcast_params(oshape, shapes[0], shapes[1])])],
        inplace=inplace)
    L.bind(node.output[0], y, oshape)


# -- shape-only views and data movement -----------------------------------------------------
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


def _axes(L: Lowerer, node, ndim):
    a = L.attrs(node)
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        c = L.const(node.input[1])
        if c is None:
            raise unsupported(node, "axes computed at run time")
        axes = [int(x) for x in c.reshape(-1)]
    return None if axes is None else [x + ndim if x < 0 else x for x in axes]


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
    params = {"__struct__": "es_perm", "ndim": nd, "shape": list(v.shape) + [1] * pad,
              "perm": perm + list(range(nd, MAX_DIMS))}
    L.add_step(node, [v.tensor], [y], [Call("es_transpose", [
        Ref(v.tensor), Ref(y), np.dtype(_np(dtype)).itemsize, params])])
    L.bind(node.output[0], y, oshape, v.deq)


def _np(dtype):
    from .ir import DTYPES

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
        calls.append(Call("es_copy_rows", [Ref(y, off), r, outer, row * 4, oshape[ax] * inner * 4,
                                           row * 4]))
        off += row
    L.add_step(node, [r.name for r, _, _ in srcs if r.name in L.tensors and
                      L.tensors[r.name].kind != "const"], [y], calls)
    L.bind(node.output[0], y, oshape)


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
        calls.append(Call("es_copy_rows", [Ref(y), Ref(x.tensor, off), outer, sz * inner * 4,
                                           sz * inner * 4, x.shape[ax] * inner * 4]))
        off += sz * inner
        outs.append(y)
        L.bind(name, y, shape)
    L.add_step(node, [x.tensor], outs, calls)


# -- pooling, reductions ---------------------------------------------------------------------
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


@lowers("MaxPool", "AveragePool")
def pool(L: Lowerer, node) -> None:
    if len(node.output) > 1 and node.output[1]:
        raise unsupported(node, "the Indices output")
    x = L.f32(node.input[0])
    params, oshape = pool_geometry(L, node, x)
    if node.op_type == "AveragePool" and (params["DH"] != 1 or params["DW"] != 1):
        raise unsupported(node, "dilated average pooling")
    y = L.new_tensor(node.output[0], oshape, "f32")
    fn = "es_maxpool2d_f32" if node.op_type == "MaxPool" else "es_avgpool2d_f32"
    L.add_step(node, [x.tensor], [y], [Call(fn, [Ref(x.tensor), Ref(y), params])])
    L.bind(node.output[0], y, oshape)


@lowers("GlobalAveragePool", "GlobalMaxPool")
def global_pool(L: Lowerer, node) -> None:
    x = L.f32(node.input[0])
    oshape = (*x.shape[:2], *([1] * (len(x.shape) - 2)))
    y = L.new_tensor(node.output[0], oshape, "f32")
    op = "ES_R_MEAN" if node.op_type == "GlobalAveragePool" else "ES_R_MAX"
    L.add_step(node, [x.tensor], [y], [Call("es_reduce_f32", [
        Ref(x.tensor), Ref(y), x.shape[0] * x.shape[1], prod(x.shape[2:]), 1, op])])
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
        Ref(x.tensor), Ref(y), prod(x.shape[:axes[0]]), prod(x.shape[axes[0]:axes[-1] + 1]),
        prod(x.shape[axes[-1] + 1:]), op[node.op_type]])])
    L.bind(node.output[0], y, oshape)


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
        Ref(x.tensor), Ref(y), outer, n, inner, int(node.op_type == "LogSoftmax")])])
    L.bind(node.output[0], y, x.shape)


@lowers("LRN")
def lrn(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    y = L.new_tensor(node.output[0], x.shape, "f32")
    calls = [Call("es_lrn_f32", [Ref(x.tensor, i * prod(x.shape[1:])),
                                 Ref(y, i * prod(x.shape[1:])), x.shape[1], prod(x.shape[2:]),
                                 int(a["size"]), float(a.get("alpha", 1e-4)),
                                 float(a.get("beta", 0.75)), float(a.get("bias", 1.0))])
             for i in range(x.shape[0])]
    L.add_step(node, [x.tensor], [y], calls)
    L.bind(node.output[0], y, x.shape)


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
    params = {"__struct__": "es_pad_params", "ndim": nd, "in": list(x.shape) + [1] * k,
              "out": oshape + [1] * k, "before": pads[:nd] + [0] * k, "mode": mode,
              "value": float(value)}
    L.add_step(node, [x.tensor], [y], [Call("es_pad_f32", [Ref(x.tensor), Ref(y), params])])
    L.bind(node.output[0], y, oshape)


COORD = {"half_pixel": 0, "align_corners": 1, "asymmetric": 2, "pytorch_half_pixel": 3,
         "tf_half_pixel_for_nn": 4}
NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}


@lowers("Resize", "Upsample")
def resize(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    nd = len(x.shape)
    scales = sizes = None
    if node.op_type == "Upsample" or L.opset < 11:
        scales = a.get("scales")
        if scales is None:
            scales = L.const(node.input[1])
        coord, nearest = "asymmetric", "floor"
    else:
        if len(node.input) > 2 and node.input[2]:
            scales = L.const(node.input[2])
        if len(node.input) > 3 and node.input[3]:
            sizes = L.const(node.input[3])
        coord = a.get("coordinate_transformation_mode", "half_pixel")
        nearest = a.get("nearest_mode", "round_prefer_floor")
    mode = a.get("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear") or nd != 4:
        raise unsupported(node, f"mode {mode} on {nd}-D input", "use nearest or linear, 4-D")
    if coord not in COORD or nearest not in NEAREST:
        raise unsupported(node, f"coordinate mode {coord} / nearest mode {nearest}")
    if sizes is not None and len(sizes):
        osz = [int(s) for s in sizes]
        sc = [osz[i] / x.shape[i] for i in range(nd)]
    elif scales is not None and len(scales):
        sc = [float(s) for s in np.asarray(scales).reshape(-1)]
        osz = [int(math.floor(x.shape[i] * sc[i])) for i in range(nd)]
    else:
        raise unsupported(node, "scales/sizes computed at run time")
    if osz[0] != x.shape[0] or osz[1] != x.shape[1]:
        raise unsupported(node, "resizing the batch or channel axis")
    y = L.new_tensor(node.output[0], osz, "f32")
    L.add_step(node, [x.tensor], [y], [Call("es_resize2d_f32", [
        Ref(x.tensor), Ref(y), x.shape[0] * x.shape[1], x.shape[2], x.shape[3], osz[2], osz[3],
        0 if mode == "nearest" else 1, COORD[coord], NEAREST[nearest], float(sc[2]),
        float(sc[3])])])
    L.bind(node.output[0], y, osz)
