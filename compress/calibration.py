"""Drawing the calibration set (``edgesmith.inputs.CalibrationSet``) from the data splits.

TFLite, OpenVINO, ONNX-QDQ and the C runtime each calibrate with their own library;
if each drew its own samples, their INT8 accuracies would differ for reasons that have
nothing to do with the format. One object, one sample set, one method setting.
"""

from __future__ import annotations

import warnings

import numpy as np

from edgesmith.inputs import CalibrationSet


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
