"""INT8 agreement criterion (issue 16, item 7): is the C runtime's int8 build as close to
onnxruntime as onnxruntime is to itself? Three checks, one table and one JSON document.

    .venv/bin/python benchmarks/int8_agreement.py [--models digits,mobilenetv2,...]
                                                  [--size 32] [--layer-samples 4]

(a) per layer: every quantized layer (the float ops between the DequantizeLinear nodes
    that feed it and the QuantizeLinear that ends it) of the C int8 build, fed
    onnxruntime's own int8 input to that layer, agrees within 1 LSB on 100 % of values.
    onnxruntime's per-layer values come from a session with every Q output exposed,
    which runs the graph unfused (ort_ints says why): the reference is the QDQ graph's
    float semantics; its fused kernels are judged end to end in (b).
    Method: edgesmith_bench has no per-step dump, so all layers are cut out of the QDQ
    model into ONE side-by-side model (input: every layer's dequantized int8 input,
    flattened and concatenated; Split, Reshape and the layer's own QuantizeLinear turn it
    back into exactly onnxruntime's int8 values; each layer ends in its own
    Quantize/Dequantize pair and is a graph output). One C build per model runs every
    layer with the kernels the whole model gets.
(b) end to end: C vs onnxruntime (ORT_ENABLE_ALL, its fused int8 kernels) agrees at least
    as well as onnxruntime fused vs onnxruntime unfused (ORT_DISABLE_ALL: DQ -> float op
    -> Q), on the output's int8 values (within 1 LSB) and on top-1.
(c) trained zoo models: top-1 of C int8 equals onnxruntime int8's on >= 99 % of the zoo's
    val split.

Where C leaves onnxruntime (b's ``first_divergence``): for a few samples whose output
differs from the unfused graph's, edgesmith_bench --dump writes the arena after every
step, and each Q output is compared with ort_ints where its step wrote it; the first step
that differs is named, and where it is a Conv, each differing value's exact rescaled sum
(int64 sum, float64 scales) says which side rounded it right. On the trained zoo
models (32x32, 1000 val samples) every sample whose output left onnxruntime's unfused
graph left it first at one value of a Conv lying within 5e-6 of a rounding tie (e.g.
21.500000107, -0.499999470), and the C build rounded it as the exact sum does in 52 of
54 (EfficientNet-B0 36 of 38, MobileNetV3-small 16 of 16): its integer sum times the
float32 scale x_scale * w_scale / y_scale is onnxruntime's own QLinearConv arithmetic,
while onnxruntime's float Conv (DQ -> Conv -> Q, kept by its fused graph for every Conv
whose output two nodes read: 54 of EfficientNet-B0's 81) carries float32 summation
error. The two misses (13.500000074, 37.499999805) are the float32 scale's own rounding.
One such 1-LSB flip grows to hundreds of values a few layers on, so (b) measures how
many near-ties the fused graph still rounds in float, not a fault of either build.

Beside (b), ``vs_float64``: each output (C, onnxruntime fused, unfused) against the QDQ
graph evaluated in float64 (benchmarks/qdq_float64.py), what the graph means without
float32's rounding. On the same 1000 samples C agrees with it far better than
onnxruntime does: EfficientNet-B0 exact 99.55 % (fused onnxruntime 97.75 %), within
1 LSB 99.84 % (99.36 %); MobileNetV3-small 99.64 % (98.76 %), 99.81 % (99.17 %).

Models: ``digits`` (examples/digits, 8x8) and the zoo CNNs with a trained checkpoint
(mobilenetv2, mobilenetv3_small, resnet18, efficientnet_b0) at --size.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import qdq_float64  # noqa: E402
from edgesmith.targets import codegen, run  # noqa: E402
from edgesmith.targets.graph import c_ident  # noqa: E402

CFLAGS = "-O3 -march=native"  # the benchmark's build: the fast kernels are the ones judged
ZOO_CNNS = ("mobilenetv2", "mobilenetv3_small", "resnet18", "efficientnet_b0")


# ---- onnxruntime -------------------------------------------------------------------------

def ort_session(model, level: str = "ORT_ENABLE_ALL"):
    """A one-thread CPU session on a path or ModelProto at graph optimisation ``level``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    src = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def ort_run(model, x: np.ndarray, level: str = "ORT_ENABLE_ALL") -> list[np.ndarray]:
    sess = ort_session(model, level)
    return sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(x, np.float32)})


