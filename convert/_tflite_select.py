"""Which TFLite ops compute an ONNX node: the map the TFLite INT8 fallback needs.

TensorFlow can leave chosen ops of an INT8 model in float (``denylisted_nodes`` of its
MLIR quantizer: the output tensor names of those ops), but onnx2tf 1.28 does not keep ONNX
node names: its TFLite tensors are named after the TF ops it emitted
(``model/tf.nn.relu/Relu;model/tf.nn.convolution/convolution`` for the digits stem's Conv +
Relu, measured), so a name lookup finds nothing. The map is made from the numbers instead:
the FP32 ONNX model (onnxruntime) and onnx2tf's calibrated float TFLite model run the same
samples, and a TFLite tensor whose values equal an ONNX tensor's (channels moved last) is
its twin. An ONNX node is then computed by the TFLite ops between its output's twin and
the nearest twins upstream: a Conv fused with the Relu after it is the one CONV_2D whose
output equals the Relu's; a strided Conv is a PAD and a CONV_2D.

Named with a leading underscore so the target registry's discovery skips it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.convert.onnx_graph import consumers_of
from edgesmith.errors import ConversionError

SAMPLES = 4  # samples both models run to find twins
RTOL = 1e-3  # of the tensor's largest magnitude: float reordering, not another value
MAX_OPS = 32  # more TFLite ops for one ONNX node means the map is not understood
MAX_FUSED = 3  # ONNX ops after a node that TFLite may have fused into it (Relu, BN, ...)


def float_tensors(fp32_onnx: Path, calibrated: Path, nodes: list[str], x: np.ndarray,
                  feed: np.ndarray) -> dict[str, list[str]]:
    """For each ONNX node in ``nodes``: the output tensor names of the TFLite ops of
    ``calibrated`` that compute it. ``x`` are samples in the ONNX layout, ``feed`` the same
    samples as the TFLite model takes them."""
    import onnx

    model = onnx.load(str(fp32_onnx))
    check_nodes(model, nodes)
    by_name = {n.name: n for n in model.graph.node}
    onnx_values = _onnx_values(model, x[:SAMPLES])
    tfl = _TFLite(calibrated, feed[:SAMPLES])
    twins = {name: t for name, v in onnx_values.items()
             if (t := tfl.twin(v)) is not None}
    consts = {i.name for i in model.graph.initializer} | {
        o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    consumers = consumers_of(model.graph)
    return {node: tfl.region(_output_twin(by_name[node], twins, consumers, consts),
                             set(twins.values()), node)
            for node in nodes}


def check_nodes(model: Any, nodes: list[str]) -> None:
    """Every name in ``nodes`` is a node of the ONNX ``model`` (a path or a ModelProto):
    checked before onnx2tf runs, so a typo costs no conversion."""
    import onnx

    if isinstance(model, (str, Path)):
        model = onnx.load(str(model), load_external_data=False)
    names = {n.name for n in model.graph.node}
    missing = [n for n in nodes if n not in names]
    if missing:
        raise ConversionError(f"float_nodes: no ONNX node named {missing[0]!r}",
                              where="tflite int8 options",
                              fix="name nodes of the optimized ONNX (model.onnx in the build "
                                  "folder)")


def _onnx_values(model: Any, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every float tensor the ONNX model computes on ``x``, by name."""
    import onnx
    import onnxruntime as ort

    inferred = onnx.shape_inference.infer_shapes(model)
    floats = {v.name for v in inferred.graph.value_info
              if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    have = {o.name for o in model.graph.output}
    for n in model.graph.node:
        for o in n.output:
            if o in floats and o not in have:
                model.graph.output.append(onnx.helper.make_tensor_value_info(
                    o, onnx.TensorProto.FLOAT, None))
                have.add(o)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, sess.run(names, {name: x.astype(np.float32)}), strict=True))
    return {k: v for k, v in out.items() if v.dtype == np.float32 and v.size}


class _TFLite:
    """The calibrated float TFLite model run on the samples with every tensor kept."""

    def __init__(self, path: Path, feed: np.ndarray):
        import warnings

        from ai_edge_litert.interpreter import Interpreter

        with warnings.catch_warnings():  # "for debugging purposes only": it is, here
            warnings.simplefilter("ignore", UserWarning)
            it = Interpreter(str(path), experimental_preserve_all_tensors=True)
        it.allocate_tensors()
        self.ops = it._get_ops_details()  # noqa: SLF001 - the only op listing offered
        self.names = {t["index"]: t["name"] for t in it.get_tensor_details()}
        self.producer = {o: k for k, op in enumerate(self.ops) for o in op["outputs"]}
        runs: dict[int, list[np.ndarray]] = {i: [] for i in self.producer}
        inp = it.get_input_details()[0]["index"]
        for sample in feed:
            it.set_tensor(inp, np.ascontiguousarray(sample[None], np.float32))
            it.invoke()
            for i, seen in runs.items():
                seen.append(np.array(it.get_tensor(i)))
        self.values = {i: np.concatenate(v) for i, v in runs.items()
                       if v and v[0].dtype == np.float32 and v[0].shape[:1] == (1,)}
        self.input = inp

    def twin(self, v: np.ndarray) -> int | None:
        """The first TFLite tensor (in execution order) holding ``v``'s values, in the ONNX
        layout or with the channels moved last."""
        forms = [v] + ([np.moveaxis(v, 1, -1)] if v.ndim >= 3 else [])
        for i in sorted(self.values, key=lambda t: self.producer[t]):
            t = self.values[i]
            if any(f.shape == t.shape and _close(f, t) for f in forms):
                return i
        return None

    def region(self, out: int | None, stops: set[int], node: str) -> list[str]:
        """Output names of the ops computing ``out`` back to the nearest twins upstream."""
        if out is None:
            raise ConversionError(
                f"float_nodes: no tensor of the TFLite model holds what ONNX node {node!r} "
                f"computes (onnx2tf rewrote it into something else)",
                where="tflite int8 fallback",
                fix="choose another node, or build with --no-fallback")
        ops, todo = set(), [self.producer[out]]
        while todo:
            k = todo.pop()
            if k in ops:
                continue
            ops.add(k)
            if len(ops) > MAX_OPS:
                raise ConversionError(
                    f"float_nodes: ONNX node {node!r} maps to more than {MAX_OPS} TFLite ops",
                    where="tflite int8 fallback", fix="build with --no-fallback")
            for i in self.ops[k]["inputs"]:
                if i in self.producer and i not in stops:
                    todo.append(self.producer[i])
        return [self.names[o] for k in sorted(ops) for o in self.ops[k]["outputs"]]


def _output_twin(node: Any, twins: dict[str, int], consumers: dict[str, list[Any]],
                 consts: set[str]) -> int | None:
    """The twin of ``node``'s output, or of the op TFLite fused it with: the single
    consumer whose other inputs are constants (an activation, a BN, a bias), up to
    ``MAX_FUSED`` steps."""
    t = node.output[0]
    for _ in range(MAX_FUSED + 1):
        if t in twins:
            return twins[t]
        users = consumers.get(t, [])
        if len(users) != 1 or any(i and i != t and i not in consts for i in users[0].input):
            return None
        t = users[0].output[0]
    return None


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    scale = float(np.abs(a).max()) if a.size else 0.0
    return bool(np.abs(a - b).max() <= RTOL * scale + 1e-6)
