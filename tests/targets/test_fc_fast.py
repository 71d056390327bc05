"""Dense layers as GEMM micro-kernels: int8 es_fc_i8 (four outputs per pass, AVX2 / NEON) is
bit-identical to the plain es_fc_i8_ref in every build flavour, and a quantized Gemm built
for AVX-512 VNNI (es_conv2d_i8_cl, a 1x1 conv per row) gives the reference kernels' codes;
fp32 es_gemm_f32 (FMA / NEON tiles) agrees with es_gemm_f32_ref."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.targets.test_int8_fast import FLAVOURS, RT, _cpu_has

C = Path(__file__).parent / "c"


def fc_cases(rng: np.random.Generator, n: int):
    """(M, N, K, x_zp, rq): shapes off every vector width (K < 16, K odd, N not a multiple
    of 4), MobileNetV2's 1280 -> 1000 head, and random ones."""
    yield from [(1, 1000, 1280, -3, 1), (1, 3, 5, 0, 1), (2, 37, 83, -128, 0),
                (3, 4, 16, 127, 1), (1, 17, 15, 5, 0)]
    for i in range(n):
        yield (int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(1, 300)),
               int(rng.integers(-128, 128)), i % 2)


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_int8_fc_kernel_is_bit_identical_to_reference(name, cc, flags, wrapper, tmp_path):
    b = tmp_path / f"fc_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(C / "fc_check.c"), str(RT / "kernels/fc_int8.c"), "-o", str(b), "-lm"],
                   check=True)
    rng = np.random.default_rng(4)
    for i, case in enumerate(fc_cases(rng, 20 if wrapper else 60)):
        p = subprocess.run([*wrapper, str(b), *map(str, case), str(i + 1)], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and "ok" in p.stdout, f"{name} {case}: {p.stdout}{p.stderr}"


def _gemm_qdq(path: Path, n: int, k: int, rows: int = 0) -> Path:
    """Linear(k, n) -> ReLU -> Linear(n, 7) on input [1, k] (two Gemms) or, with rows, on
    [1, rows, k] (MatMuls of rows rows, the bias a separate Add), quantized by onnxruntime's
    static QDQ quantizer on random data (per-channel weights)."""
    import torch

    from tests.targets._helpers import _qdq, export

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.ReLU(), torch.nn.Linear(n, 7))
    shape = (64, rows, k) if rows else (64, k)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    fp32 = export(net.eval(), torch.from_numpy(x[:1]), path.with_suffix(".fp32.onnx"))
    return _qdq(fp32, x, path)


@pytest.mark.skipif(not _cpu_has("avx512_vnni"), reason="this CPU has no AVX-512 VNNI")
@pytest.mark.parametrize(("rows", "calls"), [(0, 2), (3, 6)])
def test_int8_gemm_on_vnni_runs_as_dot_product_gemv_and_matches_reference(rows, calls,
                                                                         tmp_path):
    from edgesmith.targets import codegen, run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.isa import VNNI
    from edgesmith.targets.planner import plan

    src = _gemm_qdq(tmp_path / "fc.onnx", 83, 301, rows)
    fns = [c.fn for st in lower(src, "int8", VNNI).steps for c in st.calls]
    # one call per row and layer, no plain loop left
    assert fns.count("es_conv2d_i8_cl") == calls and "es_fc_i8" not in fns, fns
    ref = lower(src, "int8", kernels="reference")
    assert "es_fc_i8_ref" in [c.fn for st in ref.steps for c in st.calls]
    codegen.generate(ref, plan(ref), tmp_path / "ref")
    run.build(tmp_path / "ref")
    fast = codegen.from_onnx(src, tmp_path / "fast", precision="int8",
                             cflags="-O3 -march=native").out_dir
    portable = codegen.from_onnx(src, tmp_path / "portable", precision="int8").out_dir
    x = np.random.default_rng(1).standard_normal(
        (2, rows, 301) if rows else (2, 301)).astype(np.float32)
    want = run.run(tmp_path / "ref", x)
    assert np.array_equal(run.run(fast, x), want)
    assert np.array_equal(run.run(portable, x), want)
