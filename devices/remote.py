#!/usr/bin/env python3
"""edgesmith's on-device bench script: uploaded as one file, run with the device's python.

It imports nothing from edgesmith and nothing outside the standard library except the
runtime of the format it measures (and numpy, which every Python runtime needs anyway).
It knows no format: each format's loader (``convert/onnx_device.py``,
``targets/c_device.py``, ...; ``Target.device_loader``) is embedded by
``devices/script.py`` into ``LOADER_SOURCES`` at the end of the uploaded copy and run in a
namespace of its own (see "format loaders" below). It must run on old device images, so
it, and every loader, stays Python 3.8 compatible: no ``match``, no ``X | Y`` types, no
``str.removeprefix``.

    python3 edgesmith_remote.py verify files.json
        check the uploaded files (size + sha256) and describe this device
    python3 edgesmith_remote.py bench --format onnx --model DIR/model.onnx \
        --input data/bench_input.npy --reference data/bench_reference.npy --runs 100 \
        --options '{"threads": 4, "graph_optimization": "all"}'
        measure one target: warm-up + N timed runs, parity against the host reference;
        with --stop-on-eof it stops, with everything it started, when its stdin closes;
        with --power-sweep PLAN --sysfs-root /sys --restore-dir .. it measures again under
        each cpufreq governor, a few frequencies and the profile's duty cycle, with energy
        per inference where a sensor exists, and puts cpufreq back (see "power sweep")

``--stop-on-eof`` is how an interrupted or dropped ``edgesmith bench`` stops work on the
device: closing the SSH channel closes the command's stdin. Signals are no substitute:
OpenSSH does not deliver them to root sessions, and root is often the only login a board has.

Each command prints exactly one JSON document on stdout (anything a runtime prints goes
to stderr) and exits 0 whenever it printed one, failures included: a device that lacks a
runtime is a result ("missing_runtime", naming the package), not a crash.
"""

# ruff: noqa: B905  (zip(strict=) is Python 3.10+; this file runs on 3.8 devices)
import argparse
import array
import ast
import glob
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import types

SCHEMA = 1

class Missing(Exception):
    """The device lacks what this format needs; the message names the package."""


class Unsupported(Exception):
    """This format cannot run on this kind of device at all."""


class DeadlineExceeded(Exception):
    pass


# -- .npy without numpy --------------------------------------------------------------------
def read_npy(path):
    """(shape, flat list of floats) of a little- or big-endian float32/float64 C-order .npy."""
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            raise ValueError(f"{path} is not a .npy file")
        major = f.read(2)[0]
        size = f.read(2 if major == 1 else 4)
        header_len = int.from_bytes(size, "little")
        header = ast.literal_eval(f.read(header_len).decode("latin1"))
        descr, shape = header["descr"], tuple(header["shape"])
        if header.get("fortran_order"):
            raise ValueError(f"{path}: Fortran-order arrays are not supported")
        codes = {"f4": "f", "f8": "d"}
        if descr[1:] not in codes:
            raise ValueError(f"{path}: dtype {descr} is not float32/float64")
        data = array.array(codes[descr[1:]])
        data.frombytes(f.read())
    if (descr[0] == ">") != (sys.byteorder == "big"):
        data.byteswap()
    count = 1
    for d in shape:
        count *= d
    if len(data) != count:
        raise ValueError(f"{path} is truncated ({len(data)} of {count} values)")
    return shape, list(data)


def split_samples(shape, flat):
    n = shape[0] if shape else 1
    per = len(flat) // max(n, 1)
    return [flat[i * per:(i + 1) * per] for i in range(n)], tuple(shape[1:])


