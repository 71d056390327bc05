"""Object detection outside the graph: decode an anchor-free head's maps into boxes, NMS,
mAP over pycocotools, and the COCO-JSON loader.

A detector's graph ends at its raw maps; decoding and NMS are done here (host validation),
in the device script, and in the C runtime (``targets/runtime/es_detect.c``), which follows
this file step by step, so the three give the same boxes. ``decode`` and ``nms`` need numpy
only (so the file can be embedded in the device script); pycocotools, Pillow and
edgesmith's errors are imported by the functions that need them.

The head layout (``examples/detect/model.py``): one output per stride, each
``(N, 4 + 1 + K, H, W)``: channels 0..3 are l, t, r, b in strides from the cell centre
(used as ``max(d, 0) * stride``), 4 the objectness logit, 5.. one logit per class. A cell
proposes one box, of its best class, scored ``sigmoid(obj) * sigmoid(cls)``.

Labels: one list per image of ``(class, (x0, y0, x1, y1))``, class 0-based, pixels.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_STRIDES = (8, 16)
SCORE_THRESHOLD = 0.25  # what a product keeps
MAP_SCORE_THRESHOLD = 0.001  # what mAP is measured over (COCO practice: nearly every box)
IOU_THRESHOLD = 0.5
MAX_BOXES = 100  # boxes kept per image after NMS (COCO's maxDets)

Detections = tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes (M, 4), scores (M,), classes


def unpack(packed: np.ndarray, strides: Sequence[int]) -> list[np.ndarray]:
    """YOLO's packed layout, (N, 5 + K, A) with every level's square grid flattened and
    concatenated finest first, back into one (N, 5 + K, G, G) map per stride: the
    finest grid's side G solves A = sum over strides of (G * s0 / s)^2."""
    share = sum((strides[0] / s) ** 2 for s in strides)
    side = int(round((packed.shape[2] / share) ** 0.5))
    sides = [int(round(side * strides[0] / s)) for s in strides]
    if sum(g * g for g in sides) != packed.shape[2]:
        raise ValueError(f"a packed output of {packed.shape[2]} cells is no set of square "
                         f"grids at strides {list(strides)}")
    cuts = np.cumsum([0] + [g * g for g in sides])
    return [packed[:, :, a:b].reshape(len(packed), -1, g, g)
            for a, b, g in zip(cuts[:-1], cuts[1:], sides, strict=True)]


def as_levels(outputs: Any, strides: Sequence[int] = DEFAULT_STRIDES) -> list[np.ndarray]:
    """The model's outputs as a list of (N, 5 + K, H, W) float32 maps, one per stride:
    accepts a list/tuple, a name -> array mapping (in order), one 4-D array, or one
    packed (N, 5 + K, cells) array (``unpack``)."""
    if isinstance(outputs, Mapping):
        outputs = list(outputs.values())
    if isinstance(outputs, np.ndarray):
        outputs = unpack(outputs, strides) if outputs.ndim == 3 else [outputs]
    levels = [np.asarray(o, dtype=np.float32) for o in outputs]
    for i, lv in enumerate(levels):
        if lv.ndim != 4 or lv.shape[1] < 6:
            raise ValueError(f"detection output {i} has shape {list(lv.shape)}; expected "
                             "(N, 4 + 1 + classes, H, W) maps, one per stride")
    if len({lv.shape[0] for lv in levels}) > 1 or len({lv.shape[1] for lv in levels}) > 1:
        raise ValueError("detection outputs differ in batch or channels: "
                         f"{[list(lv.shape) for lv in levels]}")
    return levels


