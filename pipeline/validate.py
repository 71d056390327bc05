"""Prove an artifact against the FP32 torch model before anyone ships it.

Accuracy alone hides a broken model on an easy data set, and parity alone hides a
harmless shift; we record both, plus size and an informational host latency.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .metrics import Metric

# What "the artifact computes the same function" means per precision. FP32 must match to
# float rounding; FP16 and INT8 are judged on output direction (cosine) because their
# absolute errors scale with the logits.
PARITY_MIN_COSINE = {"fp32": 0.99999, "fp16": 0.999, "int8": 0.95}
# Cosine is blind to a uniform scale error (a clamped fp16 constant halves every logit and
# keeps every argmax), so the largest error relative to the output's range is bounded too.
PARITY_MAX_REL_ERR = {"fp32": 1e-3, "fp16": 0.05, "int8": 0.25}
# ... over which samples: every one for float, the 99th percentile of the per-sample errors
# for INT8. INT8 saturates on inputs past its calibrated ranges, so a few validation samples
# can carry a large error while the rest match (trained EfficientNet-B0-32: 5 of 1000 past
# the output quantizer's top, max error 0.46 of the range at cosine 0.9987 and a -0.5 pt
# drop); the scale error this bound is for shows in every sample, and the accuracy budget
# judges what the outliers cost. The max stays in the report (``rel_err``).
PARITY_REL_ERR_QUANTILE = {"fp32": 1.0, "fp16": 1.0, "int8": 0.99}
LATENCY_RUNS = 50
BOOTSTRAP_RESAMPLES = 200  # of the drop in a metric other than top-1 (seeded)
BOOTSTRAP_SECONDS = 20.0  # fewer resamples (at least 30) when the metric is slow (mAP)
Z95 = 1.959963984540054  # two-sided 95 % normal quantile


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
    samples: int | None = None  # validation samples behind the figures
    accuracy_ci95: tuple[float, float] | None = None  # Wilson score interval
    # paired (Tango score) interval of the drop in points, from each sample's correctness
    # under the reference and under the artifact
    accuracy_drop_ci95: tuple[float, float] | None = None
    # the primary metric (--task/--metric) when it is not top-1: the budget judges its drop
    metric: dict[str, Any] | None = None
    # the 99th percentile over samples of each sample's largest error / max |reference|
    rel_err_p99: float | None = None

    def judged_rel_err(self, precision: str) -> float | None:
        """The error the parity bound judges at this precision (PARITY_REL_ERR_QUANTILE)."""
        if PARITY_REL_ERR_QUANTILE[precision] < 1.0 and self.rel_err_p99 is not None:
            return self.rel_err_p99
        return self.rel_err

    @property
    def accuracy_drop(self) -> float | None:
        """The primary metric's drop (positive = worse than FP32), in its unit: top-1 in
        percentage points unless ``--metric``/``--task`` chose another."""
        if self.metric is not None:
            return self.metric["drop"]
        if self.accuracy is None:
            return None
        return round((self.reference_accuracy - self.accuracy) * 100, 4)

    @property
    def drop_unit(self) -> str:
        return self.metric["unit"] if self.metric is not None else "pt"

    def parity_ok(self, precision: str) -> bool:
        if not self.ran:
            return True
        err = self.judged_rel_err(precision)
        return ((self.cosine or 0.0) >= PARITY_MIN_COSINE[precision]
                and err is not None and err <= PARITY_MAX_REL_ERR[precision])

    def parity_problem(self, precision: str) -> str:
        if self.note:
            return self.note
        if (self.cosine or 0.0) < PARITY_MIN_COSINE[precision]:
            return f"cosine {self.cosine:.5f} < {PARITY_MIN_COSINE[precision]}"
        err = self.judged_rel_err(precision)
        which = "max error" if err == self.rel_err else "99th-percentile sample error"
        return f"{which} {err:.3g} of the output range > {PARITY_MAX_REL_ERR[precision]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "accuracy": self.accuracy, "reference_accuracy": self.reference_accuracy,
            "accuracy_drop": self.accuracy_drop,
            "parity": {"max_abs_err": self.max_abs_err, "rel_err": self.rel_err,
                       "rel_err_p99": self.rel_err_p99, "cosine": self.cosine,
                       "top1_agreement": self.top1_agreement},
            "latency_ms_p50": self.latency_ms_p50, "ran": self.ran, "note": self.note,
            "samples": self.samples,
            "accuracy_ci95": _rounded(self.accuracy_ci95, 6),
            "accuracy_drop_ci95": _rounded(self.accuracy_drop_ci95, 4),
            "metric": self.metric,
        }


def _rounded(ci: tuple[float, float] | None, digits: int) -> list[float] | None:
    return None if ci is None else [round(ci[0], digits), round(ci[1], digits)]


# -- how sure the figures are -----------------------------------------------------------
# An accuracy on n samples moves in steps of 1/n, and a drop of 0.3 pt measured on 359
# samples is one flipped prediction. The intervals say what the data can and cannot tell.

def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n: sensible at 0 and n, unlike k/n +- z*se."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z / den * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def _tango_z(b: int, c: int, n: int, delta: float) -> float:
    """Tango's score statistic for a paired difference ``delta`` = p(b) - p(c), where b
    counts samples only the reference gets right and c those only the artifact does;
    the variance uses the maximum-likelihood p(c) under that ``delta``."""
    big_b = -b - c + (2 * n - b + c) * delta
    disc = max(0.0, big_b * big_b + 8 * n * c * delta * (1 - delta))
    q21 = (math.sqrt(disc) - big_b) / (4 * n)
    var = n * (2 * q21 + delta * (1 - delta))
    num = b - c - n * delta
    if var <= 0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def paired_drop_ci(ref_correct: np.ndarray, art_correct: np.ndarray,
                   z: float = Z95) -> tuple[float, float]:
    """95 % interval of the accuracy drop (reference minus artifact, as a fraction) from
    per-sample correctness: Tango's score interval for paired proportions. Only the
    samples the two disagree on carry information, and with none it still has width
    (no flip in 359 samples bounds the drop by ~1.06 pt, not 0)."""
    ref_correct = np.asarray(ref_correct, bool)
    art_correct = np.asarray(art_correct, bool)
    n = len(ref_correct)
    if n == 0:
        return (-1.0, 1.0)
    b = int((ref_correct & ~art_correct).sum())
    c = int((~ref_correct & art_correct).sum())
    est = (b - c) / n
    return (_solve(lambda d: _tango_z(b, c, n, d) - z, -1.0, est),
            _solve(lambda d: _tango_z(b, c, n, d) + z, est, 1.0))


def _solve(f, lo: float, hi: float, steps: int = 60) -> float:
    """The root of a decreasing ``f`` in [lo, hi] by bisection (an end when none)."""
    if f(lo) <= 0:
        return lo
    if f(hi) >= 0:
        return hi
    for _ in range(steps):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def samples_to_resolve(budget_pt: float, z: float = Z95) -> int | None:
    """Fewest validation samples on which an artifact that flips no prediction is shown
    within ``budget_pt`` at 95 %: the drop's upper bound with no flips is z^2/(n+z^2)."""
    frac = budget_pt / 100
    if frac <= 0:
        return None  # a zero budget is never shown met by any finite sample
    return max(1, math.ceil(z * z * (1 - frac) / frac - 1e-9))


