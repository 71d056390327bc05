"""Issue 17: what `edgesmith bench` leaves behind on the device and in the build folder when
it is interrupted, fails, or races a rebuild. A real sshd on 127.0.0.1 that logs in as the
user running the tests (root here: OpenSSH delivers no signals to root sessions), a real
compiler, the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from edgesmith.devices.bench import BenchEvents, Device
from edgesmith.errors import DeviceError
from edgesmith.pipeline.bench import bench  # re-renders the report, as the CLI does
from tests.devices.conftest import wait_for

pytestmark = pytest.mark.slow
CLI = ("import sys, edgesmith.cli.bench; from edgesmith.cli.app import main; "
       "sys.argv = ['edgesmith', *sys.argv[1:]]; main()")


def _start_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLI, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True,
                          timeout=300)


def _device_procs(folder: Path) -> dict[int, str]:
    """{pid: name} of every process whose working dir is (or was: a deleted dir reads
    "PATH (deleted)") inside ``folder``: the remote script, make, edgesmith_bench."""
    out = {}
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            target = os.readlink(cwd)
            name = (cwd.parent / "comm").read_text().strip()
        except OSError:
            continue
        if target.startswith(str(folder)):
            out[int(cwd.parent.name)] = name
    return out


def _timed_run_started(folder: Path) -> bool:
    """edgesmith_bench is in its long timed run (not one of the short parity runs)."""
    for pid, name in _device_procs(folder).items():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if name == "edgesmith_bench" and b"100000000" in argv:
            return True
    return False


def _edit_manifest(build: Path, edit) -> None:
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def _long_c_only(build: Path) -> Path:
    """Only the C target, built (on the device) to honour --runs far past its default cap,
    so `edgesmith_bench` itself is what runs when the bench is interrupted."""
    _edit_manifest(build, lambda m: m.update(
        targets=[t for t in m["targets"] if t["format"] == "c"]))
    makefile = build / "targets" / "c-fp32" / "Makefile"
    text = makefile.read_text()
    makefile.write_text(text.replace("CFLAGS = ", "CFLAGS = -DES_BENCH_MAX_RUNS=100000000 ", 1))
    return build


def _profile(sshd, path: Path) -> Path:
    path.write_text(
        "extends: host\n"
        f"ssh: {{host: 127.0.0.1, port: {sshd.port}, user: {sshd.user}, "
        f"identity: {sshd.identity}, known_hosts: {sshd.known_hosts}, "
        f"workdir: {sshd.root / 'remote'}, python: {sys.executable}}}\n")
    return path


def _interrupted_c_bench(sshd, build: Path, tmp_path: Path, sig: int) -> subprocess.Popen:
    """Start a long C bench over SSH, wait until edgesmith_bench runs on the "device",
    then send ``sig`` to the edgesmith process and wait for it to end."""
    remote = sshd.root / "remote"
    proc = _start_cli("bench", str(_long_c_only(build)), "--device",
                      str(_profile(sshd, tmp_path / "dev.yaml")), "--runs", "100000000",
                      "--warmup", "0")
    try:
        wait_for(lambda: _timed_run_started(remote), 120,
                  "the timed edgesmith_bench run on the device")
        proc.send_signal(sig)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc


def test_ctrl_c_with_a_root_login_stops_the_remote_script_and_the_c_binary(sshd, demo_build,
                                                                           tmp_path):
    assert os.geteuid() == 0 or sshd.user != "root"  # the case: sshd runs as root
    proc = _interrupted_c_bench(sshd, demo_build, tmp_path, signal.SIGINT)
    assert proc.returncode == 130
    remote = sshd.root / "remote"
    try:
        wait_for(lambda: not _device_procs(remote), 10, "the remote bench to stop")
    finally:
        left = _device_procs(remote)
        for pid in left:  # never leave a runaway binary behind a failed test
            os.kill(pid, signal.SIGKILL)
    assert left == {}
    assert sorted(remote.glob("run-*")) == []  # the work dir is gone
    saved = json.loads((demo_build / "bench" / "dev.json").read_text())
    assert saved["status"] == "cancelled" and saved["kept"] is False


def test_a_killed_edgesmith_does_not_leave_the_bench_running_on_the_device(sshd, demo_build,
                                                                           tmp_path):
    # SIGKILL: no cleanup at all on our side; the device notices the dropped connection
    proc = _interrupted_c_bench(sshd, demo_build, tmp_path, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    remote = sshd.root / "remote"
    try:
        wait_for(lambda: not _device_procs(remote), 10, "the remote bench to stop")
    finally:
        left = _device_procs(remote)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert left == {}


# -- item 3: a failed run keeps the last good results -------------------------------------
class _KillAfterFirstTarget(BenchEvents):
    def __init__(self, server):
        self.server = server

    def target_done(self, device, result):
        self.server.kill()


def _stored(build: Path, device: str) -> list[dict]:
    """The device's entry as bench/<device>.json and as manifest.json hold it."""
    manifest = json.loads((build / "manifest.json").read_text())
    return [json.loads((build / "bench" / f"{device}.json").read_text()),
            manifest["bench"][device]]


