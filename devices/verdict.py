"""A bench's results and its verdict: rows for tables, device failures (exit 5) and
latency and energy budget misses (exit 3).

Both budgets judge a target as found on the device (its first measurement; with
``--power-sweep``, energy comes from the sweep's "as found" setting when the plain run had
no sensor reading). A setting of the sweep that meets both budgets is shown in the report,
not taken as the verdict: the device runs as found unless someone sets it otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.errors import BudgetError, DeviceError


def energy_mj(target: dict[str, Any]) -> float | None:
    """Energy per inference as found (mJ): the plain run's reading, else the power sweep's
    "as found" setting; None where no sensor gave one."""
    joules = target.get("energy_j_per_inference")
    if isinstance(joules, int | float):
        return 1e3 * joules
    for s in (target.get("power_sweep") or {}).get("settings") or []:
        if s.get("label") == "as found" and isinstance(s.get("energy_mj"), int | float):
            return float(s["energy_mj"])
    return None


# a device's boxes agree with the host's when each is matched: same class, IoU >= MATCH_IOU,
# score within SCORE_TOL (what an fp32 runtime must meet; int8 is judged by its match rate)
MATCH_IOU = 0.9
SCORE_TOL = 1e-3


def _iou(a: list[float], b: list[float]) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - iw * ih
    return iw * ih / union if union > 0 else 0.0


def matched(host: list[list[float]], device: list[list[float]],
            score_tol: float | None) -> int:
    """How many host boxes find an unused device box of their class with IoU >= MATCH_IOU
    (and, given ``score_tol``, a score that close), taken greedily by best IoU."""
    free, count = list(range(len(device))), 0
    for h in host:
        fits = [(_iou(h, device[j]), j) for j in free if device[j][5] == h[5]
                and (score_tol is None or abs(device[j][4] - h[4]) <= score_tol)]
        best = max(fits, default=None)
        if best is not None and best[0] >= MATCH_IOU:
            free.remove(best[1])
            count += 1
    return count


def judge_detections(found: dict[str, Any], host: list[list[list[float]]],
                     labels: list[list[list[float]]] | None) -> dict[str, Any]:
    """The script's ``detections`` judged against the host's boxes for the same samples:
    ``agree_with_host`` (every sample: same count, each box matched within SCORE_TOL),
    ``match_rate`` (matched / the larger count, scores not compared: INT8's figure) and,
    where the build kept the samples' labels, mAP@0.5 of the device's and the host's boxes."""
    boxes = found.get("boxes_per_sample")
    if not isinstance(boxes, list) or len(boxes) != len(host):
        return {**found, "agree_with_host": None,
                "error": found.get("error") or f"{len(boxes or [])} samples of boxes, the "
                                                f"host has {len(host)}"}
    agree = all(len(d) == len(h) and matched(h, d, SCORE_TOL) == len(h)
                for h, d in zip(host, boxes, strict=True))
    pairs = sum(matched(h, d, None) for h, d in zip(host, boxes, strict=True))
    most = sum(max(len(h), len(d)) for h, d in zip(host, boxes, strict=True))
    out = {**found, "agree_with_host": agree, "host_boxes": sum(len(h) for h in host),
           "matched": pairs, "match_rate": pairs / most if most else 1.0,
           "match": {"iou": MATCH_IOU, "score_tol": SCORE_TOL}}
    if labels is not None:
        out["map50"], out["host_map50"] = map50(boxes, labels), map50(host, labels)
    return out


def map50(boxes: list[list[list[float]]], labels: list[list[list[float]]]) -> float | None:
    """COCO AP at IoU 0.5 (pycocotools) of [[x0, y0, x1, y1, score, class], ...] per sample
    against [[class, x0, y0, x1, y1], ...]; None without pycocotools or any label."""
    import contextlib
    import io

    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        return None
    anns = [{"id": k + 1, "image_id": i + 1, "category_id": int(c) + 1, "iscrowd": 0,
             "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0)}
            for k, (i, (c, x0, y0, x1, y1)) in enumerate(
                (i, obj) for i, objs in enumerate(labels) for obj in objs)]
    dets = [[i + 1, b[0], b[1], b[2] - b[0], b[3] - b[1], b[4], int(b[5]) + 1]
            for i, sample in enumerate(boxes) for b in sample]
    if not anns:
        return None
    if not dets:
        return 0.0
    with contextlib.redirect_stdout(io.StringIO()):  # COCO prints progress
        coco = COCO()
        coco.dataset = {"images": [{"id": i + 1} for i in range(len(labels))],
                        "annotations": anns,
                        "categories": [{"id": c} for c in sorted({a["category_id"]
                                                                  for a in anns})]}
        coco.createIndex()
        ev = COCOeval(coco, coco.loadRes(np.asarray(dets, dtype=np.float64)), "bbox")
        ev.params.iouThrs = np.array([0.5])
        ev.params.areaRng, ev.params.areaRngLbl = [[0, 1e5 ** 2]], ["all"]
        ev.evaluate()
        ev.accumulate()
    precision = ev.eval["precision"][0, :, :, 0, -1]
    found = precision[precision > -1]
    return float(found.mean()) if found.size else 0.0


@dataclass
class BenchRun:
    build_dir: Path
    devices: dict[str, dict[str, Any]]

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for name, d in self.devices.items():
            for t in d.get("targets", []):
                lat = t.get("latency_ms") or {}
                out.append({"device": name, "target": t.get("name"),
                            "status": t.get("status"), "p50": lat.get("p50"),
                            "p90": lat.get("p90"), "p99": lat.get("p99"),
                            "min": lat.get("min"), "throughput": t.get("throughput_ips"),
                            "rss_mb": t.get("peak_rss_mb"), "load_ms": t.get("load_ms"),
                            "parity": t.get("parity"),
                            # top-1 on the raw frames the device preprocessed itself
                            "accuracy": t.get("accuracy"),
                            # a detector's boxes decoded on the device, judged by the host
                            "detections": t.get("detections"),
                            "energy_j": t.get("energy_j_per_inference"),
                            "energy_mj": energy_mj(t),
                            "budget_ms": d.get("budget_latency_ms"),
                            "budget_mj": d.get("budget_energy_mj"),
                            "message": t.get("message")})
        return out

    def budget_misses(self) -> list[dict[str, Any]]:
        return [r for r in self.rows() if r["status"] == "ok" and r["budget_ms"] is not None
                and r["p50"] is not None and r["p50"] > r["budget_ms"]]

    def energy_misses(self) -> list[dict[str, Any]]:
        """Targets whose energy per inference is over budgets.energy_mj. Without a sensor
        reading there is no figure to judge: not a miss (the report says unavailable)."""
        return [r for r in self.rows() if r["status"] == "ok" and r["budget_mj"] is not None
                and r["energy_mj"] is not None and r["energy_mj"] > r["budget_mj"]]

    def failures(self) -> dict[str, str]:
        """Device-level failures and targets that crashed (missing runtimes are not)."""
        out = {}
        for name, d in self.devices.items():
            if d.get("error"):
                e = d["error"]
                out[name] = f"{e.get('where') or name}: {e.get('what')}" + (
                    f"\n    fix: {e['fix']}" if e.get("fix") else "")
            for t in d.get("targets", []):
                if t.get("status") == "error":
                    out[f"{name}/{t.get('name')}"] = t.get("message") or "failed"
                sweep = t.get("power_sweep") or {}
                if sweep.get("status") == "error":
                    out[f"{name}/{t.get('name')}/power-sweep"] = sweep.get("message") or "failed"
        return out

    def to_json(self) -> dict[str, Any]:
        return {"build": str(self.build_dir), "devices": self.devices}

    def raise_for_status(self) -> None:
        failures = self.failures()
        if failures:
            lines = [f"{k}: {v}" for k, v in failures.items()]
            raise DeviceError(
                f"{len(failures)} bench failure(s):\n  " + "\n  ".join(lines),
                where=str(self.build_dir / "bench"),
                fix="see each failure's fix; results that were measured are kept in "
                    "bench/<device>.json and manifest.json",
            )
        latency, energy = self.budget_misses(), self.energy_misses()
        parts = []
        if latency:
            parts.append(f"{len(latency)} target(s) over the latency budget (p50):\n" + "\n".join(
                f"  {m['device']:<20} {m['target']:<16} p50 {m['p50']:.3f} ms"
                f" > budget {m['budget_ms']:g} ms" for m in latency))
        if energy:
            parts.append(f"{len(energy)} target(s) over the energy budget:\n" + "\n".join(
                f"  {m['device']:<20} {m['target']:<16} {m['energy_mj']:.4g} mJ per inference"
                f" > budget {m['budget_mj']:g} mJ" for m in energy))
        if parts:
            raise BudgetError(
                "\n".join(parts),
                where=str(self.build_dir / "manifest.json"),
                fix="pick a faster or leaner target/precision for the device (a power "
                    "sweep shows which settings fit), or raise budgets.latency_ms / "
                    "budgets.energy_mj in its profile",
            )
