"""The report's detection section: mAP@0.5 per target, how the model's outputs were packed,
and one validation image with the FP32 model's boxes beside an INT8 target's.

The figure needs outputs the manifest does not hold, so it is drawn once at build time
(``figure``), written as ``report_detect.png`` and named in the manifest's ``detection``
entry; ``markdown`` / ``html_section`` then render from the manifest alone, like the rest
of the report.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import registry
from .plots import _STYLE, _pyplot, _save

IMAGE = "report_detect.png"
DETECTION_METRICS = ("map50", "map50_95")
_CLASS_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860")


def is_detection(splits: Any, reference: Any) -> bool:
    """A build judged by a detection metric on box labels."""
    return (isinstance(splits.val_y, list) and reference.metric is not None
            and reference.metric.name in DETECTION_METRICS and reference.metric.source is None)


def _sample(labels: list[list[Any]]) -> int:
    """The validation image shown: the one with the most objects (the first of those)."""
    return int(np.argmax([len(objects) for objects in labels]))


def _int8_run(results: list[Any], x: np.ndarray) -> tuple[str, np.ndarray] | None:
    """(target name, outputs on ``x``) of the first validated INT8 target that runs here."""
    for r in results:
        if r.status != "ok" or r.spec.precision.value != "int8" or r.artifact is None:
            continue
        run = registry.get(r.spec.format.value).runner(r.artifact)
        if run is not None:
            return r.spec.name, np.asarray(run(x), np.float32)
    return None


def figure(root: Path, splits: Any, reference: Any, results: list[Any]) -> dict[str, Any] | None:
    """Draw one validation image with FP32 and INT8 boxes into ``root/report_detect.png``;
    the manifest's ``detection`` entry, or None for a build that is not a detector's.
    A figure that cannot be drawn is noted, never a failed build."""
    if not is_detection(splits, reference):
        return None
    from .detection import decode

    i = _sample(splits.val_y)
    x = splits.val_x[i:i + 1]
    entry: dict[str, Any] = {"sample": i, "image": None, "int8_target": None}
    try:
        int8 = _int8_run(results, x)
        panels = [("FP32 reference", decode(reference.outputs[i:i + 1])[0])]
        if int8 is not None:
            panels.append((f"{int8[0]} (INT8)", decode(int8[1])[0]))
            entry["int8_target"] = int8[0]
        entry["boxes"] = {title: len(d[0]) for title, d in panels}
        _draw(x[0], splits.val_y[i], panels, root / IMAGE)
        entry["image"] = IMAGE
    except Exception as e:  # the tables carry the figures; a plot never fails a build
        entry["note"] = f"figure not drawn: {type(e).__name__}: {str(e)[:200]}"
    return entry


def _pixels(x: np.ndarray) -> np.ndarray:
    """An NCHW sample scaled as load_coco does, back to HWC 0..1 for display."""
    return np.clip(np.transpose(x, (1, 2, 0)) * 0.5 + 0.5, 0, 1)


def _draw(x: np.ndarray, truth: list[Any], panels: list[tuple[str, Any]], out: Path) -> None:
    """One panel per model: its boxes (solid, class colour, score) over the image, the
    ground truth dashed white."""
    from matplotlib.patches import Rectangle

    plt = _pyplot()
    with plt.rc_context({**_STYLE, "axes.grid": False}):
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4.3), squeeze=False)
        for ax, (title, (boxes, scores, classes)) in zip(axes[0], panels, strict=True):
            ax.imshow(_pixels(x), interpolation="nearest")
            for _, (x0, y0, x1, y1) in truth:
                ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ls="--",
                                       lw=1, ec="white"))
            for b, s, c in zip(boxes, scores, classes, strict=True):
                color = _CLASS_COLORS[int(c) % len(_CLASS_COLORS)]
                ax.add_patch(Rectangle((b[0], b[1]), b[2] - b[0], b[3] - b[1], fill=False,
                                       lw=1.5, ec=color))
                ax.text(b[0], b[1] - 1, f"{int(c)} {s:.2f}", color=color, fontsize=7)
            ax.set_title(f"{title}: {len(boxes)} boxes")
            ax.set_xticks([])
            ax.set_yticks([])
        _save(plt, fig, out)


def _rows(manifest: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in manifest.get("targets", []):
        m = t.get("metric") or {}
        if m.get("name") not in DETECTION_METRICS:
            continue
        ci = m.get("drop_ci95") or [None, None]
        rows.append([t["name"], f"{100 * m['value']:.2f}", f"{100 * m['reference']:.2f}",
                     f"{m['drop']:.2f}", "—" if ci[0] is None else f"{ci[0]:.2f} .. {ci[1]:.2f}"])
    return rows


HEADER = ["target", "mAP (%)", "FP32 mAP (%)", "drop (pt)", "drop 95% CI (pt)"]


def _packing_line(manifest: dict[str, Any]) -> list[str]:
    packing = manifest.get("outputs")
    if not packing:
        return []
    parts = ", ".join(f"`{o['name']}` {o['shape']} at {o['offset']} (+{o['length']})"
                      for o in packing["outputs"])
    return [f"- outputs packed into one ({packing['layout']} layout, axis {packing['axis']}, "
            f"shape {packing['packed_shape']}): {parts}"]


def markdown(manifest: dict[str, Any], table: Callable[[list[str], list[list[str]]], str]
             ) -> list[str]:
    """The report.md section; nothing for a build that is not a detector's."""
    det = manifest.get("detection")
    if not det:
        return []
    name = (manifest.get("metric") or {}).get("name", "map50")
    parts = ["## Detection", "", f"{name} per target on {manifest.get('data', {}).get('val')} "
             "validation images (boxes decoded and NMS'd as pipeline/detection.py and "
             "es_detect.c do):", "", table(HEADER, _rows(manifest)), "", *_packing_line(manifest)]
    if det.get("image"):
        parts += ["", f"Validation image {det['sample']}: FP32 boxes beside "
                      f"{det.get('int8_target') or 'no INT8 target'}'s (ground truth dashed):",
                  "", f"![detections]({det['image']})"]
    elif det.get("note"):
        parts += ["", f"- {det['note']}"]
    return parts + [""]


def html_section(manifest: dict[str, Any], table: Callable[[list[str], list[list[str]]], str]
                 ) -> list[str]:
    """The report.html section (the same content as ``markdown``)."""
    det = manifest.get("detection")
    if not det:
        return []
    out = ["<h2>Detection</h2>", table(HEADER, _rows(manifest))]
    out += [f"<p>{html.escape(line[2:])}</p>" for line in _packing_line(manifest)]
    if det.get("image"):
        out.append(f'<img src="{html.escape(det["image"])}" alt="detections">')
    return out
