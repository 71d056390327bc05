"""The report's section on the accuracy-aware INT8 fallback (``fallback.py``): which
layers each INT8 target kept in float, the calibration it ended with (min/max, or the
percentile ranges the fallback tried first), and its accuracy drop before and after."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

HEADER = ["target", "layers kept in float", "drop before", "drop after", "tries",
          "within budget", "calibration"]
TITLE = "INT8 layers kept in float (accuracy-aware fallback)"
NOTE = ("A min/max calibration that misses is first tried again with percentile ranges "
        "(ONNX and C: onnxruntime's; OpenVINO: nncf's mean per-sample min/max; TFLite: "
        "TensorFlow's min/max ranges narrowed to the percentile). "
        "Layers ranked by their own SQNR when quantized alone (most harmful first; a "
        "Sigmoid and the Mul it gates as one), screened with onnxruntime, then confirmed "
        "on each target by its validation accuracy; at most {cap} unit(s) may fall back. "
        "--no-fallback turns this off.")


def rows(manifest: dict[str, Any]) -> list[list[str]]:
    """One row per target the fallback ran for."""
    out = []
    for t in manifest.get("targets", []):
        fb = t.get("fallback")
        if not fb:
            continue
        layers = ", ".join(fb["layers"] if fb["applied"] else fb.get("tried_layers") or [])
        out.append([t["name"], (layers if fb["applied"] else f"(tried) {layers}") or "—",
                    _pt(fb.get("drop_before_pt")), _pt(fb.get("drop_after_pt")),
                    str(fb.get("tried", 0)), "yes" if fb["applied"] else "no",
                    _calibration(fb.get("calibration"))])
    return out


def _calibration(calib: dict[str, Any] | None) -> str:
    """The method the target ended with, and each method's screened drop."""
    if not calib:
        return "—"
    tried = "; ".join(f"{s['method']}{' on ' + s['runtime'] if s.get('runtime') else ''} "
                      f"{_pt(s.get('drop_pt'))}" for s in calib.get("screen", []))
    return f"{calib['method']} ({tried})" if tried else calib["method"]


def _pt(v: Any) -> str:
    return "—" if v is None else f"{v:.2f} pt"


def _cap(manifest: dict[str, Any]) -> int:
    return max((t["fallback"].get("cap", 0) for t in manifest.get("targets", [])
                if t.get("fallback")), default=0)


def markdown(manifest: dict[str, Any], table: Callable[[list[str], list[list[str]]], str]
             ) -> list[str]:
    found = rows(manifest)
    if not found:
        return []
    return [f"## {TITLE}", "", table(HEADER, found), "",
            NOTE.format(cap=_cap(manifest)), ""]


def html_section(manifest: dict[str, Any],
                 table: Callable[[list[str], list[list[str]]], str]) -> list[str]:
    found = rows(manifest)
    if not found:
        return []
    return [f"<h2>{html.escape(TITLE)}</h2>", table(HEADER, found),
            f"<p>{html.escape(NOTE.format(cap=_cap(manifest)))}</p>"]