def ort_ints(m, x: np.ndarray) -> dict[str, np.ndarray]:
    """onnxruntime's int8 value of every QuantizeLinear output on ``x``, from a session at
    ORT_ENABLE_ALL with every Q output added as a graph output. Exposing them turns its QDQ
    fusion off (a fused QLinear node would swallow the Q/DQ pair whose tensor is asked
    for), so these are the unfused graph's values, DQ -> float op -> Q: on EfficientNet-B0
    (trained, 32x32, 300 val samples) the exposed session's output equalled
    ORT_DISABLE_ALL's on every value and differed from the fused run's on 0.7 %. (a) thus
    checks each C layer against the QDQ graph's float semantics on that graph's input."""
    import onnx

    m = onnx.ModelProto.FromString(m.SerializeToString())
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.output[0] not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(
                n.output[0], onnx.TensorProto.INT8, None))
    sess = ort_session(m)
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(None, {sess.get_inputs()[0].name: x})
    return dict(zip(names, outs, strict=True))


# ---- (a) per layer -----------------------------------------------------------------------

@dataclass
class Layer:
    """One quantized layer: the nodes from its DQ inputs to its QuantizeLinear ``q``."""
    q: object                                   # the QuantizeLinear node ending it
    nodes: list = field(default_factory=list)   # in graph order, DQs included
    acts: list = field(default_factory=list)    # Q nodes whose int8 output feeds it
    ops: list = field(default_factory=list)     # op types between the DQs and q

    @property
    def label(self) -> str:
        return f"{'+'.join(self.ops) or 'requantize'} -> {self.q.output[0]}"


def _graph_maps(m):
    prod = {o: n for n in m.graph.node for o in n.output}
    inits = {i.name for i in m.graph.initializer}
    return prod, inits


def layers(m) -> list[Layer]:
    """Every QuantizeLinear fed by computed activations, with the float region before it:
    walk back from its input through float ops to DequantizeLinear nodes (of weights, or
    of an activation's Q output: a layer input). Q nodes of the graph input are skipped
    (nothing computes there)."""
    prod, inits = _graph_maps(m)
    order = {id(n): k for k, n in enumerate(m.graph.node)}
    out = []
    for q in m.graph.node:
        if q.op_type != "QuantizeLinear" or q.input[0] not in prod:
            continue
        lay, seen, stack = Layer(q), set(), [q.input[0]]
        while stack:
            t = stack.pop()
            if not t or t in inits or t not in prod or t in seen:
                continue
            seen.add(t)
            n = prod[t]
            lay.nodes.append(n)
            if n.op_type == "DequantizeLinear":
                if n.input[0] not in inits:
                    src = prod.get(n.input[0])
                    if src is None or src.op_type != "QuantizeLinear":
                        raise ValueError(f"{n.name}: an int8 input not made by a Q node")
                    if src not in lay.acts:
                        lay.acts.append(src)
                continue
            if n.op_type == "QuantizeLinear":
                raise ValueError(f"{q.name}: walked into another Q node ({n.name})")
            stack.extend(n.input)
        lay.nodes.sort(key=lambda n: order[id(n)])
        lay.ops = [n.op_type for n in lay.nodes if n.op_type not in ("DequantizeLinear",
                                                                     "Constant")]
        if lay.acts:
            out.append(lay)
    return out


