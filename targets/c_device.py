"""The C target on a device: build the uploaded sources with ``make`` (unless the binary was
built on the host, ``--prebuilt``), then run ``edgesmith_bench``, run by the bench script.

Embedded, not imported, there (``devices/script.py``): standard library only, Python 3.8
compatible, no numpy (a board with a compiler and nothing else can bench C); ``rt`` is the
script's helper API. This loader measures by itself (``bench``) rather than handing the
script a ``run`` to time: the timed loop is the C harness's own. Given the build's raw
frames (``--frames``), it scores them through the harness's own preprocessing
(``edgesmith_bench --frames``: es_preprocess_u8 with model.h's spec), not the script's.
"""

import os
import shutil
import time

RUNTIMES = ()
PACKAGE = "make and a C compiler (e.g. apt-get install build-essential)"
FIGURES = ("p50", "p90", "p99", "min", "max", "mean")


def _build(args, folder, exe, result, deadline, rt):
    """``make`` in the uploaded folder; a prebuilt binary only gets its execute bit back."""
    if args.prebuilt:  # a binary built on the host (cross-compiled): never run make here
        if not os.path.isfile(exe):
            raise RuntimeError(f"--prebuilt, but no edgesmith_bench was uploaded to {folder}")
        os.chmod(exe, 0o755)  # SFTP does not carry the execute bit
        result["prebuilt"] = True
        return
    if not os.path.exists(os.path.join(folder, "Makefile")):
        return
    if shutil.which("make") is None:
        if not os.access(exe, os.X_OK):
            raise rt.Missing(PACKAGE)
        return
    t_build = time.perf_counter()
    code, out, err, _ = rt.run_child(["make"], folder, rt.remaining(deadline),
                                     os.path.join(folder, ".make.log"))
    result["build_s"] = time.perf_counter() - t_build
    if code != 0:
        tail = (out + err).strip().splitlines()[-15:]
        if "not found" in err and ("cc" in err or "gcc" in err):
            raise rt.Missing(PACKAGE)
        raise RuntimeError("make failed (exit {}):\n{}".format(code, "\n".join(tail)))


def _energy_source(figures, energy0, energy1):
    if figures.get("energy_j_per_inference") is not None:
        return "edgesmith_bench power hooks"
    if isinstance(energy0, dict) and isinstance(energy1, dict):
        return "unavailable: RAPL readable, but it would include process start"
    return "unavailable: %s" % (energy0 if isinstance(energy0, str) else energy1)


def _harness(args, folder, exe):
    """The harness's argv up to its per-run flags (wrapper, binary, weights)."""
    weights = args.weights or ("weights.bin" if os.path.exists(
        os.path.join(folder, "weights.bin")) else None)
    return list(args.exec_wrapper or []) + [exe] + (
        ["--weights", os.path.join(folder, weights)] if weights else [])


def _power_flags(setting):
    """The harness flags of a sweep setting: its duty cycle (--slice/--sleep-us) and frame
    period (--period-ms); cpufreq is set by the script around it."""
    flags = []
    if setting.get("max_steps") or setting.get("sleep_us"):
        flags += ["--slice", str(setting.get("max_steps") or 0),
                  "--sleep-us", str(setting.get("sleep_us") or 0)]
    if setting.get("period_ms"):
        flags += ["--period-ms", "{:g}".format(setting["period_ms"])]
    return flags


def sweep_point(args, setting, meter, deadline, rt):
    """One power-sweep setting: a fresh harness run (after ``bench`` built it) with the
    setting's flags. Energy covers the whole harness process (start, warm-up and timed
    runs), divided by the inferences it ran."""
    folder = os.path.abspath(args.model)
    in_raw = os.path.join(folder, ".in.raw")
    runs = rt.period_runs(args.runs, setting.get("period_ms"))
    flags = _power_flags(setting)
    meter.start()
    code, out, err, _ = rt.run_child(
        _harness(args, folder, os.path.join(folder, "edgesmith_bench"))
        + ["--input", in_raw, "--runs", str(runs), "--warmup", str(args.warmup)] + flags,
        folder, rt.remaining(deadline), in_raw + ".sweep.log")
    figures = rt.last_json_line(out) if code == 0 else None
    energy = meter.stop((figures or {}).get("runs", runs) + (figures or {}).get(
        "warmup", args.warmup))
    if code == 2 and "--period-ms" in flags and "usage" in err:
        raise rt.Unsupported("this edgesmith_bench has no --period-ms: rebuild the C target "
                             "with an edgesmith that has it")
    if figures is None or "latency_ms" not in figures:
        raise RuntimeError(f"edgesmith_bench failed (exit {code}): {(err or out).strip()[-300:]}")
    lat = figures["latency_ms"]
    mean = lat.get("mean") or lat.get("p50")
    return dict(energy, runs=figures.get("runs", runs),
                latency_ms={k: lat.get(k) for k in FIGURES if lat.get(k) is not None},
                throughput_ips=1e3 / mean if mean and not setting.get("period_ms") else (
                    1e3 / setting["period_ms"] if setting.get("period_ms") else None),
                energy_window="the harness process: start, warm-up and timed runs")


