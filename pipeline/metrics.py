"""Task metrics: one registry of ``name -> fn(outputs, labels) -> float`` with a unit and a
direction, so validation and the ``accuracy_drop`` budget judge whatever the task needs
(top-1 for a classifier, mAP for a detector, MSE for a regressor, a user's own function).

``--task`` picks the default metric; ``--metric`` names another or ``file.py:callable``.
A user metric is called on every artifact's outputs; one that raises or returns anything
but a finite number stops the build (exit 2) naming its file, never a traceback.
A user function may set ``higher_is_better = False`` and ``unit = "..."`` as attributes.
"""

from __future__ import annotations

import importlib
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edgesmith.errors import DataError, UsageError

from .refs import import_callable, is_callable_ref

TASK_DEFAULT = {"classify": "top1", "detect": "map50", "regress": "mse", "raw": "cosine"}
DETECTION_MODULE = "edgesmith.pipeline.detection"
DETECTION_METRICS = ("map50", "map50_95")


@dataclass(frozen=True)
class Metric:
    """A metric as validation uses it: ``drop`` turns (reference, artifact) values into
    "how much worse", positive = worse, in ``unit`` (top-1 and mAP in points)."""

    name: str
    fn: Callable[[Any, Any], float]
    unit: str
    higher_is_better: bool = True
    scale: float = 1.0  # value x scale is shown in ``unit`` (fractions -> points: 100)
    source: str | None = None  # the user's file.py:callable

    def __call__(self, outputs: Any, labels: Any) -> float:
        return call(self, outputs, labels)

    def drop(self, reference: float, value: float) -> float:
        diff = reference - value if self.higher_is_better else value - reference
        return round(diff * self.scale, 6)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "higher_is_better": self.higher_is_better,
                "scale": self.scale, "source": self.source}


def _flat(outputs: Any) -> np.ndarray:
    a = np.asarray(outputs, dtype=np.float64)
    return a.reshape(len(a), -1)


def _class_ids(labels: Any, n: int, name: str) -> np.ndarray:
    y = np.asarray(labels)
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{name} needs one integer class label per sample; the labels have "
                        f"shape {list(y.shape)} and dtype {y.dtype}",
                        fix="use --task classify data, or another --metric")
    return y


def top1(outputs: Any, labels: Any) -> float:
    """Share of samples whose highest output is the label."""
    out = _flat(outputs)
    return float((out.argmax(1) == _class_ids(labels, len(out), "top1")).mean())


def top5(outputs: Any, labels: Any) -> float:
    """Share of samples whose label is among the five highest outputs (all, when fewer)."""
    out = _flat(outputs)
    y = _class_ids(labels, len(out), "top5")
    k = min(5, out.shape[1])
    best = np.argpartition(-out, k - 1, axis=1)[:, :k]
    return float((best == y[:, None]).any(1).mean())


