"""A detection build's bench samples as boxes: what every device's decode is judged against.

For a map50/map50_95 build with a packed head, ``data/bench_detect.json`` holds the decode
settings the device script uses (levels as (stride, h, w) finest first, classes, the
thresholds of ``detection.decode``), the boxes ``detection.decode`` gives on the bench
samples' reference outputs, and those samples' ground-truth boxes. The devices room
compares with these (it imports no pipeline module), and scores mAP@0.5 on the labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.artifact import write_json_atomic

from . import detection

FILE = "bench_detect.json"
SCHEMA = 1
METRICS = ("map50", "map50_95")


def settings(outputs: np.ndarray, strides: tuple[int, ...]) -> dict[str, Any]:
    """The decode settings for packed (N, 5 + K, cells) outputs, as validation decodes."""
    levels = detection.as_levels(outputs[:1], strides)
    return {"levels": [[int(s), int(lv.shape[2]), int(lv.shape[3])]
                       for s, lv in zip(strides, levels, strict=True)],
            "classes": int(outputs.shape[1]) - 5,
            "score_threshold": detection.SCORE_THRESHOLD,
            "iou_threshold": detection.IOU_THRESHOLD, "max_boxes": detection.MAX_BOXES}


def host_boxes(outputs: np.ndarray, strides: tuple[int, ...]) -> list[list[list[float]]]:
    """detection.decode's boxes per sample: [[x0, y0, x1, y1, score, class], ...]."""
    return [[[*map(float, b), float(s), int(c)] for b, s, c in zip(*dets, strict=True)]
            for dets in detection.decode(outputs, strides)]


def _labels(val_y: Any, n: int) -> list[list[list[float]]] | None:
    """The samples' ground truth as [[class, x0, y0, x1, y1], ...], or None when the labels
    are not box lists."""
    if not isinstance(val_y, list):
        return None
    return [[[int(c), *map(float, box)] for c, box in objects] for objects in val_y[:n]]


def write(data_dir: Path, outputs: np.ndarray, val_y: Any, metric: Any,
          image_hw: tuple[int, ...]) -> dict[str, str]:
    """Write ``bench_detect.json`` for a detection build's packed bench outputs, decoded at
    the strides ``image_hw`` gives them; the manifest's ``bench_data`` entry for it ({} for
    any other build)."""
    if getattr(metric, "name", None) not in METRICS or metric.source is not None \
            or outputs.ndim != 3 or outputs.shape[1] < 6:
        return {}
    try:
        strides = detection.strides_for(image_hw, outputs)
        doc = {"schema": SCHEMA, "settings": settings(outputs, strides),
               "host_boxes": host_boxes(outputs, strides), "labels": _labels(val_y, len(outputs))}
    except ValueError:  # not a head on this input (no whole strides): nothing to decode
        return {}
    write_json_atomic(data_dir / FILE, doc)
    return {"detect": f"data/{FILE}"}
