"""The report's "Device runtimes" table: artifact x declared runtime release -> ok / op
missing / disagrees, from each target's ``runtime_check`` manifest entry
(``runtime_check.py``). Kept apart from ``report.py``, which calls the two renderers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HEADER = ["target", "runtime", "status", "static", "run there", "note"]


def rows(manifest: dict[str, Any]) -> list[list[str]]:
    out = []
    for t in manifest.get("targets", []):
        rc = t.get("runtime_check")
        if not rc:
            continue
        static = rc.get("static") or {}
        dyn = rc.get("dynamic") or {}
        found = "; ".join(f"{f['op']} v{f['version']} (max {f['max_version']})"
                          for f in static.get("findings", []))
        ran = dyn.get("status", "not run (--verify-runtimes)")
        if dyn.get("max_abs_diff") is not None:
            ran += f", max abs diff {dyn['max_abs_diff']:.3g} on {dyn.get('samples')} samples"
        note = rc.get("retried") or found or (dyn.get("detail") or "").split("\n")[0][:120]
        out.append([t["name"], str(rc.get("runtime")), str(rc.get("status")),
                    static.get("status", "—"), ran, note or ""])
    return out


def markdown(manifest: dict[str, Any], table: Callable[[list[str], list[list[str]]], str]
             ) -> list[str]:
    found = rows(manifest)
    return ["## Device runtimes", "", table(HEADER, found), ""] if found else []


def html_section(manifest: dict[str, Any],
                 table: Callable[[list[str], list[list[str]]], str]) -> list[str]:
    found = rows(manifest)
    return ["<h2>Device runtimes</h2>", table(HEADER, found)] if found else []
