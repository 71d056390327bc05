"""What each device runs: every target with its options for that device (validated by its
format) and, where the format builds here for the device (the C target with a
``cross_cc``, or ``--prebuilt-c``), the files of that build instead of the artifact's.

Done before any device is contacted: a bad option or a compiler problem is one clear
error, not one per device. One build per target and recipe, shared by the devices. An
image-folder build's raw validation frames (``bench_data.frames``) and its preprocess
spec are checked here too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from edgesmith.errors import UsageError
from edgesmith.profiles.schema import Preprocess
from edgesmith.target import Target

from . import formats
from .build_folder import REBUILD, BenchTarget, Build, inside
from .device import Device

FRAME_CHANNELS = 3


@dataclass(frozen=True)
class Frames:
    """The build's raw validation frames: the index, the raw file it names, and the spec
    (manifest ``data.preprocess``) every device applies to them."""

    index: Path
    data: Path
    spec: dict[str, Any]


def _frames_problem(doc: Any) -> str | None:
    """Why a frames index cannot be read, or None."""
    if not isinstance(doc, dict):
        return "is not a JSON object"
    runs, labels, name = doc.get("runs"), doc.get("labels"), doc.get("data")
    if not isinstance(name, str) or PurePosixPath(name).name != name or name in ("", ".", ".."):
        return f"data {name!r} is not a file name beside the index"
    if not isinstance(runs, list) or not all(
            isinstance(r, list) and len(r) == 3 and all(type(v) is int and v > 0 for v in r)
            for r in runs):
        return "runs is not [[count, height, width], ...] of positive whole numbers"
    if not isinstance(labels, list) or not all(type(v) is int and v >= 0 for v in labels):
        return "labels is not a list of class numbers"
    if len(labels) != sum(r[0] for r in runs):
        return f"has {len(labels)} labels for {sum(r[0] for r in runs)} frames"
    return None


def _spec(manifest: dict[str, Any], where: Path) -> dict[str, Any]:
    """The build's preprocess spec (``data.preprocess``), as every implementation reads it."""
    raw = (manifest.get("data") or {}).get("preprocess")
    keys = Preprocess.model_fields
    try:
        spec = Preprocess.model_validate({k: v for k, v in (raw or {}).items() if k in keys})
    except (ValidationError, AttributeError) as e:
        raise UsageError(f"data.preprocess cannot be read: {e}", where=str(where),
                         fix=REBUILD) from None
    if raw is None:
        raise UsageError("bench_data.frames is set but data.preprocess is not",
                         where=str(where), fix=REBUILD)
    return spec.model_dump(mode="json")


def frames(build: Build) -> Frames | None:
    """The build's raw frames and spec, checked before any upload (a broken index or a
    frames file of the wrong size is exit 2 naming it); None when the build has none."""
    rel = (build.manifest.get("bench_data") or {}).get("frames")
    if rel is None:
        return None
    manifest = build.root / "manifest.json"
    index = inside(build.root, rel, "bench_data.frames", manifest)
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read the frames index: {e}", where=str(index),
                         fix=REBUILD) from None
    problem = _frames_problem(doc)
    if problem:
        raise UsageError(f"the frames index {problem}", where=str(index), fix=REBUILD)
    data = inside(index.parent, doc["data"], "frames data", index)
    want = sum(n * h * w * FRAME_CHANNELS for n, h, w in doc["runs"])
    have = data.stat().st_size if data.is_file() else None
    if have != want:
        raise UsageError(f"{data.name} is {'missing' if have is None else f'{have} bytes'}; "
                         f"the index lists {want} bytes of frames", where=str(data),
                         fix=REBUILD)
    return Frames(index, data, _spec(build.manifest, manifest))


@dataclass(frozen=True)
class Detect:
    """A detection build's bench samples as boxes (``data/bench_detect.json``, written by
    the build): the decode settings each device gets, the host's boxes per sample
    (``detection.decode`` on the reference outputs) and the samples' labels, if kept."""

    settings: dict[str, Any]
    host_boxes: list[list[list[float]]]
    labels: list[list[list[float]]] | None


def _detect_problem(doc: Any, samples: int) -> str | None:
    """Why a bench_detect.json cannot be used, or None."""
    if not isinstance(doc, dict) or not isinstance(doc.get("settings"), dict):
        return "is not a JSON object with 'settings'"
    st = doc["settings"]
    levels = st.get("levels")
    if not isinstance(levels, list) or not levels or not all(
            isinstance(lv, list) and len(lv) == 3 and all(type(v) is int and v > 0 for v in lv)
            for lv in levels):
        return "settings.levels is not [[stride, height, width], ...] of positive integers"
    if type(st.get("classes")) is not int or st["classes"] < 1 or type(st.get("max_boxes")) \
            is not int or not all(isinstance(st.get(k), int | float)
                                  for k in ("score_threshold", "iou_threshold")):
        return "settings lack classes, max_boxes, score_threshold or iou_threshold"
    for key in ("host_boxes", "labels"):
        rows = doc.get(key)
        if (rows is not None or key == "host_boxes") and not (
                isinstance(rows, list) and len(rows) == samples):
            return f"{key} is not one list per bench sample ({samples})"
    return None


def detect(build: Build) -> Detect | None:
    """The build's detection settings and host boxes, checked before any upload (a broken
    file is exit 2 naming it); None when the build is no detector with a packed head."""
    rel = (build.manifest.get("bench_data") or {}).get("detect")
    if rel is None:
        return None
    path = inside(build.root, rel, "bench_data.detect", build.root / "manifest.json")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read the detection file: {e}", where=str(path),
                         fix=REBUILD) from None
    samples = _samples(build.input)
    problem = _detect_problem(doc, samples)
    if problem:
        raise UsageError(f"the detection file's {problem}", where=str(path), fix=REBUILD)
    return Detect(doc["settings"], doc["host_boxes"], doc.get("labels"))


def _samples(npy: Path) -> int:
    """The bench input's sample count, from its .npy header."""
    return int(np.load(npy, mmap_mode="r").shape[0])


def _threads(target: Target, options: BaseModel) -> int:
    """The format's threads option (0: the runtime's default, or a format without one)."""
    name = target.device_threads_option
    return int(getattr(options, name) or 0) if name else 0


def per_device(build: Build, devices: list[Device], force_prebuild: bool | None,
               scratch: Path) -> dict[str, list[BenchTarget]]:
    """{device name: its targets}, built here where the format says so (``force_prebuild``:
    --prebuilt-c / --no-prebuilt-c, None when not given)."""
    frames(build)  # a broken frames index: one clear error before any device is contacted
    detect(build)  # likewise a broken detection file
    built: dict[tuple[str, str], tuple[Path, list[str]]] = {}
    out: dict[str, list[BenchTarget]] = {}
    for device in devices:
        mine = []
        for t in build.targets:
            target = formats.target_for(t.format)
            assert target is not None  # load_build refused unknown formats
            options = formats.options_for(target, t.name, device.name, build.profile,
                                          device.profile)
            t = replace(t, options=options.model_dump(mode="json"),
                        threads=_threads(target, options))
            plan = target.device_prebuild(options, t.meta, force_prebuild)
            if plan is None:
                mine.append(t)
                continue
            key = (t.name, json.dumps(plan, sort_keys=True))
            if key not in built:
                folder = scratch / f"{t.name}-{len(built)}"
                built[key] = (folder, target.build_for_device(t.name, t.folder, plan, folder))
            folder, files = built[key]
            mine.append(replace(t, folder=folder, files=files, model=".", prebuilt=plan))
        out[device.name] = mine
    return out
