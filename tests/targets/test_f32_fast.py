"""FP32 fast conv paths (im2col + FMA GEMM, depthwise) agree with the portable reference
kernel to 1e-5 of the output magnitude on random shapes, portable / AVX2 / aarch64."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.targets.test_int8_fast import FLAVOURS, RT, conv_case

CHECK = Path(__file__).parent / "c" / "conv_f32_check.c"


def _cases(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield conv_case(rng, i, 40, lambda _, j: j % 4)


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

    fns = {c.fn for st in lower(digits_onnx, "fp32").steps for c in st.calls}
    assert {"es_conv2d_f32_gemm", "es_dwconv2d_f32"} <= fns and "es_conv2d_f32" not in fns
    fns = {c.fn for st in lower(digits_onnx, "fp32", kernels="reference").steps
           for c in st.calls}
    assert "es_conv2d_f32" in fns and "es_conv2d_f32_gemm" not in fns
