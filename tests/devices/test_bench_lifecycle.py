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
import time
from pathlib import Path

import pytest

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


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


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
        _wait_for(lambda: _timed_run_started(remote), 120,
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
        _wait_for(lambda: not _device_procs(remote), 10, "the remote bench to stop")
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
        _wait_for(lambda: not _device_procs(remote), 10, "the remote bench to stop")
    finally:
        left = _device_procs(remote)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert left == {}
