"""Which layers of a static INT8 QDQ model hurt accuracy most: a per-layer ranking.

Measuring the real thing for every layer (quantize all but layer i, validate) costs one
calibration and one validation per layer: ~50 of each for a MobileNetV2. The ranking
here is the cheap proxy the accuracy-aware fallback (``fallback.py``) sorts by before it
confirms its choice by accuracy: each quantized node is run *alone* on the FP32 model's
own input activations, once with its inputs and weights quantized as the QDQ model has
them and once in float, and the two outputs are compared as an SQNR in dB. The output
is passed through the node's own output Q/DQ on both sides, so the figure is the error
that keeping this one node in float removes (its inputs' and weights' rounding), not the
error its consumers' quantization adds, and not the error accumulated upstream.

One forward pass of the FP32 model per batch feeds every node's probe, so the cost is
about two forward passes over the samples, whatever the number of layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.convert.onnx_graph import consumers_of

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class LayerScore:
    """One quantized node: its SQNR in dB when it alone is quantized (lower = worse)."""

    node: str
    op_type: str
    sqnr_db: float

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "op_type": self.op_type,
                "sqnr_db": None if math.isinf(self.sqnr_db) else round(self.sqnr_db, 2)}


@dataclass
class _Probe:
    """One node cut out of the QDQ model: float activations in, the node's output out."""

    node: str
    op_type: str
    inputs: list[str]  # FP32 tensor names the probe's Q nodes (or the node) read
    reference: str  # the FP32 tensor the node's output stands for
    out_q: tuple[float, int] | None  # the output's own per-tensor (scale, zero point)
    session: Any = None
    signal: float = 0.0
    noise: float = 0.0

    def sqnr_db(self) -> float:
        if self.noise <= 0:
            return math.inf
        return 10 * math.log10(max(self.signal, 1e-30) / self.noise)


class _Graph:
    """Producers, consumers and constants of an ONNX graph, by tensor name."""

    def __init__(self, model: Any):
        from onnx import numpy_helper

        g = model.graph
        self.nodes = list(g.node)
        self.producer = {o: n for n in g.node for o in n.output}
        self.consumers = consumers_of(g)
        self.consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}

    def qparams(self, q_node: Any) -> tuple[float, int] | None:
        """Per-tensor int8 (scale, zero point) of a Q node, else None."""
        scale = self.consts.get(q_node.input[1])
        zp = self.consts.get(q_node.input[2]) if len(q_node.input) > 2 else None
        if scale is None or scale.size != 1 or (zp is not None and zp.size != 1):
            return None
        return float(scale.reshape(-1)[0]), int(zp.reshape(-1)[0]) if zp is not None else 0


def _float_input(graph: _Graph, name: str) -> str | None:
    """The FP32 tensor behind one input of a quantized node: the Q's input for DQ(Q(x)),
    nothing for a constant (DQ of a weight), the name itself for a float tensor."""
    dq = graph.producer.get(name)
    if name in graph.consts or (dq is not None and dq.op_type == "Constant"):
        return None
    if dq is None or dq.op_type != "DequantizeLinear":
        return name
    if dq.input[0] in graph.consts:
        return None
    q = graph.producer.get(dq.input[0])
    return q.input[0] if q is not None and q.op_type == "QuantizeLinear" else dq.input[0]


def _quantized(graph: _Graph, node: Any) -> bool:
    return node.op_type not in QDQ_OPS and any(
        graph.producer.get(i) is not None and graph.producer[i].op_type == "DequantizeLinear"
        for i in node.input)


def _probe_of(graph: _Graph, node: Any, fp32_names: set[str]) -> _Probe | None:
    """The probe of one quantized node, or None when its tensors have no FP32 twin."""
    inputs = [f for f in (_float_input(graph, i) for i in node.input if i) if f is not None]
    out = node.output[0]
    users = graph.consumers.get(out, [])
    q = users[0] if len(users) == 1 and users[0].op_type == "QuantizeLinear" else None
    reference = out
    if out not in fp32_names and q is not None:  # renamed before a graph output
        dq = graph.consumers.get(q.output[0], [])
        reference = dq[0].output[0] if len(dq) == 1 else out
    if not node.name or reference not in fp32_names or not set(inputs) <= fp32_names:
        return None
    return _Probe(node.name, node.op_type, sorted(set(inputs)), reference,
                  graph.qparams(q) if q is not None else None)


def _fake_quant(x: np.ndarray, qp: tuple[float, int] | None) -> np.ndarray:
    """QuantizeLinear then DequantizeLinear (int8, round half to even), as onnxruntime."""
    if qp is None:
        return x
    scale, zp = qp
    q = np.clip(np.rint(x / np.float32(scale)) + zp, -128, 127)
    return ((q - zp) * np.float32(scale)).astype(np.float32)


