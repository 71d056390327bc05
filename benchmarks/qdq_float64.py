"""A QDQ graph evaluated in float64: its float semantics without float32's rounding.

int8_agreement's (b) compares the C build with onnxruntime, whose fused graph still runs
many ops in float32 (DQ -> op -> Q). Where the two disagree, each 1-LSB flip starts at a
value a hair from a rounding tie, and the question is which side rounded it as the graph
means. This evaluator answers it for whole models: every DequantizeLinear gives
(q - zero_point) * scale exactly (the float32 scale widened), every float op runs in
float64 (convolutions by torch in float64, whose int8-sized products and sums stay exact
far beyond what the QDQ graph needs), and every QuantizeLinear rounds half to even and
saturates. What is left is float64 rounding, about 1e-16 of a value: a tie closer than
that is a tie.

Ops: those of the zoo CNNs and the digits CNN (Conv, Gemm, MatMul, Add, Mul, Sigmoid,
HardSigmoid, HardSwish, Relu, Clip, GlobalAveragePool, MaxPool, Flatten, Reshape, Q, DQ);
anything else raises NotImplementedError, so a model it cannot judge is said to be one.
"""

from __future__ import annotations

import numpy as np


def _per_axis(v: np.ndarray, p: np.ndarray, axis: int) -> np.ndarray:
    """A per-channel parameter ``p`` shaped to broadcast along ``axis`` of ``v``."""
    if p.ndim == 0 or v.ndim <= 1:
        return p
    shape = [1] * v.ndim
    shape[axis] = -1
    return p.reshape(shape)


def _op(op: str, at: dict, i: list) -> np.ndarray:
    import torch

    f = torch.nn.functional
    x = i[0]
    if op == "DequantizeLinear":
        axis = at.get("axis", 1)
        s = i[1].astype(np.float32).astype(np.float64)
        z = (i[2] if len(i) > 2 and i[2] is not None else np.zeros(i[1].shape)).astype(
            np.float64)
        return (x.astype(np.float64) - _per_axis(x, z, axis)) * _per_axis(x, s, axis)
    if op == "QuantizeLinear":
        axis = at.get("axis", 1)
        s = i[1].astype(np.float32).astype(np.float64)
        z = i[2]
        lim = np.iinfo(z.dtype)
        q = np.round(x / _per_axis(x, s, axis)) + _per_axis(x, z.astype(np.float64), axis)
        return np.clip(q, lim.min, lim.max).astype(z.dtype)
    if op == "Conv":
        pt, pl, pb, pr = at.get("pads", [0, 0, 0, 0])
        xp = f.pad(torch.from_numpy(x), (pl, pr, pt, pb))
        b = torch.from_numpy(i[2]) if len(i) > 2 and i[2] is not None else None
        return f.conv2d(xp, torch.from_numpy(i[1]), b, stride=at.get("strides", [1, 1]),
                        dilation=at.get("dilations", [1, 1]),
                        groups=at.get("group", 1)).numpy()
    if op in ("Gemm", "MatMul"):
        a, b = (x.T if at.get("transA") else x), (i[1].T if at.get("transB") else i[1])
        y = at.get("alpha", 1.0) * (a @ b)
        return y + at.get("beta", 1.0) * i[2] if len(i) > 2 and i[2] is not None else y
    if op in ("Add", "Mul"):
        return x + i[1] if op == "Add" else x * i[1]
    if op == "Sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if op == "HardSigmoid":  # alpha and beta are float32 attributes, widened
        return np.clip(np.float32(at.get("alpha", 0.2)) * x + np.float32(at.get("beta", 0.5)),
                       0.0, 1.0)
    if op == "HardSwish":
        return x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    if op == "Relu":
        return np.maximum(x, 0.0)
    if op == "Clip":
        lo = i[1] if len(i) > 1 and i[1] is not None else -np.inf
        hi = i[2] if len(i) > 2 and i[2] is not None else np.inf
        return np.clip(x, lo, hi)
    if op == "GlobalAveragePool":
        return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)
    if op == "MaxPool" and not at.get("ceil_mode", 0):
        pt, pl, pb, pr = at.get("pads", [0, 0, 0, 0])
        xp = f.pad(torch.from_numpy(x), (pl, pr, pt, pb), value=-np.inf)
        k = at["kernel_shape"]
        return f.max_pool2d(xp, k, at.get("strides", k),
                            dilation=at.get("dilations", [1, 1])).numpy()
    if op == "Flatten":
        axis = at.get("axis", 1)
        return x.reshape(int(np.prod(x.shape[:axis])), -1)
    if op == "Reshape":  # the model's batch of 1 becomes the samples'
        shape = [x.shape[k] if v == 0 else int(v) for k, v in enumerate(i[1])]
        return x.reshape([x.shape[0], *shape[1:]] if shape[0] == 1 else shape)
    raise NotImplementedError(f"qdq_float64: no {op} (attributes {sorted(at)})")


def run(m, x: np.ndarray, wanted: list[str], batch: int = 100) -> dict[str, np.ndarray]:
    """The tensors ``wanted`` of QDQ ModelProto ``m`` on samples ``x`` (one per row of the
    model's batch-1 input), ``batch`` samples at a time; a tensor is dropped after its
    last reader, so a whole CNN on a thousand samples fits in memory."""
    from onnx import helper, numpy_helper

    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    nodes = [n for n in m.graph.node if n.op_type != "Constant"]
    last = {t: k for k, n in enumerate(nodes) for t in n.input}
    out: dict[str, list] = {t: [] for t in wanted}
    for b0 in range(0, len(x), batch):
        env = {m.graph.input[0].name: np.ascontiguousarray(x[b0:b0 + batch], np.float32)}
        for k, n in enumerate(nodes):
            at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            ins = [env.get(t, consts.get(t)) if t else None for t in n.input]
            env[n.output[0]] = _op(n.op_type, at, ins)
            if n.output[0] in out:
                out[n.output[0]].append(env[n.output[0]])
            for t in n.input:
                if t in env and last.get(t) == k and t not in out:
                    del env[t]
    return {t: np.concatenate(v) for t, v in out.items()}