def side_by_side(m, lays: list[Layer], ints: dict[str, np.ndarray]):
    """(model, float input of one sample per row) running every layer on its own input.

    Input ``x``: [1, total], each layer's activation inputs dequantized and flattened, in
    order. Split and Reshape cut it back; the activation's own QuantizeLinear (scale and
    zero point of the original model) re-quantizes it to exactly onnxruntime's int8; every
    tensor inside layer k is renamed ``L{k}/...`` so layers sharing an input stay apart.
    Output k is layer k's Q then DQ (float; the caller rounds back to int8)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = {i.name: i for i in m.graph.initializer}
    used, nodes, outputs, pieces, sizes = set(), [], [], [], []
    for k, lay in enumerate(lays):
        rn = {}

        def name(t: str, k=k, rn=rn) -> str:
            if not t or t in inits:
                used.add(t)
                return t
            return rn.setdefault(t, f"L{k}/{t}")

        for a in lay.acts:
            src = a.output[0]
            piece = f"L{k}/in/{src}"
            shape = np.array(ints[src].shape[1:], np.int64)
            pieces.append((piece, ints[src], a))
            sizes.append(int(np.prod(shape)))
            nodes.append(helper.make_node("Reshape", [piece, f"L{k}/shape/{src}"],
                                          [f"L{k}/f/{src}"]))
            inits_new = numpy_helper.from_array(np.array([1, *shape], np.int64),
                                                f"L{k}/shape/{src}")
            inits[inits_new.name] = inits_new
            used.add(inits_new.name)
            nodes.append(helper.make_node("QuantizeLinear", [f"L{k}/f/{src}",
                                                             *[name(i) for i in a.input[1:]]],
                                          [name(src)]))
        for n in lay.nodes:
            nodes.append(helper.make_node(n.op_type, [name(i) for i in n.input],
                                          [name(o) for o in n.output], name=f"L{k}/{n.name}",
                                          **{a.name: helper.get_attribute_value(a)
                                             for a in n.attribute}))
        q = lay.q
        nodes.append(helper.make_node("QuantizeLinear", [name(i) for i in q.input],
                                      [name(q.output[0])]))
        nodes.append(helper.make_node("DequantizeLinear", [name(q.output[0]),
                                                          *[name(i) for i in q.input[1:]]],
                                      [f"y{k}"]))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT,
                                                     [1, *ints[q.output[0]].shape[1:]]))
    split = numpy_helper.from_array(np.array(sizes, np.int64), "split_sizes")
    nodes.insert(0, helper.make_node("Split", ["x", "split_sizes"], [p for p, _, _ in pieces],
                                     axis=1) if len(pieces) > 1 else
                 helper.make_node("Identity", ["x"], [pieces[0][0]]))
    xs = np.concatenate([_dequantized(m, a, v) for _, v, a in pieces], axis=1)
    g = helper.make_graph(nodes, "layers",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, xs.shape[1]])],
                          outputs, [inits[u] for u in sorted(used) if u] + [split])
    sub = helper.make_model(g, opset_imports=list(m.opset_import))
    sub.ir_version = m.ir_version
    onnx.checker.check_model(sub)
    return sub, xs


def _const(m, name: str) -> np.ndarray:
    from onnx import numpy_helper

    return next(numpy_helper.to_array(i) for i in m.graph.initializer if i.name == name)


def _dequantized(m, q, v: np.ndarray) -> np.ndarray:
    """onnxruntime's int8 values ``v`` of Q node ``q``, dequantized, one row per sample."""
    s, z = _const(m, q.input[1]), _const(m, q.input[2]).astype(np.float32)
    return ((v.astype(np.float32) - z) * s).astype(np.float32).reshape(len(v), -1)


