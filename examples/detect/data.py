"""Generated detection scenes: shapes with boxes over textured clutter, no download.

    python examples/detect/data.py OUT [--n 1200] [--size 128] [--seed 0]

writes ``OUT/images/000000.png ...`` (RGB, SIZE x SIZE) and ``OUT/annotations.json`` in
COCO's layout (``images``, ``annotations`` with ``bbox = [x, y, w, h]`` in pixels,
``categories``). Every image is drawn from its own seeded generator (seed, index), so the
same arguments give the same files on any machine, and image i does not depend on --n.

Why these scenes: a detector must find *several* objects of *several* classes at
different scales and positions and ignore things that are not objects. Each image holds
1-4 objects out of four classes (disc, square, triangle, plus) 12-56 px wide, in random
colours, over a colour gradient with sensor noise and clutter: line segments, specks and
small rings (a ring is not a disc: the model has to look at the inside). Objects overlap
little (IoU < 0.2), as on a conveyor belt or a table seen from above.

This file needs only numpy and Pillow (no edgesmith), so a data set can be made anywhere.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("disc", "square", "triangle", "plus")
MIN_SIDE, MAX_SIDE = 12, 56  # object box side in pixels, at size 128 (scaled with size)
MAX_OBJECTS = 4
MAX_IOU = 0.2  # overlap allowed between two objects' boxes


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A two-colour linear gradient at a random angle plus per-pixel noise (HWC float)."""
    c0, c1 = rng.uniform(30, 225, 3), rng.uniform(30, 225, 3)
    angle = rng.uniform(0, 2 * math.pi)
    yy, xx = np.mgrid[0:size, 0:size] / max(1, size - 1)
    t = (np.cos(angle) * xx + np.sin(angle) * yy)
    t = (t - t.min()) / max(1e-6, t.max() - t.min())
    img = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    return img + rng.normal(0, 6, img.shape)


def _colour(rng: np.random.Generator, avoid: np.ndarray) -> tuple[int, int, int]:
    """A colour at least some distance from ``avoid`` (the local background), so every
    object is visible; clutter uses the same rule."""
    for _ in range(20):
        c = rng.integers(0, 256, 3)
        if np.abs(c - avoid).sum() > 150:
            break
    return tuple(int(v) for v in c)


def _clutter(draw: ImageDraw.ImageDraw, rng: np.random.Generator, size: int,
             bg: np.ndarray) -> None:
    """Line segments, specks and small rings: structure that is not an object."""
    for _ in range(rng.integers(2, 7)):
        x0, y0, x1, y1 = rng.uniform(0, size, 4)
        draw.line([x0, y0, x1, y1], fill=_colour(rng, bg), width=int(rng.integers(1, 3)))
    for _ in range(rng.integers(3, 12)):
        x, y = rng.uniform(0, size, 2)
        r = rng.uniform(0.5, 2.0)
        draw.ellipse([x - r, y - r, x + r, y + r], fill=_colour(rng, bg))
    for _ in range(rng.integers(0, 3)):
        x, y = rng.uniform(0, size, 2)
        r = rng.uniform(4, 10) * size / 128
        draw.ellipse([x - r, y - r, x + r, y + r], outline=_colour(rng, bg), width=1)


def _draw_object(draw: ImageDraw.ImageDraw, cls: int, box: tuple[float, ...],
                 fill: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    if CLASSES[cls] == "disc":
        draw.ellipse([x0, y0, x1 - 1, y1 - 1], fill=fill)
    elif CLASSES[cls] == "square":
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], fill=fill)
    elif CLASSES[cls] == "triangle":
        draw.polygon([(x0 + w / 2, y0), (x1 - 1, y1 - 1), (x0, y1 - 1)], fill=fill)
    else:  # plus: two bars of a third of the side
        draw.rectangle([x0 + w / 3, y0, x1 - w / 3 - 1, y1 - 1], fill=fill)
        draw.rectangle([x0, y0 + h / 3, x1 - 1, y1 - h / 3 - 1], fill=fill)