def _targets(outputs: Any, labels: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    out = _flat(outputs)
    y = np.asarray(labels, dtype=np.float64).reshape(len(np.asarray(labels)), -1)
    if y.shape != out.shape:
        raise DataError(f"{name} compares outputs with target values of the same shape: "
                        f"outputs {list(out.shape)}, labels {list(y.shape)} (per sample, "
                        "flattened)", fix="store each sample's target output as its label")
    return out, y


def mse(outputs: Any, labels: Any) -> float:
    """Mean squared error against target values (labels shaped like the outputs)."""
    out, y = _targets(outputs, labels, "mse")
    return float(((out - y) ** 2).mean())


def cosine(outputs: Any, labels: Any) -> float:
    """Mean per-sample cosine similarity with target outputs."""
    out, y = _targets(outputs, labels, "cosine")
    num = (out * y).sum(1)
    den = np.linalg.norm(out, axis=1) * np.linalg.norm(y, axis=1)
    sims = np.where(den > 0, num / np.maximum(den, 1e-300), (np.abs(out - y).max(1) == 0) * 1.0)
    return float(sims.mean())


def _detection(name: str, image_hw: tuple[int, int] | None = None
               ) -> Callable[[Any, Any], float]:
    """mAP from the detection module, imported on first use (it needs pycocotools); with
    ``image_hw``, decoded at the strides the input size gives each output (``for_input``),
    else at the module's default strides."""
    def fn(outputs: Any, labels: Any) -> float:
        try:
            module = importlib.import_module(DETECTION_MODULE)
        except ImportError as e:
            raise UsageError(f"--metric {name} needs {DETECTION_MODULE}, which cannot be "
                             f"imported: {e}", fix="install pycocotools, or pick another "
                                                   "--metric") from None
        strides = module.strides_for(image_hw, outputs) if image_hw else module.DEFAULT_STRIDES
        return getattr(module, name)(outputs, labels, strides)
    fn.__name__ = name
    return fn


def for_input(metric: Metric | None, image_hw: Sequence[int]) -> Metric | None:
    """The metric as this build's input size needs it: mAP decodes each output at the
    stride the input gives it (input side / map side), which the metric alone cannot
    know. Any other metric is returned as it is."""
    if metric is None or metric.source is not None or metric.name not in DETECTION_METRICS \
            or len(image_hw) != 2:
        return metric
    return replace(metric, fn=_detection(metric.name, (int(image_hw[0]), int(image_hw[1]))))


BUILTIN = {
    "top1": Metric("top1", top1, "pt", True, 100.0),
    "top5": Metric("top5", top5, "pt", True, 100.0),
    "map50": Metric("map50", _detection("map50"), "pt", True, 100.0),
    "map50_95": Metric("map50_95", _detection("map50_95"), "pt", True, 100.0),
    "mse": Metric("mse", mse, "mse", False),
    "cosine": Metric("cosine", cosine, "cosine", True),
}


def resolve(task: str = "classify", metric: str | None = None) -> Metric:
    """The primary metric: ``--metric`` if given, else the task's default."""
    if task not in TASK_DEFAULT:
        raise UsageError(f"--task {task!r} is not one of {', '.join(TASK_DEFAULT)}",
                         fix="e.g. --task classify")
    name = metric or TASK_DEFAULT[task]
    if name in BUILTIN:
        return BUILTIN[name]
    if is_callable_ref(name):
        fn = import_callable(name, UsageError)
        return Metric(getattr(fn, "__name__", name), fn, str(getattr(fn, "unit", "") or
                                                               "metric units"),
                      bool(getattr(fn, "higher_is_better", True)), 1.0, source=name)
    raise UsageError(f"--metric {name!r} is not one of {', '.join(BUILTIN)} nor "
                     "file.py:callable", fix="e.g. --metric top5 or --metric my_metric.py:score")


def primary(task: str = "classify", metric: str | None = None) -> Metric | None:
    """The metric validation must compute besides top-1; None when top-1 is primary."""
    m = resolve(task, metric)
    return None if m is BUILTIN["top1"] else m


def _file_of(ref: str) -> str:
    """The file (or module) part of ``file.py:callable``: where an error points (the whole
    reference stays in the message)."""
    return ref.rpartition(":")[0] or ref


def call(metric: Metric, outputs: Any, labels: Any) -> float:
    """``metric(outputs, labels)`` as a float; a user metric that raises or returns a
    non-number is a DataError naming its file (exit 2)."""
    if metric.source is None:
        return float(metric.fn(outputs, labels))
    try:
        value = metric.fn(outputs, labels)
    except Exception as e:  # user code: report it, naming the file
        raise DataError(f"metric {metric.source} raised {type(e).__name__}: {e}",
                        where=_file_of(metric.source),
                        fix="the metric is called as fn(outputs, labels) with numpy arrays "
                            "(outputs (N, ...), labels as in the data) and returns a float"
                        ) from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(
            float(value)):
        raise DataError(f"metric {metric.source} returned {value!r} "
                        f"({type(value).__name__}); expected a finite number",
                        where=_file_of(metric.source), fix="return a float, e.g. float(score)")
    return float(value)


def report_lines(manifest: dict[str, Any]) -> list[str]:
    """report.md's lines on the primary metric: its name and unit, and per target its
    value, the reference's, and the drop the budget judges (with its bootstrap interval).
    Nothing for a top-1 build, whose figures the targets table already shows."""
    m = manifest.get("metric") or {}
    if not m or (m.get("name") == "top1" and m.get("source") is None):
        return []
    unit = m.get("unit", "")
    where = f" from `{m['source']}`" if m.get("source") else ""
    lines = [f"- primary metric: {m['name']}{where} ({unit}; "
             f"{'higher' if m.get('higher_is_better', True) else 'lower'} is better); "
             f"budgets.accuracy_drop judges its drop in {unit}", "",
             f"| target | {m['name']} | reference | drop ({unit}) | drop 95% CI |",
             "|---|---|---|---|---|"]
    for t in manifest.get("targets", []):
        tm = t.get("metric")
        if tm:
            ci = tm.get("drop_ci95") or [None, None]
            lines.append(f"| {t['name']} | {tm['value']:.6g} | {tm['reference']:.6g} | "
                         f"{tm['drop']:.4g} | {ci[0]:.4g} .. {ci[1]:.4g} |")
    return lines
