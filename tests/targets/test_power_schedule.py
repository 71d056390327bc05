"""Issue 21, the C side: a profile's ``power:`` block drives the generated runtime.

Two profiles that differ only in ``power:`` go through the real C target (codegen, the
host compiler); the compiled harness and a small application driver
(``c/scheduled.c``: es_run_scheduled + es_period) run, and the before/after-step hooks'
timeline shows the slices and the sleeps between them. The frame loop (--period-ms) and
the energy counters (a fake sysfs tree) are checked against wall time and known files."""

from __future__ import annotations

import array
import fcntl
import json
import os
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from edgesmith.errors import ProfileError
from edgesmith.pipeline.registry import get
from edgesmith.profiles import load as load_profile
from edgesmith.profiles.schema import TargetSpec
from edgesmith.target import ConvertContext
from edgesmith.targets import run
from tests.conftest import require_tools
from tests.targets._helpers import HARNESS, model_sources

STEPS = 6  # the chain below lowers to one step per node
SLEEP_US = 40_000  # far above scheduling noise on a shared 2-core machine


@pytest.fixture(scope="module")
def chain_onnx(tmp_path_factory) -> Path:
    """Six element-wise nodes in a chain: six steps, microseconds each (no Add feeds a
    Relu, which would run in the Add's step)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    ops = ["Add", "Sigmoid", "Mul", "Relu", "Add", "Tanh"]
    nodes, inits, prev = [], [], "input"
    for i, op in enumerate(ops):
        out = "output" if i == len(ops) - 1 else f"t{i}"
        ins = [prev]
        if op in ("Add", "Mul"):
            inits.append(numpy_helper.from_array(np.full((1, 16), 0.5, np.float32), f"c{i}"))
            ins.append(f"c{i}")
        nodes.append(helper.make_node(op, ins, [out], name=f"{op.lower()}_{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 16])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = tmp_path_factory.mktemp("power") / "chain.onnx"
    onnx.save(model, path)
    return path


def _profile(tmp: Path, name: str, power: str) -> object:
    """A real profile file through the real loader; only ``power:`` differs between calls."""
    text = ("device: {name: board, arch: x86_64, cores: 2, ram_mb: 1024}\n"
            "targets:\n  - {format: c, precision: fp32}\n" + power)
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return load_profile(path)


def _convert(tmp: Path, onnx_path: Path, profile) -> object:
    """The registered C target's convert, as a build runs it, then a host build of it."""
    from edgesmith.compress.calibration import CalibrationSet
    from edgesmith.inputs import InputSpec

    t = get("c")
    (tmp / "work").mkdir(parents=True, exist_ok=True)
    ctx = ConvertContext(
        fp32_onnx=onnx_path, spec=InputSpec((16,)),
        calib=CalibrationSet(np.zeros((2, 1, 16), np.float32)),
        target=TargetSpec(format="c", precision="fp32"), options=t.Options.model_validate({}),
        profile=profile, out_dir=tmp / "out", work_dir=tmp / "work", log_path=tmp / "log.txt")
    artifact = t.convert(ctx)
    run.build(artifact.path)
    return artifact


@pytest.fixture(scope="module")
def sliced(tmp_path_factory, chain_onnx):
    tmp = tmp_path_factory.mktemp("sliced")
    return _convert(tmp, chain_onnx, _profile(
        tmp, "sliced", f"power: {{max_steps: 2, sleep_us: {SLEEP_US}}}\n"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory, chain_onnx):
    tmp = tmp_path_factory.mktemp("plain")
    return _convert(tmp, chain_onnx, _profile(tmp, "plain", ""))


@pytest.fixture(scope="module")
def paced(tmp_path_factory, chain_onnx):
    """One inference per 30 ms, each itself sliced step by step with 2 ms sleeps: ~12 ms of
    every period is spent inside the inference."""
    tmp = tmp_path_factory.mktemp("paced")
    return _convert(tmp, chain_onnx, _profile(
        tmp, "paced", "power: {max_steps: 1, sleep_us: 2000, period_ms: 30}\n"))


def _bench(artifact, *args: str, cwd: Path | None = None) -> dict:
    folder = Path(artifact.path)
    return run.run_bench(folder / "edgesmith_bench",
                         ["--weights", str(folder / "weights.bin"), *args], cwd=cwd or folder)


def _driver(artifact, frames: int = 1) -> dict:
    """c/scheduled.c built against the generated folder, run for ``frames`` frames."""
    require_tools("cc")
    folder = Path(artifact.path)
    exe = folder / "scheduled"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-I", str(folder),
                    *model_sources(folder), str(HARNESS / "scheduled.c"), "-o", str(exe),
                    "-lm"], check=True, capture_output=True, text=True)
    p = subprocess.run([str(exe), str(frames), str(folder / "weights.bin")],
                       capture_output=True, text=True, timeout=60, check=True)
    return json.loads(p.stdout)


