"""The bench script's power sweep: cpufreq settings and duty cycles, energy from whatever
sensor exists. A part of the uploaded ``edgesmith_remote.py``, kept in a file of its own:
``devices/script.py`` embeds it beside the format loaders and ``remote.py`` runs it in a
namespace of its own, handing it the script's helper API as ``rt``. Standard library only,
Python 3.8 compatible, like the rest of the script.

``bench --power-sweep PLAN`` measures the target once per setting: as found, each cpufreq
governor, a few frequencies (scaling_max_freq, under ``performance``), the profile's duty
cycle and frame period. Every sysfs write goes through PowerState, which records the
file's original value in a restore file BEFORE its first change and writes every original
back on exit, on stdin EOF (kill_everything), on SIGTERM/SIGHUP and, when a killed run
left the file, at the next start (recover_power).
"""

# ruff: noqa: B905  (zip(strict=) is Python 3.10+; this file runs on 3.8 devices)
import glob
import hashlib
import json
import os
import signal
import threading
import time

# remote.py's API (DeadlineExceeded, Unsupported, kill_everything, latency_figures,
# rapl_zones, period_runs), set when the script loads this part
rt = None

POWER = None  # the PowerState of the sweep running now; kill_everything restores it first
RESTORE_GLOB = ".edgesmith-power-restore-*.json"
SAMPLE_S = 0.02  # how often a power sensor is sampled (and a counter read, for wraps)


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
                raise rt.DeadlineExceeded("the sweep is stopping")
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


def stop():
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
    zones = rt.rapl_zones(os.path.join(root, "class", "powercap"))
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
    except rt.Unsupported as e:
        entry.update(status="unsupported", message=str(e))
    except rt.DeadlineExceeded:
        raise
    except Exception as e:  # one setting failing must not lose the others
        entry.update(status="error", message=f"{type(e).__name__}: {e}")
    return entry




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
    old = dict((s, signal.signal(s, lambda n, f: rt.kill_everything()))
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
    runs = rt.period_runs(args.runs, setting.get("period_ms"))
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
    figures = {"runs": runs, "latency_ms": rt.latency_figures(times),
               "throughput_ips": runs / wall if wall > 0 else None,
               "energy_window": "the timed runs"}
    if period_ns or sleep_s:
        figures["emulated"] = "sleep between whole inferences (in-process runtime)"
    figures.update(meter.stop(runs))
    return figures


