"""One device's run: connect, upload the bench script, the bench tensors and every target's
files, verify them remotely (size + sha256), run the script once per target (a fresh
process each, so peak RSS belongs to one target), clean up.

Each target's result is saved to ``BUILD_DIR/bench/<device>.json`` the moment it arrives
(merged over the device's last good entry, ``merge.device_record``), so a run cut short
keeps what it measured. Nothing here knows a format: the argv is the same for all, with
each target's validated options for its loader.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from edgesmith.artifact import sha256_path, write_json_atomic
from edgesmith.errors import DeviceError, EdgesmithError

from .build_folder import BenchTarget, Build
from .device import BenchEvents, Device, safe_name
from .merge import device_record
from .prepare import Frames, detect, frames
from .remote import last_json_line  # the device script's own reader: one parser of its output
from .script import REMOTE_NAME
from .transport import Transport
from .verdict import judge_detections

LOCAL_TIMEOUT_S = 600.0
GRACE_S = 15.0  # the SSH timeout backs up the script's own deadline by this much
CANCEL_CLEANUP_S = 10.0  # after Ctrl-C: at most this long to stop remote work and clean up
SWEEP_FREQUENCIES = 3  # frequencies a power sweep tries: lowest, middle, highest
FRAMES_INDEX = "data/bench_frames.json"  # where the frames index lands on the device


def _budget_ms(device: Device, build: Build) -> float | None:
    profile = device.profile or build.profile
    return profile.budgets.latency_ms if profile is not None else None


def _energy_budget_mj(device: Device, build: Build) -> float | None:
    profile = device.profile or build.profile
    return profile.budgets.energy_mj if profile is not None else None


def power_plan(device: Device, build: Build, sysfs_root: str) -> dict[str, Any]:
    """What ``--power-sweep`` asks the device script to try beyond its cpufreq governors and
    a few frequencies: the profile's duty cycle (``power.max_steps``/``sleep_us``), frame
    period (``power.period_ms``) and governor. ``power.run_us`` is not swept: the harness
    has no flag for it."""
    profile = device.profile or build.profile
    power = profile.power if profile is not None else None
    plan: dict[str, Any] = {"frequencies": SWEEP_FREQUENCIES, "sysfs_root": sysfs_root}
    if power is not None:
        plan["governor"] = power.governor
        plan["duty"] = {"max_steps": power.max_steps, "sleep_us": power.sleep_us}
        plan["period_ms"] = power.period_ms
    return plan


def _power_argv(plan: dict[str, Any] | None) -> list[str]:
    """The script's sweep flags; ``--restore-dir ..`` always: the work dir's parent
    outlives this run, so a sweep killed there is put right by the next run's start."""
    argv = ["--restore-dir", ".."]
    if plan is not None:
        argv += ["--power-sweep", json.dumps({k: v for k, v in plan.items()
                                              if k != "sysfs_root"}, sort_keys=True),
                 "--sysfs-root", plan["sysfs_root"]]
    return argv


def _uploads(build: Build, targets: list[BenchTarget], script: Path,
             raw: Frames | None = None) -> list[tuple[Path, str]]:
    items = [(script, REMOTE_NAME), (build.input, "data/bench_input.npy"),
             (build.reference, "data/bench_reference.npy")]
    if raw is not None:  # the index names its data file by its name, beside it
        items += [(raw.index, FRAMES_INDEX), (raw.data, f"data/{raw.data.name}")]
    for t in targets:
        items += [(t.folder / f, f"targets/{t.name}/{f}") for f in t.files]
    return items


def _file_index(items: list[tuple[Path, str]]) -> dict[str, list[Any]]:
    index: dict[str, list[Any]] = {}
    for local, rel in items:
        if local.is_dir():
            for p in sorted(q for q in local.rglob("*") if q.is_file()):
                index[f"{rel}/{p.relative_to(local).as_posix()}"] = [p.stat().st_size,
                                                                    sha256_path(p)]
        else:
            index[rel] = [local.stat().st_size, sha256_path(local)]
    return index