def strides_for(image_hw: Sequence[int], outputs: Any) -> tuple[int, ...]:
    """Each level's stride on an ``image_hw`` input, from the outputs' shapes: the same rule
    the C generator uses for es_detect.c (``edgesmith.detect_grid``), so a head at strides
    4/8 or 8/16/32 decodes right everywhere instead of at this example's (8, 16). Imported
    here, not at the top, so decode and nms keep needing numpy only."""
    from edgesmith import detect_grid

    if isinstance(outputs, Mapping):
        outputs = list(outputs.values())
    if isinstance(outputs, np.ndarray) and outputs.ndim == 3:
        shapes = [list(outputs.shape)]
        grids = detect_grid.packed_grids(image_hw, outputs.shape[2])
    else:
        shapes = [list(np.shape(o)) for o in
                  (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
        grids = detect_grid.map_grids(image_hw, shapes)
    if not grids:
        raise ValueError(f"detection outputs {shapes} are no head on a "
                         f"{image_hw[0]}x{image_hw[1]} input: each map must be the input at a "
                         "whole stride (a packed output: levels at strides s, 2s, 4s...)")
    return tuple(s for s, _, _ in grids)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = np.float32(1.0)
    return one / (one + np.exp(-x, dtype=np.float32))


def candidates(levels: Sequence[np.ndarray], image: int, strides: Sequence[int],
               score_threshold: float) -> Detections:
    """Every cell of every level whose best class scores >= ``score_threshold``, in the
    order level, row, column: the order es_detect_decode writes them."""
    boxes, scores, classes = [], [], []
    for lv, stride in zip(levels, strides, strict=True):
        m = lv[image]
        s = np.float32(stride)
        cls = np.argmax(m[5:], axis=0)  # first of equal logits, as the C loop
        best = np.take_along_axis(m[5:], cls[None], axis=0)[0]
        score = _sigmoid(m[4]) * _sigmoid(best)
        ys, xs = np.nonzero(score >= np.float32(score_threshold))
        cx = (xs.astype(np.float32) + np.float32(0.5)) * s
        cy = (ys.astype(np.float32) + np.float32(0.5)) * s
        d = np.maximum(m[:4, ys, xs], np.float32(0)) * s
        boxes.append(np.stack([cx - d[0], cy - d[1], cx + d[2], cy + d[3]], axis=1))
        scores.append(score[ys, xs])
        classes.append(cls[ys, xs])
    return (np.concatenate(boxes).astype(np.float32).reshape(-1, 4),
            np.concatenate(scores).astype(np.float32), np.concatenate(classes).astype(np.int64))


def iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one (x0, y0, x1, y1) box with each of ``others``, in float32 as es_nms."""
    zero = np.float32(0)
    iw = np.maximum(zero, np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]))
    ih = np.maximum(zero, np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]))
    inter = iw * ih
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    return np.where(union > zero, inter / np.where(union > zero, union, np.float32(1)), zero)


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
        iou_threshold: float = IOU_THRESHOLD, max_boxes: int = MAX_BOXES) -> np.ndarray:
    """Greedy per-class NMS: indices of the kept boxes, best first. Candidates are taken
    by descending score (equal scores: lower index first, a stable sort); one is kept
    when its IoU with every kept box of its class is <= ``iou_threshold``."""
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    for i in order:
        if len(kept) == max_boxes:
            break
        same = [k for k in kept if classes[k] == classes[i]]
        if same and (iou(boxes[i], boxes[same]) > np.float32(iou_threshold)).any():
            continue
        kept.append(int(i))
    return np.asarray(kept, dtype=np.int64)


def decode(outputs: Any, strides: Sequence[int] = DEFAULT_STRIDES,
           score_threshold: float = SCORE_THRESHOLD, iou_threshold: float = IOU_THRESHOLD,
           max_boxes: int = MAX_BOXES) -> list[Detections]:
    """Per image: (boxes (M, 4) x0 y0 x1 y1 in input pixels, scores (M,), classes (M,)),
    after NMS, best first."""
    levels = as_levels(outputs, strides)
    if len(levels) != len(strides):
        raise ValueError(f"{len(levels)} detection outputs but {len(strides)} strides "
                         f"{list(strides)}; pass one stride per output")
    settings = (tuple(strides), float(score_threshold), float(iou_threshold), int(max_boxes))
    out = []
    for image in range(levels[0].shape[0]):
        key = _image_key(levels, image, settings)
        if key not in _DECODED:
            boxes, scores, classes = candidates(levels, image, strides, score_threshold)
            keep = nms(boxes, scores, classes, iou_threshold, max_boxes)
            _remember(key, (boxes[keep], scores[keep], classes[keep]))
        out.append(_DECODED[key])
    return out


# Validation scores mAP on a few hundred bootstrap resamples of the same images, each
# decoded the same way: an image's boxes are kept by a digest of its outputs and the
# settings (read-only arrays), so each image runs NMS once per artifact, not per resample.
_DECODED: dict[bytes, Detections] = {}
_DECODED_MAX = 8192


def _image_key(levels: Sequence[np.ndarray], image: int, settings: tuple) -> bytes:
    h = hashlib.blake2b(repr(settings).encode(), digest_size=20)
    for lv in levels:
        h.update(repr(lv.shape[1:]).encode())
        h.update(np.ascontiguousarray(lv[image]).tobytes())
    return h.digest()


def _remember(key: bytes, dets: Detections) -> None:
    if len(_DECODED) >= _DECODED_MAX:
        _DECODED.clear()
    for a in dets:
        a.flags.writeable = False
    _DECODED[key] = dets


def parity_view(outputs: np.ndarray) -> np.ndarray:
    """The head's outputs as decode reads them, for output parity: box channels as they
    are, objectness and class logits as sigmoid scores. INT8 clips a confident logit
    (28 -> 20.6 on the example's validation images) to the calibrated range with no effect
    on any score or box, and raw-logit parity would call that a 27 % error."""
    out = np.array(outputs, dtype=np.float32, copy=True)
    if out.ndim in (3, 4) and out.shape[1] >= 6:
        out[:, 4:] = _sigmoid(out[:, 4:])
    return out


# -- mAP over pycocotools ---------------------------------------------------------------

def _coco_ground_truth(labels: Sequence[Sequence[Any]]) -> dict[str, Any]:
    images, annotations, classes = [], [], set()
    for i, objects in enumerate(labels):
        images.append({"id": i + 1})
        for cls, (x0, y0, x1, y1) in objects:
            classes.add(int(cls))
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                "category_id": int(cls) + 1, "iscrowd": 0,
                                "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                                "area": float((x1 - x0) * (y1 - y0))})
    return {"images": images, "annotations": annotations,
            "categories": [{"id": c + 1} for c in sorted(classes)]}


def _evaluator(outputs: Any, labels: Sequence[Sequence[Any]], strides: Sequence[int]
               ) -> Any | None:
    """A COCOeval of the decoded outputs against ``labels``, not yet run; None when the
    outputs hold no box at all."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    dets = decode(outputs, strides, MAP_SCORE_THRESHOLD, IOU_THRESHOLD, MAX_BOXES)
    if len(dets) != len(labels):
        raise ValueError(f"{len(dets)} images of outputs but {len(labels)} of labels")
    gt = _coco_ground_truth(labels)
    if not gt["annotations"]:
        raise ValueError("no ground-truth box in the labels: mAP is undefined")
    # one row per box: image id, x, y, w, h, score, category id (loadRes's array form)
    rows = [np.column_stack([np.full(len(s), i + 1), b[:, :2], b[:, 2:] - b[:, :2], s, c + 1])
            for i, (b, s, c) in enumerate(dets) if len(s)]
    with contextlib.redirect_stdout(io.StringIO()):  # COCO prints progress and a table
        coco = COCO()
        coco.dataset = gt
        coco.createIndex()
        if not rows:
            return None
        return COCOeval(coco, coco.loadRes(np.concatenate(rows).astype(np.float64)), "bbox")


def _coco_stats(outputs: Any, labels: Sequence[Sequence[Any]],
                strides: Sequence[int]) -> np.ndarray:
    """COCOeval's 12 summary figures for the decoded outputs against ``labels``."""
    evaluator = _evaluator(outputs, labels, strides)
    if evaluator is None:
        return np.zeros(12)
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return np.maximum(np.asarray(evaluator.stats, dtype=np.float64), 0.0)


def map50(outputs: Any, labels: Sequence[Sequence[Any]],
          strides: Sequence[int] = DEFAULT_STRIDES) -> float:
    """COCO AP at IoU 0.5 (a fraction, 0..1) of the decoded ``outputs`` against ``labels``:
    COCOeval's stats[1], evaluated at that one IoU over all areas (a quarter of the work of
    the full summary, which validation repeats for every bootstrap resample)."""
    evaluator = _evaluator(outputs, labels, strides)
    if evaluator is None:
        return 0.0
    evaluator.params.iouThrs = np.array([0.5])
    evaluator.params.areaRng, evaluator.params.areaRngLbl = [[0, 1e5 ** 2]], ["all"]
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator.evaluate()
        evaluator.accumulate()
    precision = evaluator.eval["precision"][0, :, :, 0, -1]  # IoU .5, all areas, 100 dets
    found = precision[precision > -1]
    return float(found.mean()) if found.size else 0.0


def map50_95(outputs: Any, labels: Sequence[Sequence[Any]],
             strides: Sequence[int] = DEFAULT_STRIDES) -> float:
    """COCO AP averaged over IoU 0.50:0.95 (a fraction, 0..1)."""
    return float(_coco_stats(outputs, labels, strides)[0])


# -- COCO JSON + image folder -----------------------------------------------------------

ANNOTATIONS = "annotations.json"


def _data_error(what: str, where: str, fix: str | None = None) -> Exception:
    from edgesmith.errors import DataError

    return DataError(what, where=where, fix=fix)


def _read_coco(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise _data_error(f"cannot read the annotations: {e.strerror or e}", str(path)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f"{path}:{e.lineno}" if isinstance(e, json.JSONDecodeError) else str(path)
        raise _data_error(f"not valid JSON ({e})", where,
                          "write the file with json.dump (COCO's layout)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list) \
            or not isinstance(doc.get("annotations"), list):
        raise _data_error("expected COCO's layout: an object with 'images' and "
                          "'annotations' lists", str(path),
                          "see examples/detect/data.py for the layout")
    return doc


def _categories(doc: dict[str, Any], path: Path) -> dict[int, int]:
    """COCO category id -> 0-based class, in the order of the ids."""
    ids = sorted(int(c["id"]) for c in doc.get("categories") or [] if "id" in c)
    if not ids:
        ids = sorted({int(a.get("category_id", 0)) for a in doc["annotations"]})
    if not ids:
        raise _data_error("no categories and no annotations", str(path))
    return {cid: k for k, cid in enumerate(ids)}


def _decode_image(file: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(file) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except FileNotFoundError:
        raise _data_error("image file listed in the annotations does not exist",
                          str(file)) from None
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise _data_error(f"cannot decode the image ({type(e).__name__}: {e})", str(file),
                          "re-export it as PNG or JPEG, or drop it from the annotations"
                          ) from None


def _box(ann: dict[str, Any], size: tuple[int, int], path: Path) -> tuple[float, ...]:
    try:
        x, y, w, h = (float(v) for v in ann["bbox"])
    except (KeyError, TypeError, ValueError):
        raise _data_error(f"annotation {ann.get('id')} has bbox {ann.get('bbox')!r}; "
                          "expected [x, y, w, h] numbers", str(path)) from None
    height, width = size
    if not (w > 0 and h > 0 and x >= 0 and y >= 0 and x + w <= width + 0.5
            and y + h <= height + 0.5):
        raise _data_error(f"annotation {ann.get('id')} has bbox {[x, y, w, h]}, not a box "
                          f"of positive size inside its {width}x{height} image", str(path),
                          "fix or drop that annotation")
    return (x, y, x + w, y + h)


def load_coco(directory: str | Path) -> tuple[np.ndarray, list[list[tuple[int, tuple]]]]:
    """``DIR/annotations.json`` (COCO layout, file names relative to DIR) and its images:
    x float32 NCHW RGB scaled as (pixel / 255 - 0.5) / 0.5, and per image a list of
    (class 0..K-1 in category-id order, (x0, y0, x1, y1) in pixels). Every way the folder
    can be wrong is a DataError naming the file (or the annotation id)."""
    root = Path(directory)
    path = root / ANNOTATIONS
    if not path.is_file():
        raise _data_error(f"no {ANNOTATIONS} in the data folder", str(root),
                          "a detection folder holds annotations.json (COCO) and the images "
                          "it names; python examples/detect/data.py DIR makes one")
    doc = _read_coco(path)
    cats = _categories(doc, path)
    by_image: dict[int, list[tuple[int, tuple]]] = {}
    pixels, ids, shape = [], [], None
    for img in doc["images"]:
        arr = _decode_image(root / str(img.get("file_name", "")))
        if shape is not None and arr.shape != shape:
            raise _data_error(f"image is {arr.shape[1]}x{arr.shape[0]}, the first was "
                              f"{shape[1]}x{shape[0]}", str(root / img["file_name"]),
                              "detection folders need images of one size")
        shape = arr.shape
        pixels.append(arr)
        ids.append(img["id"])
        by_image[img["id"]] = []
    if not pixels:
        raise _data_error("the annotations list no images", str(path))
    for ann in doc["annotations"]:
        if ann.get("image_id") not in by_image:
            raise _data_error(f"annotation {ann.get('id')} names image_id "
                              f"{ann.get('image_id')!r}, not in 'images'", str(path))
        if int(ann.get("category_id", -1)) not in cats:
            raise _data_error(f"annotation {ann.get('id')} has category_id "
                              f"{ann.get('category_id')!r}, not in 'categories'", str(path))
        box = _box(ann, shape[:2], path)
        by_image[ann["image_id"]].append((cats[int(ann["category_id"])], box))
    x = np.stack(pixels).astype(np.float32).transpose(0, 3, 1, 2)
    x = (x / np.float32(255) - np.float32(0.5)) / np.float32(0.5)
    return np.ascontiguousarray(x), [by_image[i] for i in ids]
