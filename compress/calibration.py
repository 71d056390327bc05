"""The calibration set every INT8 converter takes, so all targets see identical tensors.

TFLite, OpenVINO, ONNX-QDQ and the C runtime each calibrate with their own library;
if each drew its own samples, their INT8 accuracies would differ for reasons that have
nothing to do with the format. One object, one sample set, one method setting.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CalibrationSet:
    """NCHW float32 samples (already normalised) plus the calibration settings."""

    x: np.ndarray
    method: str = "minmax"  # minmax | percentile | entropy | mse
    percentile: float = 99.99
    per_channel: bool = True
    requested: int = 0

    @property
    def samples(self) -> int:
        return len(self.x)

    def batches(self, batch_size: int = 1) -> Iterator[np.ndarray]:
        for i in range(0, len(self.x), batch_size):
            yield self.x[i:i + batch_size]

    def nhwc(self) -> np.ndarray:
        """The same samples channels-last, for converters whose graphs are NHWC (TFLite)."""
        return np.ascontiguousarray(self.x.transpose(0, 2, 3, 1)) if self.x.ndim == 4 else self.x

    def summary(self) -> dict[str, object]:
        return {"samples": self.samples, "requested": self.requested, "method": self.method,
                "percentile": self.percentile, "per_channel": self.per_channel}


def from_splits(splits, settings, warn=None) -> CalibrationSet:
    """Take the first ``settings.samples`` of the calibration split (then train, if short).

    A request larger than the data warns (through ``warn``, default ``warnings.warn``) and
    uses what exists: calibrating on fewer samples is a quality question for the user,
    not a reason to stop the build.
    """
    pool = splits.calib_x
    if len(pool) < settings.samples:
        pool = np.concatenate([splits.calib_x, splits.train_x])
    if len(pool) < settings.samples:
        message = (f"calibration asked for {settings.samples} samples but the data has "
                   f"{len(pool)}; calibrating on {len(pool)}")
        if warn is None:
            warnings.warn(message, stacklevel=2)
        else:
            warn(message)
    x = np.ascontiguousarray(pool[: settings.samples], dtype=np.float32)
    return CalibrationSet(x=x, method=settings.method, percentile=settings.percentile,
                          per_channel=settings.per_channel, requested=settings.samples)