def _error_dict(e: EdgesmithError) -> dict[str, Any]:
    return {"what": e.what, "where": e.where, "fix": e.fix, "type": type(e).__name__}


class DeviceRun:
    def __init__(self, build: Build, device: Device, transport: Transport, runs: int,
                 warmup: int, keep: bool, events: BenchEvents, targets: list[BenchTarget],
                 script: Path, exec_wrapper: list[str] | None = None,
                 power: dict[str, Any] | None = None):
        self.build, self.device, self.t = build, device, transport
        self.targets, self.script = targets, script
        self.exec_wrapper = list(exec_wrapper or [])
        self.power = power  # the sweep plan (power_plan), None: no sweep
        self.frames = frames(build)  # raw val frames + spec: scored on the device too
        self.detect = detect(build)  # a detector's decode settings + the host's boxes
        self.runs, self.warmup, self.keep, self.events = runs, warmup, keep, events
        self.timeout = device.ssh.command_timeout_s if device.ssh else LOCAL_TIMEOUT_S
        self.out = build.root / "bench" / device.file_name
        self.previous = (build.manifest.get("bench") or {}).get(device.name)
        self.result: dict[str, Any] = {
            "device": device.name, "transport": transport.kind, "address": transport.address,
            "status": "running", "error": None, "started_unix": int(time.time()),
            "duration_s": None, "runs": runs, "warmup": warmup,
            "budget_latency_ms": _budget_ms(device, build),
            "budget_energy_mj": _energy_budget_mj(device, build), "system": None,
            "overhead_s": {}, "workdir": None, "targets": [],
            "skipped": dict(build.skipped),
        }

    def record(self) -> dict[str, Any]:
        """What the device's entry holds now: this run merged over the last good one."""
        return device_record(self.previous, self.result)

    def save(self) -> None:
        write_json_atomic(self.out, self.record())

    async def run(self) -> dict[str, Any]:
        t_start = time.perf_counter()
        name = self.device.name
        self.events.device_start(name, 3 + len(self.targets))
        opened = cancelled = False
        try:
            t0 = time.perf_counter()
            await self.t.open()
            opened = True
            self.result["overhead_s"]["connect"] = time.perf_counter() - t0
            self.result["workdir"] = self.t.workdir
            self.events.device_step(name, "connected")
            await self._upload()
            self.events.device_step(name, "uploaded")
            for target in self.targets:
                r = await self._bench(target)
                self.result["targets"].append(r)
                self.save()
                self.events.target_done(name, r)
                self.events.device_step(name, target.name)
            self.result["status"] = "ok"
        except asyncio.CancelledError:  # Ctrl-C: clean up below, then let it propagate
            cancelled = True
            self.result["status"] = "cancelled"
            self.result["error"] = {"what": "cancelled (interrupted) before it finished",
                                    "where": name, "fix": None, "type": "Cancelled"}
            raise
        except EdgesmithError as e:
            self.result["status"] = "partial" if self.result["targets"] else "error"
            self.result["error"] = _error_dict(e)
        except Exception as e:  # noqa: BLE001  anything the layers below missed stays here:
            # one device's surprise must not take the rest of a fleet down with it
            self.result["status"] = "partial" if self.result["targets"] else "error"
            self.result["error"] = {"what": f"{type(e).__name__}: {e}", "where": name,
                                    "fix": None, "type": "DeviceError"}
        finally:
            t0 = time.perf_counter()
            await self._close(cancelled)
            if opened:
                self.result["overhead_s"]["cleanup"] = time.perf_counter() - t0
            self.events.device_step(name, "done")
            self.result["duration_s"] = time.perf_counter() - t_start
            self.result["kept"] = bool(self.keep and opened)
            self.save()
            self.events.device_done(name, self.result)
        return self.result

    async def _close(self, cancelled: bool) -> None:
        """Remove the work dir (unless --keep) and disconnect. After a cancellation this is
        best effort within CANCEL_CLEANUP_S: an interrupted user must not wait on a dead
        link, and a second Ctrl-C stops it at once."""
        try:
            if cancelled:
                await asyncio.wait_for(self.t.close(self.keep), CANCEL_CLEANUP_S)
            else:
                await self.t.close(self.keep)
        except (EdgesmithError, asyncio.TimeoutError, OSError):
            pass  # the connection is gone; the error recorded already says why

    async def _upload(self) -> None:
        t0 = time.perf_counter()
        items = _uploads(self.build, self.targets, self.script, self.frames)
        index = _file_index(items)
        total = 0
        for local, rel in items:
            total += await self.t.put(local, rel)
        tmp = self.build.root / "bench" / f".files-{safe_name(self.device.name)}.json"
        write_json_atomic(tmp, index)
        try:
            await self.t.put(tmp, "files.json")
        finally:
            tmp.unlink(missing_ok=True)
        r = await self.t.run([self.t.python, REMOTE_NAME, "verify", "files.json"],
                             timeout=min(self.timeout, 120.0))
        doc = last_json_line(r.stdout)
        if doc is None:
            raise DeviceError(
                f"the bench script did not run with {self.t.python!r} "
                f"(exit {r.exit_status}): {(r.stderr or r.stdout).strip()[-300:]}",
                where=self.t.address,
                fix="install python3 on the device, or point ssh.python in the profile "
                    "(or --python) at an interpreter",
            )
        if not doc.get("ok"):
            raise DeviceError("uploaded files do not match: " + "; ".join(doc["problems"]),
                              where=f"{self.t.address}:{self.t.workdir}",
                              fix="check free space in ssh.workdir on the device and retry")
        self.result["system"] = doc.get("system")
        self.result["upload_bytes"] = total
        self.result["overhead_s"]["upload"] = time.perf_counter() - t0

    async def _bench(self, target: BenchTarget) -> dict[str, Any]:
        folder = f"targets/{target.name}"
        argv = [self.t.python, REMOTE_NAME, "bench", "--name", target.name,
                "--format", target.format, "--precision", target.precision,
                "--model", f"{folder}/{target.model}" if target.model != "." else folder,
                "--input", "data/bench_input.npy", "--reference", "data/bench_reference.npy",
                "--runs", str(self.runs), "--warmup", str(self.warmup),
                "--threads", str(target.threads),
                "--options", json.dumps(target.options, sort_keys=True),
                "--timeout", f"{self.timeout:g}", "--stop-on-eof", *_power_argv(self.power)]
        if self.frames is not None:
            argv += ["--frames", FRAMES_INDEX,
                     "--preprocess", json.dumps(self.frames.spec, sort_keys=True)]
        if self.detect is not None:
            argv += ["--detect", json.dumps(self.detect.settings, sort_keys=True)]
        if target.weights:
            argv += ["--weights", target.weights]
        if target.prebuilt:
            argv.append("--prebuilt")
        for word in self.exec_wrapper:  # used by loaders that run a compiled harness
            argv.append(f"--exec-wrapper={word}")  # a word starting with '-' stays a value
        r = await self.t.run(argv, timeout=self.timeout + GRACE_S)
        doc = last_json_line(r.stdout)
        if doc is None:
            return {"name": target.name, "format": target.format,
                    "precision": target.precision, "status": "error",
                    "message": f"bench script exited {r.exit_status} without a result: "
                               f"{(r.stderr or r.stdout).strip()[-500:]}",
                    "latency_ms": None, "peak_rss_mb": None,
                    "artifact_sha256": target.sha256, "measured_unix": int(time.time())}
        doc["name"] = target.name
        doc["wall_s"] = r.seconds
        doc["artifact_sha256"] = target.sha256
        doc["measured_unix"] = int(time.time())
        if target.prebuilt:
            doc["prebuilt"] = {"built": "here", **target.prebuilt}
        if self.detect is not None and isinstance(doc.get("detections"), dict):
            doc["detections"] = judge_detections(doc["detections"], self.detect.host_boxes,
                                                 self.detect.labels)
        return doc
