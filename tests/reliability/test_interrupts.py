"""Interrupted, concurrent and repeated builds: nothing half-written, nothing lost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgesmith.artifact import sha256_path
from edgesmith.pipeline import cache
from tests.conftest import DIGITS_ARCH

EDGESMITH = str(Path(sys.executable).with_name("edgesmith"))


def _cmd(ckpt, out, *extra):
    return [EDGESMITH, "build", str(ckpt), "--arch", DIGITS_ARCH, "--out", str(out),
            "-t", "onnx", *extra]


def _assert_complete_build(out: Path) -> dict[str, str]:
    """The folder is one whole build: a manifest whose every artifact hashes as recorded."""
    manifest = json.loads((out / "manifest.json").read_text())
    hashes = {}
    for t in manifest["targets"]:
        assert sha256_path(out / t["sha256_of"]) == t["sha256"], t["name"]
        hashes[t["name"]] = t["sha256"]
    assert (out / "report.md").exists()
    return hashes


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "EDGESMITH_CACHE": str(tmp_path / "cache")}


@pytest.mark.slow
def test_killed_builds_never_leave_half_a_build(digits_ckpt, tmp_path, env):
    out = tmp_path / "out"
    subprocess.run(_cmd(digits_ckpt, out), env=env, check=True, capture_output=True)
    good = _assert_complete_build(out)
    moments = [0.2, 0.6, 1.0, 1.5, 2.0, 2.6, 3.2, 3.9, 4.6, 5.4, 6.3, 7.5]
    survived = 0
    for i, delay in enumerate(moments):
        sig = signal.SIGKILL if i % 2 == 0 else signal.SIGINT
        proc = subprocess.Popen(_cmd(digits_ckpt, out, "--force"), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        assert _assert_complete_build(out) == good  # old or new, always whole and equal
        survived += 1
    assert survived >= 10
    # the next run recovers: same hashes, and no staging folders left behind
    subprocess.run(_cmd(digits_ckpt, out), env=env, check=True, capture_output=True)
    assert _assert_complete_build(out) == good
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == \
        [".out.lock"]


def _start_build(ckpt, out: Path, env: dict) -> subprocess.Popen:
    """A build that has got as far as its staging folder and its scratch folder."""
    proc = subprocess.Popen(_cmd(ckpt, out, "--force"), env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (list(out.parent.glob(f".{out.name}.tmp-*"))
               and list(Path(env["TMPDIR"]).glob("edgesmith-work-*"))):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    return proc


def _leftovers(out: Path, env: dict) -> list[str]:
    return sorted([p.name for p in out.parent.glob(f".{out.name}.tmp-*")]
                  + [p.name for p in Path(env["TMPDIR"]).glob("edgesmith-work-*")])


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_stop_signal_says_interrupted_and_removes_what_it_staged(digits_ckpt, tmp_path, env,
                                                                 sig):
    """SIGINT used to exit 130 silently (typer swallows KeyboardInterrupt); SIGTERM, what
    CI runners and `timeout` send, killed at once and left the staging folder and the
    scratch folder behind."""
    env = {**env, "TMPDIR": str(tmp_path / "scratch")}
    (tmp_path / "scratch").mkdir()
    out = tmp_path / "out"
    proc = _start_build(digits_ckpt, out, env)
    proc.send_signal(sig)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 128 + sig, err[-2000:]
    assert f"interrupted ({sig.name})" in err and "Traceback" not in err
    assert _leftovers(out, env) == []
    assert not out.exists()  # nothing was published


_HELD_BY_IMPORT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from cli.stop_signals import Interrupted, stop_signals_raise
with stop_signals_raise():
    try:
        import slow_module
        time.sleep(30)
        print("not interrupted")
    except Interrupted as e:
        mod = sys.modules.get("slow_module")
        print(e.signum, getattr(mod, "DONE", False), flush=True)
"""


def _interrupt_during_import(tmp_path: Path, signals: list[signal.Signals]):
    """A process with our handler, importing a module whose top level takes 2 s, sent
    ``signals`` while that import runs."""
    mark = tmp_path / "importing"
    (tmp_path / "slow_module.py").write_text(
        f"import pathlib, time\npathlib.Path({str(mark)!r}).touch()\ntime.sleep(2)\nDONE = True\n")
    proc = subprocess.Popen([sys.executable, "-c", _HELD_BY_IMPORT, str(tmp_path)],
                            cwd=Path(__file__).parents[2], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.2)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_a_stop_signal_during_an_import_waits_for_the_import_to_finish(tmp_path):
    """Unwinding a native module's initialisation (``import onnx`` in a build) aborted or
    segfaulted the interpreter about one Ctrl-C in twenty; the signal is now raised just
    after the import, which has run to its end."""
    rc, out, err = _interrupt_during_import(tmp_path, [signal.SIGTERM])
    assert (rc, out.split()) == (0, [str(int(signal.SIGTERM)), "True"]), err