def _place(rng: np.random.Generator, size: int, boxes: list[tuple[float, ...]]
           ) -> tuple[float, ...] | None:
    """A box of random side and aspect (0.75-1.33) inside the image that overlaps the
    others by at most MAX_IOU; None after a few tries (the image then has fewer objects)."""
    scale = size / 128
    for _ in range(30):
        side = rng.uniform(MIN_SIDE, MAX_SIDE) * scale
        aspect = math.exp(rng.uniform(math.log(0.75), math.log(1.33)))
        w, h = round(side * math.sqrt(aspect)), round(side / math.sqrt(aspect))
        x0, y0 = int(rng.integers(0, size - w + 1)), int(rng.integers(0, size - h + 1))
        box = (float(x0), float(y0), float(x0 + w), float(y0 + h))
        if all(_iou(box, b) <= MAX_IOU for b in boxes):
            return box
    return None


def scene(index: int, size: int = 128, seed: int = 0
          ) -> tuple[np.ndarray, list[tuple[int, tuple[float, float, float, float]]]]:
    """Image ``index`` of the set: (HWC uint8 RGB, [(class, (x0, y0, x1, y1)), ...])."""
    rng = np.random.default_rng([seed, index])
    bg = _background(rng, size)
    img = Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    mean_bg = bg.reshape(-1, 3).mean(0)
    _clutter(draw, rng, size, mean_bg)
    objects: list[tuple[int, tuple[float, float, float, float]]] = []
    for _ in range(int(rng.integers(1, MAX_OBJECTS + 1))):
        box = _place(rng, size, [b for _, b in objects])
        if box is None:
            continue
        cls = int(rng.integers(0, len(CLASSES)))
        _draw_object(draw, cls, box, _colour(rng, mean_bg))
        objects.append((cls, box))
    # a few specks over the objects too, and sensor noise over everything
    for _ in range(rng.integers(0, 4)):
        x, y = rng.uniform(0, size, 2)
        draw.ellipse([x - 1, y - 1, x + 1, y + 1], fill=_colour(rng, mean_bg))
    arr = np.asarray(img, dtype=np.float32) + rng.normal(0, 4, (size, size, 3))
    return np.clip(arr, 0, 255).astype(np.uint8), objects


def coco_document(records: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """COCO's JSON layout: bbox is [x, y, w, h] in pixels, category ids start at 1."""
    images, annotations = [], []
    for rec in records:
        images.append({"id": rec["id"], "file_name": rec["file_name"], "width": size,
                       "height": size})
        for cls, (x0, y0, x1, y1) in rec["objects"]:
            annotations.append({"id": len(annotations) + 1, "image_id": rec["id"],
                                "category_id": cls + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                                "area": (x1 - x0) * (y1 - y0), "iscrowd": 0})
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(CLASSES)]
    return {"info": {"description": "edgesmith generated detection scenes"},
            "images": images, "annotations": annotations, "categories": categories}


def write(out: Path, n: int = 1200, size: int = 128, seed: int = 0) -> Path:
    """Write ``n`` scenes and their annotations under ``out``; returns the JSON's path."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(n):
        pixels, objects = scene(i, size, seed)
        name = f"images/{i:06d}.png"
        Image.fromarray(pixels).save(out / name)
        records.append({"id": i + 1, "file_name": name, "objects": objects})
    path = out / "annotations.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(coco_document(records, size)))
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder to write images/ and annotations.json into")
    p.add_argument("--n", type=int, default=1200, help="number of images (default 1200)")
    p.add_argument("--size", type=int, default=128, help="image side in pixels (default 128)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.n < 1 or args.size < 32:
        p.error("--n must be >= 1 and --size >= 32")
    path = write(args.out, args.n, args.size, args.seed)
    print(f"{args.n} images of {args.size}x{args.size} and their boxes: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
