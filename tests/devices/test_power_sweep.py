"""Issue 21 item 2: `edgesmith bench --power-sweep` through a real sshd on 127.0.0.1.

This sandbox has no cpufreq and no powercap in /sys, so every test builds a fake sysfs tree
(cpu0..cpuN/cpufreq with scaling_governor, scaling_available_governors,
scaling_available_frequencies, scaling_max_freq, scaling_min_freq; optionally
class/powercap/intel-rapl:0/energy_uj) and points `--sysfs-root` at it. The device script
writes that tree exactly as it would write /sys; what it cannot show is a real governor's
effect on latency or a real counter's joules. A fake RAPL counter that the test advances
can only check that "a number is reported", not that the number is right.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from edgesmith import profiles
from edgesmith.devices import formats, script
from edgesmith.devices.bench import Device
from edgesmith.errors import BudgetError, UsageError
from edgesmith.pipeline.bench import bench  # re-renders the report, as the CLI does
from tests.devices.conftest import wait_for

pytestmark = pytest.mark.slow
CLI = ("import sys, edgesmith.cli.bench; from edgesmith.cli.app import main; "
       "sys.argv = ['edgesmith', *sys.argv[1:]]; main()")
CPUS = 4
GOVERNORS = ("performance", "powersave", "schedutil")
FREQS = (600000, 1000000, 1400000, 1800000)
ORIGINAL = {"scaling_governor": "schedutil", "scaling_max_freq": "1800000",
            "scaling_min_freq": "1000000"}


def fake_sysfs(root: Path, rapl: bool = False) -> Path:
    """A sysfs tree with CPUS cpus' cpufreq files (and a RAPL zone when asked)."""
    for i in range(CPUS):
        d = root / f"devices/system/cpu/cpu{i}/cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_available_governors").write_text(" ".join(GOVERNORS) + "\n")
        (d / "scaling_available_frequencies").write_text(" ".join(map(str, FREQS)) + "\n")
        for name, value in ORIGINAL.items():
            (d / name).write_text(value + "\n")
    if rapl:
        zone = root / "class/powercap/intel-rapl:0"
        zone.mkdir(parents=True)
        (zone / "energy_uj").write_text("0\n")
        (zone / "max_energy_range_uj").write_text("5000000\n")
    return root


def cpufreq(root: Path) -> list[dict[str, str]]:
    """What each cpu's governor/max/min files hold now."""
    return [{name: (root / f"devices/system/cpu/cpu{i}/cpufreq/{name}").read_text().strip()
             for name in ORIGINAL} for i in range(CPUS)]


def _only(build: Path, fmts: tuple[str, ...]) -> Path:
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["targets"] = [t for t in manifest["targets"] if t["format"] in fmts]
    path.write_text(json.dumps(manifest))
    return build


def _profile(sshd, path: Path, extra: str = "") -> Path:
    path.write_text(
        "extends: host\n"
        "power: {max_steps: 2, sleep_us: 50, period_ms: 20, governor: powersave}\n"
        f"{extra}"
        f"ssh: {{host: 127.0.0.1, port: {sshd.port}, user: {sshd.user}, "
        f"identity: {sshd.identity}, known_hosts: {sshd.known_hosts}, "
        f"workdir: {sshd.root / 'remote'}, python: {sys.executable}}}\n")
    return path


def _restore_files(sshd) -> list[Path]:
    return sorted((sshd.root / "remote").glob(".edgesmith-power-restore-*.json"))


