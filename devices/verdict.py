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
