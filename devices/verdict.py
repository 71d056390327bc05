"""A bench's results and its verdict: rows for tables, device failures (exit 5) and
latency budget misses (exit 3)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgesmith.errors import BudgetError, DeviceError


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
                            "energy_j": t.get("energy_j_per_inference"),
                            "budget_ms": d.get("budget_latency_ms"),
                            "message": t.get("message")})
        return out

    def budget_misses(self) -> list[dict[str, Any]]:
        return [r for r in self.rows() if r["status"] == "ok" and r["budget_ms"] is not None
                and r["p50"] is not None and r["p50"] > r["budget_ms"]]

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
        misses = self.budget_misses()
        if misses:
            table = "\n".join(f"  {m['device']:<20} {m['target']:<16} p50 {m['p50']:.3f} ms"
                              f" > budget {m['budget_ms']:g} ms" for m in misses)
            raise BudgetError(
                f"{len(misses)} target(s) over the latency budget (p50):\n{table}",
                where=str(self.build_dir / "manifest.json"),
                fix="pick a faster target/precision for the device, or raise "
                    "budgets.latency_ms in its profile",
            )