def test_power_sweep_sets_each_governor_and_frequency_then_restores_them(sshd, demo_build,
                                                                         tmp_path):
    root = fake_sysfs(tmp_path / "sys")
    build = _only(demo_build, ("onnx", "c"))
    device = Device("d", ssh=sshd.ssh(),
                    profile=profiles.load(_profile(sshd, tmp_path / "p.yaml")))
    run = bench(build, [device], runs=5, warmup=1, power_sweep=True, sysfs_root=str(root))
    run.raise_for_status()

    assert cpufreq(root) == [ORIGINAL] * CPUS  # every file back as found
    assert _restore_files(sshd) == []  # and nothing left to restore
    for target in run.devices["d"]["targets"]:
        sweep = target["power_sweep"]
        assert sweep["status"] == "ok" and sweep["restored"] is True, sweep
        by_label = {s["label"]: s for s in sweep["settings"]}
        assert list(by_label) == ["as found", "governor performance", "governor powersave",
                                  "governor schedutil", "600 MHz (performance)",
                                  "1400 MHz (performance)", "1800 MHz (performance)",
                                  "duty 2 steps, sleep 50 us", "period 20 ms"]
        for s in sweep["settings"]:
            if s["label"] == "period 20 ms" and target["format"] == "c" and (
                    s["status"] == "unsupported"):  # a harness without --period-ms yet
                assert "--period-ms" in s["message"]
                continue
            assert s["status"] == "ok", s
            assert s["latency_ms"]["p50"] > 0 and s["throughput_ips"] > 0
            assert s["energy_mj"] is None  # no sensor in this tree: never a figure
        # what the files held while each setting was measured (read back after the writes)
        for g in GOVERNORS:
            applied = by_label[f"governor {g}"]["applied"]
            assert sorted(applied.values()) == [g] * CPUS
        capped = by_label["600 MHz (performance)"]["applied"]
        for i in range(CPUS):
            cpu = f"devices/system/cpu/cpu{i}/cpufreq"
            assert capped[f"{cpu}/scaling_governor"] == "performance"
            assert capped[f"{cpu}/scaling_max_freq"] == "600000"
            assert capped[f"{cpu}/scaling_min_freq"] == "600000"  # was above the cap
        assert "scaling_min_freq" not in str(by_label["1800 MHz (performance)"]["applied"])
        assert sorted(by_label["period 20 ms"]["applied"].values()) == ["powersave"] * CPUS
        assert by_label["as found"]["applied"] == {}
        assert sweep["energy_source"].startswith("unavailable: no RAPL zones")
        assert "no hwmon" in sweep["energy_source"] and "no battery" in sweep["energy_source"]

    manifest = json.loads((build / "manifest.json").read_text())
    stored = {t["name"]: t for t in manifest["bench"]["d"]["targets"]}
    assert len(stored["onnx-fp32"]["power_sweep"]["settings"]) == 9
    report = (build / "report.md").read_text()
    assert "## Power sweep" in report and "governor powersave" in report
    assert "energy unavailable" in report and "report_power.png" in report
    assert (build / "report_power.png").stat().st_size > 0
    assert "governor powersave" in (build / "report.html").read_text()


# the fake counter's writer: the energy since it started at ~0.5 mJ per ms, wrapping at its
# range, written every millisecond, each write atomic (a reader never sees half a number)
RAPL_TICKER = """
import os, sys, time
path, start = sys.argv[1], time.monotonic()
while True:
    value = int((time.monotonic() - start) * 500_000) % 5_000_000
    with open(path + ".tmp", "w") as f:
        f.write(f"{value}\\n")
    os.replace(path + ".tmp", path)
    time.sleep(0.001)
"""


