"""fp32 es_gemm_f32 on AVX-512 takes 8 outputs per pass over the input row (dot8) when K is a
multiple of 16 but not of 1024, and the 4-output pass for the rest of N: it agrees with the
plain es_gemm_f32_ref to 1e-5 of the output's magnitude on MobileNetV3-small's classifier
(576 -> 1024 with hard-swish, 1024 -> 10), on every N from 1 to 19 (no block of 8, one and
two, with 4-output and part-full tails after them), on K of one vector and of 1024 (the
rows 4 KB apart that keep dot4), with batches of rows, in every build the runtime has and
under AddressSanitizer."""

from __future__ import annotations

import subprocess

import pytest

from tests.targets.test_gemm_f32_fast import _build
from tests.targets.test_int8_fast import FLAVOURS

HARDSWISH = 4  # ES_ACT_HARDSWISH
# M N K act
CASES = [(1, 1024, 576, HARDSWISH), (1, 10, 1024, 0), (1, 1000, 1280, 0), (3, 40, 960, 1)]
CASES += [(1 + n % 2, n, 16 * (1 + n % 3), n % 5) for n in range(1, 20)]
CASES += [(2, 19, 1024, 2), (1, 13, 2048, 0), (1, 11, 48, HARDSWISH)]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), [
    *FLAVOURS, ("asan", "cc", ["-O1", "-g", "-march=native", "-fsanitize=address,undefined",
                               "-fno-sanitize-recover"], [])])
def test_eight_row_gemv_matches_plain_loop(name, cc, flags, wrapper, tmp_path):
    flags = [*flags, "-mfma"] if name == "avx2" else flags
    b = _build(cc, flags, tmp_path / f"gemm_{name}")
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for i, case in enumerate(CASES):
        p = subprocess.run([*wrapper, str(b), *map(str, case), str(i + 1)], capture_output=True,
                           text=True, timeout=120, env=env)
        assert p.returncode == 0, f"{name} {case}: {p.stdout}{p.stderr}"
