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


def _save(plt: Any, fig: Any, out_png: Path | str) -> Path:
    """Lay out, write without a timestamp (the same figures give the same bytes), close."""
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, format="png", metadata=_PNG_META)
    plt.close(fig)
    return out_png


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
        return _save(plt, fig, out_png)


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
        return _save(plt, fig, out_png)


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both latency and energy, by latency: what a
    power-aware schedule would choose from (lower is better on both axes)."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(set(points)):
        if not front or y < front[-1][1]:
            front.append((x, y))
    return front


def _swept(bench: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]]:
    """{target: [(device, device entry, target result)]} for every target with a sweep."""
    out: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {}
    for dev in sorted(bench):
        entry = bench[dev] if isinstance(bench[dev], dict) else {}
        for t in entry.get("targets") or []:
            if isinstance(t.get("power_sweep"), dict):
                out.setdefault(str(t.get("name")), []).append((dev, entry, t))
    return out


def _sweep_points(result: dict[str, Any]) -> list[tuple[float, float, str]]:
    points = []
    for s in result["power_sweep"].get("settings") or []:
        x = _num((s.get("latency_ms") or {}).get("p50"))
        y = _num(s.get("energy_mj"))
        if s.get("status") == "ok" and x is not None and y is not None:
            points.append((x, y, str(s.get("label"))))
    return points


def _draw_budgets(ax, entries: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
    lat = {_num(e.get("budget_latency_ms")) for _, e, _ in entries} - {None}
    mj = {_num(e.get("budget_energy_mj")) for _, e, _ in entries} - {None}
    for v in sorted(lat):
        ax.axvline(v, color="#C44E52", linestyle="--", linewidth=0.8,
                   label=f"budgets.latency_ms {v:g}")
    for v in sorted(mj):
        ax.axhline(v, color="#C44E52", linestyle=":", linewidth=0.8,
                   label=f"budgets.energy_mj {v:g}")


def _log_if_wide(ax, points: list[tuple[float, float, str]]) -> None:
    """Log axes where figures span more than 20x (a frame period's idle energy beside
    back-to-back runs), so the cluster near the front stays readable."""
    for values, set_scale in (([p[0] for p in points], ax.set_xscale),
                              ([p[1] for p in points], ax.set_yscale)):
        positive = [v for v in values if v > 0]
        if positive and max(positive) > 20 * min(positive):
            set_scale("log")


def _draw_target(ax, plt, target: str,
                 entries: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
    """One target: each device's settings, its Pareto front, the budgets."""
    cmap = plt.get_cmap("tab10")
    unavailable = []
    for i, (dev, _entry, result) in enumerate(entries):
        points = _sweep_points(result)
        if not points:
            unavailable.append(f"{dev}: {result['power_sweep'].get('energy_source')}")
            continue
        ax.scatter([p[0] for p in points], [p[1] for p in points], color=cmap(i % 10), s=24,
                   zorder=3, label=dev)
        for x, y, label in points:
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(3, 3), fontsize=6)
        front = pareto_front([(x, y) for x, y, _ in points])
        ax.step([p[0] for p in front], [p[1] for p in front], where="post", color=cmap(i % 10),
                linewidth=1.0, alpha=0.7, label=f"{dev} Pareto front")
    _draw_budgets(ax, entries)
    _log_if_wide(ax, [p for _, _, r in entries for p in _sweep_points(r)])
    if unavailable:
        ax.text(0.5, 0.5, "energy unavailable\n" + "\n".join(unavailable), ha="center",
                va="center", fontsize=6, wrap=True, transform=ax.transAxes)
    ax.set_xlabel("latency p50 (ms)")
    ax.set_ylabel("energy per inference (mJ)")
    ax.set_title(f"{target}: energy vs latency per setting")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)


def plot_power(bench: dict[str, Any], out_png: Path) -> Path | None:
    """Energy per inference vs p50 latency, one panel per swept target: every setting of
    every device, each device's Pareto front, the profile's latency and energy budgets.
    A device without an energy sensor is named with why, never drawn as 0. None when no
    target was swept."""
    swept = _swept(bench)
    if not swept:
        return None
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        fig, axes = plt.subplots(len(swept), 1, figsize=(7, 3.6 * len(swept)), squeeze=False)
        for ax, (target, entries) in zip(axes[:, 0], sorted(swept.items()), strict=True):
            _draw_target(ax, plt, target, entries)
        return _save(plt, fig, out_png)
