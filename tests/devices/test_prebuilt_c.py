"""The C target as a binary built here (host compiler, or cross-compiled for aarch64 and run
under qemu on a loopback "device"), uploaded instead of the sources: no make on the device."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgesmith.devices.bench import Device, bench
from tests.conftest import require_tools

pytestmark = pytest.mark.slow
CROSS_CC = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"
EM_AARCH64 = 183


def _c_only(build: Path, **meta) -> Path:
    """Keep only the generated C target in the manifest (the others are benched elsewhere),
    with ``meta`` added to its manifest meta (e.g. a cross_cc)."""
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["targets"] = [t for t in manifest["targets"] if t["format"] == "c"]
    manifest["targets"][0].setdefault("meta", {}).update(meta)
    path.write_text(json.dumps(manifest))
    return build


def _elf_machine(binary: Path) -> int:
    head = binary.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    return int.from_bytes(head[18:20], "little")


def _device_files(workdir: str) -> list[str]:
    folder = Path(workdir) / "targets" / "c-fp32"
    return sorted(p.name for p in folder.iterdir())


def test_prebuilt_c_uploads_the_host_binary_and_runs_no_make(sshd, demo_build):
    build = _c_only(demo_build)
    run = bench(build, [Device("d", ssh=sshd.ssh())], runs=5, warmup=1, keep=True,
                prebuilt_c=True)
    run.raise_for_status()
    d = run.devices["d"]
    (c,) = d["targets"]
    assert c["status"] == "ok" and c["parity"]["top1_agreement"] == 1.0
    assert c["parity"]["cosine"] > 0.99999
    assert c["prebuilt"]["built"] == "here" and c["prebuilt"]["cc"] == "cc"
    assert "build_s" not in c  # the remote script never ran make
    files = _device_files(d["workdir"])
    assert "Makefile" not in files and not [f for f in files if f.endswith((".o", ".c"))]
    assert ".make.log" not in files and "edgesmith_bench" in files
    shutil.rmtree(d["workdir"])


def test_cross_cc_in_the_manifest_runs_an_aarch64_binary_through_the_exec_wrapper(
        sshd, demo_build):
    require_tools(CROSS_CC, QEMU)
    build = _c_only(demo_build, cross_cc=CROSS_CC)  # cross_cc: prebuilt without asking
    run = bench(build, [Device("arm", ssh=sshd.ssh())], runs=3, warmup=0, keep=True,
                exec_wrapper=f"{QEMU} -L /usr/aarch64-linux-gnu")
    run.raise_for_status()
    d = run.devices["arm"]
    (c,) = d["targets"]
    assert c["status"] == "ok" and c["parity"]["top1_agreement"] == 1.0
    assert c["parity"]["cosine"] > 0.99999
    assert c["prebuilt"]["cc"] == CROSS_CC and "build_s" not in c
    assert c["exec_wrapper"] == [QEMU, "-L", "/usr/aarch64-linux-gnu"]
    assert _elf_machine(Path(d["workdir"]) / "targets/c-fp32/edgesmith_bench") == EM_AARCH64
    shutil.rmtree(d["workdir"])


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys, edgesmith.cli.bench; from edgesmith.cli.app import main; " \
           "sys.argv = ['edgesmith', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120)


def test_a_cross_compile_that_fails_names_the_compiler_and_exits_5(demo_build):
    build = _c_only(demo_build, cross_cc="cc", cross_cflags="-O2 --no-such-flag")
    r = _cli("bench", str(build), "--local", "--runs", "1")
    assert r.returncode == 5, r.stderr
    assert "with 'cc' failed" in r.stderr and "--no-such-flag" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_a_missing_cross_compiler_is_named_without_a_traceback(demo_build):
    build = _c_only(demo_build, cross_cc="no-such-cross-gcc")
    r = _cli("bench", str(build), "--local", "--runs", "1")
    assert r.returncode == 2, r.stderr
    assert "no-such-cross-gcc" in r.stderr and "--no-prebuilt-c" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (build / "bench" / "local.json").exists()  # refused before benching