# -- figures -----------------------------------------------------------------------------------
def percentile(sorted_vals, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_vals:
        return None
    pos = (len(sorted_vals) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def latency_figures(ns):
    ms = sorted(t / 1e6 for t in ns)
    return {"p50": percentile(ms, 50), "p90": percentile(ms, 90), "p99": percentile(ms, 99),
            "min": ms[0], "max": ms[-1], "mean": sum(ms) / len(ms)}


def argmax(v):
    best = 0
    for i in range(1, len(v)):
        if v[i] > v[best]:
            best = i
    return best


def parity(outputs, references):
    """max |a-b|, cosine over everything, and top-1 agreement per sample."""
    max_abs, dot, na, nb, agree = 0.0, 0.0, 0.0, 0.0, 0
    for out, ref in zip(outputs, references):
        if len(out) != len(ref):
            raise ValueError(f"output has {len(out)} values, the reference {len(ref)}")
        for a, b in zip(out, ref):
            max_abs = max(max_abs, abs(a - b))
            dot += a * b
            na += a * a
            nb += b * b
        agree += argmax(out) == argmax(ref)
    cosine = dot / math.sqrt(na * nb) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    return {"max_abs_err": max_abs, "cosine": cosine,
            "top1_agreement": agree / len(references) if references else None,
            "samples": len(references)}


def rss_mb(rusage_maxrss):
    # Linux reports KiB, macOS bytes
    return rusage_maxrss / (1024.0 * 1024.0) if sys.platform == "darwin" else rusage_maxrss / 1024.0


def self_peak_rss_mb():
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    return rss_mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


# -- energy (RAPL through powercap; "unavailable" is a normal answer) ---------------------------
def rapl_zones(root):
    return sorted(z for z in glob.glob(os.path.join(root, "intel-rapl:*"))
                  if os.path.basename(z).count(":") == 1)


def read_energy_uj(root):
    """{zone: (energy_uj, max_range_uj)} for every package zone, or a reason string."""
    zones = rapl_zones(root)
    if not zones:
        return f"no RAPL counters under {root}"
    out = {}
    for z in zones:
        try:
            with open(os.path.join(z, "energy_uj")) as f:
                e = int(f.read().strip())
            try:
                with open(os.path.join(z, "max_energy_range_uj")) as f:
                    rng = int(f.read().strip())
            except OSError:
                rng = 0
        except PermissionError:
            return "RAPL counters need root (energy_uj is not readable)"
        except (OSError, ValueError) as e:
            return f"cannot read {z}: {e}"
        out[z] = (e, rng)
    return out


def energy_joules(before, after):
    """Sum of per-zone deltas in joules, counting one wrap-around of each counter."""
    total = 0
    for zone, (e0, rng) in before.items():
        e1 = after[zone][0]
        d = e1 - e0
        if d < 0:
            d += rng if rng > 0 else 0
        total += d
    return total / 1e6


# -- format loaders --------------------------------------------------------------------------
# A loader is one stdlib-only source file per format, embedded by devices/script.py into
# LOADER_SOURCES (format -> source). Run in a namespace of its own, it defines
#   RUNTIMES  ((module, distribution), ...) this format may use: `verify` lists them;
#   PACKAGE   what to install when the runtime is missing (named in the result);
# and either
#   load(args, sample_shape, rt) -> (runtime name, version, prepare(flat) -> feed,
#                                    run(feed) -> output, to_list(output) -> floats)
#       for a format this script times in-process (IMPORTS: modules imported, and timed,
#       before the load), or
#   bench(args, result, samples, sample_shape, references, deadline, rt)
#       for a format that measures itself (the C runtime's own harness) and fills result.
# ``args`` holds --model, --threads, --options (the format's validated options, a dict),
# --weights, --prebuilt, --exec-wrapper, --runs, --warmup, --energy-root; ``rt`` is API.
def numpy_or_missing():
    try:
        import numpy
    except ImportError:
        raise Missing("numpy is not installed on this device (pip install numpy)") from None
    return numpy


def _version(dist, module=None):
    try:
        from importlib import metadata
        return metadata.version(dist)
    except Exception:
        return getattr(module, "__version__", None)


_LOADED = {}


def loader(fmt):
    """The format's loader namespace, compiled once from LOADER_SOURCES; None if unknown."""
    if fmt not in _LOADED:
        source = LOADER_SOURCES.get(fmt)
        if source is None:
            return None
        module = types.ModuleType(f"edgesmith_loader_{fmt}")
        exec(compile(source, f"<{fmt} loader>", "exec"), module.__dict__)
        _LOADED[fmt] = module
    return _LOADED[fmt]


def import_runtime(mod):
    import importlib

    for name in getattr(mod, "IMPORTS", ()):
        try:
            importlib.import_module(name)
            return
        except ImportError:
            continue


def bench_python(args, result, samples, sample_shape, references, mod):
    """Time ``run`` of an in-process loader: warm-up, then N runs one sample after another."""
    t0 = time.perf_counter()
    numpy_or_missing()
    t_import = time.perf_counter()
    import_runtime(mod)
    result["import_ms"] = (time.perf_counter() - t_import) * 1e3
    result["rss_before_load_mb"] = self_peak_rss_mb()
    t_load = time.perf_counter()
    name, version, prepare, run, to_list = mod.load(args, sample_shape, API)
    result["load_ms"] = (time.perf_counter() - t_load) * 1e3
    result["runtime"] = {"name": name, "version": version}
    feeds = [prepare(s) for s in samples]
    outputs = [to_list(run(f)) for f in feeds]  # the parity pass doubles as first warm-up
    result["parity"] = parity(outputs, references)
    for i in range(args.warmup):
        run(feeds[i % len(feeds)])
    energy0 = read_energy_uj(args.energy_root)
    times = []
    clock = time.perf_counter_ns
    wall0 = clock()
    for i in range(args.runs):
        feed = feeds[i % len(feeds)]
        t = clock()
        run(feed)
        times.append(clock() - t)
    wall = (clock() - wall0) / 1e9
    energy1 = read_energy_uj(args.energy_root)
    result["latency_ms"] = latency_figures(times)
    result["throughput_ips"] = args.runs / wall if wall > 0 else None
    result["peak_rss_mb"] = self_peak_rss_mb()
    if isinstance(energy0, dict) and isinstance(energy1, dict):
        result["energy_j_per_inference"] = energy_joules(energy0, energy1) / args.runs
        result["energy_source"] = "rapl (whole package, includes other load)"
    else:
        result["energy_source"] = "unavailable: %s" % (energy0 if isinstance(energy0, str)
                                                         else energy1)
    result["seconds"] = time.perf_counter() - t0
    return lambda setting, meter: timed_python(run, feeds, args, setting, meter)


# -- stopping when the controller is gone ---------------------------------------------------
RUNNING = []  # children started by run_child that have not been reaped yet


def kill_everything():
    """SIGKILL this script and what it started (make, the compiler, edgesmith_bench).

    As its process group's leader, one killpg reaches grandchildren too; otherwise each
    child still running is killed before the script exits. A power sweep's cpufreq
    settings are put back first."""
    power_stop()
    if hasattr(os, "killpg") and os.getpgrp() == os.getpid():
        try:
            os.killpg(os.getpid(), signal.SIGKILL)
        except OSError:
            pass
    for p in list(RUNNING):
        try:
            p.kill()
        except OSError:
            pass
    os._exit(1)


def stop_on_eof(stdin_fd=0):
    """Watch ``stdin_fd`` in a daemon thread; at end of file, kill everything and exit.

    Becomes the leader of a process group first (where it is not already: sshd and the
    local transport start it as one) so that children stay in a group of our own."""
    if hasattr(os, "setpgid") and os.getpgrp() != os.getpid():
        try:
            os.setpgid(0, 0)
        except OSError:
            pass  # a session leader already; its group is its own

    def watch():
        try:
            while os.read(stdin_fd, 65536):
                pass  # whatever arrives is ignored; only the end of it matters
        except OSError:
            pass
        kill_everything()

    thread = threading.Thread(target=watch, name="stop-on-eof")
    thread.daemon = True
    thread.start()
    return thread


# -- children (make, a compiled harness), for loaders that run one --------------------------
def _vm_hwm_mb(pid):
    """The child's own peak RSS from /proc (Linux). ru_maxrss of a vfork'd child also
    counts the parent's memory at exec time, which would charge python to the C runtime."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def run_child(argv, cwd, timeout, stdout_path):
    """Run a child, return (exit code, stdout text, stderr tail, its own peak RSS in MB)."""
    err_path = stdout_path + ".err"
    peak = None
    with open(stdout_path, "wb") as out, open(err_path, "wb") as err:
        # stdin: the controller's channel belongs to the stop-on-eof watcher, not to make
        p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        RUNNING.append(p)
        limit = time.monotonic() + timeout
        try:
            while True:
                if hasattr(os, "wait4"):
                    pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                    if pid:
                        p.returncode = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                                        else os.WEXITSTATUS(status))
                        if peak is None:
                            peak = rss_mb(usage.ru_maxrss)
                        break
                elif p.poll() is not None:
                    break
                hwm = _vm_hwm_mb(p.pid)
                if hwm is not None:
                    peak = hwm
                if time.monotonic() > limit:
                    p.kill()
                    p.wait()
                    raise DeadlineExceeded(f"{argv[0]} ran past {timeout:.0f} s")
                time.sleep(0.02)
        finally:
            if p.returncode is None:  # interrupted (deadline alarm): do not leave it running
                p.kill()
                p.wait()
            RUNNING.remove(p)
    with open(stdout_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    with open(err_path, encoding="utf-8", errors="replace") as f:
        err_text = f.read()[-2000:]
    return p.returncode, text, err_text, peak


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def write_raw(path, flat):
    data = array.array("f", flat)
    if sys.byteorder == "big":
        data.byteswap()
    with open(path, "wb") as f:
        f.write(data.tobytes())


def read_raw(path):
    data = array.array("f")
    with open(path, "rb") as f:
        data.frombytes(f.read())
    if sys.byteorder == "big":
        data.byteswap()
    return list(data)


def remaining(deadline):
    return max(1.0, deadline - time.monotonic())


# -- power sweep: cpufreq settings and duty cycles, energy from whatever sensor exists -------
# ``bench --power-sweep PLAN`` measures the target once per setting: as found, each cpufreq
# governor, a few frequencies (scaling_max_freq, under ``performance``), the profile's duty
# cycle and frame period. Every sysfs write goes through PowerState, which records the
# file's original value in a restore file BEFORE its first change and writes every original
# back on exit, on stdin EOF (kill_everything), on SIGTERM/SIGHUP and, when a killed run
# left the file, at the next start (recover_power).
POWER = None  # the PowerState of the sweep running now; kill_everything restores it first
RESTORE_GLOB = ".edgesmith-power-restore-*.json"
SAMPLE_S = 0.02  # how often a power sensor is sampled (and a counter read, for wraps)
PERIOD_SWEEP_S = 20.0  # a frame-period setting runs at most about this long


def _read(path):
    with open(path) as f:
        return f.read().strip()


def _write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def _alive(pid):
    """Is ``pid`` a running bench script (not a pid the kernel gave to something else)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"edgesmith_remote" in f.read()
    except OSError:
        return True  # no /proc: assume it is


def restore_settings(saved):
    """Write each original back (scaling_min_freq last: a max below the min is refused);
    returns the files that could not be put back, with why."""
    problems = []
    for path, value in sorted(saved, key=lambda s: s[0].endswith("scaling_min_freq")):
        try:
            if _read(path) != value:
                _write(path, value)
        except OSError as e:
            problems.append(f"{path}: {e.strerror or e}")
    return problems


def recover_power(restore_dir):
    """Put back what a killed sweep left changed (its restore file), unless it still runs."""
    if not restore_dir:
        return None
    done = []
    for path in sorted(glob.glob(os.path.join(restore_dir, RESTORE_GLOB))):
        try:
            with open(path) as f:
                doc = json.load(f)
            pid, saved = int(doc.get("pid", 0)), doc["settings"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            done.append({"file": path, "problems": [f"unreadable: {e}"]})
            continue
        if pid != os.getpid() and _alive(pid):
            continue  # a sweep running now owns it
        problems = restore_settings(saved)
        if not problems:
            try:
                os.remove(path)
            except OSError as e:
                problems.append(f"cannot remove the restore file: {e}")
        done.append({"file": path, "restored": [p for p, _ in saved], "problems": problems})
    return done or None


class PowerBusy(Exception):
    """Another sweep is changing this device's cpufreq settings right now."""


class PowerState:
    """The sysfs files a sweep changed, their originals, and the restore file naming them."""

    def __init__(self, restore_file):
        self.restore_file = restore_file
        self.saved = []  # [path, original] in the order first changed
        self.lock = threading.Lock()
        self.closed = False
        if os.path.exists(restore_file):  # recover_power ran first: it is live, or stuck
            raise PowerBusy(f"{restore_file} exists: another power sweep is changing these cpufreq "
                            "settings, or a killed one's originals could not be written back "
                            "(see power_recovered); wait, or restore them and delete the file")

    def _remember(self, path):
        if any(p == path for p, _ in self.saved):
            return
        self.saved.append([path, _read(path)])
        tmp = self.restore_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "settings": self.saved}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.restore_file)

    def apply(self, writes, root):
        """Originals back, then ``writes`` ((path, value), ...); returns what each file reads
        now, by its path under ``root``."""
        with self.lock:
            if self.closed:
                raise DeadlineExceeded("the sweep is stopping")
            restore_settings(self.saved)
            for path, value in writes:
                self._remember(path)
                _write(path, value)
            return dict((os.path.relpath(p, root), _read(p)) for p, _ in writes)

    def close(self):
        """Every original back; the restore file goes when all were. Returns the problems."""
        if not self.lock.acquire(timeout=5):
            return ["the sweep held its settings lock for 5 s"]
        try:
            if self.closed:
                return []
            self.closed = True
            problems = restore_settings(self.saved)
            if not problems and os.path.exists(self.restore_file):
                os.remove(self.restore_file)
            return problems
        finally:
            self.lock.release()


def power_stop():
    """Restore a running sweep's settings (before kill_everything kills this process)."""
    state = POWER
    if state is not None:
        state.close()


# energy sensors: (sensor, None) or (None, why); units as sysfs gives them
def _sysfs_int(path):
    return int(_read(path))


def _sensor_or_why(kind, files, ranges, source):
    try:
        for p in files:
            _sysfs_int(p)
    except PermissionError:
        return None, f"{files[0]} is not readable by this user (RAPL needs root since Linux 5.10)"
    except (OSError, ValueError) as e:
        return None, f"cannot read {files[0]}: {e}"
    return {"kind": kind, "files": files, "ranges": ranges, "source": source}, None


def _rapl_sensor(root):
    zones = rapl_zones(os.path.join(root, "class", "powercap"))
    if not zones:
        return None, "no RAPL zones (class/powercap/intel-rapl:N)"
    ranges = []
    for z in zones:
        try:
            ranges.append(_sysfs_int(os.path.join(z, "max_energy_range_uj")))
        except (OSError, ValueError):
            ranges.append(0)
    return _sensor_or_why("counter", [os.path.join(z, "energy_uj") for z in zones], ranges,
                          f"RAPL energy_uj of {len(zones)} package zone(s): the whole "
                          "package, other load included")


def _board_channel(files):
    """The channel whose label says it is the board's input (VDD_IN on Jetson INA3221
    rails: the others are parts of it, so summing would count twice); else the first."""
    for path in files:
        try:
            label = _read(path[:-len("_input")] + "_label").lower()
        except OSError:
            continue
        if label.endswith("_in") or label in ("in", "vin", "total", "sys") or "vdd_in" in label:
            return path
    return files[0]


def _hwmon_sensor(root):
    base = os.path.join(root, "class", "hwmon")
    for kind, pattern, what in (("counter", "energy*_input", "energy counter (uJ)"),
                                ("power", "power*_input",
                                 f"power (uW), sampled every {SAMPLE_S * 1e3:.0f} ms")):
        files = sorted(glob.glob(os.path.join(base, "*", pattern)))
        if files:
            path = _board_channel(files)
            try:
                label = " ({})".format(_read(path[:-len("_input")] + "_label"))
            except OSError:
                label = ""
            rel = os.path.relpath(path, base)
            return _sensor_or_why(kind, [path], [0], f"hwmon {rel}{label}: {what}")
    return None, "no hwmon energy*_input or power*_input (class/hwmon)"


def _battery_sensor(root):
    why = "no battery (class/power_supply/*/type = Battery)"
    for d in sorted(glob.glob(os.path.join(root, "class", "power_supply", "*"))):
        try:
            if _read(os.path.join(d, "type")) != "Battery":
                continue
            status = _read(os.path.join(d, "status"))
        except OSError:
            continue
        name = os.path.basename(d)
        if status != "Discharging":
            why = (f"battery {name} is {status}, not discharging: its current is not the "
                   "board's draw")
            continue
        vi = [os.path.join(d, "voltage_now"), os.path.join(d, "current_now")]
        if all(os.path.exists(p) for p in vi):
            return _sensor_or_why("vi", vi, [0, 0], f"battery {name} voltage_now x current_now "
                                  f"(uV x uA), sampled every {SAMPLE_S * 1e3:.0f} ms")
        why = f"battery {name} has no voltage_now/current_now"
    return None, why


def find_sensor(root):
    """The first energy source under ``root`` (a sysfs tree): RAPL, hwmon, a battery."""
    reasons = []
    for probe in (_rapl_sensor, _hwmon_sensor, _battery_sensor):
        sensor, why = probe(root)
        if sensor is not None:
            return sensor, None
        reasons.append(why)
    return None, "; ".join(reasons) + " under " + root


class Meter:
    """Energy over a window: counters (uJ, wrapping at their range) are read and power
    (uW) sampled every SAMPLE_S in a thread, so a counter that wraps within the window is
    still counted right."""

    def __init__(self, sensor):
        self.sensor = sensor

    def _sample(self):
        values = [_sysfs_int(p) for p in self.sensor["files"]]
        if self.sensor["kind"] == "vi":
            return abs(values[0] * values[1]) / 1e6
        return values if self.sensor["kind"] == "counter" else values[0]

    def _step(self):
        now, value = time.monotonic(), self._sample()
        t0, v0 = self.last
        if self.sensor["kind"] == "counter":
            for a, b, rng in zip(v0, value, self.sensor["ranges"]):
                self.total_uj += (b - a) if b >= a else (b - a + rng if rng > 0 else 0)
        else:
            self.total_uj += (v0 + value) / 2.0 * (now - t0)
        self.last = (now, value)

    def _loop(self):
        while not self.done.wait(SAMPLE_S):
            try:
                self._step()
            except (OSError, ValueError) as e:
                self.error = str(e)
                return

    def start(self):
        self.total_uj, self.error, self.done = 0.0, None, threading.Event()
        self.t0 = time.monotonic()
        self.last = (self.t0, self._sample())
        self.thread = threading.Thread(target=self._loop, name="energy-meter")
        self.thread.daemon = True
        self.thread.start()

    def stop(self, inferences):
        """{"energy_mj": per inference, "power_w": mean} over the window, or why not."""
        self.done.set()
        self.thread.join()
        if self.error is None:
            try:
                self._step()
            except (OSError, ValueError) as e:
                self.error = str(e)
        if self.error is not None:
            return {"energy_mj": None, "energy_note": "unavailable: sensor read failed: "
                    + self.error}
        seconds = self.last[0] - self.t0
        return {"energy_mj": self.total_uj / 1e3 / max(1, inferences),
                "power_w": self.total_uj / 1e6 / seconds if seconds > 0 else None}


class NoMeter:
    """No sensor: no figure, ever."""

    def start(self):
        pass

    def stop(self, inferences):
        return {"energy_mj": None}


def period_runs(runs, period_ms):
    """Runs for a frame-period setting: at most about PERIOD_SWEEP_S of it, at least 3."""
    if not period_ms:
        return runs
    return max(1, min(runs, max(3, int(PERIOD_SWEEP_S * 1e3 / period_ms))))


def cpufreq_dirs(root):
    found = glob.glob(os.path.join(root, "devices", "system", "cpu", "cpu[0-9]*", "cpufreq"))
    return sorted(found, key=lambda d: int(os.path.basename(os.path.dirname(d))[3:]))


def _pick(freqs, n):
    """Up to ``n`` of the sorted frequencies, spread from the lowest to the highest."""
    if n <= 0 or not freqs:
        return []
    if n == 1 or len(freqs) == 1:
        return [freqs[-1]]
    idx = sorted(set(round(i * (len(freqs) - 1) / (n - 1)) for i in range(n)))
    return [freqs[i] for i in idx]


def cpufreq_settings(cpus, plan, root):
    """(settings, facts): each governor, then a few capped frequencies."""
    if not cpus:
        return [], {"available": False, "why": "no cpufreq (devices/system/cpu/cpu*/cpufreq) "
                    "under " + root}
    first = cpus[0]
    facts = {"available": True, "cpus": len(cpus)}
    try:
        governors = _read(os.path.join(first, "scaling_available_governors")).split()
        facts["original_governor"] = _read(os.path.join(first, "scaling_governor"))
    except OSError as e:
        return [], {"available": False, "why": f"cannot read {e.filename}: {e.strerror}"}
    facts["governors"] = governors
    settings = [{"label": "governor " + g, "governor": g} for g in governors]
    try:
        freqs = sorted(int(x) for x in _read(
            os.path.join(first, "scaling_available_frequencies")).split())
    except (OSError, ValueError):
        freqs = []
        facts["frequencies_why"] = "no scaling_available_frequencies (intel_pstate lists none)"
    facts["frequencies_khz"] = freqs
    gov = "performance" if "performance" in governors else None
    for f in _pick(freqs, int(plan.get("frequencies", 3))):
        settings.append({"label": "{:g} MHz{}".format(f / 1e3, " (performance)" if gov else ""),
                         "governor": gov, "max_freq_khz": f})
    return settings, facts


def duty_settings(plan, governors):
    """The profile's duty cycle and frame period (under its governor, where it names one
    the device has)."""
    gov = plan.get("governor") if plan.get("governor") in governors else None
    out = []
    duty = plan.get("duty") or {}
    if duty.get("max_steps") or duty.get("sleep_us"):
        out.append({"label": "duty {} steps, sleep {} us".format(duty.get("max_steps") or "all",
                                                            duty.get("sleep_us") or 0),
                    "governor": gov, "max_steps": duty.get("max_steps") or 0,
                    "sleep_us": duty.get("sleep_us") or 0})
    if plan.get("period_ms"):
        out.append({"label": "period {:g} ms".format(plan["period_ms"]), "governor": gov,
                    "period_ms": plan["period_ms"]})
    return out


def cpufreq_writes(cpus, setting):
    """(path, value) pairs that put every CPU in ``setting``: governor, then min (only when
    above the cap), then max."""
    writes = []
    for cpu in cpus:
        if setting.get("governor"):
            writes.append((os.path.join(cpu, "scaling_governor"), setting["governor"]))
        f = setting.get("max_freq_khz")
        if f:
            low = os.path.join(cpu, "scaling_min_freq")
            try:
                if _sysfs_int(low) > f:
                    writes.append((low, f))
            except (OSError, ValueError):
                pass
            writes.append((os.path.join(cpu, "scaling_max_freq"), f))
    return writes


def measure_setting(state, cpus, root, setting, measure, sensor):
    entry = {"label": setting["label"], "setting": dict(
        (k, v) for k, v in setting.items() if k != "label" and v is not None),
        "status": "ok", "message": None, "latency_ms": None, "throughput_ips": None,
        "energy_mj": None}
    try:
        entry["applied"] = state.apply(cpufreq_writes(cpus, setting), root)
    except OSError as e:
        entry.update(status="skipped", message=f"cannot write {e.filename}: {e.strerror} "
                     "(changing cpufreq needs root)")
        return entry
    try:
        entry.update(measure(setting, Meter(sensor) if sensor else NoMeter()))
    except Unsupported as e:
        entry.update(status="unsupported", message=str(e))
    except DeadlineExceeded:
        raise
    except Exception as e:  # one setting failing must not lose the others
        entry.update(status="error", message=f"{type(e).__name__}: {e}")
    return entry


def sweep_measure(mod, args, deadline):
    """A self-measuring loader's sweep point (``sweep_point``), or None if it has none."""
    point = getattr(mod, "sweep_point", None)
    if point is None:
        return None
    return lambda setting, meter: point(args, setting, meter, deadline, API)


def power_sweep(args, measure):
    """Measure every setting with ``measure(setting, meter) -> figures``; put back every
    cpufreq file it changed, whatever happens."""
    global POWER
    root = os.path.abspath(args.sysfs_root)
    out = {"sysfs_root": root, "status": "ok", "message": None, "settings": [],
           "energy_source": None, "restored": None}
    if measure is None:
        out.update(status="unsupported", message="this format's loader cannot sweep")
        return out
    if not os.path.isdir(root):
        out.update(status="error", message=f"--sysfs-root {root} is not a folder on this device")
        return out
    sensor, why = find_sensor(root)
    out["energy_source"] = sensor["source"] if sensor else "unavailable: " + why
    cpus = cpufreq_dirs(root)
    freq, out["cpufreq"] = cpufreq_settings(cpus, args.power_sweep, root)
    settings = [{"label": "as found"}] + freq + duty_settings(
        args.power_sweep, out["cpufreq"].get("governors", ()))
    name = hashlib.sha1(root.encode()).hexdigest()[:12]
    try:
        POWER = PowerState(os.path.join(args.restore_dir or ".", RESTORE_GLOB.replace("*", name)))
    except PowerBusy as e:
        out.update(status="error", message=str(e))
        return out
    old = dict((s, signal.signal(s, lambda n, f: kill_everything()))
               for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s)
    try:
        for setting in settings:
            out["settings"].append(measure_setting(POWER, cpus, root, setting, measure, sensor))
    finally:
        problems = POWER.close()
        POWER = None
        for s, handler in old.items():
            signal.signal(s, handler)
        out["restored"] = not problems
        if problems:
            out.update(status="error", message="could not restore: " + "; ".join(problems))
    return out


def timed_python(run, feeds, args, setting, meter):
    """One sweep setting for an in-process runtime. It cannot stop mid-graph, so a duty
    cycle is emulated at inference granularity: sleep_us after each inference (max_steps
    cannot be honoured); a frame period sleeps to the next period's start. Latency is the
    inference alone; energy covers the whole window, sleeps included."""
    for i in range(args.warmup):
        run(feeds[i % len(feeds)])
    period_ns = int(setting.get("period_ms", 0) * 1e6)
    sleep_s = setting.get("sleep_us", 0) / 1e6
    runs = period_runs(args.runs, setting.get("period_ms"))
    clock, times = time.perf_counter_ns, []
    meter.start()
    wall0 = clock()
    for i in range(runs):
        t = clock()
        run(feeds[i % len(feeds)])
        times.append(clock() - t)
        if period_ns:
            time.sleep(max(0, t + period_ns - clock()) / 1e9)
        elif sleep_s:
            time.sleep(sleep_s)
    wall = (clock() - wall0) / 1e9
    figures = {"runs": runs, "latency_ms": latency_figures(times),
               "throughput_ips": runs / wall if wall > 0 else None,
               "energy_window": "the timed runs"}
    if period_ns or sleep_s:
        figures["emulated"] = "sleep between whole inferences (in-process runtime)"
    figures.update(meter.stop(runs))
    return figures


# -- commands ---------------------------------------------------------------------------------
def system_info():
    import importlib.util

    runtimes = {}
    known = [("numpy", "numpy")]
    for fmt in sorted(LOADER_SOURCES):
        try:
            pairs = getattr(loader(fmt), "RUNTIMES", ())
        except Exception:  # noqa: BLE001  one broken loader must not hide the others
            continue
        known += [pair for pair in pairs if pair not in known]
    for module, dist in known:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        runtimes[dist] = _version(dist) if found else None
    return {
        "hostname": platform.node(), "system": platform.system(),
        "release": platform.release(), "machine": platform.machine(),
        "python": platform.python_version(), "cpu_count": os.cpu_count(),
        "runtimes": runtimes,
        "make": shutil.which("make") is not None,
        "cc": next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None),
    }


