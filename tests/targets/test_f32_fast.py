"""FP32 fast conv paths (im2col + FMA GEMM, depthwise) agree with the portable reference
kernel to 1e-5 of the output magnitude on random shapes, portable / AVX2 / aarch64."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.targets.test_int8_fast import FLAVOURS, RT

CHECK = Path(__file__).parent / "c" / "conv_f32_check.c"


def _cases(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    for i in range(n):
        kind = i % 3
        k = 1 if kind == 0 else int(rng.choice([1, 3, 5]))
        s = 1 if kind == 0 else int(rng.integers(1, 3))
        pad = 0 if kind == 0 else int(rng.integers(0, k // 2 + 1))
        d = 1 if kind == 0 else int(rng.integers(1, 3))
        c = int(rng.integers(1, 40))
        group, m = (1, int(rng.integers(1, 20))) if kind != 2 else (c, c)
        h, w = int(rng.integers(d * (k - 1) + 1, 14)), int(rng.integers(d * (k - 1) + 1, 40))
        oh = (h + 2 * pad - d * (k - 1) - 1) // s + 1
        ow = (w + 2 * pad - d * (k - 1) - 1) // s + 1
        yield [c, h, w, m, k, k, s, s, pad, pad, d, d, group, i % 4, i + 1, oh, ow]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fast_f32_conv_matches_reference(name, cc, flags, wrapper, tmp_path):
    flags = [*flags, "-mfma"] if name == "avx2" else flags
    b = tmp_path / f"check_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/conv_f32.c"),
                    str(RT / "kernels/conv_f32_fast.c"), "-o", str(b), "-lm"], check=True)
    for args in _cases(24 if wrapper else 60):
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"


def test_generated_f32_model_uses_fast_conv_and_reference_switch(digits_onnx):
    from edgesmith.targets.ir import lower
    from edgesmith.targets.ops_int8 import reference_kernels

    fns = {c.fn for st in lower(digits_onnx, "fp32").steps for c in st.calls}
    assert {"es_conv2d_f32_gemm", "es_dwconv2d_f32"} <= fns and "es_conv2d_f32" not in fns
    with reference_kernels():
        fns = {c.fn for st in lower(digits_onnx, "fp32").steps for c in st.calls}
    assert "es_conv2d_f32" in fns and "es_conv2d_f32_gemm" not in fns