def resolution(n: int, budget_pt: float | None) -> dict[str, Any]:
    """Whether ``n`` validation samples can tell a drop within ``budget_pt`` from one over
    it, and if not, how many could: the manifest's ``validation`` section."""
    out: dict[str, Any] = {"samples": n, "one_flip_pt": round(100 / n, 4) if n else None,
                           "budget_pt": budget_pt, "resolves_budget": None,
                           "samples_needed": None, "best_case_drop_upper_pt": None}
    if budget_pt is None or n <= 0:
        return out
    upper = 100 * Z95 * Z95 / (n + Z95 * Z95)
    needed = samples_to_resolve(budget_pt)
    out.update(best_case_drop_upper_pt=round(upper, 4), samples_needed=needed,
               resolves_budget=needed is not None and n >= needed)
    return out


def resolution_warning(res: dict[str, Any]) -> str | None:
    """The console/report sentence for a split too small to judge the budget."""
    if res.get("resolves_budget") is not False:
        return None
    needed = res["samples_needed"]
    more = (f"{needed} samples would (--val-samples {needed}, data permitting)"
            if needed is not None else "no sample count can show a 0 pt budget met")
    return (f"{res['samples']} validation samples cannot resolve the "
            f"{res['budget_pt']:g} pt accuracy budget: one flipped prediction is "
            f"{res['one_flip_pt']:.2f} pt, and even with none the drop's 95 % upper bound "
            f"is {res['best_case_drop_upper_pt']:.2f} pt; {more}")


