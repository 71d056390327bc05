"""What a model is fed, as every room sees it: the input's shape and layout
(``InputSpec``) and the calibration set every INT8 converter takes (``CalibrationSet``).

TFLite, OpenVINO, ONNX-QDQ and the C runtime each calibrate with their own library;
if each drew its own samples, their INT8 accuracies would differ for reasons that have
nothing to do with the format. One object, one sample set, one method setting. Both
live in the core so that ``ConvertContext`` can name its types without importing a room.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class InputSpec:
    """How one input sample looks; the batch axis is not part of ``shape``."""

    shape: tuple[int, ...]
    name: str = "input"
    dtype: str = "float32"
    layout: str = "NCHW"
    normalization: dict[str, Any] = field(default_factory=dict)

    def batch_shape(self, n: int = 1) -> tuple[int, ...]:
        return (n, *self.shape)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d



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
