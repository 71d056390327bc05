"""Prove an artifact against the FP32 torch model before anyone ships it.

Accuracy alone hides a broken model on an easy data set, and parity alone hides a
harmless shift; we record both, plus size and an informational host latency.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

# What "the artifact computes the same function" means per precision. FP32 must match to
# float rounding; FP16 and INT8 are judged on output direction (cosine) because their
# absolute errors scale with the logits.
PARITY_MIN_COSINE = {"fp32": 0.99999, "fp16": 0.999, "int8": 0.95}
# Cosine is blind to a uniform scale error (a clamped fp16 constant halves every logit and
# keeps every argmax), so the largest error relative to the output's range is bounded too.
PARITY_MAX_REL_ERR = {"fp32": 1e-3, "fp16": 0.05, "int8": 0.25}
LATENCY_RUNS = 50


@dataclass(frozen=True)
class Validation:
    accuracy: float | None
    reference_accuracy: float
    max_abs_err: float | None
    rel_err: float | None  # max_abs_err / max |reference|
    cosine: float | None
    top1_agreement: float | None
    latency_ms_p50: float | None
    ran: bool
    note: str = ""

    @property
    def accuracy_drop(self) -> float | None:
        """Absolute top-1 drop in percentage points (positive = worse than FP32)."""
        if self.accuracy is None:
            return None
        return round((self.reference_accuracy - self.accuracy) * 100, 4)

    def parity_ok(self, precision: str) -> bool:
        if not self.ran:
            return True
        return ((self.cosine or 0.0) >= PARITY_MIN_COSINE[precision]
                and self.rel_err is not None and self.rel_err <= PARITY_MAX_REL_ERR[precision])

    def parity_problem(self, precision: str) -> str:
        if self.note:
            return self.note
        if (self.cosine or 0.0) < PARITY_MIN_COSINE[precision]:
            return f"cosine {self.cosine:.5f} < {PARITY_MIN_COSINE[precision]}"
        return (f"max error {self.rel_err:.3g} of the output range > "
                f"{PARITY_MAX_REL_ERR[precision]}")

    def to_json(self) -> dict[str, Any]:
        return {
            "accuracy": self.accuracy, "reference_accuracy": self.reference_accuracy,
            "accuracy_drop": self.accuracy_drop,
            "parity": {"max_abs_err": self.max_abs_err, "rel_err": self.rel_err,
                       "cosine": self.cosine, "top1_agreement": self.top1_agreement},
            "latency_ms_p50": self.latency_ms_p50, "ran": self.ran, "note": self.note,
        }


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean per-sample cosine similarity of two output batches."""
    a = a.reshape(len(a), -1).astype(np.float64)
    b = b.reshape(len(b), -1).astype(np.float64)
    num = (a * b).sum(1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    sims = np.where(den > 0, num / np.maximum(den, 1e-300), (np.abs(a - b).max(1) == 0) * 1.0)
    return float(sims.mean())


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((logits.reshape(len(logits), -1).argmax(1) == y).mean())


BATCH = 64  # samples per validation run, unless the model takes fewer


def run_batched(fn, x: np.ndarray, batch: int = BATCH) -> np.ndarray:
    return np.concatenate([np.asarray(fn(x[i:i + batch])) for i in range(0, len(x), batch)])


def latency_p50(fn, sample: np.ndarray, runs: int = LATENCY_RUNS) -> float:
    """Median single-sample latency on this host, after warm-up. Informational only."""
    for _ in range(3):
        fn(sample)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(sample)
        times.append(time.perf_counter() - t0)
    return round(float(np.median(times)) * 1e3, 4)


def validate(runner, x: np.ndarray, y: np.ndarray, reference: np.ndarray,
             reference_accuracy: float, *, not_run_reason: str = "",
             measure_latency: bool = True, latency_ms: float | None = None,
             batch: int = BATCH) -> Validation:
    """``latency_ms``, when given, is the format's own measurement (see
    ``Target.host_latency_ms``) and replaces timing the runner. ``batch``: samples per
    run (1 for a model whose graph fixes its batch)."""
    if runner is None:
        return Validation(None, reference_accuracy, None, None, None, None, None, ran=False,
                          note=not_run_reason or "not run on this host")
    out = run_batched(runner, x, batch).astype(np.float32).reshape(reference.shape)
    if not np.isfinite(out).all():  # an fp16 overflow, a broken kernel: never "close enough"
        bad = int((~np.isfinite(out)).sum())
        return Validation(None, reference_accuracy, None, None, None, None, None, ran=True,
                          note=f"{bad} of {out.size} outputs are inf/NaN (overflow?)")
    agree = float((out.argmax(1) == reference.argmax(1)).mean())
    lat = latency_ms if latency_ms is not None else (
        latency_p50(runner, x[:1]) if measure_latency else None)
    max_abs = float(np.max(np.abs(out - reference)))
    scale = float(np.max(np.abs(reference)))
    return Validation(
        accuracy=accuracy(out, y), reference_accuracy=reference_accuracy,
        max_abs_err=max_abs, rel_err=max_abs / scale if scale > 0 else max_abs,
        cosine=cosine(out, reference),
        top1_agreement=agree, latency_ms_p50=lat, ran=True,
    )