def _gaps_us(trace: list[tuple[float, float]]) -> list[float]:
    """Idle time between one step's end and the next one's start."""
    return [trace[i + 1][0] - trace[i][1] for i in range(len(trace) - 1)]


def _slices(gaps: list[float], sleep_us: float) -> list[int]:
    """Where the sleeps are: indices of the steps after which the runtime slept."""
    return [i for i, g in enumerate(gaps) if g >= sleep_us]


def test_model_h_and_the_artifact_state_the_power_block(sliced, plain):
    h = (Path(sliced.path) / "model.h").read_text()
    assert "#define ES_POWER_MAX_STEPS 2 " in h
    assert f"#define ES_POWER_SLEEP_US {SLEEP_US}u " in h
    assert "#define ES_POWER_PERIOD_US 0u " in h
    assert sliced.meta["power"] == {"max_steps": 2, "run_us": 0, "sleep_us": SLEEP_US,
                                    "period_us": 0, "governor": None}
    assert plain.meta["power"] == {"max_steps": 0, "run_us": 0, "sleep_us": 0,
                                   "period_us": 0, "governor": None}
    assert "#define ES_POWER_MAX_STEPS 0 " in (Path(plain.path) / "model.h").read_text()


def test_harness_runs_the_profiles_slices_and_sleeps_by_default(sliced, plain):
    out = _bench(sliced, "--runs", "1", "--warmup", "0", "--trace")
    assert (out["slice"], out["sleep_us"]) == (2, SLEEP_US)  # what it ran with
    trace = [(s["start_us"], s["end_us"]) for s in out["trace"]]
    assert len(trace) == STEPS
    # slices of 2 steps: a sleep after steps 1 and 3, none inside a slice
    assert _slices(_gaps_us(trace), SLEEP_US) == [1, 3]
    assert out["latency_ms"]["p50"] >= 2 * SLEEP_US / 1e3
    assert 0 < out["duty_cycle"] < 0.5  # the sleeps are idle time

    flat = _bench(plain, "--runs", "1", "--warmup", "0", "--trace")
    assert (flat["slice"], flat["sleep_us"]) == (0, 0)
    assert _slices(_gaps_us([(s["start_us"], s["end_us"]) for s in flat["trace"]]),
                   SLEEP_US) == []


def test_harness_flags_override_the_profile_defaults(sliced):
    out = _bench(sliced, "--runs", "1", "--warmup", "0", "--trace", "--slice", "3")
    trace = [(s["start_us"], s["end_us"]) for s in out["trace"]]
    assert out["slice"] == 3 and _slices(_gaps_us(trace), SLEEP_US) == [2]
    off = _bench(sliced, "--runs", "1", "--warmup", "0", "--trace", "--no-power")
    assert (off["slice"], off["sleep_us"], off["period_ms"]) == (0, 0, 0)
    assert _slices(_gaps_us([(s["start_us"], s["end_us"]) for s in off["trace"]]),
                   SLEEP_US) == []


def test_es_run_scheduled_follows_model_h(sliced, plain):
    out = _driver(sliced)
    assert (out["steps"], out["max_steps"], out["sleep_us"]) == (STEPS, 2, SLEEP_US)
    assert _slices(_gaps_us(out["trace"]), SLEEP_US) == [1, 3]
    flat = _driver(plain)
    assert flat["max_steps"] == 0 and _slices(_gaps_us(flat["trace"]), SLEEP_US) == []


def test_period_mode_paces_runs_to_the_period_and_reports_the_duty_cycle(plain):
    n, period_ms = 8, 25.0
    t0 = time.monotonic()
    out = _bench(plain, "--runs", str(n), "--warmup", "0", "--period-ms", "25")
    elapsed_ms = (time.monotonic() - t0) * 1e3
    assert out["period_ms"] == period_ms and out["runs"] == n
    assert n * period_ms <= out["wall_ms"] < n * period_ms * 1.5
    assert n * period_ms <= elapsed_ms < n * period_ms + 2000  # process start, a loaded box
    assert out["missed_deadlines"] <= 1
    assert 0 < out["duty_cycle"] < 0.2  # microseconds of work per 25 ms
    assert out["duty_cycle"] == pytest.approx(out["busy_ms"] / out["wall_ms"], rel=1e-3,
                                              abs=1e-6)


