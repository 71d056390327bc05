"""es_quantize_f32_i8 gives exactly q = clamp(rint(x / scale) + zp, -128, 127) with a true
division, as onnxruntime's QuantizeLinear does (a reciprocal multiply can move a value
across a rounding boundary), in every build flavour: every 4099th 32-bit pattern as input
(NaNs and infinities included; a NaN gives -128 on the vector and the scalar path alike),
at scales and zero points from 1e-5 to 7.5 and -128 to 37, on lengths that leave a scalar
tail. A division-free variant (reciprocal times x, then Markstein's FMA correction) equalled
the division on all 2^32 inputs at 132 scales, but ran slower on this CPU (ResNet-18-224's
input quantize 16.8 -> 21.6 us): vdivps is not what this step waits on."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from tests.targets.test_int8_fast import FLAVOURS, RT

CHECK = Path(__file__).parent / "c" / "quant_check.c"
SCALES = (0.0039215689, 0.1, 0.02, 1e-5, 7.5, 0.99999994)  # the last: significand all ones


def _bits(scale: float) -> str:
    return hex(struct.unpack("<I", struct.pack("<f", scale))[0])


def _build(cc: str, flags: list[str], src: Path, out: Path, include: Path = RT) -> Path:
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{include}",
                    str(CHECK), str(src), "-o", str(out), "-lm"], check=True)
    return out


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_quantize_equals_the_true_division(name, cc, flags, wrapper, tmp_path):
    b = _build(cc, flags, RT / "kernels/quant_int8.c", tmp_path / f"quant_{name}")
    for scale in SCALES:
        for zp in (-128, 0, 37):
            p = subprocess.run([*wrapper, str(b), _bits(scale), str(zp), "4099"],
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0 and p.stdout.startswith("ok"), (scale, zp, p.stdout
                                                                     + p.stderr)


def test_the_check_catches_a_reciprocal_multiply(tmp_path):
    """x * (1 / scale) in place of the division, on both paths: the check must fail."""
    src = (RT / "kernels/quant_int8.c").read_text()
    bad = src.replace("_mm512_div_ps(_mm512_loadu_ps(x + i), s)",
                      "_mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_div_ps(_mm512_set1_ps(1), s))")
    bad = bad.replace("rintf(x[i] / scale)", "rintf(x[i] * (1.0f / scale))")
    assert bad.count("_mm512_set1_ps(1), s)") == 1 and "1.0f / scale" in bad
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels/quant_int8.c").write_text(bad)
    for h in RT.glob("*.h"):
        (tmp_path / h.name).write_text(h.read_text())
    b = _build("cc", ["-O3", "-march=native"], tmp_path / "kernels/quant_int8.c",
               tmp_path / "quant_bad", include=tmp_path)
    p = subprocess.run([str(b), _bits(0.1), "0", "7"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 1 and "want" in p.stdout, p.stdout
