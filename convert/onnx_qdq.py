"""ONNX as a deployable format: FP32 as optimised, FP16, and static INT8 QDQ.

The INT8 QDQ model is also what the C runtime generator lowers to quantized kernels, so
``quantize_qdq`` is the single place where INT8 scales for ONNX and C are decided.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edgesmith.artifact import Artifact
from edgesmith.errors import ConversionError
from edgesmith.target import CompatRule, ConvertContext, Runner, Target

from . import onnx_device

# ORT has no MSE calibrator; its histogram "Distribution" method is the closest relative.
_ORT_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile",
                "mse": "Distribution"}


class _CalibReader:
    """onnxruntime's CalibrationDataReader protocol over the shared calibration set."""

    def __init__(self, input_name: str, calib, batch: int = 32):
        self._it = iter(calib.batches(batch))
        self._name = input_name

    def get_next(self):
        batch = next(self._it, None)
        return None if batch is None else {self._name: batch}

    def rewind(self) -> None:  # pragma: no cover - ORT calls it for some methods only
        pass


def quantize_qdq(fp32_onnx: Path, calib, out: Path, *, log=None,
                 exclude: Sequence[str] = ()) -> Path:
    """Static INT8 QDQ: per-channel symmetric int8 weights, asymmetric int8 activations.
    ``exclude``: node names left in float (the accuracy-aware fallback's layers); their
    inputs are not quantized for them, so a float node sits between a DQ and a Q."""
    import onnx
    from onnxruntime import quantization as q

    graph = onnx.load(str(fp32_onnx), load_external_data=False).graph
    name = graph.input[0].name
    _check_names(exclude, {n.name for n in graph.node}, fp32_onnx)
    method = getattr(q.CalibrationMethod, _ORT_METHODS[calib.method])
    extra = {"ActivationSymmetric": False, "WeightSymmetric": True}
    if calib.method == "percentile":
        extra["CalibPercentile"] = calib.percentile
    out.parent.mkdir(parents=True, exist_ok=True)
    root_logger = logging.getLogger()
    level = root_logger.level
    root_logger.setLevel(logging.ERROR)  # ORT logs a pre-processing advice on every call
    printed = io.StringIO()  # ORT's histogram calibrators print progress: not on our stdout,
    try:  # which carries --json
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            warnings.simplefilter("ignore")
            q.quantize_static(
                str(fp32_onnx), str(out), _CalibReader(name, calib),
                quant_format=q.QuantFormat.QDQ, per_channel=calib.per_channel,
                activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8,
                calibrate_method=method, extra_options=extra,
                nodes_to_exclude=list(exclude),
            )
    except Exception as e:
        raise ConversionError(f"onnxruntime static quantization failed: {type(e).__name__}: {e}",
                              where="onnx-int8 calibration") from None
    finally:
        root_logger.setLevel(level)
    if log:
        for line in printed.getvalue().splitlines():
            log(f"onnxruntime: {line}")
        log(f"quantize_static: method={calib.method} samples={calib.samples} "
            f"per_channel={calib.per_channel} float={list(exclude)} -> {out}")
    return out


def _check_names(exclude: Sequence[str], names: set[str], model: Path) -> None:
    """onnxruntime ignores a name it does not find: a typo would quantize the layer."""
    missing = [n for n in exclude if n not in names]
    if missing:
        raise ConversionError(f"no node named {', '.join(map(repr, missing))} to keep in float",
                              where=str(model), fix="use node names of the optimized ONNX "
                                                    "(model.onnx in the build folder)")


def to_fp16(fp32_onnx: Path, out: Path) -> Path:
    """Weights and activations in fp16, with float32 I/O so callers feed the same tensors."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(fp32_onnx)), keep_io_types=True)
    onnx.save(model, str(out))
    return out


class OnnxOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    threads: int = Field(1, ge=1, le=256, description="intra-op threads when run")
    graph_optimization: Literal["all", "basic", "none"] = "all"


class OnnxTarget(Target):
    format = "onnx"
    precisions = ("fp32", "fp16", "int8")
    Options = OnnxOptions
    device_runtime = "onnxruntime"
    device_loader = Path(__file__).with_name("onnx_device.py")
    device_threads_option = "threads"
    # onnxruntime runs every default-domain op and its own contrib ops
    domains = ("", "ai.onnx", "com.microsoft")
    default_rule = CompatRule("supported")
    uses_static_qdq = True

    def convert(self, ctx: ConvertContext) -> Artifact:
        out = ctx.out_dir / "model.onnx"
        precision = ctx.precision
        if precision == "fp32":
            shutil.copyfile(ctx.fp32_onnx, out)
            meta = {"source": "optimized export"}
        elif precision == "fp16":
            to_fp16(ctx.fp32_onnx, out)
            meta = {"source": "optimized export, float16 weights/activations, float32 I/O"}
        elif ctx.qdq_onnx is not None:
            shutil.copyfile(ctx.qdq_onnx, out)
            meta = {"source": "QAT export (QuantizeLinear/DequantizeLinear pairs)"}
        else:
            if ctx.static_qdq is None:
                raise ConversionError("no static QDQ model was made for this INT8 target",
                                      where="onnx-int8", fix="report this: it is an edgesmith bug")
            shutil.copyfile(ctx.static_qdq, out)
            meta = {"source": "static QDQ (onnxruntime.quantization)",
                    "calibration": ctx.calib.summary()}
        meta["threads"] = ctx.options.threads
        meta["graph_optimization"] = ctx.options.graph_optimization
        return Artifact.of(out, "onnx", precision, **meta)

    def runner(self, artifact: Artifact) -> Runner:
        sess = _session(artifact.path, artifact.meta.get("threads", 1),
                        artifact.meta.get("graph_optimization", "all"))
        name = sess.get_inputs()[0].name

        def run(x: np.ndarray) -> np.ndarray:
            return np.asarray(sess.run(None, {name: x})[0], dtype=np.float32)

        return run


# the profile's ``graph_optimization`` option -> onnxruntime's level (validated and on-device
# runs use the same setting: "basic" keeps QDQ models unfused, as some NPU delegates need);
# one table, in the device loader, which a device runs without edgesmith
GRAPH_OPTIMIZATION = onnx_device.GRAPH_OPTIMIZATION


def _session(path: Path, threads: int, graph_optimization: str = "all"):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                            GRAPH_OPTIMIZATION[graph_optimization])
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
