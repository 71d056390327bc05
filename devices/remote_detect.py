"""The bench script's detection post-processing: a detector's packed output decoded into
boxes on the device, so a camera product's bench shows boxes, not logits. A part of the
uploaded ``edgesmith_remote.py``, kept in a file of its own: ``devices/script.py`` embeds
it beside the format loaders and ``remote.py`` runs it in a namespace of its own. Standard
library only, Python 3.8 compatible, like the rest of the script.

It follows ``pipeline/detection.decode`` step by step (and es_detect.c follows the same):
per level, row, column, a cell proposes one box of its best class (the first of equal
logits), scored ``sigmoid(obj) * sigmoid(cls)``; boxes scoring >= the threshold are kept,
``max(d, 0) * stride`` from the cell centre; greedy per-class NMS by descending score (a
stable sort), a box kept when its IoU with every kept box of its class is <= the IoU
threshold, at most ``max_boxes``. Every step is rounded to float32 as numpy computes it,
so thresholds and ties fall the same way as on the host.

The settings (``--detect JSON``, from the build's ``data/bench_detect.json``):
``{"levels": [[stride, h, w], ...] finest first, "classes": K, "score_threshold": ..,
"iou_threshold": .., "max_boxes": ..}``; one sample's output is the packed
``(5 + K, sum(h * w))`` array, row-major.
"""

# ruff: noqa: B905  (zip(strict=) is Python 3.10+; this file runs on 3.8 devices)
import math
import struct

rt = None  # remote.py's API, set when the script loads this part (unused: pure arithmetic)

_F32 = struct.Struct("f")


def f32(x):
    """``x`` rounded to float32 (overflow: a signed infinity, as numpy gives)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def sigmoid(x):
    """numpy's float32 ``1 / (1 + exp(-x))``."""
    try:
        e = f32(math.exp(-x))
    except OverflowError:
        e = math.inf
    return f32(1.0 / f32(1.0 + e))


def candidates(flat, settings):
    """[(box, score, class), ...] of every cell whose best class scores >= the threshold,
    in the order level, row, column."""
    classes = int(settings["classes"])
    cells = sum(h * w for _, h, w in settings["levels"])
    if len(flat) != (5 + classes) * cells:
        raise ValueError(f"a detection output of {len(flat)} values is not (5 + {classes}) "
                         f"x {cells} cells")
    threshold = f32(settings["score_threshold"])
    out, offset = [], 0
    for stride, h, w in settings["levels"]:
        s = f32(stride)
        for y in range(h):
            for x in range(w):
                cell = offset + y * w + x
                logits = [flat[(5 + k) * cells + cell] for k in range(classes)]
                cls = max(range(classes), key=lambda k: (logits[k], -k))
                score = f32(sigmoid(flat[4 * cells + cell]) * sigmoid(logits[cls]))
                if score < threshold:
                    continue
                cx, cy = f32((x + 0.5) * s), f32((y + 0.5) * s)
                d = [f32(max(flat[c * cells + cell], 0.0) * s) for c in range(4)]
                box = (f32(cx - d[0]), f32(cy - d[1]), f32(cx + d[2]), f32(cy + d[3]))
                out.append((box, score, cls))
        offset += h * w
    return out


def iou(a, b):
    """IoU of two (x0, y0, x1, y1) boxes in float32, as es_nms and detection.iou."""
    iw = max(0.0, f32(min(a[2], b[2]) - max(a[0], b[0])))
    ih = max(0.0, f32(min(a[3], b[3]) - max(a[1], b[1])))
    inter = f32(iw * ih)
    area_a = f32(f32(a[2] - a[0]) * f32(a[3] - a[1]))
    area_b = f32(f32(b[2] - b[0]) * f32(b[3] - b[1]))
    union = f32(f32(area_a + area_b) - inter)
    return f32(inter / union) if union > 0.0 else 0.0


def nms(found, iou_threshold, max_boxes):
    """Greedy per-class NMS over ``candidates``: the kept ones, best first."""
    limit = f32(iou_threshold)
    order = sorted(range(len(found)), key=lambda i: -found[i][1])  # stable, as numpy's
    kept = []
    for i in order:
        if len(kept) == max_boxes:
            break
        box, _, cls = found[i]
        if any(found[k][2] == cls and iou(box, found[k][0]) > limit for k in kept):
            continue
        kept.append(i)
    return [found[i] for i in kept]


def decode(flat, settings):
    """One sample's boxes after NMS, best first: [[x0, y0, x1, y1, score, class], ...]."""
    kept = nms(candidates(flat, settings), settings["iou_threshold"],
               int(settings["max_boxes"]))
    return [list(box) + [score, cls] for box, score, cls in kept]


def detections(outputs, settings):
    """The script's ``detections`` entry for the bench samples' outputs (one flat list of
    floats per sample): the device's boxes per sample; the host judges them."""
    boxes = [decode(flat, settings) for flat in outputs]
    return {"boxes_per_sample": boxes, "boxes": sum(len(b) for b in boxes),
            "samples": len(boxes), "agree_with_host": None}