def _session(model_bytes: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    # basic only: "all" would fuse the probe's Q/DQ into a QLinear kernel, and the ranking
    # is about the quantization the QDQ model describes, not one runtime's fusion
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _fp32_with_outputs(fp32_onnx: Path, names: list[str]) -> Any:
    """A session of the FP32 model that also returns the intermediate tensors ``names``."""
    import onnx

    model = onnx.load(str(fp32_onnx))
    have = {o.name for o in model.graph.output} | {i.name for i in model.graph.input}
    for name in names:
        if name not in have:
            model.graph.output.append(onnx.helper.make_tensor_value_info(
                name, onnx.TensorProto.FLOAT, None))
            have.add(name)
    return _session(model.SerializeToString())


def _probes(fp32_onnx: Path, qdq_onnx: Path) -> list[_Probe]:
    import onnx
    from onnx.utils import Extractor

    fp32 = onnx.load(str(fp32_onnx), load_external_data=False).graph
    fp32_names = {o for n in fp32.node for o in n.output} | {i.name for i in fp32.input}
    qdq = onnx.shape_inference.infer_shapes(onnx.load(str(qdq_onnx)))
    graph = _Graph(qdq)
    extractor = Extractor(qdq)
    probes = []
    for node in graph.nodes:
        probe = _probe_of(graph, node, fp32_names) if _quantized(graph, node) else None
        if probe is None:
            continue
        sub = extractor.extract_model(probe.inputs, [node.output[0]])
        probe.session = _session(sub.SerializeToString())
        probes.append(probe)
    return probes


def rank_layers(fp32_onnx: Path, qdq_onnx: Path, x: np.ndarray,
                batch: int = 32) -> list[LayerScore]:
    """Every quantized node of ``qdq_onnx`` (an onnxruntime static QDQ model of
    ``fp32_onnx``), most sensitive (lowest SQNR) first, measured on the samples ``x``."""
    probes = _probes(fp32_onnx, qdq_onnx)
    if not probes:
        return []
    wanted = sorted({n for p in probes for n in [*p.inputs, p.reference]})
    fp32 = _fp32_with_outputs(fp32_onnx, wanted)
    in_name = fp32.get_inputs()[0].name
    out_names = [o.name for o in fp32.get_outputs()]
    for i in range(0, len(x), batch):
        xb = np.ascontiguousarray(x[i:i + batch], dtype=np.float32)
        values = dict(zip(out_names, fp32.run(out_names, {in_name: xb}), strict=True))
        values[in_name] = xb
        for p in probes:
            got = p.session.run(None, {n: values[n] for n in p.inputs})[0]
            ref = _fake_quant(values[p.reference], p.out_q)
            err = _fake_quant(np.asarray(got, np.float32), p.out_q) - ref
            p.signal += float(np.square(ref, dtype=np.float64).sum())
            p.noise += float(np.square(err, dtype=np.float64).sum())
    scores = [LayerScore(p.node, p.op_type, p.sqnr_db()) for p in probes]
    return sorted(scores, key=lambda s: s.sqnr_db)


GATES = ("Sigmoid", "HardSigmoid")  # a gate whose output a Mul applies


def fallback_units(fp32_onnx: Path) -> dict[str, tuple[str, ...]]:
    """Node name -> the nodes that must stay in float together with it. A gate (Sigmoid,
    HardSigmoid) whose one consumer is a Mul forms one unit with that Mul: a squeeze-and-
    excitation scale or a SiLU/Swish. A Mul alone in float changes nothing, since the gate
    still quantizes its output, and a gate alone in float still has its output quantized
    for the Mul; only both together take that rounding out."""
    import onnx

    graph = onnx.load(str(fp32_onnx), load_external_data=False).graph
    consumers = consumers_of(graph)
    outputs = {o.name for o in graph.output}
    units: dict[str, tuple[str, ...]] = {}
    for gate in graph.node:
        users = consumers.get(gate.output[0], []) if gate.op_type in GATES else []
        if len(users) == 1 and users[0].op_type == "Mul" and gate.name and users[0].name \
                and gate.output[0] not in outputs:
            unit = (gate.name, users[0].name)
            units[gate.name] = units[users[0].name] = unit
    return units


def ranked_units(ranking: list[LayerScore],
                 units: dict[str, tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The ranking as what falls back together: each node's unit at the place of its most
    harmful member, every unit once."""
    out: list[tuple[str, ...]] = []
    for s in ranking:
        unit = units.get(s.node, (s.node,))
        if unit not in out:
            out.append(unit)
    return out

