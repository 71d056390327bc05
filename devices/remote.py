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
        per inference where a sensor exists, and puts cpufreq back (see "power sweep");
        with --frames data/bench_frames.json --preprocess SPEC it also scores the build's
        raw validation frames, preprocessed on the device (remote_preprocess.py);
        with --detect SETTINGS it decodes each bench sample's output into boxes
        (a detector's post-processing, remote_detect.py)

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


OUTPUTS = []  # the outputs of the last parity pass, one flat list per bench sample


def parity(outputs, references):
    """max |a-b|, cosine over everything, and top-1 agreement per sample."""
    max_abs, dot, na, nb, agree = 0.0, 0.0, 0.0, 0.0, 0
    OUTPUTS[:] = outputs  # what a detection build's boxes are decoded from (cmd_bench)
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


def namespace(kind, name, sources):
    """Embedded source ``name`` of ``sources`` run as a module of its own, once, with this
    script's API as its ``rt``; None if the script carries no such source."""
    key = (kind, name)
    if key not in _LOADED:
        source = sources.get(name)
        if source is None:
            return None
        module = types.ModuleType(f"edgesmith_{kind}_{name}")
        exec(compile(source, f"<{name} {kind}>", "exec"), module.__dict__)
        module.rt = API
        _LOADED[key] = module
    return _LOADED[key]


def loader(fmt):
    """The format's loader namespace, compiled once from LOADER_SOURCES; None if unknown."""
    return namespace("loader", fmt, LOADER_SOURCES)


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
    if args.frames:  # the build's raw frames, preprocessed here: top-1 against their labels
        result["accuracy"] = frames_accuracy(
            lambda: preprocessing().accuracy_python(args, prepare, run, to_list, sample_shape))
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
    return lambda setting, meter: power().timed_python(run, feeds, args, setting, meter)


# -- stopping when the controller is gone ---------------------------------------------------
RUNNING = []  # children started by run_child that have not been reaped yet


def kill_everything():
    """SIGKILL this script and what it started (make, the compiler, edgesmith_bench).

    As its process group's leader, one killpg reaches grandchildren too; otherwise each
    child still running is killed before the script exits. A power sweep's cpufreq
    settings are put back first."""
    swept = _LOADED.get(("part", "power"))
    if swept is not None:
        swept.stop()
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


# -- parts: the power sweep lives in devices/remote_power.py ---------------------------------
# devices/script.py embeds each part's source in PART_SOURCES, as it does the loaders;
# a part runs in a namespace of its own and gets this script's helper API as ``rt``.
PERIOD_SWEEP_S = 20.0  # a frame-period setting runs at most about this long


def period_runs(runs, period_ms):
    """Runs for a frame-period setting: at most about PERIOD_SWEEP_S of it, at least 3."""
    if not period_ms:
        return runs
    return max(1, min(runs, max(3, int(PERIOD_SWEEP_S * 1e3 / period_ms))))


def power():
    """The power-sweep part (devices/remote_power.py), compiled once."""
    return namespace("part", "power", PART_SOURCES)


def preprocessing():
    """The declared-preprocessing part (devices/remote_preprocess.py), compiled once."""
    return namespace("part", "preprocess", PART_SOURCES)


def detecting():
    """The detection part (devices/remote_detect.py), compiled once."""
    return namespace("part", "detect", PART_SOURCES)


def decoded_boxes(settings):
    """The bench samples' boxes (remote_detect.detections), or what stopped the decode:
    a finding beside the latency, not a reason to lose it."""
    try:
        return detecting().detections(OUTPUTS, settings)
    except DeadlineExceeded:
        raise
    except Exception as e:  # noqa: BLE001  reported as data, with its type
        return {"boxes_per_sample": None, "error": f"{type(e).__name__}: {e}"}


def frames_accuracy(score):
    """``score()``'s figures, or what stopped it: a frame the spec or the model cannot
    take is a finding beside the latency, not a reason to lose it."""
    try:
        return score()
    except DeadlineExceeded:
        raise
    except Exception as e:  # noqa: BLE001  reported as data, with its type
        return {"top1": None, "error": f"{type(e).__name__}: {e}"}


def sweep_measure(mod, args, deadline):
    """A self-measuring loader's sweep point (``sweep_point``), or None if it has none."""
    point = getattr(mod, "sweep_point", None)
    if point is None:
        return None
    return lambda setting, meter: point(args, setting, meter, deadline, API)


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
    recovered = power().recover_power(args.restore_dir)
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
        if args.detect is not None:  # a detector: the bench samples' boxes, decoded here
            result["detections"] = decoded_boxes(args.detect)
        result["status"] = "ok"
        if args.power_sweep is not None:
            result["power_sweep"] = power().power_sweep(args, measure)
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
    b.add_argument("--frames", default=None, metavar="INDEX.json",
                   help="the build's raw validation frames (data/bench_frames.json): each is "
                        "preprocessed by --preprocess and scored top-1 against its label")
    b.add_argument("--preprocess", type=json.loads, default=None, metavar="JSON",
                   help="the build's preprocess spec (manifest data.preprocess), for --frames")
    b.add_argument("--detect", type=json.loads, default=None, metavar="JSON",
                   help="a detector's decode settings (levels, classes, thresholds): "
                        "decode each bench sample's output into boxes (remote_detect.py)")
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
    period_runs=period_runs, kill_everything=kill_everything, latency_figures=latency_figures,
    rapl_zones=rapl_zones, preprocessing=preprocessing, frames_accuracy=frames_accuracy)

# format -> loader source and part -> source; empty in devices/remote.py itself, filled in
# the uploaded copy
LOADER_SOURCES = {}
PART_SOURCES = {}
# @@LOADERS@@

if __name__ == "__main__":
    sys.exit(main())
