"""Quantization-aware training with NNCF, exported as ONNX Q/DQ for the converters.

``nncf.quantize`` inserts fake-quantizers and initialises their ranges on the shared
:class:`~edgesmith.compress.calibration.CalibrationSet` (so this INT8 model saw the same
tensors every converter calibrates on); :func:`edgesmith.compress.train.fit` then trains
weights and ranges together. The export sets every quantizer to ONNX
QuantizeLinear/DequantizeLinear pairs (NNCF's default is OpenVINO's ``FakeQuantize``,
which onnxruntime cannot load), and the accuracy we report is measured on that ONNX file
in onnxruntime: the artifact the user ships, not the torch model that produced it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import re
import sys
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgesmith.errors import ConversionError

from . import nncf_env
from .artifacts import OPSET
from .calibration import CalibrationSet
from .prune import resolve_ignored
from .train import Progress, evaluate, fit

# Calibration methods -> NNCF range estimators. NNCF has no KL/entropy estimator for
# torch; its histogram estimator (minimises quantization error) is the closest, and the
# report names the estimator actually used.
RANGE_ESTIMATORS = {"minmax": "MINMAX", "percentile": "MEAN_QUANTILE",
                    "mse": "HISTOGRAM", "entropy": "HISTOGRAM"}


class _Wrapped(nn.Module):
    """NNCF cannot quantize a top-level ``nn.Sequential`` (it adds a child module the
    Sequential would then call), so such a model goes in a plain module first."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.model = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


@dataclass
class QatResult:
    model: nn.Module  # the trained NNCF model (torch); ship the ONNX, not this
    onnx_path: Path | None
    report: dict[str, Any] = field(default_factory=dict)


def _scope(model: nn.Module, names: list[str], prefix: str) -> Any:
    """``ignored_scopes`` entries are module names (``classifier``, ``block2.0``) or raw
    NNCF node-name regexes prefixed ``re:``."""
    import nncf

    plain = [n for n in names if not n.startswith("re:")]
    resolve_ignored(model, plain, where="compress.qat.ignored_scopes")
    patterns = [n[3:] for n in names if n.startswith("re:")]
    patterns += [f"^{re.escape(prefix + n.replace('.', '/'))}/" for n in plain]
    return nncf.IgnoredScope(patterns=patterns, validate=True) if patterns else None


def quantize(model: nn.Module, calib: CalibrationSet, *, preset: str = "performance",
             ignored_scopes: list[str] | None = None, batch_size: int = 32) -> nn.Module:
    """A copy of ``model`` with NNCF fake-quantizers, ranges set on ``calib`` (PTQ)."""
    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        QuantizationParameters,
    )
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    nncf_env.prepare()
    logging.getLogger("nncf").setLevel(logging.WARNING)
    src = copy.deepcopy(model).eval()
    prefix = ""
    if isinstance(src, nn.Sequential):
        src, prefix = _Wrapped(src), "model/"
    scope = _scope(model, list(ignored_scopes or []), prefix)
    batches = [torch.as_tensor(b) for b in calib.batches(batch_size)]
    estimator = getattr(RangeEstimatorParametersSet, RANGE_ESTIMATORS[calib.method])
    advanced = AdvancedQuantizationParameters(
        activations_range_estimator_params=estimator,
        weights_quantization_params=QuantizationParameters(per_channel=calib.per_channel),
    )
    presets = {"performance": nncf.QuantizationPreset.PERFORMANCE,
               "mixed": nncf.QuantizationPreset.MIXED}
    try:
        # NNCF draws its own progress bars on stdout; keep stdout clean for --json.
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            q = nncf.quantize(src, nncf.Dataset(batches), preset=presets[preset],
                              subset_size=len(batches), ignored_scope=scope,
                              advanced_parameters=advanced)
    except Exception as e:
        name = type(e).__name__
        fix = None
        if "Timeout" in name:
            fix = (f"the NNCF C++ extension did not build in time; set "
                   f"{nncf_env.TIMEOUT_ENV}=1200 or clear {nncf_env.extensions_root()}")
        elif "ignored" in str(e).lower():
            fix = "check compress.qat.ignored_scopes against the model's module names"
        raise ConversionError(f"NNCF quantization failed: {name}: {str(e)[:400]}",
                              where=type(model).__name__, fix=fix) from None
    return q


