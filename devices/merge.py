"""Merging a device's results into the build folder's ``manifest.json``.

What a device's entry keeps across runs: a run that fails keeps the last good results
(updated with whatever it did measure) and records itself beside them as ``last_error``.
Every result names the ``artifact_sha256`` it measured; results whose hash is no longer
the manifest's artifact move to ``stale_targets``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from edgesmith.artifact import write_json_atomic


def device_record(previous: dict[str, Any] | None, run: dict[str, Any]) -> dict[str, Any]:
    """A device's entry after ``run``: the run itself when it succeeded (or when there is
    nothing earlier worth keeping); otherwise the previous entry, its targets replaced by
    those this run measured, and this run's failure recorded beside them as ``last_error``.
    A failed reconnect must not erase what the device measured before."""
    if run["status"] == "ok" or not (previous or {}).get("targets"):
        return run
    assert previous is not None
    record = {k: v for k, v in previous.items() if k != "last_error"}
    fresh = {t.get("name"): t for t in run["targets"]}
    record["targets"] = ([fresh.pop(t.get("name"), t) for t in previous["targets"]]
                         + list(fresh.values()))
    if run.get("error"):
        record["last_error"] = {"unix": int(time.time()), "status": run["status"],
                                **run["error"]}
    return record


def artifact_hashes(manifest: dict[str, Any]) -> dict[str, str | None]:
    """{target name: sha256} of every artifact the manifest holds."""
    return {t.get("name") or f"{t.get('format')}-{t.get('precision')}": t.get("sha256")
            for t in manifest.get("targets") or [] if t.get("path")}


def drop_stale(record: dict[str, Any], hashes: dict[str, str | None]) -> dict[str, Any]:
    """Move results measured on an artifact the manifest no longer holds (another sha256,
    or the target is gone) to ``stale_targets``; results without a hash (older edgesmith)
    cannot be judged and stay."""
    live, stale = [], list(record.get("stale_targets") or [])
    for t in record.get("targets") or []:
        sha = t.get("artifact_sha256")
        if sha is not None and hashes.get(t.get("name")) != sha:
            stale.append({"name": t.get("name"), "artifact_sha256": sha,
                          "measured_unix": t.get("measured_unix"),
                          "why": "the build now holds another artifact under this name"})
        else:
            live.append(t)
    if not stale:
        return record
    return {**record, "targets": live, "stale_targets": stale}


def merge_into_manifest(root: Path, device: str, record: dict[str, Any]) -> dict[str, Any]:
    """Put ``record`` under ``manifest["bench"][device]``, re-judging every entry against the
    manifest's artifact hashes. Returns the record as stored. The caller holds the build
    folder's lock (``outdir.lock``) and re-renders the report (``pipeline/bench.py``)."""
    path = root / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    hashes = artifact_hashes(manifest)
    bench = {**(manifest.get("bench") or {}), device: record}
    manifest["bench"] = {name: drop_stale(r, hashes) if isinstance(r, dict) else r
                         for name, r in bench.items()}
    write_json_atomic(path, manifest)
    return manifest["bench"][device]
