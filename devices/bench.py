"""``edgesmith bench``: run a build's targets on one device, a fleet, or this machine.

The steps, one module each: ``build_folder`` reads and checks the manifest, ``prepare``
gives every device its targets (options validated by each format, builds done here),
``script`` assembles the one-file bench script from ``remote.py`` and the formats' device
loaders, ``run`` does one device (upload, verify, one run per target, save as results
arrive), ``merge`` folds the device's entry into ``manifest.json``, ``verdict`` judges.

The whole bench holds the build folder's lock (the one ``edgesmith build`` takes), so a
rebuild waits for it. ``after_merge`` runs under that lock after each device's merge:
``pipeline/bench.py`` re-renders the report there (devices imports no pipeline).
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgesmith import outdir
from edgesmith.artifact import write_json_atomic
from edgesmith.errors import ProfileError, UsageError

from . import formats, interrupt, prepare, script
from . import ssh as ssh_mod
from .build_folder import BenchTarget, Build, load_build, require_build
from .device import BenchEvents, Device, safe_name
from .merge import artifact_hashes, device_record, drop_stale, merge_into_manifest
from .run import DeviceRun, power_plan
from .transport import LocalTransport, SshTransport
from .verdict import BenchRun

__all__ = ["DEFAULT_RUNS", "DEFAULT_WARMUP", "BenchEvents", "BenchRun", "BenchTarget", "Build",
           "Device", "artifact_hashes", "bench", "bench_devices", "check_devices",
           "device_record", "drop_stale", "load_build", "merge_into_manifest", "safe_name"]

DEFAULT_RUNS = 100
DEFAULT_WARMUP = 10
AfterMerge = Callable[[Path], None]


def check_devices(devices: list[Device]) -> None:
    """Each device's names, key file and known_hosts, before any device is contacted: a
    mistake there is the user's input (exit 2), found once, not a device failure (exit 5)."""
    for device in devices:
        if device.ssh is None:
            continue
        try:
            ssh_mod.check_local_inputs(device.ssh)
        except ProfileError as e:
            raise ProfileError(f"device {device.name}: {e.what}", where=e.where,
                               fix=e.fix) from None


def _unique_names(devices: list[Device]) -> None:
    names = [d.name for d in devices]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise UsageError(f"device names must be unique: {', '.join(sorted(dupes))}",
                         fix="give each fleet entry its own `name:`")


async def bench_devices(build: Build, devices: list[Device], *, runs: int, warmup: int,
                        keep: bool, concurrency: int, events: BenchEvents,
                        connect_attempts: int | None = None,
                        backoff_s: float | None = None, prebuilt_c: bool | None = None,
                        exec_wrapper: list[str] | None = None,
                        after_merge: AfterMerge | None = None,
                        sysfs_root: str | None = None) -> dict[str, dict[str, Any]]:
    """Bench every device with at most ``concurrency`` at once; failures stay isolated.

    Every device's targets are prepared (options validated, builds done here: a
    ``cross_cc`` or ``prebuilt_c``) before any device is contacted: a bad option or a
    compiler problem is one clear error, not one per device. ``sysfs_root`` (None: no
    power sweep) is the device's sysfs tree a sweep changes."""
    _unique_names(devices)
    gate = asyncio.Semaphore(max(1, concurrency))
    extra: dict[str, Any] = {}
    if connect_attempts is not None:
        extra["connect_attempts"] = connect_attempts
    if backoff_s is not None:
        extra["backoff_s"] = backoff_s

    with tempfile.TemporaryDirectory(prefix="edgesmith-bench-") as scratch:
        per_device = await asyncio.to_thread(prepare.per_device, build, devices, prebuilt_c,
                                             Path(scratch))
        uploaded = script.write(formats.discover(), Path(scratch))

        async def one(device: Device) -> dict[str, Any]:
            async with gate:
                transport = (SshTransport(device.ssh, **extra) if device.ssh
                             else LocalTransport())
                plan = (None if sysfs_root is None
                        else power_plan(device, build, sysfs_root))
                run = DeviceRun(build, device, transport, runs, warmup, keep, events,
                                per_device[device.name], uploaded, exec_wrapper, plan)
                result = await run.run()
                stored = merge_into_manifest(build.root, device.name, run.record())
                write_json_atomic(run.out, stored)
                if after_merge is not None:
                    after_merge(build.root)
                return result

        results = await asyncio.gather(*(one(d) for d in devices))
    return {d.name: r for d, r in zip(devices, results, strict=True)}