def cmd_verify(args):
    with open(args.files) as f:
        expected = json.load(f)
    problems = []
    for rel, (size, digest) in sorted(expected.items()):
        path = os.path.join(os.path.dirname(os.path.abspath(args.files)), rel)
        if not os.path.isfile(path):
            problems.append(f"{rel}: missing")
            continue
        if os.path.getsize(path) != size:
            problems.append(f"{rel}: {os.path.getsize(path)} bytes, expected {size}")
            continue
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != digest:
            problems.append(f"{rel}: sha256 differs")
    return {"schema": SCHEMA, "ok": not problems, "problems": problems,
            "system": system_info()}


def cmd_bench(args):
    result = {"schema": SCHEMA, "name": args.name, "format": args.format,
              "precision": args.precision, "status": "error", "message": None,
              "threads": args.threads, "options": args.options, "runs": args.runs,
              "warmup": args.warmup,
              "latency_ms": None, "peak_rss_mb": None, "energy_j_per_inference": None}
    deadline = time.monotonic() + args.timeout
    recovered = recover_power(args.restore_dir)
    if recovered:
        result["power_recovered"] = recovered

    def on_alarm(signum, frame):
        raise DeadlineExceeded(f"bench ran past its {args.timeout:.0f} s limit")

    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(max(1, int(args.timeout)))
    try:
        shape, flat = read_npy(args.input)
        samples, sample_shape = split_samples(shape, flat)
        ref_shape, ref_flat = read_npy(args.reference)
        references, _ = split_samples(ref_shape, ref_flat)
        if len(references) != len(samples) or not samples:
            raise ValueError(f"bench input has {len(samples)} samples, "
                             f"the reference {len(references)}")
        mod = loader(args.format)
        if mod is None:
            raise Unsupported(f"this bench script has no loader for format {args.format!r}")
        if hasattr(mod, "bench"):
            mod.bench(args, result, samples, sample_shape, references, deadline, API)
            measure = sweep_measure(mod, args, deadline)
        else:
            measure = bench_python(args, result, samples, sample_shape, references, mod)
        result["status"] = "ok"
        if args.power_sweep is not None:
            result["power_sweep"] = power_sweep(args, measure)
    except Missing as e:
        result["status"] = "missing_runtime"
        result["message"] = f"missing on this device: {e}"
    except Unsupported as e:
        result["status"] = "unsupported"
        result["message"] = str(e)
    except DeadlineExceeded as e:
        result["message"] = str(e)
    except Exception as e:  # report every other failure as data, with its type
        result["message"] = f"{type(e).__name__}: {e}"
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)
    return result


