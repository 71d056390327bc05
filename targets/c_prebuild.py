"""The C target built on this machine for a device (``edgesmith bench --prebuilt-c``, or a
profile that names a ``cross_cc``): compile ``edgesmith_bench`` here and upload the binary
(plus ``weights.bin``) instead of the sources, so the device needs no make or compiler.

Host-side half of ``c_device.py`` (which then runs the binary with ``--prebuilt``); the
``CTarget.device_prebuild``/``build_for_device`` hooks call these.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from edgesmith.errors import DeviceError, EdgesmithError, ProfileError, UsageError

# what the build recorded in the artifact's meta, under the profile's options
_COMPILER_KEYS = ("cc", "cflags", "cross_cc", "cross_cflags")


def compiler_options(options: BaseModel, meta: dict[str, Any]) -> BaseModel:
    """The compiler the artifact was built for (its meta), overridden by what the profile
    sets explicitly, validated as the C target's options."""
    raw = {k: meta[k] for k in _COMPILER_KEYS if meta.get(k) is not None}
    raw.update(options.model_dump(include=options.model_fields_set))
    try:
        return type(options).model_validate(raw)
    except ValidationError as e:
        raise ProfileError(f"c target options from manifest.json meta: {e.errors()[0]['msg']}",
                           where="manifest.json",
                           fix="rebuild with `edgesmith build`") from None


def plan(options: BaseModel, meta: dict[str, Any], force: bool | None) -> dict[str, Any] | None:
    """{cc, cflags} to build with here, or None to build on the device. ``force`` True or
    False is --prebuilt-c / --no-prebuilt-c; by default a ``cross_cc`` means build here
    (host cflags such as -march=native do not fit a cross build: ``cross_cflags`` do)."""
    o: Any = compiler_options(options, meta)
    wanted = force if force is not None else bool(o.cross_cc)
    if not wanted:
        return None
    if o.cross_cc:
        return {"cc": o.cross_cc, "cflags": o.cross_cflags}
    return {"cc": o.cc or "cc", "cflags": o.cflags}


def build(name: str, folder: Path, how: dict[str, Any], out: Path) -> list[str]:
    """Copy the sources to ``out``, make ``edgesmith_bench`` there; the files to upload."""
    from . import run as c_run

    cc, cflags = how["cc"], how.get("cflags")
    words = shlex.split(cc) if cc else []
    if not words or shutil.which(words[0]) is None:
        raise UsageError(
            f"target {name}: C compiler {cc!r} for the device binary is not on this "
            "machine's PATH", where="c target options (cc / cross_cc)",
            fix=f"install {words[0] if words else 'it'} (e.g. apt-get install "
                "gcc-aarch64-linux-gnu for aarch64-linux-gnu-gcc), fix cross_cc in the "
                "profile's c target options, or pass --no-prebuilt-c to build on the device")
    _refuse_mcu(name, cc, cflags or "")
    shutil.copytree(folder, out)
    try:
        c_run.build(out, cc=cc, cflags=cflags, target="edgesmith_bench")
    except EdgesmithError as e:
        raise DeviceError(
            f"target {name}: building edgesmith_bench with {cc!r} failed: {e.what}",
            where=str(folder),
            fix="check the compiler and cross_cflags in the profile's c target options, or "
                "pass --no-prebuilt-c to build on the device") from None
    except (OSError, subprocess.SubprocessError) as e:
        raise DeviceError(f"target {name}: cannot run make with {cc!r}: {e}", where=str(folder),
                          fix="install make here, or pass --no-prebuilt-c") from None
    weights = "weights.bin"
    return ["edgesmith_bench"] + ([weights] if (out / weights).is_file() else [])


def _refuse_mcu(name: str, cc: str, cflags: str) -> None:
    """A Cortex-M build has no OS to run edgesmith_bench on (nor SSH to reach it): say
    so, and where its outputs can be checked instead, rather than fail at the link."""
    from .isa import is_mcu, macros

    if is_mcu(macros(cc, cflags)):
        raise UsageError(
            f"target {name}: {cc} {cflags} builds for a microcontroller, which runs no "
            "edgesmith_bench over SSH", where="c target options (cross_cc / cross_cflags)",
            fix="link the folder's model library into your firmware; to check its outputs "
                "on an emulated Cortex-M7 run `python -m edgesmith.targets.mcu_qemu "
                "BUILD/targets/c-int8 --input x.npy` (qemu-system-arm)")