def _wrapper_words(exec_wrapper: str | list[str] | None) -> list[str] | None:
    if not isinstance(exec_wrapper, str):
        return exec_wrapper or None
    try:
        return shlex.split(exec_wrapper) or None
    except ValueError as e:
        raise UsageError(f"--exec-wrapper {exec_wrapper!r}: {e}",
                         fix="quote it like a shell command line") from None


def _sysfs_root(power_sweep: bool, sysfs_root: str | None) -> str | None:
    """The sysfs tree a sweep uses on each device (None: no sweep); refused when given
    without --power-sweep or not absolute (it is a path on the device, not here)."""
    if not power_sweep:
        if sysfs_root is not None:
            raise UsageError("--sysfs-root is only read by a power sweep",
                             fix="add --power-sweep, or drop --sysfs-root")
        return None
    root = sysfs_root or "/sys"
    if not root.startswith("/") or "\x00" in root:
        raise UsageError(f"--sysfs-root {root!r} is not an absolute path",
                         fix="give the device's sysfs tree as an absolute path, e.g. /sys")
    return root


def bench(build_dir: Path, devices: list[Device], *, runs: int = DEFAULT_RUNS,
          warmup: int = DEFAULT_WARMUP, keep: bool = False, concurrency: int = 4,
          events: BenchEvents | None = None, connect_attempts: int | None = None,
          backoff_s: float | None = None, prebuilt_c: bool | None = None,
          exec_wrapper: str | list[str] | None = None,
          after_merge: AfterMerge | None = None, power_sweep: bool = False,
          sysfs_root: str | None = None) -> BenchRun:
    """Bench a build on ``devices``; returns the results. Call ``raise_for_status()`` to
    turn device failures into DeviceError (exit 5) and budget misses into BudgetError (3).

    ``prebuilt_c``: True uploads what a format can build here (the C target: an
    ``edgesmith_bench`` built with the profile's ``cross_cc``/``cross_cflags``, else
    ``cc``/``cflags``) instead of its sources; False always builds on the device; None
    (default) lets the format decide (C: when the profile or manifest names a ``cross_cc``).
    ``exec_wrapper`` (a command line, split like a shell would, or a list of words) runs a
    compiled harness under e.g. ``qemu-aarch64 -L /usr/aarch64-linux-gnu``.
    ``after_merge(build_dir)`` runs under the build folder's lock after each device's
    results are merged into ``manifest.json`` (the pipeline re-renders the report there).
    ``power_sweep`` measures each target again under every cpufreq governor, a few
    frequencies and the profile's duty cycle (energy per inference where the device has a
    sensor), on the device's sysfs tree ``sysfs_root`` (default /sys), and puts cpufreq
    back afterwards."""
    if runs < 1 or warmup < 0:
        raise UsageError("--runs must be at least 1 and --warmup at least 0")
    if not devices:
        raise UsageError("no device to bench", fix="pass --local, --host, --device or --fleet")
    words = _wrapper_words(exec_wrapper)
    root = _sysfs_root(power_sweep, sysfs_root)
    events = events or BenchEvents()
    outdir.recover(Path(build_dir))  # a publish a kill cut short: put it right first
    require_build(Path(build_dir))
    check_devices(devices)
    # the lock `edgesmith build` takes: no rebuild can swap the artifacts (and manifest)
    # between reading them here and merging their results
    with outdir.lock(Path(build_dir), on_wait=events.warn, job="bench"):
        build = load_build(build_dir)
        results = interrupt.run(bench_devices(
            build, devices, runs=runs, warmup=warmup, keep=keep, concurrency=concurrency,
            events=events, connect_attempts=connect_attempts, backoff_s=backoff_s,
            prebuilt_c=prebuilt_c, exec_wrapper=words, after_merge=after_merge,
            sysfs_root=root))
    return BenchRun(Path(build_dir), results)
