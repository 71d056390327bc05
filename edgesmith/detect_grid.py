"""Where an anchor-free detection head's cells sit: (stride, h, w) per level, read from the
input's size and the outputs' shapes.

A detector's decode must know each level's stride (a box offset of 1.0 is one stride of
pixels). Rather than assume the example's strides, both decoders derive them the same way:
the C generator (targets/codegen.py, for es_detect.c's sizes) and validation's mAP
(pipeline/detection.py). Two layouts:

- one (N, 5 + K, h, w) map per level: stride = input side / map side, whole and the same on
  both axes;
- one packed (N, 5 + K, cells) output (pipeline/packing.py), the levels' maps flattened
  finest first: the chain of strides s, 2s, 4s... dividing the input whose grids hold
  ``cells`` in all (each level a quarter of the previous one's cells, so at most one chain
  fits).

Either returns [] when the shapes are not such a head.
"""

from __future__ import annotations

from collections.abc import Sequence

Grid = tuple[int, int, int]  # stride, h, w


def map_grids(image_hw: Sequence[int], shapes: Sequence[Sequence[int]]) -> list[Grid]:
    """(stride, h, w) per 4-D output when each is a map at a whole stride of the input."""
    ih, iw = int(image_hw[0]), int(image_hw[1])
    grids = []
    for s in shapes:
        if len(s) != 4 or not s[2] or not s[3] or ih % s[2] or iw % s[3] \
                or ih // s[2] != iw // s[3]:
            return []
        grids.append((ih // s[2], int(s[2]), int(s[3])))
    return grids


def packed_grids(image_hw: Sequence[int], cells: int) -> list[Grid]:
    """(stride, h, w) per level of a packed head of ``cells`` cells (see the module text)."""
    ih, iw = int(image_hw[0]), int(image_hw[1])
    for first in (2 ** k for k in range(1, 8)):
        total, grids, s = 0, [], first
        while ih % s == 0 and iw % s == 0 and total < cells:
            grids.append((s, ih // s, iw // s))
            total += grids[-1][1] * grids[-1][2]
            s *= 2
        if total == cells:
            return grids
    return []