def drop_verdict(ci_pt: list[float] | tuple[float, float] | None,
                 budget_pt: float | None) -> str:
    """within / over / undecided: where the drop's 95 % interval lies against the budget."""
    if ci_pt is None or budget_pt is None:
        return "—"
    if ci_pt[1] <= budget_pt:
        return "within"
    if ci_pt[0] > budget_pt:
        return "over"
    return "undecided"


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean per-sample cosine similarity of two output batches."""
    a = a.reshape(len(a), -1).astype(np.float64)
    b = b.reshape(len(b), -1).astype(np.float64)
    num = (a * b).sum(1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    sims = np.where(den > 0, num / np.maximum(den, 1e-300), (np.abs(a - b).max(1) == 0) * 1.0)
    return float(sims.mean())


def predictions(logits: np.ndarray) -> np.ndarray:
    """Top-1 class per sample."""
    return logits.reshape(len(logits), -1).argmax(1)


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((predictions(logits) == y).mean())


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


def is_class_labels(y: Any) -> bool:
    """One integer class id per sample: top-1 and its intervals apply."""
    return isinstance(y, np.ndarray) and y.ndim == 1 and np.issubdtype(y.dtype, np.integer)


def bootstrap_drop_ci(metric: Metric, against: Any, out: np.ndarray, y: Any,
                      seed: int = 0) -> tuple[tuple[float, float], int]:
    """Paired bootstrap 95 % interval of ``metric``'s drop (the same resampled samples
    scored under both models), seeded so a rebuild gives the same interval; returns the
    interval and the resamples used (fewer when one evaluation is slow)."""
    n = len(out)
    rng = np.random.default_rng(seed)
    labels = np.asarray(y) if isinstance(y, np.ndarray) else None
    drops: list[float] = []
    t0 = time.perf_counter()
    for i in range(BOOTSTRAP_RESAMPLES):
        idx = rng.integers(0, n, n)
        ys = labels[idx] if labels is not None else [y[j] for j in idx]
        drops.append(metric.drop(metric(against[idx], ys), metric(out[idx], ys)))
        spent = time.perf_counter() - t0
        if i >= 29 and spent * BOOTSTRAP_RESAMPLES / (i + 1) > BOOTSTRAP_SECONDS:
            break
    lo, hi = np.percentile(drops, [2.5, 97.5])
    return (float(lo), float(hi)), len(drops)


def metric_figures(metric: Metric, out: np.ndarray, y: Any, against: np.ndarray,
                   reference_value: float | None = None) -> dict[str, Any]:
    """The primary metric on an artifact's outputs: its value, the reference's, the drop
    in the metric's unit and the drop's bootstrap interval (the manifest's ``metric``)."""
    value = metric(out, y)
    ref_value = metric(against, y) if reference_value is None else reference_value
    ci, resamples = bootstrap_drop_ci(metric, against, out, y)
    return {**metric.to_json(), "value": value, "reference": ref_value,
            "drop": metric.drop(ref_value, value), "drop_ci95": [round(ci[0], 6),
                                                                 round(ci[1], 6)],
            "ci_method": f"paired bootstrap, {resamples} resamples, seed 0"}


def validate(runner, x: np.ndarray, y: np.ndarray, reference: np.ndarray,
             reference_accuracy: float, *, not_run_reason: str = "",
             measure_latency: bool = True, latency_ms: float | None = None,
             batch: int = BATCH, reference_correct: np.ndarray | None = None,
             metric: Metric | None = None, metric_against: np.ndarray | None = None,
             metric_reference: float | None = None, parity_view=None) -> Validation:
    """``latency_ms``, when given, is the format's own measurement (see
    ``Target.host_latency_ms``) and replaces timing the runner. ``batch``: samples per
    run (1 for a model whose graph fixes its batch). ``reference_correct``: per sample,
    whether the model the drop is measured against got it right (default: ``reference``
    itself); it pairs the drop's interval. ``metric``: the primary metric when it is not
    top-1, judged against ``metric_against`` (the outputs of the model the drop is
    measured against; default ``reference``) whose value is ``metric_reference``."""
    if runner is None:
        return Validation(None, reference_accuracy, None, None, None, None, None, ran=False,
                          note=not_run_reason or "not run on this host")
    out = run_batched(runner, x, batch).astype(np.float32).reshape(reference.shape)
    if not np.isfinite(out).all():  # an fp16 overflow, a broken kernel: never "close enough"
        bad = int((~np.isfinite(out)).sum())
        return Validation(None, reference_accuracy, None, None, None, None, None, ran=True,
                          note=f"{bad} of {out.size} outputs are inf/NaN (overflow?)")
    # parity_view: the outputs as their consumer reads them (a detector's logits as scores)
    pout, pref = (out, reference) if parity_view is None else (parity_view(out),
                                                                parity_view(reference))
    flat_out, flat_ref = out.reshape(len(out), -1), reference.reshape(len(reference), -1)
    agree = float((flat_out.argmax(1) == flat_ref.argmax(1)).mean())
    lat = latency_ms if latency_ms is not None else (
        latency_p50(runner, x[:1]) if measure_latency else None)
    per_sample = np.abs(pout - pref).reshape(len(pout), -1).max(1)
    max_abs = float(per_sample.max())
    scale = float(np.max(np.abs(pref)))
    p99 = float(np.quantile(per_sample, PARITY_REL_ERR_QUANTILE["int8"])) / (
        scale if scale > 0 else 1.0)
    primary = None if metric is None or metric.name == "top1" and metric.source is None else (
        metric_figures(metric, out, y, reference if metric_against is None else metric_against,
                       metric_reference))
    if not is_class_labels(y):  # regression / raw targets: no top-1, the metric decides
        return Validation(
            accuracy=None, reference_accuracy=reference_accuracy, max_abs_err=max_abs,
            rel_err=max_abs / scale if scale > 0 else max_abs, cosine=cosine(pout, pref),
            top1_agreement=agree, latency_ms_p50=lat, ran=True, samples=len(y), metric=primary,
            rel_err_p99=p99)
    correct = predictions(out) == y
    ref_correct = predictions(reference) == y if reference_correct is None else reference_correct
    lo, hi = paired_drop_ci(ref_correct, correct)
    return Validation(
        accuracy=accuracy(out, y), reference_accuracy=reference_accuracy,
        max_abs_err=max_abs, rel_err=max_abs / scale if scale > 0 else max_abs,
        cosine=cosine(pout, pref),
        top1_agreement=agree, latency_ms_p50=lat, ran=True, samples=len(y),
        accuracy_ci95=wilson(int(correct.sum()), len(y)),
        accuracy_drop_ci95=(lo * 100, hi * 100), metric=primary, rel_err_p99=p99,
    )