def test_the_profiles_period_is_the_default_and_deadlines_do_not_drift(paced):
    """Each inference sleeps ~10 ms between its slices inside a 30 ms period: deadlines
    kept as start + k * period end the loop at n * 30 ms; sleeping 30 ms after each
    inference instead would take n * 42 ms."""
    n = 8
    out = _bench(paced, "--runs", str(n), "--warmup", "0")
    assert out["period_ms"] == 30.0 and out["slice"] == 1 and out["sleep_us"] == 2000
    assert out["latency_ms"]["min"] >= 5 * 2.0  # five sleeps of 2 ms inside each inference
    assert n * 30 <= out["wall_ms"] < n * 30 * 1.2
    drv = _driver(paced, frames=n)  # the application's loop: es_run_scheduled + es_period
    assert drv["period_us"] == 30_000 and n * 30 <= drv["wall_ms"] < n * 30 * 1.2


def test_a_period_shorter_than_the_inference_counts_every_run_as_missed(plain):
    out = _bench(plain, "--runs", "5", "--warmup", "0", "--period-ms", "1", "--slice", "1",
                 "--sleep-us", "2000")
    assert out["missed_deadlines"] == 5
    # skipped to the next deadline ahead, never bunched: each run still takes >= 1 period
    assert out["wall_ms"] >= 5 * 10


# ---- energy: RAPL and hwmon under a fake sysfs root ---------------------------------------

def _unread(fd: int) -> int:
    """Bytes written to a pipe that no reader has taken yet (FIONREAD, either end)."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


def _counter(path: Path, start: int, step: int) -> tuple[list[int], Callable[[], None]]:
    """An energy counter that advances by ``step`` at every read, served through a FIFO.

    A counter a thread advanced on a timer made the test depend on that thread being
    scheduled inside the 200 ms of runs: on a loaded CI machine it once was not, and the
    bench read the same value twice. Here each read of the file takes the next value, so
    the bench's reads (the probe in es_energy_open, the one before the runs and the one
    after) see ``start``, ``start + step``, ``start + 2 step``: the energy of the runs is
    exactly ``step``. Returns the values read so far and a function that stops the server."""
    os.mkfifo(path)
    taken: list[int] = []
    stop = threading.Event()
    # opened read-write, the FIFO always has a writer: a reader's open never blocks and its
    # read waits for the line instead of seeing end-of-file between two values
    fd = os.open(path, os.O_RDWR)

    def serve() -> None:
        value = start
        while not stop.is_set():
            os.write(fd, f"{value}\n".encode())
            # the next value only once a reader has taken this line whole (one read)
            while _unread(fd) and not stop.is_set():
                time.sleep(0.0005)
            if not _unread(fd):
                taken.append(value)
                value += step

    def halt() -> None:
        stop.set()
        server.join(5)
        os.close(fd)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    return taken, halt


@pytest.mark.parametrize("kind", ["rapl", "hwmon"])
def test_energy_per_inference_and_average_power_from_a_counter(plain, tmp_path, kind):
    folder = (tmp_path / "sys/class/powercap/intel-rapl:0" if kind == "rapl"
              else tmp_path / "sys/class/hwmon/hwmon1")
    folder.mkdir(parents=True)
    counter = folder / ("energy_uj" if kind == "rapl" else "energy2_input")
    taken, halt = _counter(counter, 1_000_000, 500)
    try:
        out = _bench(plain, "--runs", "10", "--warmup", "0", "--period-ms", "20",
                     "--sysfs", str(tmp_path / "sys"))
    finally:
        halt()
    assert out["energy_source"] == str(counter) and out["energy_unavailable"] is None
    assert taken == [1_000_000, 1_000_500, 1_001_000]  # found, read before, read after
    total_j = out["energy_j_per_inference"] * out["runs"]
    assert total_j == pytest.approx(500e-6, rel=1e-6)  # after - before, in joules
    assert out["avg_power_w"] == pytest.approx(total_j / (out["wall_ms"] / 1e3), rel=1e-3)


def test_energy_is_unavailable_with_the_reason_and_no_figure(plain, tmp_path):
    (tmp_path / "sys").mkdir()
    out = _bench(plain, "--runs", "2", "--warmup", "0", "--sysfs", str(tmp_path / "sys"))
    assert out["energy_j_per_inference"] is None and out["avg_power_w"] is None
    assert out["energy_source"] is None
    assert out["energy_unavailable"].startswith(
        f"{tmp_path}/sys/class/powercap/intel-rapl:0/energy_uj: No such file or directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file anyway")
def test_energy_unreadable_without_permission_says_so(plain, tmp_path):
    rapl = tmp_path / "sys/class/powercap/intel-rapl:0"
    rapl.mkdir(parents=True)
    (rapl / "energy_uj").write_text("5\n")
    (rapl / "energy_uj").chmod(0)
    out = _bench(plain, "--runs", "2", "--warmup", "0", "--sysfs", str(tmp_path / "sys"))
    assert "Permission denied" in out["energy_unavailable"]
    assert out["energy_j_per_inference"] is None


# ---- governor ---------------------------------------------------------------------------

def _cpufreq(root: Path, cpus: int) -> list[Path]:
    files = []
    for c in range(cpus):
        d = root / f"devices/system/cpu/cpu{c}/cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text("performance\n")
        files.append(d / "scaling_governor")
    return files


def test_governor_is_set_for_the_run_and_restored(plain, tmp_path):
    """The harness reads each CPU's governor, writes the one asked for, runs, and writes
    the old one back. cpu1's file is a FIFO holding "performance" for the harness's read;
    every write after it stays in the pipe, so the bytes left there are the writes in order.
    (A thread that sampled the file every 5 ms during the runs depended on being scheduled
    inside them, as the energy counter above did before.)"""
    files = _cpufreq(tmp_path / "sys", 2)
    files[1].unlink()
    os.mkfifo(files[1])
    # read-write: the harness's opens never block, and its read takes exactly this line
    fd = os.open(files[1], os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(fd, b"performance\n")
        out = _bench(plain, "--runs", "10", "--warmup", "0", "--period-ms", "20",
                     "--governor", "powersave", "--sysfs", str(tmp_path / "sys"))
        written = os.read(fd, 4096) if _unread(fd) else b""
    finally:
        os.close(fd)
    assert out["governor"] == {"name": "powersave", "cpus": 2}
    assert written == b"powersave" + b"performance"  # set before the runs, restored after
    assert files[0].read_text().strip() == "performance"


def test_governor_without_cpufreq_is_unavailable_with_the_reason(plain, tmp_path):
    out = _bench(plain, "--runs", "1", "--warmup", "0", "--governor", "powersave",
                 "--sysfs", str(tmp_path))
    assert out["governor"]["name"] == "powersave" and "cpus" not in out["governor"]
    assert "No such file or directory" in out["governor"]["unavailable"]


# ---- profile values the C runtime cannot hold ---------------------------------------------

@pytest.mark.parametrize("power, where", [
    ({"sleep_us": 1000}, "power"),  # nothing to sleep between
    ({"max_steps": 1, "sleep_us": 2**32}, "power.sleep_us"),
    ({"run_us": 2**32}, "power.run_us"),
    ({"max_steps": 2**31}, "power.max_steps"),
    ({"period_ms": 0.0001}, "power.period_ms"),
    ({"governor": "power save"}, "power.governor"),
])
def test_power_values_the_runtime_cannot_hold_are_profile_errors(tmp_path, power, where):
    """Refused when the profile loads (exit 2, naming the file and line), not when the C
    target is generated minutes into a build."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"extends": "host", "power": power}))
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert e.value.exit_code == 2 and f"{path}:" in e.value.message()
    assert where in e.value.message()


