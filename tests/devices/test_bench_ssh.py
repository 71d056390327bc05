"""`edgesmith bench` end to end: the demo as `edgesmith build` makes it (onnx, tflite and the
generated C runtime), benched through a real sshd on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from edgesmith.devices.bench import BenchEvents, Device
from edgesmith.devices.fleet import load_fleet
from edgesmith.errors import BudgetError, DeviceError, ProfileError
from edgesmith.pipeline.bench import bench  # re-renders the report, as the CLI does
from tests.devices.conftest import wait_for

pytestmark = pytest.mark.slow
RUNS = 20


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys, edgesmith.cli.bench; from edgesmith.cli.app import main; " \
           "sys.argv = ['edgesmith', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300)


def _run_dirs(server) -> list[Path]:
    return sorted((server.root / "remote").glob("run-*"))


def test_full_bench_over_ssh_measures_onnx_tflite_and_c(sshd, demo_build):
    run = bench(demo_build, [Device("test-sshd", ssh=sshd.ssh())], runs=RUNS, warmup=2)
    run.raise_for_status()
    d = run.devices["test-sshd"]
    assert d["status"] == "ok" and d["transport"] == "ssh"
    assert {t["name"]: t["status"] for t in d["targets"]} == {
        "onnx-fp32": "ok", "tflite-fp32": "ok", "c-fp32": "ok"}
    for t in d["targets"]:
        assert t["parity"]["cosine"] > 0.99999 and t["parity"]["top1_agreement"] == 1.0
        assert 0 < t["latency_ms"]["min"] <= t["latency_ms"]["p50"] <= t["latency_ms"]["p99"]
        assert t["peak_rss_mb"] > 0 and t["throughput_ips"] > 0
    assert d["system"]["runtimes"]["onnxruntime"]
    # the C target is the generated runtime, built on the device from the build's sources
    c = next(t for t in d["targets"] if t["name"] == "c-fp32")
    built = json.loads((demo_build / "manifest.json").read_text())["targets"]
    c_meta = next(t for t in built if t["name"] == "c-fp32")["meta"]
    assert c["c"]["arena_bytes"] == c_meta["arena_bytes"] and c["build_s"] > 0
    assert c["c"]["weights_bytes"] == c_meta["weights_bytes"]
    # the harness's peak RSS holds at least its arena and weights, never a first page
    assert c["peak_rss_mb"] * 2**20 >= c_meta["arena_bytes"] + c_meta["weights_bytes"]
    on_disk = json.loads((demo_build / "bench" / "test-sshd.json").read_text())
    assert on_disk["status"] == "ok" and len(on_disk["targets"]) == 3
    manifest = json.loads((demo_build / "manifest.json").read_text())
    assert manifest["bench"]["test-sshd"]["targets"][0]["name"] == "onnx-fp32"
    assert "test-sshd" in (demo_build / "report.md").read_text()
    assert _run_dirs(sshd) == []  # the remote work dir is gone


def test_local_bench_runs_the_same_script_without_ssh(demo_build):
    r = _cli("bench", str(demo_build), "--local", "--runs", str(RUNS), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    local = doc["devices"]["local"]
    assert local["transport"] == "local"
    assert [t["status"] for t in local["targets"]] == ["ok", "ok", "ok"]
    assert (demo_build / "bench" / "local.json").is_file()


def test_keep_leaves_the_work_dir_on_the_device(sshd, demo_build):
    run = bench(demo_build, [Device("d", ssh=sshd.ssh())], runs=2, warmup=0, keep=True)
    kept = Path(run.devices["d"]["workdir"])
    assert kept in _run_dirs(sshd)
    assert (kept / "edgesmith_remote.py").is_file()
    assert (kept / "targets" / "c-fp32" / "edgesmith_bench").is_file()  # built there


class _KillAfterFirstTarget(BenchEvents):
    def __init__(self, server):
        self.server = server

    def target_done(self, device, result):
        self.server.kill()


def test_server_killed_mid_run_keeps_the_partial_results(sshd, demo_build):
    run = bench(demo_build, [Device("flaky", ssh=sshd.ssh())], runs=RUNS, warmup=0,
                events=_KillAfterFirstTarget(sshd))
    d = run.devices["flaky"]
    assert d["status"] == "partial"
    assert [t["name"] for t in d["targets"]] == ["onnx-fp32"]
    assert d["targets"][0]["status"] == "ok"
    assert "connection lost" in d["error"]["what"] or "cannot connect" in d["error"]["what"]
    saved = json.loads((demo_build / "bench" / "flaky.json").read_text())
    assert saved["status"] == "partial" and len(saved["targets"]) == 1
    with pytest.raises(DeviceError) as e:
        run.raise_for_status()
    assert e.value.exit_code == 5 and "flaky" in e.value.what


def test_fleet_of_two_finishes_the_live_device_when_the_other_is_down(sshd_factory, demo_build,
                                                                       tmp_path):
    up, down = sshd_factory(), sshd_factory()
    down.kill()
    fleet = tmp_path / "devices.yaml"
    entries = []
    for name, s in (("up", up), ("down", down)):
        entries.append(
            f"  - name: {name}\n    ssh: {{host: 127.0.0.1, port: {s.port}, user: {s.user}, "
            f"identity: {s.identity}, known_hosts: {s.known_hosts}, "
            f"workdir: {s.root / 'remote'}, python: {sys.executable}, connect_timeout_s: 2}}\n")
    fleet.write_text("concurrency: 2\ndevices:\n" + "".join(entries))
    devices, concurrency = load_fleet(fleet)
    assert concurrency == 2 and [d.name for d in devices] == ["up", "down"]
    run = bench(demo_build, devices, runs=RUNS, warmup=0, concurrency=concurrency,
                connect_attempts=2, backoff_s=0.05)
    assert run.devices["up"]["status"] == "ok"
    assert len(run.devices["up"]["targets"]) == 3
    assert run.devices["down"]["status"] == "error"
    assert "cannot connect after 2 attempts" in run.devices["down"]["error"]["what"]
    manifest = json.loads((demo_build / "manifest.json").read_text())
    assert set(manifest["bench"]) == {"up", "down"}
    with pytest.raises(DeviceError):
        run.raise_for_status()


def test_shell_metacharacters_in_the_workdir_cannot_inject(sshd, demo_build, tmp_path):
    canary = tmp_path / "pwned"
    workdir = (f"{sshd.root}/w d;touch {canary}1;$(touch {canary}2)`touch {canary}3`"
               f"'\"&&touch {canary}4")
    run = bench(demo_build, [Device("meta", ssh=sshd.ssh(workdir=workdir))], runs=2, warmup=0)
    run.raise_for_status()
    assert [t["status"] for t in run.devices["meta"]["targets"]] == ["ok", "ok", "ok"]
    assert run.devices["meta"]["workdir"].startswith(workdir + "/run-")
    assert not list(tmp_path.glob("pwned*"))
    assert Path(workdir).is_dir() and not list(Path(workdir).iterdir())  # run dir removed


def test_a_bench_past_the_command_timeout_is_reported_not_hung(sshd, demo_build):
    run = bench(demo_build, [Device("slow", ssh=sshd.ssh(command_timeout_s=1))],
                runs=10_000_000, warmup=0)
    targets = run.devices["slow"]["targets"]
    assert [t["status"] for t in targets] == ["error", "error", "error"]
    assert all("ran past" in t["message"] for t in targets)
    with pytest.raises(DeviceError):
        run.raise_for_status()


def test_device_without_runtimes_names_the_package_and_still_runs_c(sshd, demo_build,
                                                                    tmp_path):
    # a fresh venv without site packages: a device python with nothing but the stdlib
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    probe = subprocess.run([bare, "-c", "import numpy"], capture_output=True)
    assert probe.returncode != 0, "the bare venv must not see numpy"
    run = bench(demo_build, [Device("bare", ssh=sshd.ssh(python=bare))], runs=2, warmup=0)
    by_name = {t["name"]: t for t in run.devices["bare"]["targets"]}
    assert by_name["onnx-fp32"]["status"] == "missing_runtime"
    assert "pip install numpy" in by_name["onnx-fp32"]["message"]
    assert by_name["c-fp32"]["status"] == "ok"  # the C path needs only the stdlib
    run.raise_for_status()  # a missing runtime is a finding, not a failure


def test_unknown_host_key_refuses_the_bench_with_the_fingerprint(sshd, demo_build, tmp_path):
    r = _cli("bench", str(demo_build), "--host", "127.0.0.1", "--port", str(sshd.port),
             "--identity", str(sshd.identity), "--known-hosts", str(tmp_path / "none"),
             "--python", sys.executable)
    assert r.returncode == 5
    assert "unknown host key SHA256:" in r.stderr and "ssh-keyscan" in r.stderr
    saved = json.loads((demo_build / "bench" / f"127.0.0.1-{sshd.port}.json").read_text())
    assert saved["status"] == "error" and saved["targets"] == []


def test_latency_budget_miss_exits_3_with_the_table(sshd, demo_build, tmp_path):
    profile = tmp_path / "tiny-device.yaml"
    profile.write_text(
        "extends: host\n"
        "budgets: {latency_ms: 0.000001}\n"
        f"ssh: {{host: 127.0.0.1, port: {sshd.port}, user: {sshd.user}, "
        f"identity: {sshd.identity}, known_hosts: {sshd.known_hosts}, "
        f"workdir: {sshd.root / 'remote'}, python: {sys.executable}}}\n")
    r = _cli("bench", str(demo_build), "--device", str(profile), "--runs", "5")
    assert r.returncode == 3, r.stderr
    assert "over the latency budget" in r.stderr and "onnx-fp32" in r.stderr
    assert "on-device bench" in r.stdout  # the table is printed before the verdict
    manifest = json.loads((demo_build / "manifest.json").read_text())
    assert manifest["bench"]["tiny-device"]["budget_latency_ms"] == 0.000001
    with pytest.raises(BudgetError):
        from edgesmith.devices.bench import BenchRun

        BenchRun(demo_build, manifest["bench"]).raise_for_status()


def test_fleet_file_errors_point_at_the_line(tmp_path):
    fleet = tmp_path / "devices.yaml"
    fleet.write_text("devices:\n  - name: a\n    ssh: {host: x}\n  - name: b\n    shh: {}\n")
    with pytest.raises(ProfileError) as e:
        load_fleet(fleet)
    assert f"{fleet}:" in str(e.value) and "shh" in str(e.value)


def _procs_under(folder: Path) -> list[int]:
    """Processes whose working dir is inside ``folder`` (the bench script and its children)."""
    out = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            target = os.readlink(cwd)
        except OSError:
            continue
        if target.startswith(str(folder)):
            out.append(int(cwd.parent.name))
    return out


def _device_profile(sshd, path: Path, extra: str = "") -> Path:
    path.write_text(
        f"extends: host\n{extra}"
        f"ssh: {{host: 127.0.0.1, port: {sshd.port}, user: {sshd.user}, "
        f"identity: {sshd.identity}, known_hosts: {sshd.known_hosts}, "
        f"workdir: {sshd.root / 'remote'}, python: {sys.executable}}}\n")
    return path


def test_ctrl_c_stops_the_remote_bench_and_removes_its_work_dir(sshd, demo_build, tmp_path):
    remote = sshd.root / "remote"
    profile = _device_profile(sshd, tmp_path / "dev.yaml")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys, edgesmith.cli.bench; from edgesmith.cli.app import "
         "main; sys.argv = ['edgesmith', *sys.argv[1:]]; main()",
         "bench", str(demo_build), "--device", str(profile), "--runs", "100000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the bench script is measuring on the "device" (its cwd is the run dir)
        wait_for(lambda: _procs_under(remote), 60, "the remote bench to start")
        assert len(_run_dirs(sshd)) == 1
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert _run_dirs(sshd) == []  # work dir removed
    wait_for(lambda: not _procs_under(remote), 5, "the remote bench to stop")
    saved = json.loads((demo_build / "bench" / "dev.json").read_text())
    assert saved["status"] == "cancelled" and saved["kept"] is False
