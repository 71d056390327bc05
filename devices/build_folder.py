"""Reading a build folder for a bench: ``manifest.json``, checked as untrusted input.

Every path the manifest names must be relative, free of ``..`` and (symlinks resolved)
inside the build folder; target names must be plain names; formats must be registered.
Anything else is a hostile or broken manifest, refused (exit 2) before any upload.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from edgesmith.errors import UsageError
from edgesmith.profiles.schema import Profile

from . import formats

_TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
REBUILD = "rebuild with `edgesmith build`"


@dataclass
class BenchTarget:
    """One artifact as a device runs it."""

    name: str
    format: str
    precision: str
    folder: Path  # local folder holding the files
    files: list[str]
    model: str  # relative to folder ("." when the folder is the model, e.g. C sources)
    weights: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # the manifest's target meta
    prebuilt: dict[str, Any] | None = None  # built here for the device (e.g. {cc, cflags})
    sha256: str | None = None  # the manifest's artifact hash: what the results belong to
    options: dict[str, Any] = field(default_factory=dict)  # validated, for the device loader
    threads: int = 0  # the format's threads option on this device; 0: runtime default


@dataclass
class Build:
    root: Path
    manifest: dict[str, Any]
    profile: Profile | None
    input: Path
    reference: Path
    targets: list[BenchTarget]
    skipped: dict[str, str] = field(default_factory=dict)


def inside(root: Path, rel: object, what: str, where: Path) -> Path:
    """``root / rel`` for a manifest path that is relative, has no ``..``, and (symlinks
    resolved) stays inside ``root``; anything else is a hostile or broken manifest."""
    bad = None
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        bad = "is not a relative path"
    elif rel.startswith(("/", "~")) or PurePosixPath(rel).is_absolute():
        bad = "is absolute"
    elif ".." in PurePosixPath(rel).parts:
        bad = "contains '..'"
    else:
        path = root / rel
        try:
            ok = path.resolve().is_relative_to(root.resolve())
        except (OSError, RuntimeError):
            ok = False
        if ok:
            return path
        bad = "points outside the build folder"
    raise UsageError(f"{what} {rel!r} {bad}", where=str(where),
                     fix="manifest paths must be relative and inside the build folder; "
                         "rebuild with `edgesmith build` rather than editing manifest.json")


def require_build(root: Path) -> None:
    """Refuse a folder that holds no build (before taking its lock, which would create it)."""
    if not (root / "manifest.json").is_file():
        raise UsageError(f"{root} is not a build folder (no manifest.json)", where=str(root),
                         fix="run `edgesmith build` first and pass its output folder")


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read manifest.json: {e}", where=str(path),
                         fix=REBUILD) from None


def load_build(build_dir: Path) -> Build:
    root = Path(build_dir)
    manifest_path = root / "manifest.json"
    require_build(root)
    manifest = _read_manifest(manifest_path)
    try:
        profile = Profile.model_validate(manifest.get("profile") or {})
    except ValueError:
        profile = None
    data = manifest.get("bench_data") or {}
    inp = inside(root, data.get("input", "data/bench_input.npy"), "bench_data.input",
                 manifest_path)
    ref = inside(root, data.get("reference", "data/bench_reference.npy"),
                 "bench_data.reference", manifest_path)
    for p in (inp, ref):
        if not p.is_file():
            raise UsageError(f"bench data {p.name} is missing", where=str(p), fix=REBUILD)
    targets, skipped = [], {}
    for t in manifest.get("targets") or []:
        name = t.get("name") or f"{t.get('format')}-{t.get('precision')}"
        if t.get("status", "ok") != "ok" or not t.get("path"):
            skipped[name] = f"not built ({t.get('status', 'no artifact')})"
            continue
        targets.append(_bench_target(root, name, t))
    if not targets:
        raise UsageError("the build has no target to bench", where=str(manifest_path),
                         fix="check `edgesmith build` output: every target failed or none "
                             "was listed in the profile")
    return Build(root, manifest, profile, inp, ref, targets, skipped)


def _bench_target(root: Path, name: str, t: dict[str, Any]) -> BenchTarget:
    manifest_path = root / "manifest.json"
    if not isinstance(name, str) or not _TARGET_NAME.fullmatch(name):
        raise UsageError(f"target name {name!r} is not a plain name", where=str(manifest_path),
                         fix="target names are letters, digits, '.', '-', '_' (e.g. onnx-fp32);"
                             " rebuild with `edgesmith build`")
    path = inside(root, t["path"], f"target {name}: path", manifest_path)
    spec = t.get("bench") or {}
    fmt = spec.get("format") or t["format"]
    if formats.target_for(fmt) is None:
        raise UsageError(f"target {name}: unknown format {fmt!r}", where=str(manifest_path),
                         fix=f"known formats: {', '.join(sorted(formats.discover()))}; "
                             f"{REBUILD}")
    listed = spec.get("files")
    # the artifact is a file (or a bundle such as .mlpackage) its spec lists, inside its
    # folder; or the folder itself is the artifact (the C sources), its files listed inside
    folder = path.parent if path.is_file() or path.name in (listed or []) else path
    files = list(listed or ([path.name] if path.is_file() else
                            sorted(p.name for p in path.iterdir())))
    for key in ("model", "weights"):
        if spec.get(key) is not None:
            inside(folder, spec[key], f"target {name}: bench.{key}", manifest_path)
    for f in files:
        inside(folder, f, f"target {name}: file", manifest_path)
        if not (folder / f).exists():
            raise UsageError(f"target {name}: file {f} is missing", where=str(folder / f),
                             fix=REBUILD)
    model = spec.get("model") or (path.name if folder != path else ".")
    return BenchTarget(name, fmt, spec.get("precision") or t.get("precision", "fp32"), folder,
                       files, model, spec.get("weights"), dict(t.get("meta") or {}),
                       sha256=t.get("sha256"))
