"""The kernels changed for issue 16, built for aarch64 and run under qemu-aarch64: the fp32
packed GEMM and fast conv (NEON twins), the int8 stem, the fused int8 conv + residual Add
(its epilogue's NEON add) and the es_threads pool. Each check program compares the fast
kernel with the reference kernel in the same process, so these tests hold whatever the
kernels' authors change: bit for bit for int8, to rounding for fp32. They run once more
under AddressSanitizer + UndefinedBehaviorSanitizer (both work under qemu-user with leak
detection off). A MobileNetV2-style network with ``threads: 2`` cross-built for aarch64
gives the host's single-thread bytes (int8) and allocates nothing after es_init."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_tools

CC = "aarch64-linux-gnu-gcc"
QEMU = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
RT = Path(__file__).parents[2] / "targets" / "runtime"
CHECKS = Path(__file__).parent / "c"
SAN = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
ENV = {"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1",
       "PATH": "/usr/bin:/bin"}

pytestmark = pytest.mark.slow


def _stem(n: int):
    from tests.targets.test_int8_stem import _cases

    return "stem_check.c", ["conv_int8.c", "conv_int8_dot.c"], list(_cases(n, seed=11))


def _conv_add(n: int):
    from tests.targets.test_int8_fuse import _cases

    return ("conv_add_check.c", ["conv_int8.c", "conv_int8_dot.c", "add_int8.c"],
            list(_cases(n, seed=12)))


def _conv_f32(n: int):
    from tests.targets.test_f32_fast import _cases

    return ("conv_f32_check.c", ["conv_f32.c", "conv_f32_fast.c", "dwconv_f32.c"],
            list(_cases(n, seed=13)))


def _gemm_f32(_n: int):
    from tests.targets.test_gemm_f32_fast import CASES

    return "gemm_f32_check.c", ["gemm_f32.c"], [[*c, i + 1] for i, c in enumerate(CASES)]


def _conv_int8(n: int):
    from tests.targets.test_int8_fast import _cases

    return ("conv_fast_check.c", ["conv_int8.c", "conv_int8_fast.c", "conv_int8_dot.c",
                                  "conv_int8_cl.c"], list(_cases(n, seed=14)))


KERNELS = {"int8_stem": _stem, "int8_conv_add": _conv_add, "f32_conv_gemm": _conv_f32,
           "f32_gemm": _gemm_f32, "int8_conv": _conv_int8}


def _build(check: str, sources: list[str], flags: list[str], out: Path) -> Path:
    p = subprocess.run([CC, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                        str(CHECKS / check), *(str(RT / "kernels" / s) for s in sources),
                        "-lm", "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return out


# ASan's start-up under qemu-user costs seconds a process: the sanitizer builds are
# very_slow (make test-all), the plain NEON ones run in every make test
@pytest.mark.parametrize("flags", [["-O3"], pytest.param(SAN, marks=pytest.mark.very_slow)],
                         ids=["neon", "neon_asan_ubsan"])
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_changed_kernel_on_aarch64_matches_its_reference(kernel, flags, tmp_path):
    require_tools(CC, QEMU[0])
    check, sources, cases = KERNELS[kernel](6 if flags == SAN else 12)
    b = _build(check, sources, flags, tmp_path / f"{kernel}_check")
    for args in cases:
        p = subprocess.run([*QEMU, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=300, env=ENV)
        assert p.returncode == 0 and "runtime error" not in p.stderr, \
            f"{kernel} {args}: {p.stdout}{p.stderr[-3000:]}"


def _cross_folder(src: Path, out: Path, precision: str, threads: int) -> Path:
    """The generated folder with kernels chosen for aarch64 (NEON), ``threads`` workers,
    every sliceable step split, built for aarch64."""
    from edgesmith.targets import codegen, run

    if out.exists():
        shutil.rmtree(out)
    codegen.from_onnx(src, out, precision=precision, deploy_cc=CC, deploy_cflags="-O3",
                      threads=threads, split_min_macs=0)
    run.build(out, cc=CC, cflags="-O3 -pthread")
    return out


@pytest.mark.parametrize("precision", ["int8", "fp32"])
def test_threaded_aarch64_build_equals_single_thread_and_host(work, request, precision):
    """threads: 2 under qemu-aarch64 (real pthreads) against threads: 1 under qemu (every
    value bit for bit) and the host's single-thread build (int8: bit for bit, the kernels
    are exact; fp32: to rounding, the NEON and x86 kernels add in different orders)."""
    from edgesmith.targets import run

    require_tools(CC, QEMU[0])
    src = request.getfixturevalue("mnv2_qdq" if precision == "int8" else "mnv2_onnx")
    host = request.getfixturevalue("mnv2_c_int8" if precision == "int8" else "mnv2_c_fp32")
    one = _cross_folder(src, work / f"a64_{precision}_t1", precision, 1)
    two = _cross_folder(src, work / f"a64_{precision}_t2", precision, 2)
    assert "es_parallel_for(" in (two / "model.c").read_text()
    (ishape,), _ = run.io_shapes(one)
    x = np.random.default_rng(5).standard_normal((2, *ishape[1:])).astype(np.float32)
    y1 = run.run(one, x, binary=one / "edgesmith_bench", wrapper=QEMU)
    y2 = run.run(two, x, binary=two / "edgesmith_bench", wrapper=QEMU)
    yh = run.run(host, x)
    assert np.array_equal(y1, y2), f"max |diff| {np.abs(y1 - y2).max()}"
    if precision == "int8":
        assert np.array_equal(y2, yh), f"max |diff| {np.abs(y2 - yh).max()}"
    else:
        assert np.abs(y2 - yh).max() <= 1e-4 * np.abs(yh).max()


@pytest.fixture(scope="module")
def mnv2_c_int8(work, mnv2_qdq) -> Path:
    from tests.targets._helpers import generate

    return generate(mnv2_qdq, work / "mnv2_c_int8_host_t1", precision="int8")


@pytest.fixture(scope="module")
def mnv2_c_fp32(work, mnv2_onnx) -> Path:
    from tests.targets._helpers import generate

    return generate(mnv2_onnx, work / "mnv2_c_fp32_host_t1")


@pytest.fixture(scope="module")
def a64_int8_t2(work, mnv2_qdq) -> Path:
    return _cross_folder(mnv2_qdq, work / "a64_int8_t2_harness", "int8", 2)


def _harness_run(folder: Path, flags: list[str], args: list[str],
                 env: dict[str, str]) -> str:
    from tests.targets._helpers import compile_harness

    h = compile_harness(folder, folder / ("harness_" + "_".join(f.strip("-") for f in flags)),
                        [*flags, "-pthread"], cc=CC)
    p = subprocess.run([*QEMU, str(h), *args], capture_output=True, text=True, cwd=folder,
                       timeout=600, env={**os.environ, **env})
    assert p.returncode == 0 and "runtime error" not in p.stderr, p.stdout + p.stderr[-3000:]
    return p.stdout.strip().splitlines()[-1]


@pytest.mark.very_slow
def test_threaded_aarch64_build_is_sanitizer_clean(a64_int8_t2):
    """Time-sliced (one step a slice, hooks on the caller) and whole runs with threads: 2,
    equal outputs, under ASan + UBSan on aarch64."""
    import json

    for k in ("1", "1000"):
        out = json.loads(_harness_run(a64_int8_t2, SAN, ["slice", k], ENV))
        assert out["rc"] == 0 and out["same"] == 1
        assert out["before"] == out["after"] == out["steps"]


def test_threaded_aarch64_build_allocates_nothing_after_init(a64_int8_t2, tmp_path):
    """malloc_count.c cross-built as a shared object and preloaded into the aarch64
    process by qemu (-E LD_PRELOAD): 0 allocations over 20 runs with the pool running."""
    import json

    shim = tmp_path / "malloc_count.so"
    subprocess.run([CC, "-shared", "-fPIC", "-O1", "-o", str(shim),
                    str(CHECKS / "malloc_count.c")], check=True)
    from tests.targets._helpers import compile_harness

    h = compile_harness(a64_int8_t2, a64_int8_t2 / "harness_noalloc", ["-O1", "-pthread"],
                        cc=CC)
    p = subprocess.run([*QEMU, "-E", f"LD_PRELOAD={shim}", str(h), "noalloc", "20"],
                       capture_output=True, text=True, cwd=a64_int8_t2, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"allocations": 0, "runs": 20,
                                                             "same": 1}
