"""The report's two plots: targets (accuracy vs size, host latency) and on-device latency.

Pure functions of the manifest's data: same manifest, same PNG bytes (Agg backend, fixed
size, DPI and style, no timestamps in the file). Targets without a figure (Core ML off
macOS: "not run here") are left out of the plot they have no figure for, never drawn as 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_STYLE = {"font.size": 9, "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 100,
          "savefig.dpi": 100, "axes.spines.top": False, "axes.spines.right": False}
_FORMAT_COLORS = {"onnx": "#4C72B0", "tflite": "#DD8452", "openvino": "#55A868",
                  "coreml": "#C44E52", "c": "#8172B3"}
_PNG_META = {"Software": None}  # no library version in the file: bytes depend on data only


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _color(fmt: str) -> str:
    return _FORMAT_COLORS.get(fmt, "#777777")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def plot_targets(targets: list[dict[str, Any]], out_png: Path) -> Path:
    """Left: top-1 accuracy (%) vs size (KB), one point per target. Right: host p50 latency."""
    plt = _pyplot()
    rows = sorted(targets, key=lambda t: str(t.get("name", "")))
    with plt.rc_context(_STYLE):
        fig, (ax_acc, ax_lat) = plt.subplots(1, 2, figsize=(10, 4))
        plotted = [t for t in rows if _num(t.get("accuracy")) is not None
                   and _num(t.get("size_bytes")) is not None]
        for t in plotted:
            x, y = t["size_bytes"] / 1024, 100 * t["accuracy"]
            ax_acc.scatter([x], [y], color=_color(t.get("format", "")), s=36, zorder=3)
            ax_acc.annotate(t.get("name", "?"), (x, y), textcoords="offset points",
                            xytext=(4, 4), fontsize=7)
        ref = next((_num(t.get("reference_accuracy")) for t in rows
                    if _num(t.get("reference_accuracy")) is not None), None)
        if ref is not None:
            ax_acc.axhline(100 * ref, color="#444444", linestyle="--", linewidth=0.8,
                           label="FP32 torch")
            ax_acc.legend(loc="lower right", fontsize=7)
        ax_acc.set_xlabel("size (KB)")
        ax_acc.set_ylabel("top-1 accuracy (%)")
        ax_acc.set_title("accuracy vs size")
        if not plotted:
            ax_acc.text(0.5, 0.5, "no accuracy figures", ha="center", va="center",
                        transform=ax_acc.transAxes)

        timed = [t for t in rows if _num(t.get("latency_ms_p50")) is not None]
        names = [t.get("name", "?") for t in timed]
        ax_lat.barh(range(len(timed)), [t["latency_ms_p50"] for t in timed],
                    color=[_color(t.get("format", "")) for t in timed])
        ax_lat.set_yticks(range(len(timed)), names)
        ax_lat.invert_yaxis()
        ax_lat.set_xlabel("p50 latency on the build host (ms)")
        ax_lat.set_title("latency per target")
        skipped = [t.get("name", "?") for t in rows if t not in timed]
        if skipped:
            ax_lat.text(1.0, -0.18, "not run here: " + ", ".join(skipped), ha="right",
                        va="top", fontsize=7, transform=ax_lat.transAxes)
        fig.tight_layout()
        out_png = Path(out_png)
        out_png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_png, format="png", metadata=_PNG_META)
        plt.close(fig)
    return out_png


def plot_bench(bench: dict[str, Any], out_png: Path) -> Path:
    """p50 latency per target, one group of bars per target and one bar per device;
    the p90..p99 spread as an error bar where the device reported it."""
    plt = _pyplot()
    devices = sorted(bench)
    targets = sorted({str(t.get("name")) for d in devices
                      for t in (bench[d] or {}).get("targets", []) if t.get("name")})
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(targets) + 2), 4))
        width = 0.8 / max(1, len(devices))
        cmap = plt.get_cmap("tab10")
        for i, dev in enumerate(devices):
            by_name = {t.get("name"): t for t in (bench[dev] or {}).get("targets", [])}
            xs, p50s, errs = [], [], [[], []]
            for j, name in enumerate(targets):
                lat = (by_name.get(name) or {}).get("latency_ms") or {}
                p50 = _num(lat.get("p50"))
                if p50 is None:
                    continue
                xs.append(j + (i - (len(devices) - 1) / 2) * width)
                p50s.append(p50)
                p99 = _num(lat.get("p99"))
                low = _num(lat.get("min"))
                errs[0].append(max(0.0, p50 - low) if low is not None else 0.0)
                errs[1].append(max(0.0, p99 - p50) if p99 is not None else 0.0)
            if xs:
                ax.bar(xs, p50s, width=width, color=cmap(i % 10), label=dev,
                       yerr=errs, capsize=2, error_kw={"linewidth": 0.7})
        ax.set_xticks(range(len(targets)), targets, rotation=30, ha="right")
        ax.set_ylabel("latency p50 (ms); whiskers min..p99")
        ax.set_title("on-device latency per target")
        if devices:
            ax.legend(fontsize=7)
        fig.tight_layout()
        out_png = Path(out_png)
        out_png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_png, format="png", metadata=_PNG_META)
        plt.close(fig)
    return out_png
