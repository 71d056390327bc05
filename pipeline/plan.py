"""``edgesmith plan``: the C runtime's memory plan of a build, as the generator drew it.

Every generated C folder holds ``plan.txt`` (``targets.planner.render_plan``, after TFLite
Micro's PrintMemoryPlan): each arena buffer's offset, size and lifetime, and one row per
step; and ``plan.json``, the same plan's figures as data (arena, lower bound and, for a
tiled build, ``tiling``: grid, halo, split, arena untiled and tiled, extra MACs, the
candidates weighed). This finds the plans of a build folder (or of one C folder) for the
CLI to print.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgesmith import outdir
from edgesmith.errors import UsageError

PLAN = "plan.txt"
FIGURES = "plan.json"


@dataclass(frozen=True)
class TargetPlan:
    name: str  # the build's target name (c-int8), or the folder's name
    folder: Path
    text: str
    arena_bytes: int | None = None
    figures: dict[str, Any] | None = None  # plan.json (None: a folder generated before it)

    def summary(self) -> dict[str, Any]:
        """What `edgesmith plan --json` prints for this target."""
        f = self.figures or {}
        return {"target": self.name, "folder": str(self.folder),
                "arena_bytes": self.arena_bytes if self.arena_bytes is not None
                else f.get("arena_bytes"), "lower_bound_bytes": f.get("lower_bound_bytes"),
                "tiling": f.get("tiling"), "input_arenas": f.get("input_arenas"),
                "plan": self.text}


def _figures(folder: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((folder / FIGURES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def plans(path: Path) -> list[TargetPlan]:
    """The plan of a generated C folder, or of every C target of a build folder."""
    path = Path(path)
    if (path / PLAN).is_file():
        return [TargetPlan(path.name, path, (path / PLAN).read_text(encoding="utf-8"),
                           figures=_figures(path))]
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
            meta = t.get("meta") or {}
            found.append(TargetPlan(t["name"], folder, (folder / PLAN).read_text(encoding="utf-8"),
                                    meta.get("arena_bytes"), _figures(folder) or meta))
    if not found:
        raise UsageError("the build has no C target with a memory plan",
                         where=str(manifest),
                         fix="add a `format: c` target to the profile (or -t c:int8) and rebuild")
    return found