def parse(argv):
    p = argparse.ArgumentParser(prog="edgesmith_remote.py")
    sub = p.add_subparsers(dest="command")
    v = sub.add_parser("verify")
    v.add_argument("files")
    b = sub.add_parser("bench")
    b.add_argument("--format", required=True)
    b.add_argument("--precision", default="fp32")
    b.add_argument("--name", default=None)
    b.add_argument("--model", required=True, help="model file, or the artifact's folder")
    b.add_argument("--weights", default=None, help="weights file inside the model folder")
    b.add_argument("--input", required=True)
    b.add_argument("--reference", required=True)
    b.add_argument("--runs", type=int, default=100)
    b.add_argument("--warmup", type=int, default=10)
    b.add_argument("--threads", type=int, default=0, help="0: the runtime's default")
    b.add_argument("--options", type=json.loads, default={}, metavar="JSON",
                   help="the format's options (validated by edgesmith), for its loader")
    b.add_argument("--timeout", type=float, default=600.0)
    b.add_argument("--energy-root", default="/sys/class/powercap")
    b.add_argument("--prebuilt", action="store_true",
                   help="the upload was built on the host: run it as is (no build here)")
    b.add_argument("--exec-wrapper", action="append", default=[], metavar="WORD",
                   help="run a compiled harness under this command (one word per flag), "
                        "e.g. qemu-aarch64; formats that run in-process ignore it")
    b.add_argument("--power-sweep", type=json.loads, default=None, metavar="JSON",
                   help='measure once per power setting too: {"frequencies": 3, '
                        '"governor": G, "duty": {"max_steps": K, "sleep_us": S}, '
                        '"period_ms": P}; cpufreq is put back afterwards')
    b.add_argument("--sysfs-root", default="/sys",
                   help="the sysfs tree to sweep and read energy from (a copy for tests)")
    b.add_argument("--restore-dir", default=None,
                   help="where a sweep records what to put back (and where leftovers of a "
                        "killed sweep are looked for at start)")
    b.add_argument("--stop-on-eof", action="store_true",
                   help="stop, with everything started, when stdin closes (the SSH "
                        "channel or the local pipe of edgesmith bench)")
    args = p.parse_args(argv)
    if args.command is None:
        p.error("give a command: verify or bench")
    if args.command == "bench":
        args.runs = max(1, args.runs)
        args.warmup = max(0, args.warmup)
        args.name = args.name or f"{args.format}-{args.precision}"
    return args


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    if getattr(args, "stop_on_eof", False):
        stop_on_eof()
    # keep stdout for our one JSON document: runtimes print banners and warnings to fd 1
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        doc = cmd_verify(args) if args.command == "verify" else cmd_bench(args)
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()
    return 0


# the script's helper API, handed to every loader as ``rt``
API = types.SimpleNamespace(
    Missing=Missing, Unsupported=Unsupported, DeadlineExceeded=DeadlineExceeded,
    numpy=numpy_or_missing, version=_version, parity=parity, run_child=run_child,
    remaining=remaining, read_energy_uj=read_energy_uj, write_raw=write_raw,
    read_raw=read_raw, last_json_line=last_json_line, self_peak_rss_mb=self_peak_rss_mb,
    period_runs=period_runs)

# format -> loader source; empty in devices/remote.py itself, filled in the uploaded copy
LOADER_SOURCES = {}
# @@LOADERS@@

if __name__ == "__main__":
    sys.exit(main())