def export_qdq(qmodel: nn.Module, example: torch.Tensor, path: Path) -> Path:
    """ONNX with QuantizeLinear/DequantizeLinear pairs and a dynamic batch axis."""
    from nncf.torch.quantization.layers import BaseQuantizer, QuantizerExportMode

    quantizers = [m for m in qmodel.modules() if isinstance(m, BaseQuantizer)]
    if not quantizers:
        raise ConversionError("the model has no NNCF quantizers to export", where=str(path))
    for m in quantizers:
        m.set_export_mode(QuantizerExportMode.ONNX_QUANTIZE_DEQUANTIZE_PAIRS)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # torch.onnx.export rewrites the file in place, keeping mkstemp's 0600: give it the mode
    # every other output has (0666 & ~umask), or another user's bench cannot read it
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    os.close(fd)
    was_training = qmodel.training
    qmodel.eval()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(qmodel, (example,), tmp, dynamo=False, opset_version=OPSET,
                              input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        os.replace(tmp, path)
    except Exception as e:
        Path(tmp).unlink(missing_ok=True)
        raise ConversionError(f"QDQ ONNX export failed: {type(e).__name__}: {str(e)[:300]}",
                              where=str(path)) from None
    finally:
        qmodel.train(was_training)
    return path


def qdq_node_counts(path: Path) -> dict[str, int]:
    import onnx

    ops = Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    return {k: ops.get(k, 0) for k in ("QuantizeLinear", "DequantizeLinear")}


def ort_accuracy(path: Path, x: np.ndarray, y: np.ndarray) -> float:
    """Top-1 (0..1) of an ONNX file in onnxruntime on the CPU."""
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:
        raise ConversionError(f"onnxruntime cannot load the exported model: {str(e)[:300]}",
                              where=str(path)) from None
    name = sess.get_inputs()[0].name
    out = sess.run(None, {name: np.ascontiguousarray(x, dtype=np.float32)})[0]
    return float((out.argmax(axis=1) == np.asarray(y)).mean())


def run_qat(model: nn.Module, splits: Any, calib: CalibrationSet, qat: Any, train: Any,
            out_path: Path, *, progress: Progress | None = None) -> QatResult:
    """PTQ-initialise, fine-tune ``qat.epochs`` epochs, export Q/DQ ONNX, score it in ORT.

    ``qat`` is ``profiles.schema.Qat`` and ``train`` is ``profiles.schema.Train``. The
    report's ``accuracy_before`` is the FP32 input model, ``accuracy_after`` the QDQ ONNX.
    """
    example = torch.as_tensor(splits.val_x[:1])
    acc_fp32 = evaluate(model, splits.val_x, splits.val_y)
    qmodel = quantize(model, calib, preset=qat.preset, ignored_scopes=list(qat.ignored_scopes),
                      batch_size=min(32, max(1, calib.samples)))
    acc_ptq = evaluate(qmodel, splits.val_x, splits.val_y)
    hist = fit(qmodel, splits, epochs=qat.epochs, lr=qat.lr, optimizer=train.optimizer,
               batch_size=train.batch_size, seed=train.seed, patience=train.patience,
               progress=progress)
    acc_torch = evaluate(qmodel, splits.val_x, splits.val_y)
    path = export_qdq(qmodel, example, out_path)
    nodes = qdq_node_counts(path)
    acc_onnx = ort_accuracy(path, splits.val_x, splits.val_y)
    report = {
        "accuracy_before": acc_fp32,
        "accuracy_after": acc_onnx,
        "accuracy_ptq_torch": acc_ptq,
        "accuracy_after_torch": acc_torch,
        "epochs": qat.epochs,
        "epochs_run": hist["epochs_run"],
        "best_epoch": hist["best_epoch"],
        "lr": qat.lr,
        "preset": qat.preset,
        "ignored_scopes": list(qat.ignored_scopes),
        "calibration": {**calib.summary(), "range_estimator": RANGE_ESTIMATORS[calib.method]},
        "qdq_nodes": nodes,
        "onnx_bytes": path.stat().st_size,
        "seconds_train": hist["seconds"],
    }
    return QatResult(model=qmodel, onnx_path=path, report=report)
