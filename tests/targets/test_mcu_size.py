"""On a Cortex-M the budgets check flash (.text + .rodata + .data of the cross-compiled
objects) and RAM (arena + .bss + .data + stack), not the size of the generated C text."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import require_tools
from tests.targets.test_mcu_kernels import M7_CC, M7_FLAGS, geometry_qdq  # noqa: F401


@pytest.fixture(autouse=True)
def _tools() -> None:
    """The Makefile installs these: missing is a broken setup, a failure, not a skip."""
    require_tools('arm-none-eabi-gcc', 'arm-none-eabi-size')


def _m7_folder(qdq, out):
    from edgesmith.targets import codegen, run

    codegen.from_onnx(qdq, out, precision="int8", embedded=True, deploy_cc=M7_CC,
                      deploy_cflags=M7_FLAGS)
    run.build(out, cc=M7_CC, cflags=M7_FLAGS, target="lib")  # the C target's cross build
    return out


def test_flash_and_ram_come_from_the_cross_compiled_objects(geometry_qdq, tmp_path):  # noqa: F811
    from edgesmith.targets import mcu_size

    folder = _m7_folder(geometry_qdq[0], tmp_path / "m7")
    header = (folder / "model.h").read_text()
    s = mcu_size.measure(folder, M7_CC, M7_FLAGS)
    weights = mcu_size._define(header, "ES_WEIGHTS_BYTES")
    # the weights are the const blob in .rodata, byte for byte (int8, not C text)
    blob = subprocess.run(["arm-none-eabi-size", "-A", str(folder / "weights_data.o")],
                          capture_output=True, text=True, check=True).stdout
    assert f".rodata {weights}" in " ".join(blob.split())
    assert s.rodata > weights and 0 < s.text < 64 * 1024
    assert s.arena == mcu_size._define(header, "ES_ARENA_BYTES") and 0 < s.stack < 8192
    assert s.flash == s.text + s.rodata + s.data
    assert s.ram == s.arena + s.bss + s.data + s.stack
    source_text = sum(p.stat().st_size for p in folder.rglob("*.[ch]"))
    assert s.flash < source_text / 2  # the decimal weights array is several times larger
    # what inspect estimates before any object exists: the same figures
    for o in folder.rglob("*.o"):
        o.unlink()
    est = mcu_size.measure(folder, M7_CC, M7_FLAGS)
    assert abs(est.flash - s.flash) <= 64 and est.ram == s.ram


def test_model_kb_budget_checks_flash_and_ram_mb_the_mcu_ram(tmp_path):
    from edgesmith.artifact import Artifact
    from edgesmith.pipeline.stages import check_budgets
    from edgesmith.profiles.schema import Budgets

    folder = tmp_path / "c-int8"
    folder.mkdir()
    (folder / "weights_data.c").write_text("x" * 300 * 1024)  # 300 KB of C text
    spec = type("Spec", (), {"name": "c-int8"})()

    def result(**meta):
        from edgesmith.pipeline.stages import TargetResult

        return TargetResult(spec, Artifact.of(folder, "c", "int8", arena_bytes=1024, **meta),
                            None, "ok")

    ok = result(flash_bytes=100 * 1024, ram_bytes=20 * 1024)
    over = result(flash_bytes=250 * 1024, ram_bytes=2 * 2**20)
    misses = check_budgets([ok, over], Budgets(model_kb=200), ram_mb=1)
    assert ok.status == "ok"
    assert over.status == "budget" and len(misses) == 1
    assert "flash 250.0 KB > budget 200.0 KB" in misses[0]
    assert "arena + .bss + .data + stack" in misses[0]
    # a CPU target (no flash figure) is still checked on its files
    cpu = result()
    check_budgets([cpu], Budgets(model_kb=200))
    assert cpu.status == "budget" and "size" in cpu.message


def test_inspect_estimates_flash_and_ram_for_cortex_m7_before_any_build():
    """``edgesmith inspect --profile cortex-m7``: flash holds the int8 weights (one byte per
    conv/linear weight, not two), RAM the planned arena; budgets shown beside them."""
    from edgesmith.pipeline.inspect import inspect
    from tests.targets._helpers import _load

    report = inspect("examples/digits/model.py:build", "cortex-m7")
    (est,) = report["mcu"]
    params = sum(p.numel() for p in _load("digits", "model").build().parameters()
                 if p.dim() > 1)
    sec = est["mcu_sections"]
    assert est["target"] == "c-int8" and est["model_kb"] == 1024 and est["arena_kb"] == 256
    assert params <= sec["rodata"] < 1.3 * params + 16 * 1024  # int8, not int16 pairs
    assert est["flash_bytes"] == sec["text"] + sec["rodata"] + sec["data"]
    assert est["ram_bytes"] >= sec["arena"] > 0


def test_a_host_build_in_the_folder_does_not_break_the_size_check(geometry_qdq, tmp_path):  # noqa: F811
    """After `make` on the host (as run.run does), weights_data.o is an x86 object: the
    check estimates the weights from model.h instead of failing on 'file format not
    recognized', and gives the cross build's figures to within the array's padding."""
    from edgesmith.targets import codegen, mcu_size, run

    cross = _m7_folder(geometry_qdq[0], tmp_path / "cross")
    want = mcu_size.measure(cross, M7_CC, M7_FLAGS)
    host = tmp_path / "host"
    codegen.from_onnx(geometry_qdq[0], host, precision="int8", embedded=True,
                      deploy_cc=M7_CC, deploy_cflags=M7_FLAGS)
    run.build(host)
    got = mcu_size.measure(host, M7_CC, M7_FLAGS)
    assert abs(got.flash - want.flash) <= 64 and got.ram == want.ram