def c_outputs(folder: Path, xs: np.ndarray) -> list[list[np.ndarray]]:
    """Every output of the C build, per sample (edgesmith_bench --output writes them all
    back to back)."""
    _, oshapes = run.io_shapes(folder)
    binary = run.build(folder)
    res = []
    with tempfile.TemporaryDirectory(prefix="es_agree_") as tmp:
        for i, x in enumerate(xs):
            fin, fout = Path(tmp) / f"in{i}.raw", Path(tmp) / f"out{i}.raw"
            np.ascontiguousarray(x, "<f4").tofile(fin)
            run.run_bench(binary.resolve(), ["--weights", str((folder / "weights.bin").resolve()),
                                             "--input", str(fin), "--output", str(fout),
                                             "--runs", "1", "--warmup", "0", "--no-power"],
                          cwd=folder)
            raw, outs, off = np.fromfile(fout, "<f4"), [], 0
            for sh in oshapes:
                n = int(np.prod(sh))
                outs.append(raw[off:off + n].reshape(sh))
                off += n
            res.append(outs)
    return res


def to_int8(m, q, y: np.ndarray) -> np.ndarray:
    """A dequantized output of Q node ``q`` back to its int8 values."""
    s, z = float(_const(m, q.input[1])), int(_const(m, q.input[2]))
    return np.clip(np.round(y / s) + z, -128, 127).astype(np.int32)


def per_layer(qdq: Path, x: np.ndarray, work: Path) -> dict:
    """(a): every layer of ``qdq`` in C on onnxruntime's int8 input, samples ``x``."""
    import onnx

    m = onnx.load(str(qdq))
    return judge_layers(m, ort_ints(m, x), work, qdq.stem)


def judge_layers(m, ints: dict[str, np.ndarray], work: Path, stem: str) -> dict:
    """(a) on given int8 tensors ``ints`` (onnxruntime's, normally): each layer's output
    in C, from ``ints`` of its inputs, against ``ints`` of its output."""
    import onnx

    lays = layers(m)
    sub, xs = side_by_side(m, lays, ints)
    path = work / f"{stem}_layers.onnx"
    onnx.save(sub, str(path))
    folder = work / f"{stem}_layers_c"
    codegen.from_onnx(path, folder, precision="int8", cflags=CFLAGS)
    ys = c_outputs(folder, xs)
    rows = []
    for k, lay in enumerate(lays):
        ours = np.stack([to_int8(m, lay.q, y[k].reshape(-1)) for y in ys])
        ref = ints[lay.q.output[0]].astype(np.int32).reshape(ours.shape)
        err = np.abs(ours - ref)
        rows.append({"layer": lay.label, "values": int(err.size),
                     "exact": float((err == 0).mean()), "within_1lsb": float((err <= 1).mean()),
                     "max_lsb": int(err.max())})
    return {"method": "all layers side by side in one C build, each fed onnxruntime's int8 "
                      "input to it (its unfused values: see ort_ints)",
            "samples": len(xs), "layers": len(rows),
            "bit_exact_layers": sum(r["exact"] == 1.0 for r in rows),
            "min_within_1lsb": min(r["within_1lsb"] for r in rows),
            "max_lsb": max(r["max_lsb"] for r in rows),
            "pass": all(r["max_lsb"] <= 1 for r in rows), "per_layer": rows}


# ---- (b) and (c) end to end --------------------------------------------------------------

def _agreement(a: np.ndarray, b: np.ndarray) -> dict:
    """Int8 outputs (samples, values...) a vs b: exact, within 1 LSB, top-1 agreement."""
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    err = np.abs(a - b)
    return {"exact": float((err == 0).mean()), "within_1lsb": float((err <= 1).mean()),
            "max_lsb": int(err.max()),
            "top1": float((a.argmax(1) == b.argmax(1)).mean())}


