"""``edgesmith bench``: run a build's targets on one device, a fleet, or this machine.

One device run: open the transport (connect + per-run work dir), upload the bench script,
the bench tensors and every target's files, verify them remotely (size + sha256), run the
script once per target (a fresh process each, so peak RSS belongs to one target), clean
up. Each target's result is written to ``BUILD_DIR/bench/<device>.json`` the moment it
arrives, so a run cut short keeps what it measured; the finished device is merged into
``manifest.json`` under ``"bench"`` and the report is re-rendered.

What a device's entry keeps across runs: a run that fails keeps the last good results
(updated with whatever it did measure) and records itself beside them as ``last_error``.
Every result names the ``artifact_sha256`` it measured; when merged, results whose hash is
no longer the manifest's artifact move to ``stale_targets``. The whole bench holds the
build folder's lock (the one ``edgesmith build`` takes), so a rebuild waits for it.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from edgesmith import outdir
from edgesmith.artifact import sha256_path, write_json_atomic
from edgesmith.errors import BudgetError, DeviceError, EdgesmithError, ProfileError, UsageError
from edgesmith.profiles.schema import Profile, Ssh

from . import interrupt
from . import ssh as ssh_mod
from .transport import LocalTransport, SshTransport, Transport

REMOTE_SCRIPT = Path(__file__).with_name("remote.py")
REMOTE_NAME = "edgesmith_remote.py"
DEFAULT_RUNS = 100
DEFAULT_WARMUP = 10
LOCAL_TIMEOUT_S = 600.0
GRACE_S = 15.0  # the SSH timeout backs up the script's own deadline by this much
CANCEL_CLEANUP_S = 10.0  # after Ctrl-C: at most this long to stop remote work and clean up
MODEL_SUFFIXES = {"onnx": (".onnx",), "tflite": (".tflite",), "openvino": (".xml",),
                  "coreml": (".mlpackage", ".mlmodel")}


# -- what a device is ----------------------------------------------------------------------
@dataclass
class Device:
    """One place to bench: ``ssh`` None means this machine."""

    name: str
    ssh: Ssh | None = None
    profile: Profile | None = None  # budgets and threads; None: the build's own profile

    @property
    def file_name(self) -> str:
        return safe_name(self.name) + ".json"


_TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _inside(root: Path, rel: object, what: str, where: Path) -> Path:
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
            inside = path.resolve().is_relative_to(root.resolve())
        except (OSError, RuntimeError):
            inside = False
        if not inside:
            bad = "points outside the build folder"
        else:
            return path
    raise UsageError(f"{what} {rel!r} {bad}", where=str(where),
                     fix="manifest paths must be relative and inside the build folder; "
                         "rebuild with `edgesmith build` rather than editing manifest.json")


def safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return cleaned or "device"


# -- what a build offers -----------------------------------------------------------------------
@dataclass
class BenchTarget:
    name: str
    format: str
    precision: str
    folder: Path  # local folder holding the files
    files: list[str]
    model: str  # relative to folder ("." for a C source folder)
    weights: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # the manifest's target meta
    prebuilt: dict[str, Any] | None = None  # C: a binary built here ({cc, cflags}), no make
    sha256: str | None = None  # the manifest's artifact hash: what the results belong to


@dataclass
class Build:
    root: Path
    manifest: dict[str, Any]
    profile: Profile | None
    input: Path
    reference: Path
    targets: list[BenchTarget]
    skipped: dict[str, str] = field(default_factory=dict)


def require_build(root: Path) -> None:
    """Refuse a folder that holds no build (before taking its lock, which would create it)."""
    if not (root / "manifest.json").is_file():
        raise UsageError(f"{root} is not a build folder (no manifest.json)", where=str(root),
                         fix="run `edgesmith build` first and pass its output folder")


def load_build(build_dir: Path) -> Build:
    root = Path(build_dir)
    manifest_path = root / "manifest.json"
    require_build(root)
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read manifest.json: {e}", where=str(manifest_path),
                         fix="rebuild with `edgesmith build`") from None
    try:
        profile = Profile.model_validate(manifest.get("profile") or {})
    except ValueError:
        profile = None
    data = manifest.get("bench_data") or {}
    inp = _inside(root, data.get("input", "data/bench_input.npy"), "bench_data.input",
                  manifest_path)
    ref = _inside(root, data.get("reference", "data/bench_reference.npy"),
                  "bench_data.reference", manifest_path)
    for p in (inp, ref):
        if not p.is_file():
            raise UsageError(f"bench data {p.name} is missing", where=str(p),
                             fix="rebuild with `edgesmith build`")
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
    path = _inside(root, t["path"], f"target {name}: path", manifest_path)
    spec = t.get("bench") or {}
    fmt = spec.get("format") or t["format"]
    if fmt not in (*MODEL_SUFFIXES, "c"):
        raise UsageError(f"target {name}: unknown format {fmt!r}", where=str(manifest_path))
    folder = path if path.is_dir() and fmt == "c" else path.parent
    files = list(spec.get("files") or ([path.name] if path.is_file() else
                                       sorted(p.name for p in path.iterdir())))
    for key in ("model", "weights"):
        if spec.get(key) is not None:
            _inside(folder, spec[key], f"target {name}: bench.{key}", manifest_path)
    for f in files:
        _inside(folder, f, f"target {name}: file", manifest_path)
        if not (folder / f).exists():
            raise UsageError(f"target {name}: file {f} is missing", where=str(folder / f),
                             fix="rebuild with `edgesmith build`")
    if fmt == "c":
        model = "."
    else:
        model = spec.get("model") or next(
            (f for f in files if f.endswith(MODEL_SUFFIXES.get(fmt, ()))),
            path.name if path.is_file() else files[0])
    return BenchTarget(name, fmt, spec.get("precision") or t.get("precision", "fp32"), folder,
                       files, model, spec.get("weights"), dict(t.get("meta") or {}),
                       sha256=t.get("sha256"))


# -- progress ------------------------------------------------------------------------------------
class BenchEvents:
    """No-op base; the CLI shows rich progress, tests may record."""

    def device_start(self, device: str, steps: int) -> None:
        pass

    def device_step(self, device: str, what: str) -> None:
        pass

    def target_done(self, device: str, result: dict[str, Any]) -> None:
        pass

    def device_done(self, device: str, result: dict[str, Any]) -> None:
        pass

    def warn(self, message: str) -> None:
        """Something the user should know while waiting (e.g. a build holds the lock)."""


# -- C binaries built here (cross-compiled per the profile) ----------------------------------
def _c_options(device: Device, build: Build, target: BenchTarget) -> dict[str, Any]:
    """The c target's compiler options: the device's (else the build's) profile entry for
    this target, over the manifest's meta."""
    opts = {k: target.meta.get(k) for k in ("cc", "cflags", "cross_cc", "cross_cflags")}
    profile = device.profile or build.profile
    for spec in (profile.targets if profile is not None else []):
        if spec.name == target.name:
            opts.update({k: v for k, v in spec.options.items() if k in opts})
    return opts


def wants_prebuilt(device: Device, build: Build, target: BenchTarget,
                   prebuilt_c: bool | None) -> bool:
    """``--prebuilt-c`` forces it, ``--no-prebuilt-c`` refuses it; by default a C target
    whose profile or manifest names a ``cross_cc`` is cross-compiled here."""
    if target.format != "c":
        return False
    if prebuilt_c is not None:
        return prebuilt_c
    return bool(_c_options(device, build, target).get("cross_cc"))


def _compile_here(target: BenchTarget, cc: str, cflags: str | None, out: Path) -> None:
    from edgesmith.targets import run as c_run

    words = shlex.split(cc) if cc else []
    if not words or shutil.which(words[0]) is None:
        raise UsageError(
            f"target {target.name}: C compiler {cc!r} for the device binary is not on this "
            "machine's PATH",
            where="cross_cc" if target.meta.get("cross_cc") == cc else "cc",
            fix=f"install {words[0] if words else 'it'} (e.g. apt-get install "
                "gcc-aarch64-linux-gnu for aarch64-linux-gnu-gcc), fix cross_cc in the "
                "profile's c target options, or pass --no-prebuilt-c to build on the device")
    shutil.copytree(target.folder, out)
    try:
        c_run.build(out, cc=cc, cflags=cflags, target="edgesmith_bench")
    except EdgesmithError as e:
        raise DeviceError(
            f"target {target.name}: building edgesmith_bench with {cc!r} failed: {e.what}",
            where=str(target.folder),
            fix="check the compiler and cross_cflags in the profile's c target options, or "
                "pass --no-prebuilt-c to build on the device") from None
    except (OSError, subprocess.SubprocessError) as e:
        raise DeviceError(f"target {target.name}: cannot run make with {cc!r}: {e}",
                          where=str(target.folder),
                          fix="install make here, or pass --no-prebuilt-c") from None


def _default_cross_cflags() -> str:
    from edgesmith.targets.c_target import COptions

    return COptions.model_fields["cross_cflags"].default


def prebuild_c(build: Build, devices: list[Device], prebuilt_c: bool | None,
               scratch: Path) -> dict[str, list[BenchTarget]]:
    """Each device's target list, with C targets replaced by a binary built here when
    asked for (one build per distinct compiler + flags, shared by the devices)."""
    done: dict[tuple[str, str, str | None], BenchTarget] = {}
    out: dict[str, list[BenchTarget]] = {}
    for device in devices:
        targets = []
        for t in build.targets:
            if not wants_prebuilt(device, build, t, prebuilt_c):
                targets.append(t)
                continue
            o = _c_options(device, build, t)
            if o.get("cross_cc"):  # host cflags (-march=native...) do not fit a cross build
                cc, cflags = o["cross_cc"], o.get("cross_cflags") or _default_cross_cflags()
            else:
                cc, cflags = o.get("cc") or "cc", o.get("cflags")
            key = (t.name, cc, cflags)
            if key not in done:
                folder = scratch / f"{t.name}-{len(done)}"
                _compile_here(t, cc, cflags, folder)
                files = ["edgesmith_bench"] + (
                    [t.weights or "weights.bin"]
                    if (folder / (t.weights or "weights.bin")).is_file() else [])
                done[key] = BenchTarget(t.name, t.format, t.precision, folder, files, ".",
                                        t.weights, t.meta, {"cc": cc, "cflags": cflags},
                                        t.sha256)
            targets.append(done[key])
        out[device.name] = targets
    return out


# -- one device --------------------------------------------------------------------------------
def _threads(device: Device, build: Build, target: BenchTarget) -> int:
    profile = device.profile or build.profile
    if profile is None:
        return 0
    for spec in profile.targets:
        if spec.name == target.name and spec.options.get("num_threads"):
            return int(spec.options["num_threads"])
    return profile.device.cores


def _budget_ms(device: Device, build: Build) -> float | None:
    profile = device.profile or build.profile
    return profile.budgets.latency_ms if profile is not None else None


def _uploads(build: Build, targets: list[BenchTarget]) -> list[tuple[Path, str]]:
    items = [(REMOTE_SCRIPT, REMOTE_NAME), (build.input, "data/bench_input.npy"),
             (build.reference, "data/bench_reference.npy")]
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


def _parse_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def _error_dict(e: EdgesmithError) -> dict[str, Any]:
    return {"what": e.what, "where": e.where, "fix": e.fix, "type": type(e).__name__}


class _DeviceRun:
    def __init__(self, build: Build, device: Device, transport: Transport, runs: int,
                 warmup: int, keep: bool, events: BenchEvents,
                 targets: list[BenchTarget] | None = None,
                 exec_wrapper: list[str] | None = None):
        self.build, self.device, self.t = build, device, transport
        self.targets = build.targets if targets is None else targets
        self.exec_wrapper = list(exec_wrapper or [])
        self.runs, self.warmup, self.keep, self.events = runs, warmup, keep, events
        self.timeout = device.ssh.command_timeout_s if device.ssh else LOCAL_TIMEOUT_S
        self.out = build.root / "bench" / device.file_name
        self.previous = (build.manifest.get("bench") or {}).get(device.name)
        self.result: dict[str, Any] = {
            "device": device.name, "transport": transport.kind, "address": transport.address,
            "status": "running", "error": None, "started_unix": int(time.time()),
            "duration_s": None, "runs": runs, "warmup": warmup,
            "budget_latency_ms": _budget_ms(device, build), "system": None,
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
        items = _uploads(self.build, self.targets)
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
        doc = _parse_json(r.stdout)
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
                "--threads", str(_threads(self.device, self.build, target)),
                "--timeout", f"{self.timeout:g}", "--stop-on-eof"]
        if target.weights:
            argv += ["--weights", target.weights]
        if target.prebuilt:
            argv.append("--prebuilt")
        if target.format == "c":
            for word in self.exec_wrapper:
                argv.append(f"--exec-wrapper={word}")  # a word starting with '-' stays a value
        r = await self.t.run(argv, timeout=self.timeout + GRACE_S)
        doc = _parse_json(r.stdout)
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
        return doc


# -- merging ------------------------------------------------------------------------------------
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
    manifest's artifact hashes, and re-render the report. Returns the record as stored.
    The caller holds the build folder's lock (``outdir.lock``)."""
    path = root / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    hashes = artifact_hashes(manifest)
    bench = {**(manifest.get("bench") or {}), device: record}
    manifest["bench"] = {name: drop_stale(r, hashes) if isinstance(r, dict) else r
                         for name, r in bench.items()}
    write_json_atomic(path, manifest)
    try:
        from edgesmith.pipeline.report import write_report
    except ImportError:  # TODO(lead): drop this guard once pipeline.report is always present
        return manifest["bench"][device]
    write_report(root)
    return manifest["bench"][device]


# -- the run and its verdict -----------------------------------------------------------------
@dataclass
class BenchRun:
    build_dir: Path
    devices: dict[str, dict[str, Any]]

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for name, d in self.devices.items():
            for t in d.get("targets", []):
                lat = t.get("latency_ms") or {}
                out.append({"device": name, "target": t.get("name"),
                            "status": t.get("status"), "p50": lat.get("p50"),
                            "p90": lat.get("p90"), "p99": lat.get("p99"),
                            "min": lat.get("min"), "throughput": t.get("throughput_ips"),
                            "rss_mb": t.get("peak_rss_mb"), "load_ms": t.get("load_ms"),
                            "parity": t.get("parity"),
                            "energy_j": t.get("energy_j_per_inference"),
                            "budget_ms": d.get("budget_latency_ms"),
                            "message": t.get("message")})
        return out

    def budget_misses(self) -> list[dict[str, Any]]:
        return [r for r in self.rows() if r["status"] == "ok" and r["budget_ms"] is not None
                and r["p50"] is not None and r["p50"] > r["budget_ms"]]

    def failures(self) -> dict[str, str]:
        """Device-level failures and targets that crashed (missing runtimes are not)."""
        out = {}
        for name, d in self.devices.items():
            if d.get("error"):
                e = d["error"]
                out[name] = f"{e.get('where') or name}: {e.get('what')}" + (
                    f"\n    fix: {e['fix']}" if e.get("fix") else "")
            for t in d.get("targets", []):
                if t.get("status") == "error":
                    out[f"{name}/{t.get('name')}"] = t.get("message") or "failed"
        return out

    def to_json(self) -> dict[str, Any]:
        return {"build": str(self.build_dir), "devices": self.devices}

    def raise_for_status(self) -> None:
        failures = self.failures()
        if failures:
            lines = [f"{k}: {v}" for k, v in failures.items()]
            raise DeviceError(
                f"{len(failures)} bench failure(s):\n  " + "\n  ".join(lines),
                where=str(self.build_dir / "bench"),
                fix="see each failure's fix; results that were measured are kept in "
                    "bench/<device>.json and manifest.json",
            )
        misses = self.budget_misses()
        if misses:
            table = "\n".join(f"  {m['device']:<20} {m['target']:<16} p50 {m['p50']:.3f} ms"
                              f" > budget {m['budget_ms']:g} ms" for m in misses)
            raise BudgetError(
                f"{len(misses)} target(s) over the latency budget (p50):\n{table}",
                where=str(self.build_dir / "manifest.json"),
                fix="pick a faster target/precision for the device, or raise "
                    "budgets.latency_ms in its profile",
            )


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


async def bench_devices(build: Build, devices: list[Device], *, runs: int, warmup: int,
                        keep: bool, concurrency: int, events: BenchEvents,
                        connect_attempts: int | None = None,
                        backoff_s: float | None = None, prebuilt_c: bool | None = None,
                        exec_wrapper: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Bench every device with at most ``concurrency`` at once; failures stay isolated.

    C targets that are to run as a binary built here (``prebuilt_c``, or a ``cross_cc`` in
    the profile) are compiled before any device is contacted: a compiler problem is one
    clear error, not one per device."""
    names = [d.name for d in devices]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise UsageError(f"device names must be unique: {', '.join(sorted(dupes))}",
                         fix="give each fleet entry its own `name:`")
    gate = asyncio.Semaphore(max(1, concurrency))
    extra: dict[str, Any] = {}
    if connect_attempts is not None:
        extra["connect_attempts"] = connect_attempts
    if backoff_s is not None:
        extra["backoff_s"] = backoff_s

    with tempfile.TemporaryDirectory(prefix="edgesmith-prebuilt-") as scratch:
        per_device = await asyncio.to_thread(prebuild_c, build, devices, prebuilt_c,
                                             Path(scratch))

        async def one(device: Device) -> dict[str, Any]:
            async with gate:
                transport = (SshTransport(device.ssh, **extra) if device.ssh
                             else LocalTransport())
                run = _DeviceRun(build, device, transport, runs, warmup, keep, events,
                                 per_device[device.name], exec_wrapper)
                result = await run.run()
                stored = merge_into_manifest(build.root, device.name, run.record())
                write_json_atomic(run.out, stored)
                return result

        results = await asyncio.gather(*(one(d) for d in devices))
    return {d.name: r for d, r in zip(devices, results, strict=True)}


def bench(build_dir: Path, devices: list[Device], *, runs: int = DEFAULT_RUNS,
          warmup: int = DEFAULT_WARMUP, keep: bool = False, concurrency: int = 4,
          events: BenchEvents | None = None, connect_attempts: int | None = None,
          backoff_s: float | None = None, prebuilt_c: bool | None = None,
          exec_wrapper: str | list[str] | None = None) -> BenchRun:
    """Bench a build on ``devices``; returns the results. Call ``raise_for_status()`` to
    turn device failures into DeviceError (exit 5) and budget misses into BudgetError (3).

    ``prebuilt_c``: True uploads a C binary built here (``cross_cc``/``cross_cflags`` from
    the profile, else ``cc``/``cflags``) instead of the sources; False always builds on the
    device; None (default) prebuilds where the profile or manifest names a ``cross_cc``.
    ``exec_wrapper`` (a command line, split like a shell would, or a list of words) runs the
    C binary under e.g. ``qemu-aarch64 -L /usr/aarch64-linux-gnu``."""
    if runs < 1 or warmup < 0:
        raise UsageError("--runs must be at least 1 and --warmup at least 0")
    if not devices:
        raise UsageError("no device to bench", fix="pass --local, --host, --device or --fleet")
    if isinstance(exec_wrapper, str):
        try:
            exec_wrapper = shlex.split(exec_wrapper)
        except ValueError as e:
            raise UsageError(f"--exec-wrapper {exec_wrapper!r}: {e}",
                             fix="quote it like a shell command line") from None
    events = events or BenchEvents()
    outdir.recover(Path(build_dir))  # a publish a kill cut short: put it right first
    require_build(Path(build_dir))
    check_devices(devices)
    # the lock `edgesmith build` takes: no rebuild can swap the artifacts (and manifest)
    # between reading them here and merging their results
    with outdir.lock(Path(build_dir), on_wait=events.warn):
        build = load_build(build_dir)
        results = interrupt.run(bench_devices(
            build, devices, runs=runs, warmup=warmup, keep=keep, concurrency=concurrency,
            events=events, connect_attempts=connect_attempts, backoff_s=backoff_s,
            prebuilt_c=prebuilt_c, exec_wrapper=exec_wrapper or None))
    return BenchRun(Path(build_dir), results)