def test_a_second_stop_signal_during_an_import_stops_at_once(tmp_path):
    """An import that hangs must not make the process unstoppable."""
    rc, out, err = _interrupt_during_import(tmp_path, [signal.SIGINT, signal.SIGINT])
    assert (rc, out) == (-signal.SIGINT, ""), err


@pytest.mark.slow
def test_next_build_sweeps_what_a_killed_build_left(digits_ckpt, tmp_path, env):
    """SIGKILL runs no cleanup: the next build removes the staging folder (under the
    folder's lock) and the scratch folder (its owner lock is free)."""
    env = {**env, "TMPDIR": str(tmp_path / "scratch")}
    (tmp_path / "scratch").mkdir()
    out = tmp_path / "out"
    proc = _start_build(digits_ckpt, out, env)
    proc.kill()
    proc.wait(timeout=60)
    left = _leftovers(out, env)
    assert len(left) == 2, left
    subprocess.run(_cmd(digits_ckpt, out), env=env, check=True, capture_output=True)
    _assert_complete_build(out)
    assert _leftovers(out, env) == []


def test_interrupted_swap_is_recovered(digits_ckpt, tmp_path):
    """A kill between the two renames of publish() leaves DIR missing and DIR.old present;
    the next build must put the old one back before anything else."""
    from edgesmith import outdir

    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    os.replace(out, tmp_path / ".out.old-123")
    with outdir.staging(out):
        assert (out / "manifest.json").read_text() == "{}"


@pytest.mark.slow
def test_concurrent_builds_into_one_dir_are_serialised(digits_ckpt, tmp_path, env):
    out = tmp_path / "out"
    procs = [subprocess.Popen(_cmd(digits_ckpt, out, "--force"), env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert any("waiting for the build already writing" in err for _, err in results)
    _assert_complete_build(out)


def test_builds_into_different_dirs_do_not_wait(digits_ckpt, tmp_path):
    from edgesmith import outdir

    with outdir.staging(tmp_path / "a") as a, outdir.staging(tmp_path / "b") as b:
        assert a.exists() and b.exists() and a != b


@pytest.mark.slow
def test_same_seed_builds_are_byte_identical(digits_ckpt, tmp_path, env):
    """Every format, not only the easy ones: Core ML packages are re-serialised (sorted
    protobuf maps, manifest ids named after paths) to make this hold."""
    from edgesmith.pipeline import build

    hashes = []
    for name in ("one", "two"):
        build.run(build.BuildRequest(
            model=str(digits_ckpt), arch=DIGITS_ARCH, data="digits", profile="host",
            out=tmp_path / name, use_cache=False,
            targets=["onnx", "c", "tflite:int8", "openvino:int8", "coreml"]))
        hashes.append(_assert_complete_build(tmp_path / name))
    assert hashes[0] == hashes[1]
    assert set(hashes[0]) == {"onnx-fp32", "onnx-int8", "c-fp32", "c-int8", "tflite-int8",
                              "openvino-int8", "coreml-fp16"}


def test_corrupted_cache_entry_is_recomputed_not_used(digits_ckpt, tmp_path, monkeypatch):
    from edgesmith.pipeline import build

    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "cache"))
    req = build.BuildRequest(model=str(digits_ckpt), arch=DIGITS_ARCH, data="digits",
                             profile="host", out=tmp_path / "o", targets=["onnx:int8"])
    first = build.run(req).manifest["targets"][0]
    entries = list((tmp_path / "cache" / "targets").iterdir())
    assert len(entries) == 1
    blob = entries[0] / "files" / "model.onnx"
    blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])  # truncate
    second = build.run(req).manifest["targets"][0]
    assert not second["meta"].get("cached")
    assert second["sha256"] == first["sha256"]
    third = build.run(req).manifest["targets"][0]
    assert third["meta"].get("cached") and third["sha256"] == first["sha256"]
    assert cache.info()["kinds"]["targets"]["entries"] == 1


def test_cache_cli_info_and_clear(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESMITH_CACHE", str(tmp_path / "c"))
    (tmp_path / "c" / "targets" / "k" / "files").mkdir(parents=True)
    r = cli("cache", "info", "--json")
    assert r.code == 0 and json.loads(r.out)["entries"] == 1
    r = cli("cache", "clear")
    assert r.code == 0 and "removed 1" in r.out
    assert not (tmp_path / "c").exists()
    shutil.rmtree(tmp_path / "c", ignore_errors=True)
