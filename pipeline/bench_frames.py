"""The validation split's raw camera frames, written beside the bench tensors, so a device
can be scored on what its camera would hand over: each frame preprocessed there (the
bench script's stdlib path, or the C harness's ``es_preprocess_u8``) by the spec the build
declared, top-1 against its label.

``data/bench_frames.u8`` holds the frames back to back (HWC uint8 RGB, no header: the C
harness reads it as is); ``data/bench_frames.json`` indexes it: runs of frames of one size
(``[[count, height, width], ...]``, so frames of different sizes need no padding), one label
per frame, the class names, and how many of the validation split it holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.artifact import write_json_atomic

from .data import Splits

INDEX = "bench_frames.json"
DATA = "bench_frames.u8"
MAX_BYTES = 64 * 2**20  # more validation frames than this are cut (the index says so)
SCHEMA = 1


def _runs(frames: list[np.ndarray]) -> list[list[int]]:
    """[[count, h, w], ...]: consecutive frames of one size."""
    runs: list[list[int]] = []
    for f in frames:
        h, w = int(f.shape[0]), int(f.shape[1])
        if runs and runs[-1][1:] == [h, w]:
            runs[-1][0] += 1
        else:
            runs.append([1, h, w])
    return runs


def _kept(frames: list[np.ndarray]) -> int:
    """How many leading frames fit in MAX_BYTES (at least one)."""
    total = 0
    for i, f in enumerate(frames):
        total += f.nbytes
        if total > MAX_BYTES:
            return max(i, 1)
    return len(frames)


def write(data_dir: Path, splits: Splits) -> dict[str, str]:
    """Write the frames and their index when the data came from an image folder; the
    manifest's ``bench_data`` entries for them ({} when there are no frames)."""
    if not splits.val_frames or splits.preprocess is None or isinstance(splits.val_y, list):
        return {}  # not an image folder (detection folders' labels are box lists)
    labels = np.asarray(splits.val_y)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        return {}  # labels that are not one class per frame
    n = _kept(splits.val_frames)
    frames = [np.ascontiguousarray(f, dtype=np.uint8) for f in splits.val_frames[:n]]
    tmp = data_dir / f".{DATA}.tmp"
    with open(tmp, "wb") as out:
        for f in frames:
            out.write(f.tobytes())
    tmp.replace(data_dir / DATA)
    index: dict[str, Any] = {
        "schema": SCHEMA, "data": DATA, "frame": "HWC uint8 RGB", "runs": _runs(frames),
        "labels": [int(v) for v in splits.val_y[:n]], "classes": splits.classes,
        "frames": n, "val_samples": len(splits.val_y)}
    write_json_atomic(data_dir / INDEX, index)
    return {"frames": f"data/{INDEX}"}