def _frames_run(base, folder, n, h, w, data, labels, deadline, rt):
    """The harness's --frames mode on one run of same-sized frames: its JSON line."""
    raw, txt = os.path.join(folder, ".frames.raw"), os.path.join(folder, ".labels.txt")
    with open(raw, "wb") as f:
        f.write(data)
    with open(txt, "w") as f:
        f.write("\n".join(str(v) for v in labels) + "\n")
    code, out, err, _ = rt.run_child(
        base + ["--frames", raw, "--frame-hw", str(h), str(w), "--labels", txt],
        folder, rt.remaining(deadline), raw + ".log")
    doc = rt.last_json_line(out) if code == 0 else None
    if code == 2 and "usage" in err:
        raise RuntimeError("this edgesmith_bench has no --frames: rebuild the C target with "
                           "an edgesmith that has it")
    if doc is None or doc.get("frames") != n:
        raise RuntimeError(f"edgesmith_bench --frames failed (exit {code}): "
                           f"{(err or out).strip()[-300:]}")
    return doc


def frames_accuracy(args, base, folder, deadline, rt):
    """Top-1 on the build's raw frames, preprocessed by the harness itself (es_preprocess_u8
    with model.h's ES_PREPROCESS_SPEC): one harness run per run of same-sized frames."""
    part = rt.preprocessing()
    index = part.read_index(args.frames)
    correct = frames = 0
    pre_ms = 0.0
    for n, h, w, data, labels in part.frame_runs(index):
        doc = _frames_run(base, folder, n, h, w, data, labels, deadline, rt)
        correct += doc["correct"]
        frames += n
        pre_ms += doc["preprocess_ms"] * n
    figures = part.figures(correct, frames, index,
                           "C harness (es_preprocess_u8, model.h's ES_PREPROCESS_SPEC)")
    figures["preprocess_ms"] = pre_ms / frames if frames else None
    return figures


def bench(args, result, samples, sample_shape, references, deadline, rt):
    t0 = time.perf_counter()
    folder = os.path.abspath(args.model)
    exe = os.path.join(folder, "edgesmith_bench")
    _build(args, folder, exe, result, deadline, rt)
    if not os.access(exe, os.X_OK):
        raise RuntimeError(f"no executable edgesmith_bench in {folder} after the build")
    result["runtime"] = {"name": "edgesmith C runtime", "version": None}
    base = _harness(args, folder, exe)
    if args.exec_wrapper:
        result["exec_wrapper"] = list(args.exec_wrapper)
    in_raw, out_raw = os.path.join(folder, ".in.raw"), os.path.join(folder, ".out.raw")
    outputs = []
    for s in samples:
        rt.write_raw(in_raw, s)
        code, out, err, _ = rt.run_child(base + ["--input", in_raw, "--output", out_raw,
                                                 "--runs", "1", "--warmup", "0"],
                                         folder, rt.remaining(deadline), in_raw + ".log")
        if code != 0:
            raise RuntimeError(f"edgesmith_bench failed (exit {code}): {err.strip()}")
        outputs.append(rt.read_raw(out_raw))
    result["parity"] = rt.parity(outputs, references)
    if args.frames:  # the build's raw frames through the harness's own preprocessing
        result["accuracy"] = rt.frames_accuracy(
            lambda: frames_accuracy(args, base, folder, deadline, rt))
    rt.write_raw(in_raw, samples[0])
    energy0 = rt.read_energy_uj(args.energy_root)
    code, out, err, peak = rt.run_child(
        base + ["--input", in_raw, "--output", out_raw, "--runs", str(args.runs),
                "--warmup", str(args.warmup)], folder, rt.remaining(deadline), in_raw + ".log")
    energy1 = rt.read_energy_uj(args.energy_root)
    if code != 0:
        raise RuntimeError(f"edgesmith_bench failed (exit {code}): {err.strip()}")
    figures = rt.last_json_line(out)
    if figures is None or "latency_ms" not in figures:
        raise RuntimeError(f"edgesmith_bench printed no JSON result line: {out[-300:]!r}")
    lat = figures["latency_ms"]
    result["latency_ms"] = {k: lat.get(k) for k in FIGURES if lat.get(k) is not None}
    mean = lat.get("mean") or lat.get("p50")
    result["throughput_ips"] = 1e3 / mean if mean else None
    # the harness's own VmHWM, read as it exits; polling /proc from here can catch a run
    # that ends within one poll only at its first page (0.004 MB)
    own_kb = figures.get("peak_rss_kb")
    result["peak_rss_mb"] = own_kb / 1024.0 if isinstance(own_kb, (int, float)) and \
        own_kb > 0 else peak
    result["c"] = {k: figures.get(k) for k in ("arena_bytes", "weights_bytes", "runs")}
    if figures.get("energy_j_per_inference") is not None:
        result["energy_j_per_inference"] = figures["energy_j_per_inference"]
    result["energy_source"] = _energy_source(figures, energy0, energy1)
    result["seconds"] = time.perf_counter() - t0
