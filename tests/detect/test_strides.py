"""mAP decodes each detection output at the stride the build's input size gives it
(input side / map side), as the C generator does for es_detect.c: a head at strides 4/8
on a 64x64 input is scored right, where the example's fixed (8, 16) drew every box twice
as large and scored a perfect detector 0."""

from __future__ import annotations

import numpy as np
import pytest

from edgesmith import detect_grid
from edgesmith.pipeline import detection, metrics


def _perfect_head(image: int, strides: tuple[int, ...]) -> tuple[list[np.ndarray], list]:
    """Maps that propose one confident box per image, of class 1, centred on cell (2, 3)
    of the finest level, 2 strides to each side; and labels holding exactly that box."""
    levels = [np.full((1, 7, image // s, image // s), -20.0, np.float32) for s in strides]
    s = strides[0]
    levels[0][0, 4, 2, 3] = 20.0  # objectness
    levels[0][0, 6, 2, 3] = 20.0  # class 1
    levels[0][0, :4, 2, 3] = 2.0  # l, t, r, b in strides
    cx, cy = (3 + 0.5) * s, (2 + 0.5) * s
    return levels, [[(1, (cx - 2 * s, cy - 2 * s, cx + 2 * s, cy + 2 * s))]]


def test_strides_come_from_the_input_size_for_maps_and_packed_heads():
    maps, _ = _perfect_head(64, (4, 8))
    assert detection.strides_for((64, 64), maps) == (4, 8)
    packed = np.zeros((1, 7, 16 * 16 + 8 * 8), np.float32)
    assert detection.strides_for((64, 64), packed) == (4, 8)
    assert detection.strides_for((128, 128), packed) == (8, 16)
    assert detect_grid.packed_grids((64, 64), 16 * 16 + 8 * 8) == [(4, 16, 16), (8, 8, 8)]


def test_a_head_that_is_no_whole_stride_of_the_input_is_refused():
    with pytest.raises(ValueError, match="no head on a 64x64 input"):
        detection.strides_for((64, 64), [np.zeros((1, 7, 10, 10), np.float32)])


def test_map50_bound_to_the_input_scores_a_stride_4_head_right():
    maps, labels = _perfect_head(64, (4, 8))
    bound = metrics.for_input(metrics.resolve("detect"), (64, 64))
    assert bound.name == "map50" and bound(maps, labels) == pytest.approx(1.0)
    # the unbound metric decodes at (8, 16): the same boxes twice as large, none matched
    assert metrics.resolve("detect")(maps, labels) == pytest.approx(0.0)


def test_binding_leaves_other_metrics_alone():
    top5 = metrics.resolve("classify", "top5")
    assert metrics.for_input(top5, (64, 64)) is top5
    assert metrics.for_input(None, (64, 64)) is None