def end_to_end(qdq: Path, x: np.ndarray, work: Path) -> dict:
    """(b): C int8 vs onnxruntime fused, against onnxruntime fused vs unfused, on the
    output's int8 values (the last Q node's scale) and top-1."""
    import onnx

    m = onnx.load(str(qdq))
    out = m.graph.output[0].name
    prod, _ = _graph_maps(m)
    q = prod[prod[out].input[0]]  # output = DQ(Q(...))
    fused = to_int8(m, q, ort_run(m, x)[0])
    unfused = to_int8(m, q, ort_run(m, x, "ORT_DISABLE_ALL")[0])
    folder = work / f"{qdq.stem}_c"
    codegen.from_onnx(qdq, folder, precision="int8", cflags=CFLAGS)
    c = to_int8(m, q, np.stack([o[0] for o in c_outputs(folder, x[:, None])]))
    c = c.reshape(fused.shape)  # one [1, ...] output per sample -> onnxruntime's batch
    c_vs = _agreement(c, fused)
    ort_self = _agreement(fused, unfused)
    ok = c_vs["within_1lsb"] >= ort_self["within_1lsb"] and c_vs["top1"] >= ort_self["top1"]
    # beside the criterion, not in it: how close C is to the unfused graph (a)'s layers see
    off = np.nonzero((c != unfused).reshape(len(x), -1).any(1))[0]
    return {"samples": len(x), "c_vs_ort": c_vs, "ort_fused_vs_unfused": ort_self,
            "c_vs_ort_unfused": _agreement(c, unfused),
            "vs_float64": _vs_float64(m, q, x, {"c": c, "ort_fused": fused,
                                                "ort_unfused": unfused}),
            "first_divergence": None if ok else first_divergence(m, folder, x, off[:3]),
            "pass": ok, "c_int8": c, "ort_int8": fused}


def _vs_float64(m, q, x: np.ndarray, outs: dict[str, np.ndarray]) -> dict | None:
    """Beside (b): each int8 output in ``outs`` against the QDQ graph evaluated in float64
    (benchmarks/qdq_float64.py: its float semantics without float32 rounding), i.e. which
    of C and onnxruntime computes what the graph means; None for an op it lacks."""
    try:
        ref = qdq_float64.run(m, x, [q.output[0]])[q.output[0]].astype(np.int32)
    except NotImplementedError as e:
        return {"unavailable": str(e)}
    return {k: _agreement(v, ref.reshape(v.shape)) for k, v in outs.items()}


# ---- where the whole C build first leaves onnxruntime ------------------------------------

def c_step_outputs(folder: Path, x: np.ndarray) -> tuple[list[str], dict, np.ndarray]:
    """(step labels, {C buffer macro: (first step naming it, arena offset)}, arena after
    every step as int8 [steps, arena bytes]) of one sample ``x`` through the C build.
    A buffer's first step is the one that writes it (steps run in graph order); its bytes
    are read from the image after that step, before a later step reuses them."""
    src = (folder / "model.c").read_text()
    offsets = {g[0]: int(g[1]) for g in re.findall(r"^#define (T_\w+) \(A \+ (\d+)\)", src,
                                                  re.M)}
    parts = re.split(r"^    case (\d+): /\* (.*) \*/$", src.split("void es_run_step", 1)[1],
                     flags=re.M)
    labels, where = [], {}
    for k in range(1, len(parts), 3):
        labels.append(parts[k + 1])
        for t in re.findall(r"\bT_\w+", parts[k + 2]):
            if t in offsets:
                where.setdefault(t, (int(parts[k]), offsets[t]))
    binary = run.build(folder).resolve()
    with tempfile.TemporaryDirectory(prefix="es_dump_") as tmp:
        fin, fdump = Path(tmp) / "in.raw", Path(tmp) / "steps.raw"
        np.ascontiguousarray(x, "<f4").tofile(fin)
        subprocess.run([str(binary), "--weights", str((folder / "weights.bin").resolve()),
                        "--input", str(fin), "--dump", str(fdump)], cwd=folder, check=True,
                       capture_output=True)
        images = np.fromfile(fdump, np.int8).reshape(len(labels), -1)
    return labels, where, images


