"""What each device runs: every target with its options for that device (validated by its
format) and, where the format builds here for the device (the C target with a
``cross_cc``, or ``--prebuilt-c``), the files of that build instead of the artifact's.

Done before any device is contacted: a bad option or a compiler problem is one clear
error, not one per device. One build per target and recipe, shared by the devices.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from edgesmith.target import Target

from . import formats
from .build_folder import BenchTarget, Build
from .device import Device


def _threads(target: Target, options: BaseModel) -> int:
    """The format's threads option (0: the runtime's default, or a format without one)."""
    name = target.device_threads_option
    return int(getattr(options, name) or 0) if name else 0


def per_device(build: Build, devices: list[Device], force_prebuild: bool | None,
               scratch: Path) -> dict[str, list[BenchTarget]]:
    """{device name: its targets}, built here where the format says so (``force_prebuild``:
    --prebuilt-c / --no-prebuilt-c, None when not given)."""
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
