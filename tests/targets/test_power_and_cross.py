"""Power helpers against a fake sysfs tree, and cross-compilation (aarch64 under qemu,
Cortex-M with embedded weights and size figures)."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from edgesmith.targets import run
from tests.conftest import require_tools
from tests.targets._helpers import compile_harness, generate, model_sources


def _fake_sysfs(root, energy=123456789, rng=262143328850):
    cpu = root / "devices/system/cpu/cpu0/cpufreq"
    cpu.mkdir(parents=True)
    (cpu / "scaling_governor").write_text("performance\n")
    (cpu / "scaling_cur_freq").write_text("2400000\n")
    (cpu / "scaling_max_freq").write_text("3000000\n")
    rapl = root / "class/powercap/intel-rapl:0"
    rapl.mkdir(parents=True)
    (rapl / "energy_uj").write_text(f"{energy}\n")
    (rapl / "max_energy_range_uj").write_text(f"{rng}\n")
    return root


def test_power_helpers_read_and_write_a_sysfs_tree(digits_c, tmp_path):
    root = _fake_sysfs(tmp_path / "sys")
    h = compile_harness(digits_c, digits_c / "harness_power")
    out = json.loads(subprocess.run([str(h), "power", str(root)], capture_output=True,
                                    text=True, check=True).stdout)
    assert out["governor_rc"] == 0 and out["governor"] == "performance"
    assert out["set_governor_rc"] == 0
    assert (root / "devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text() == "powersave"
    assert out["khz"] == 2400000 and out["set_max_rc"] == 0
    assert (root / "devices/system/cpu/cpu0/cpufreq/scaling_max_freq").read_text() == "1200000"
    assert out["rapl_rc"] == 0 and out["energy_uj"] == 123456789
    assert out["wrap_delta"] == 16  # (range - (range - 10)) + 5 + 1 across the wrap


def test_power_helpers_report_unavailable_without_the_files(digits_c, tmp_path):
    h = compile_harness(digits_c, digits_c / "harness_power")
    out = json.loads(subprocess.run([str(h), "power", str(tmp_path / "nothing")],
                                    capture_output=True, text=True, check=True).stdout)
    for k in ("governor_rc", "set_governor_rc", "khz_rc", "set_max_rc", "rapl_rc"):
        assert out[k] == -13  # ES_ERR_UNAVAILABLE


def test_bench_reports_energy_per_inference_when_rapl_is_readable(digits_c, tmp_path):
    root = _fake_sysfs(tmp_path / "sys")
    out = run.run_bench(digits_c / "edgesmith_bench", ["--runs", "5", "--sysfs", str(root)],
                        cwd=digits_c)
    assert out["energy_j_per_inference"] == 0.0  # a static counter: zero, but readable


@pytest.mark.slow
def test_aarch64_build_runs_under_qemu_and_matches_host(digits_c, digits_splits, tmp_path):
    require_tools("aarch64-linux-gnu-gcc", "qemu-aarch64")
    cross = tmp_path / "aarch64"
    shutil.copytree(digits_c, cross)
    subprocess.run(["make", "-s", "-C", str(cross), "clean"], check=True)
    b = run.build(cross, cc="aarch64-linux-gnu-gcc", cflags="-O2")
    x = digits_splits.val_x[:4]
    host = run.run(digits_c, x)
    y = run.run(cross, x, binary=b, wrapper=["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"])
    assert np.abs(y - host).max() <= 1e-4 * np.abs(host).max()


@pytest.mark.slow
def test_cortex_m7_build_with_embedded_weights_reports_sizes(work, digits_qdq, tmp_path):
    require_tools("arm-none-eabi-gcc", "arm-none-eabi-size")
    out = generate(digits_qdq, tmp_path / "m7", precision="int8", embedded=True)
    objs = []
    for src in model_sources(out):
        o = tmp_path / (src.replace("/", "_") + ".o")
        subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard",
                        "-mfpu=fpv5-d16", "-Os", "-std=c99", "-Wall", "-Wextra", "-Werror",
                        "-ffunction-sections", "-fdata-sections", "-DES_NO_POSIX",
                        "-I", str(out), "-c", src, "-o", str(o)], check=True)
        objs.append(str(o))
    p = subprocess.run(["arm-none-eabi-size", "-A", "-d", *objs], capture_output=True,
                       text=True, check=True)
    sizes = {"text": 0, "rodata": 0, "bss": 0, "data": 0}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            for k in sizes:
                if parts[0].startswith("." + k):
                    sizes[k] += int(parts[1])
    print("cortex-m7 sizes (bytes):", json.dumps(sizes))
    assert sizes["rodata"] >= len((out / "weights_data.c").read_text()) // 5  # weights in flash
    assert sizes["bss"] == 0 and sizes["data"] < 64  # the arena is the caller's
    assert 0 < sizes["text"] < 64 * 1024