def c_layouts(folder: Path) -> dict[str, tuple[str, int, int]]:
    """{C buffer macro: (layout, channels, pixels)} of the buffers a step writes in a
    hand-over layout instead of CHW (lower/passes.py): "quads" (es_conv_params y_quads,
    channel-quad planes) or "pquads" (y_pquads, pixel quads); a buffer is the step's
    output, its call's last tensor argument before the params."""
    src = (folder / "model.c").read_text()
    params = {m[0]: m[1] for m in re.findall(
        r"static const es_conv_params (P_\w+) = \{(.*?)\};", src, re.S)}
    out = {}
    for call, name in re.findall(r"(\w+\([^;]*?&(P_\w+)\));", src, re.S):
        body = params.get(name, "")
        kind = ("pquads" if ".y_pquads = 1" in body else
                "quads" if ".y_quads = 1" in body else None)
        if kind is None:
            continue
        field = {k: int(v) for k, v in re.findall(r"\.(M|OH|OW) = (\d+)", body)}
        y = re.findall(r"\bT_\w+", call)[-1]
        out[y] = (kind, field["M"], field["OH"] * field["OW"])
    return out


def to_chw(raw: np.ndarray, layout: tuple[str, int, int]) -> np.ndarray:
    """A dumped int8 buffer in a hand-over layout (c_layouts) back in CHW order."""
    kind, m, p = layout
    c, j = np.divmod(np.arange(m * p), p)
    at = ((c // 4) * 4 * p + 4 * j + c % 4 if kind == "quads" else
          ((c // 16) * p + j - j % 4) * 16 + (c % 16) * 4 + j % 4)
    return (raw[at].view(np.uint8) ^ 0x80).view(np.int8)


def c_buffer(tensor: str) -> str:
    """The macro model.c names the buffer of ONNX value ``tensor`` with (codegen.buffer_macro
    of its C identifier; the Q outputs asked about have distinct names, so no suffix)."""
    return codegen.buffer_macro(c_ident(tensor))


def first_divergence(m, folder: Path, x: np.ndarray, samples) -> list[dict]:
    """For each sample index in ``samples``: the first step of the C build ``folder``
    whose int8 output differs from onnxruntime's unfused value (ort_ints), how many
    values differ and by how much, and for a Conv, how many of them C rounds as the
    exact sum does (``c_exact``) against onnxruntime (``ort_exact``)."""
    qs = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
    out = []
    for s in (int(i) for i in samples):
        ints = ort_ints(m, x[s:s + 1])
        labels, where, images = c_step_outputs(folder, x[s])
        layouts = c_layouts(folder)
        found = None
        for q in qs:
            t = c_buffer(q.output[0])
            if t not in where:
                continue  # a Q the lowering folded away (e.g. inside a LUT)
            step, off = where[t]
            ref = ints[q.output[0]].astype(np.int32).reshape(-1)
            got = images[step, off:off + ref.size]
            got = (to_chw(got, layouts[t]) if t in layouts else got).astype(np.int32)
            bad = np.nonzero(got != ref)[0]
            if len(bad) and (found is None or step < found["step"]):
                found = {"sample": s, "step": step, "label": labels[step],
                         "tensor": q.output[0], "values": int(len(bad)),
                         "max_lsb": int(np.abs(got - ref).max()),
                         **_conv_verdict(m, q, ints, bad, got, ref)}
        out.append(found or {"sample": s, "step": None})
    return out


def _conv_verdict(m, q, ints: dict, bad: np.ndarray, got: np.ndarray, ref: np.ndarray) -> dict:
    """Where Q node ``q`` ends a Conv (DQ x, DQ w[, DQ bias] -> Conv -> q): the exact value
    of each differing output (int64 sum of the int8 products and the int32 bias, rescaled
    in float64), and how many of them C and onnxruntime each round as it does."""
    import torch

    prod, inits = _graph_maps(m)
    conv = prod.get(q.input[0])
    if conv is None or conv.op_type != "Conv" or \
            any(prod.get(i) is None or prod[i].op_type != "DequantizeLinear"
                for i in conv.input if i):
        return {}
    dq = [prod[i] for i in conv.input if i]
    xq = ints[dq[0].input[0]].astype(np.float64)
    xs, xz = float(_const(m, dq[0].input[1])), float(_const(m, dq[0].input[2]))
    w = _const(m, dq[1].input[0]).astype(np.float64)
    ws = _const(m, dq[1].input[1]).astype(np.float64).reshape(-1)
    attrs = {a.name: a for a in conv.attribute}
    pads = list(attrs["pads"].ints) if "pads" in attrs else [0, 0, 0, 0]
    stride = list(attrs["strides"].ints) if "strides" in attrs else [1, 1]
    dil = list(attrs["dilations"].ints) if "dilations" in attrs else [1, 1]
    group = attrs["group"].i if "group" in attrs else 1
    xp = torch.nn.functional.pad(torch.from_numpy(xq - xz), (pads[1], pads[3], pads[0], pads[2]))
    acc = torch.nn.functional.conv2d(xp, torch.from_numpy(w), stride=stride, dilation=dil,
                                     groups=group).numpy()[0]  # integers below 2^53: exact
    if len(dq) > 2:
        acc = acc + _const(m, dq[2].input[0]).astype(np.float64).reshape(-1, 1, 1)
    ys, yz = float(_const(m, q.input[1])), int(_const(m, q.input[2]))
    scale = np.broadcast_to(xs * ws, (acc.shape[0],)).reshape(-1, 1, 1)
    exact = (acc * scale / ys).reshape(-1)[bad]
    want = np.clip(np.round(exact) + yz, -128, 127)
    return {"exact": [round(float(v), 9) for v in exact[:4]],
            "c_exact": int((got[bad] == want).sum()), "ort_exact": int((ref[bad] == want).sum())}


# ---- models ------------------------------------------------------------------------------

def digits_model(work: Path, epochs: int = 8):
    """(fp32 ONNX, calib, val x, val y, weights) of the digits CNN (examples/digits),
    trained here for ``epochs`` (seconds on 8x8 inputs; as the C tests' fixture does), on
    the pipeline's digits split."""
    import torch

    from edgesmith.pipeline.data import digits
    from tests.targets._helpers import _load, export

    s = digits()
    model = _load("digits", "model").build()
    x, y = torch.from_numpy(s.train_x), torch.from_numpy(s.train_y).long()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[perm[i:i + 64]]),
                                              y[perm[i:i + 64]]).backward()
            opt.step()
    model.eval()
    onnx_path = export(model, torch.from_numpy(s.val_x[:1]), work / "digits.onnx")
    return onnx_path, s.calib_x, s.val_x, s.val_y, f"trained here ({epochs} epochs, 8x8)"


def zoo_model(name: str, size: int, work: Path, n_val: int):
    from benchmarks.c_runtime import zoo_net

    onnx_path, calib, kind, val = zoo_net(name, size, work, n_calib=200, n_val=n_val)
    if kind != "trained":
        raise SystemExit(f"{name}: no trained checkpoint in the zoo cache "
                         "(python examples/zoo/train.py --model {name})")
    return onnx_path, calib, val[0], val[1], f"trained (zoo checkpoint), {size}x{size}"


def judge(name: str, onnx_path: Path, calib, val_x, val_y, weights: str, work: Path,
          layer_samples: int) -> dict:
    from tests.targets._helpers import _qdq

    qdq = _qdq(onnx_path, calib, work / f"{name}_qdq.onnx")
    a = per_layer(qdq, val_x[:layer_samples], work)
    b = end_to_end(qdq, val_x, work)
    c_top1 = b.pop("c_int8").reshape(len(val_x), -1).argmax(1)
    ort_top1 = b.pop("ort_int8").reshape(len(val_x), -1).argmax(1)
    top1 = float((c_top1 == ort_top1).mean())
    return {"weights": weights, "val_samples": len(val_x),
            "accuracy": {"c_int8": float((c_top1 == val_y).mean()),
                         "ort_int8": float((ort_top1 == val_y).mean())},
            "a_per_layer": a, "b_end_to_end": b,
            "c_top1_agreement": {"value": top1, "pass": top1 >= 0.99 if
                                 weights.startswith("trained") else None}}


def table(report: dict) -> str:
    head = (f"{'model':<18} {'layers':>6} {'exact':>6} {'<=1LSB':>8} {'maxLSB':>6} "
            f"{'C~ORT <=1':>9} {'ORT~ORT <=1':>11} {'C~ORT top1':>10} {'ORT~ORT top1':>12} "
            f"{'a':>4} {'b':>4} {'c':>4}")
    lines, notes = [head], []
    for name, r in report.items():
        a, b = r["a_per_layer"], r["b_end_to_end"]
        c = r["c_top1_agreement"]["pass"]
        lines.append(
            f"{name:<18} {a['layers']:>6} {a['bit_exact_layers']:>6} "
            f"{a['min_within_1lsb']:>8.2%} {a['max_lsb']:>6} "
            f"{b['c_vs_ort']['within_1lsb']:>9.2%} "
            f"{b['ort_fused_vs_unfused']['within_1lsb']:>11.2%} "
            f"{b['c_vs_ort']['top1']:>10.2%} {b['ort_fused_vs_unfused']['top1']:>12.2%} "
            f"{'ok' if a['pass'] else 'FAIL':>4} {'ok' if b['pass'] else 'FAIL':>4} "
            f"{'-' if c is None else 'ok' if c else 'FAIL':>4}")
        f64 = b.get("vs_float64") or {}
        if "c" in f64:
            notes.append(f"  {name} vs the QDQ graph in float64, exact / <=1 LSB: " + ", ".join(
                f"{k} {v['exact']:.2%} / {v['within_1lsb']:.2%}" for k, v in f64.items()))
        for d in b.get("first_divergence") or []:
            if d.get("step") is not None:
                verdict = (f"; rounds the exact sum right: C {d['c_exact']}, onnxruntime "
                           f"{d['ort_exact']} (exact {d['exact']})" if "exact" in d else "")
                notes.append(f"  {name} sample {d['sample']}: first off onnxruntime unfused "
                             f"at step {d['step']} {d['label']}, {d['values']} values, "
                             f"max {d['max_lsb']} LSB{verdict}")
    return "\n".join(lines + notes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="digits," + ",".join(ZOO_CNNS))
    ap.add_argument("--size", type=int, default=32, help="zoo input size (trained at 32)")
    ap.add_argument("--layer-samples", type=int, default=4,
                    help="val samples fed through every layer for (a)")
    ap.add_argument("--val", type=int, default=1000, help="zoo val samples for (b) and (c)")
    args = ap.parse_args(argv)
    report = {}
    with tempfile.TemporaryDirectory(prefix="es_int8_agree_") as tmp:
        work = Path(tmp)
        for name in [n for n in args.models.split(",") if n]:
            if name == "digits":
                src = digits_model(work)
            elif name in ZOO_CNNS:
                src = zoo_model(name, args.size, work, args.val)
            else:
                raise SystemExit(f"--models: unknown {name!r}; known: digits, "
                                 f"{', '.join(ZOO_CNNS)}")
            report[name] = judge(name, *src, work, args.layer_samples)
            print(f"{name}: done", file=sys.stderr, flush=True)
    print(table(report), file=sys.stderr)
    print(json.dumps(report, indent=1))
    ok = all(r["a_per_layer"]["pass"] and r["b_end_to_end"]["pass"] and
             r["c_top1_agreement"]["pass"] is not False for r in report.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