def test_the_target_cache_key_changes_with_the_power_block(tmp_path, chain_onnx):
    """A build whose profile changes only ``power:`` must regenerate model.h."""
    from edgesmith.compress.calibration import CalibrationSet
    from edgesmith.inputs import InputSpec
    from edgesmith.pipeline import stages

    t = get("c")

    def key(power: str) -> str:
        ctx = ConvertContext(
            fp32_onnx=chain_onnx, spec=InputSpec((16,)),
            calib=CalibrationSet(np.zeros((2, 1, 16), np.float32)),
            target=TargetSpec(format="c", precision="fp32"),
            options=t.Options.model_validate({}), profile=_profile(tmp_path, "p", power),
            out_dir=tmp_path / "out", work_dir=tmp_path, log_path=tmp_path / "log.txt")
        return stages._cache_key(t, ctx)

    assert key("") == key("")
    assert key("power: {max_steps: 2}\n") != key("")


def test_host_latency_ignores_the_power_schedule(sliced):
    """Validation's latency is the compute time: 4 sleeps of 40 ms are the device's."""
    ms = get("c").host_latency_ms(sliced, np.zeros((1, 16), np.float32))
    assert ms is not None and ms < SLEEP_US / 1e3
    y = run.run(Path(sliced.path), np.zeros((1, 16), np.float32))
    assert y.shape == (1, 16)


def test_harness_refuses_a_period_it_cannot_use(plain):
    folder = Path(plain.path)
    for bad in ("-1", "abc", "0.0001", "4000000"):
        p = subprocess.run([str(folder / "edgesmith_bench"), "--period-ms", bad],
                           capture_output=True, text=True, cwd=folder, timeout=30)
        assert p.returncode == 2 and f"error: --period-ms {bad}" in p.stderr
        assert p.stdout == ""
