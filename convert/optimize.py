"""Graph optimisation of the exported ONNX, proven equal to the unoptimised graph.

onnxslim does constant folding, Conv+BN fusion, dead/identity/dropout removal and shape
inference. An optimiser bug that changes numerics would poison every target downstream,
so the result is checked against the input graph in onnxruntime on real data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgesmith.errors import ConversionError

# Folding constants or fusing ops reorders float arithmetic, which moves each output by a
# few ulps of the largest values the graph computes: 2.7e-5 on a 21 MB ViT whose logits are
# large. An optimiser bug moves outputs by a visible fraction of their scale. So the check
# is relative to the output scale (max |reference|): 1e-4 of it, about 800 float32 ulps and
# far below any real rewrite error, with an absolute floor for outputs that are all ~0.
PARITY_RTOL = 1e-4
PARITY_ATOL = 1e-5
# A rewrite bug changes the graph's function, so it shows on any input; the check needs
# enough samples to exercise every branch of the data, not the whole val split. 128 keeps
# it a few seconds on ResNet-18-224 (the full 1000 ran onnxruntime twice over all of them),
# and every target is still validated against the reference on the whole split later.
PARITY_SAMPLES = 128


@dataclass(frozen=True)
class OptimizeResult:
    path: Path
    nodes_before: int
    nodes_after: int
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    max_abs_err: float
    output_scale: float  # max |output| of the export on the check data
    tolerance: float  # the absolute tolerance that scale gave

    def summary(self) -> dict[str, object]:
        return {"nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "ops_before": self.ops_before, "ops_after": self.ops_after,
                "parity_max_abs_err": self.max_abs_err, "parity_tolerance": self.tolerance,
                "parity_rtol": PARITY_RTOL, "parity_output_scale": self.output_scale}


def parity_tolerance(scale: float) -> float:
    """The largest difference float reordering explains for outputs of this scale."""
    return max(PARITY_ATOL, PARITY_RTOL * scale)


def check_parity(ref: np.ndarray, got: np.ndarray, where: str) -> tuple[float, float, float]:
    """(max abs error, output scale, tolerance) of ``got`` against ``ref``; raises when the
    error is more than float reordering explains."""
    err = float(np.max(np.abs(ref - got))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    tol = parity_tolerance(scale)
    if not err <= tol:  # NaN fails too
        raise ConversionError(
            f"optimised graph differs from the export by {err:.3g} (tolerance {tol:.3g}: "
            f"{PARITY_RTOL:g} of the output scale {scale:.3g})",
            where=where, fix="this is an optimiser bug; please report it with the model",
        )
    return err, scale, tol


def op_histogram(model) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def ort_session(path: Path | bytes, log_level: int = 3):
    """A single-threaded CPU session on a file, or on a serialised graph (bytes)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = log_level
    model = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def run_ort(path_or_session, x: np.ndarray, batch: int = 256) -> np.ndarray:
    """Outputs on ``x`` in runs of ``batch`` samples (1 for a graph that fixes its batch)."""
    sess = ort_session(path_or_session) if isinstance(path_or_session, Path | str | bytes) \
        else path_or_session
    name = sess.get_inputs()[0].name
    outs = [sess.run(None, {name: x[i:i + batch]})[0] for i in range(0, len(x), batch)]
    return np.concatenate(outs).astype(np.float32)


def _remove_dropout_identity(model) -> None:
    """Drop Dropout/Identity nodes by rewiring consumers to their inputs (onnxslim keeps
    graph-output identities; a rename is safe because we only rewire internal edges)."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    for node in list(graph.node):
        if node.op_type not in ("Dropout", "Identity") or node.output[0] in outputs:
            continue
        src, dst = node.input[0], node.output[0]
        for other in graph.node:
            for i, name in enumerate(other.input):
                if name == dst:
                    other.input[i] = src
        graph.node.remove(node)


def optimize(src: Path, dst: Path, check_x: np.ndarray, batch: int = 256) -> OptimizeResult:
    """onnxslim + own passes, checked against ``src`` on the first ``PARITY_SAMPLES`` of
    ``check_x`` in runs of ``batch``."""
    import onnx
    import onnxslim

    model = onnx.load(str(src))
    before = op_histogram(model)
    try:
        slim = onnxslim.slim(model)
    except Exception as e:
        raise ConversionError(f"onnxslim failed: {type(e).__name__}: {e}", where=str(src),
                              fix="report the model; build with the unoptimised export meanwhile",
                              ) from None
    _remove_dropout_identity(slim)
    slim = onnx.shape_inference.infer_shapes(slim, strict_mode=False)
    onnx.checker.check_model(slim)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(slim, str(dst))
    check_x = check_x[:PARITY_SAMPLES]
    ref = run_ort(src, check_x, batch)
    got = run_ort(dst, check_x, batch)
    err, scale, tol = check_parity(ref, got, str(dst))
    return OptimizeResult(dst, len(model.graph.node), len(slim.graph.node), before,
                          op_histogram(slim), err, scale, tol)
