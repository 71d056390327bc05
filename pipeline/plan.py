"""``edgesmith plan``: the C runtime's memory plan of a build, as the generator drew it.

Every generated C folder holds ``plan.txt`` (``targets.planner.render_plan``, after TFLite
Micro's PrintMemoryPlan): each arena buffer's offset, size and lifetime, and one row per
step. This finds the plans of a build folder (or of one C folder) for the CLI to print.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edgesmith import outdir
from edgesmith.errors import UsageError

PLAN = "plan.txt"


@dataclass(frozen=True)
class TargetPlan:
    name: str  # the build's target name (c-int8), or the folder's name
    folder: Path
    text: str
    arena_bytes: int | None = None


def plans(path: Path) -> list[TargetPlan]:
    """The plan of a generated C folder, or of every C target of a build folder."""
    path = Path(path)
    if (path / PLAN).is_file():
        return [TargetPlan(path.name, path, (path / PLAN).read_text(encoding="utf-8"))]
    outdir.recover(path)  # a publish cut short leaves the last good build where readers look
    manifest = path / "manifest.json"
    if not manifest.is_file():
        raise UsageError("neither a build folder nor a generated C folder",
                         where=str(path),
                         fix="pass --out of `edgesmith build`, or its targets/c-<precision>")
    try:
        targets = json.loads(manifest.read_text(encoding="utf-8")).get("targets", [])
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {manifest}: {e}", where=str(manifest),
                         fix="rebuild the folder with `edgesmith build`") from None
    found = []
    for t in targets:
        folder = path / t.get("path", "") if t.get("format") == "c" and t.get("path") else None
        if folder is not None and (folder / PLAN).is_file():
            found.append(TargetPlan(t["name"], folder, (folder / PLAN).read_text(encoding="utf-8"),
                                    (t.get("meta") or {}).get("arena_bytes")))
    if not found:
        raise UsageError("the build has no C target with a memory plan",
                         where=str(manifest),
                         fix="add a `format: c` target to the profile (or -t c:int8) and rebuild")
    return found
