"""fp32 es_gemm_f32 (four outputs per pass over the input row in AVX-512 / AVX2 / NEON
vectors; on AVX-512 eight per pass, dot8, when K is a multiple of 16 but not of 1024)
agrees with the plain es_gemm_f32_ref to 1e-5 of the output's magnitude, with N and K not
multiples of any vector width, in every build the runtime has, under AddressSanitizer too;
the reference kernel set uses the plain loop."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.targets.test_int8_fast import FLAVOURS, RT

CHECK = Path(__file__).parent / "c" / "gemm_f32_check.c"
# M N K act: MobileNetV2's head, odd N and K (vector tails), K below one vector, batch 3
CASES = [(1, 1000, 1280, 0), (1, 7, 37, 1), (3, 5, 3, 2), (2, 13, 129, 3), (1, 1, 1, 0),
         (4, 64, 16, 2)]
# dot8: MobileNetV3-small's classifier (576 -> 1024 with hard-swish, 1024 -> 10), every N
# from 1 to 19 (no block of 8, one and two, with 4-output and part-full tails after them),
# K of one vector and of 1024 (rows 4 KB apart keep dot4), batches of rows
HARDSWISH = 4  # ES_ACT_HARDSWISH
CASES += [(1, 1024, 576, HARDSWISH), (1, 10, 1024, 0), (3, 40, 960, 1)]
CASES += [(1 + n % 2, n, 16 * (1 + n % 3), n % 5) for n in range(1, 20)]
CASES += [(2, 19, 1024, 2), (1, 13, 2048, 0), (1, 11, 48, HARDSWISH)]


def _build(cc: str, flags: list[str], out: Path) -> Path:
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}", str(CHECK),
                    str(RT / "kernels/gemm_f32.c"), "-o", str(out), "-lm"], check=True)
    return out


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), [
    *FLAVOURS, ("asan", "cc", ["-O1", "-g", "-march=native", "-fsanitize=address,undefined",
                               "-fno-sanitize-recover"], [])])
def test_fast_f32_gemm_matches_plain_loop(name, cc, flags, wrapper, tmp_path):
    flags = [*flags, "-mfma"] if name == "avx2" else flags
    b = _build(cc, flags, tmp_path / f"gemm_{name}")
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for i, case in enumerate(CASES):
        p = subprocess.run([*wrapper, str(b), *map(str, case), str(i + 1)], capture_output=True,
                           text=True, timeout=120, env=env)
        assert p.returncode == 0, f"{name} {case}: {p.stdout}{p.stderr}"


def test_reference_kernels_use_the_plain_dense_loop(digits_onnx):
    from edgesmith.targets.ir import lower

    fns = {c.fn for st in lower(digits_onnx, "fp32").steps for c in st.calls}
    ref = {c.fn for st in lower(digits_onnx, "fp32", kernels="reference").steps
           for c in st.calls}
    assert "es_gemm_f32" in fns and "es_gemm_f32_ref" not in fns
    assert "es_gemm_f32_ref" in ref and "es_gemm_f32" not in ref