def test_a_failed_rerun_keeps_the_last_good_results_and_records_the_failure(sshd_factory,
                                                                            demo_build):
    first, second = sshd_factory(), sshd_factory()
    bench(demo_build, [Device("d", ssh=first.ssh())], runs=2, warmup=0).raise_for_status()
    (good, _) = _stored(demo_build, "d")
    by_name = {t["name"]: t for t in good["targets"]}
    assert set(by_name) == {"onnx-fp32", "tflite-fp32", "c-fp32"}

    # the same device, cut off after its first target: that one is new, the others kept
    partial = bench(demo_build, [Device("d", ssh=second.ssh())], runs=2, warmup=0,
                    events=_KillAfterFirstTarget(second))
    assert partial.devices["d"]["status"] == "partial"
    fresh = partial.devices["d"]["targets"][0]
    for stored in _stored(demo_build, "d"):
        assert stored["status"] == "ok" and stored["started_unix"] == good["started_unix"]
        assert [t["name"] for t in stored["targets"]] == ["onnx-fp32", "tflite-fp32",
                                                          "c-fp32"]
        assert stored["targets"][0] == fresh
        assert stored["targets"][1:] == good["targets"][1:]
        assert stored["last_error"]["status"] == "partial"
        assert "connection lost" in stored["last_error"]["what"]

    # and a run that cannot connect at all: every earlier result stays
    failed = bench(demo_build, [Device("d", ssh=second.ssh())], runs=2, warmup=0,
                   connect_attempts=1)
    assert failed.devices["d"]["status"] == "error"
    with pytest.raises(DeviceError) as e:
        failed.raise_for_status()  # the run itself still fails: exit 5
    assert e.value.exit_code == 5
    for stored in _stored(demo_build, "d"):
        assert stored["targets"][0] == fresh and stored["targets"][1:] == good["targets"][1:]
        assert stored["last_error"]["status"] == "error"
        assert "cannot connect" in stored["last_error"]["what"]
        assert stored["last_error"]["unix"] >= good["started_unix"]
    assert "d" in (demo_build / "report.md").read_text()


# -- item 8: bench and build exclude each other; results belong to one artifact ------------
def _python_targets_only(build: Path) -> Path:
    _edit_manifest(build, lambda m: m.update(
        targets=[t for t in m["targets"] if t["format"] in ("onnx", "tflite")]))
    return build


def test_bench_waits_for_a_build_holding_the_folder(demo_build):
    from edgesmith import outdir

    build = _python_targets_only(demo_build)
    with outdir.lock(build):  # what `edgesmith build` holds while it writes the folder
        proc = _start_cli("bench", str(build), "--local", "--runs", "2", "--warmup", "0")
        try:
            time.sleep(3)
            assert proc.poll() is None
            assert not (build / "bench").exists()  # nothing read, nothing written yet
        except BaseException:
            proc.kill()
            raise
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "waiting for the build" in err
    assert (build / "bench" / "local.json").is_file()


def _children_running(pid: int, word: bytes) -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
            ppid = int((cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and any(word in a for a in argv):
            return True
    return False


def test_a_build_waits_for_a_running_bench(demo_build):
    from edgesmith import outdir

    build = _python_targets_only(demo_build)
    proc = _start_cli("bench", str(build), "--local", "--runs", "100000000", "--warmup", "0")
    waits: list[str] = []
    acquired = threading.Event()

    def rebuild():  # the lock `edgesmith build` takes before it stages anything
        with outdir.lock(build, on_wait=waits.append):
            acquired.set()

    try:
        wait_for(lambda: _children_running(proc.pid, b"edgesmith_remote.py"), 60,
                  "the bench script to run")
        thread = threading.Thread(target=rebuild, daemon=True)
        thread.start()
        wait_for(lambda: waits, 10, "the build to report that it waits")
        assert not acquired.is_set()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert acquired.wait(30)  # the bench is over: the build goes ahead
    assert "waiting for" in waits[0]


class _RebuildAfterFirstTarget(BenchEvents):
    """What a build that ignored the lock would do mid-bench: publish another artifact
    under the first target's name."""

    def __init__(self, build: Path):
        self.build, self.done = build, False

    def target_done(self, device, result):
        if not self.done:
            self.done = True
            _edit_manifest(self.build, lambda m: m["targets"][0].update(sha256="0" * 64))


def test_results_of_an_artifact_replaced_during_the_bench_are_not_merged_as_current(
        demo_build):
    build = _python_targets_only(demo_build)
    before = {t["name"]: t["sha256"]
              for t in json.loads((build / "manifest.json").read_text())["targets"]}
    run = bench(build, [Device("local")], runs=2, warmup=0,
                events=_RebuildAfterFirstTarget(build))
    run.raise_for_status()
    measured = run.devices["local"]["targets"]
    assert [t["artifact_sha256"] for t in measured] == [before["onnx-fp32"],
                                                        before["tflite-fp32"]]
    for stored in _stored(build, "local"):
        assert [t["name"] for t in stored["targets"]] == ["tflite-fp32"]
        assert stored["targets"][0]["artifact_sha256"] == before["tflite-fp32"]
        (stale,) = stored["stale_targets"]
        assert stale["name"] == "onnx-fp32" and stale["artifact_sha256"] == before["onnx-fp32"]