class _Rapl:
    """A fake RAPL counter advancing with the clock, written by a process of its own: a
    thread of the test process needed the GIL the bench's own threads hold, and on a loaded
    CI host it missed a whole setting's window (about 10 ms of digits runs: 0.0 mJ)."""

    def __init__(self, root: Path):
        self.zone = root / "class/powercap/intel-rapl:0"
        self.proc: subprocess.Popen | None = None

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", RAPL_TICKER,
                                      str(self.zone / "energy_uj")])
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def test_a_rapl_counter_gives_an_energy_figure_and_the_energy_budget_is_judged(
        sshd, demo_build, tmp_path):
    root = fake_sysfs(tmp_path / "sys", rapl=True)
    build = _only(demo_build, ("onnx",))
    profile = _profile(sshd, tmp_path / "p.yaml", "budgets: {energy_mj: 0.000001}\n")
    with _Rapl(root):
        run = bench(build, [Device("d", ssh=sshd.ssh(), profile=profiles.load(profile))],
                    runs=200, warmup=1, power_sweep=True, sysfs_root=str(root))
    (target,) = run.devices["d"]["targets"]
    sweep = target["power_sweep"]
    assert sweep["energy_source"].startswith("RAPL energy_uj of 1 package zone")
    for s in sweep["settings"]:
        # a number: the fake counter's rate says nothing about the model's real energy
        assert isinstance(s["energy_mj"], float) and s["energy_mj"] > 0, s
    assert cpufreq(root) == [ORIGINAL] * CPUS
    assert run.devices["d"]["budget_energy_mj"] == 0.000001
    (miss,) = run.energy_misses()
    assert miss["target"] == "onnx-fp32"
    with pytest.raises(BudgetError) as e:
        run.raise_for_status()
    assert e.value.exit_code == 3 and "over the energy budget" in e.value.what


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLI, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_killing_edgesmith_mid_sweep_leaves_the_original_settings(sshd, demo_build, tmp_path):
    root = fake_sysfs(tmp_path / "sys")
    build = _only(demo_build, ("onnx",))
    proc = _cli("bench", str(build), "--device", str(_profile(sshd, tmp_path / "p.yaml")),
                "--runs", "40000", "--warmup", "0", "--power-sweep", "--sysfs-root", str(root))
    try:
        # the sweep is in a setting of its own: the files hold something else than found
        wait_for(lambda: cpufreq(root)[0]["scaling_governor"] != "schedutil", 240,
                 "the sweep to change the governor")
        assert _restore_files(sshd)  # the originals were recorded before that write
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # the dropped connection closes the script's stdin: it restores, then stops
    wait_for(lambda: cpufreq(root) == [ORIGINAL] * CPUS, 30, "the original cpufreq settings")
    wait_for(lambda: not _restore_files(sshd), 10, "the restore file to go")


def test_a_sweep_killed_on_the_device_is_put_right_at_the_next_start(demo_build, tmp_path):
    """SIGKILL of the device script itself (no cleanup at all there): its restore file
    stays, and the next bench script started in the same work dir writes the originals
    back before it does anything else."""
    root = fake_sysfs(tmp_path / "sys")
    work = tmp_path / "work"
    run_dir = work / "run-1"
    run_dir.mkdir(parents=True)
    script.write(formats.discover(), run_dir)
    onnx = demo_build / "targets" / "onnx-fp32" / "model.onnx"
    argv = [sys.executable, script.REMOTE_NAME, "bench", "--format", "onnx", "--model",
            str(onnx), "--input", str(demo_build / "data/bench_input.npy"), "--reference",
            str(demo_build / "data/bench_reference.npy"), "--restore-dir", ".."]
    plan = json.dumps({"frequencies": 3})
    proc = subprocess.Popen(argv + ["--runs", "40000", "--warmup", "0", "--power-sweep",
                                    plan, "--sysfs-root", str(root)], cwd=run_dir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: list(work.glob(".edgesmith-power-restore-*.json")), 240,
                 "the sweep to record its originals")
        wait_for(lambda: cpufreq(root)[0]["scaling_governor"] != "schedutil", 30,
                 "the sweep to change the governor")
    finally:
        proc.kill()
        proc.wait()
    assert cpufreq(root)[0] != ORIGINAL  # nobody put it back: the script died mid-write
    (left,) = work.glob(".edgesmith-power-restore-*.json")

    run_dir2 = work / "run-2"
    run_dir2.mkdir()
    script.write(formats.discover(), run_dir2)
    done = subprocess.run(argv + ["--runs", "1", "--warmup", "0"], cwd=run_dir2,
                          capture_output=True, text=True, timeout=120)
    doc = json.loads(done.stdout)
    assert doc["status"] == "ok", doc
    (recovered,) = doc["power_recovered"]
    assert recovered["problems"] == [] and Path(recovered["file"]).name == left.name
    assert cpufreq(root) == [ORIGINAL] * CPUS
    assert not left.exists()


def test_sysfs_root_is_refused_without_a_sweep_or_when_relative(demo_build):
    with pytest.raises(UsageError, match="only read by a power sweep") as e:
        bench(demo_build, [Device("local")], sysfs_root="/sys")
    assert e.value.exit_code == 2
    with pytest.raises(UsageError, match="not an absolute path"):
        bench(demo_build, [Device("local")], power_sweep=True, sysfs_root="sys")
