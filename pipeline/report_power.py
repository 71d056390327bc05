"""The report's power-sweep table and notes (``edgesmith bench --power-sweep``): one row per
setting a device measured, whether it meets the profile's budgets, and where each
target's energy figures come from or why there are none."""

from __future__ import annotations

from typing import Any


def _fmt(v: Any, spec: str) -> str:
    return "—" if v is None else format(v, spec) if isinstance(v, float) else str(v)


def _within(s: dict[str, Any], result: dict[str, Any]) -> str:
    """Whether a sweep setting meets the device's latency and energy budgets: yes, no,
    or ? (a budget set but no figure to judge it: energy unavailable)."""
    checks = []
    for budget, value in ((result.get("budget_latency_ms"),
                           (s.get("latency_ms") or {}).get("p50")),
                          (result.get("budget_energy_mj"), s.get("energy_mj"))):
        if budget is not None:
            checks.append(None if value is None else value <= budget)
    if not checks or s.get("status") != "ok":
        return "—"
    if False in checks:
        return "no"
    return "?" if None in checks else "yes"


def sweep_rows(manifest: dict[str, Any]) -> list[list[str]]:
    """One row per power-sweep setting of every device and target."""
    rows = []
    for device, result in sorted((manifest.get("bench") or {}).items()):
        for t in result.get("targets", []) if isinstance(result, dict) else []:
            for s in (t.get("power_sweep") or {}).get("settings") or []:
                lat = s.get("latency_ms") or {}
                rows.append([device, str(t.get("name", "?")), str(s.get("label")),
                             str(s.get("status")), _fmt(lat.get("p50"), ".3f"),
                             _fmt(lat.get("p99"), ".3f"), _fmt(s.get("throughput_ips"), ".0f"),
                             _fmt(s.get("energy_mj"), ".4g"), _fmt(s.get("power_w"), ".3g"),
                             _within(s, result), s.get("message") or ""])
    return rows


SWEEP_HEADER = ["device", "target", "setting", "status", "p50 ms", "p99 ms", "inf/s",
                "mJ/inf", "W", "within budgets", "note"]


def sweep_notes(manifest: dict[str, Any]) -> list[str]:
    """Per swept target: where its energy figures come from, or why there are none; what
    cpufreq offered; whether the settings were put back."""
    notes = []
    for device, result in sorted((manifest.get("bench") or {}).items()):
        for t in result.get("targets", []) if isinstance(result, dict) else []:
            sweep = t.get("power_sweep")
            if not isinstance(sweep, dict):
                continue
            where = f"{device}/{t.get('name')}"
            source = str(sweep.get("energy_source"))
            notes.append(f"{where}: energy {source}" if source.startswith("unavailable")
                         else f"{where}: energy from {source}")
            why = (sweep.get("cpufreq") or {}).get("why")
            if why:
                notes.append(f"{where}: cpufreq unavailable: {why}")
            if sweep.get("message"):
                notes.append(f"{where}: power sweep {sweep.get('status')}: {sweep['message']}")
            elif sweep.get("restored"):
                notes.append(f"{where}: cpufreq settings restored after the sweep "
                             f"(sysfs root {sweep.get('sysfs_root')})")
    return notes
