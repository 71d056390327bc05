"""The fp32 depthwise kernels (stride phases of the padded plane, 32 outputs per pass with
every tap in registers; on planes of at most 64 outputs, 16 channels in the lanes) agree
with the reference es_conv2d_f32 to 1e-5 of the output's magnitude on MobileNet shapes and
odd ones (planes narrower than a vector, stride 2 and 3, asymmetric padding, dilation, 1-D,
more than 64 taps, channel counts not a multiple of 16), in every build the runtime has
(portable, AVX2, AVX-512, NEON under qemu), stay inside exactly ES_F32_DW_SCRATCH bytes
under AddressSanitizer, and the generator plans the same bytes as the C macro."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from edgesmith.targets.lower.kernels import dw_f32_scratch
from tests.targets.test_int8_fast import FLAVOURS, RT

CHECK = Path(__file__).parent / "c" / "dw_f32_check.c"
KEYS = ("C", "H", "W", "KH", "KW", "SH", "SW", "PT", "PL", "PB", "PR", "DH", "DW")

# C H W KH KW SH SW PT PL PB PR DH DW act
CASES = [
    (32, 112, 112, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2),  # MobileNetV2's first, ReLU6
    (96, 56, 56, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 2),    # TF-style stride 2 (pad after only)
    # 5x5 planes with bands of 8 output rows clear of the padding (AVX-512: the test-free
    # instance) between the edge bands, and unequal padding
    (6, 37, 29, 5, 5, 1, 1, 2, 1, 0, 2, 1, 1, 5),     # stride 1, sigmoid
    (5, 45, 41, 5, 5, 2, 2, 1, 2, 2, 1, 1, 1, 6),     # stride 2, SiLU
    (17, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),      # a plane narrower than a vector
    (5, 7, 7, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 0),       # 5x5 stride 2 on an odd plane
    (3, 13, 11, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3),     # stride 3, leaky ReLU
    (7, 15, 17, 3, 3, 1, 2, 2, 1, 0, 2, 2, 2, 0),     # unequal strides, dilation 2
    (4, 1, 40, 1, 7, 1, 2, 0, 3, 0, 3, 1, 1, 1),      # 1-D (H = 1), 1x7 stride 2
    (2, 12, 12, 9, 9, 1, 1, 4, 4, 4, 4, 1, 1, 2),     # 81 taps: two groups of at most 64
    (1, 2, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0),       # output 1x1
    # planes of at most 64 outputs: 16 channels in the lanes (ES_F32_DW_LANES)
    (40, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2),      # 6x6, 40 = 16 + 16 + 8 channels
    (33, 5, 5, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 3),      # 5x5 taps on 5x5, leaky
    (20, 15, 15, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 1),    # 5x5 stride 2 -> 8x8: 64, the last
    (20, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0),      # 72 outputs: the phase kernel again
]


def _geo(case) -> dict:
    g = dict(zip(KEYS, case[:13], strict=True))
    g["OH"] = (g["H"] + g["PT"] + g["PB"] - g["DH"] * (g["KH"] - 1) - 1) // g["SH"] + 1
    g["OW"] = (g["W"] + g["PL"] + g["PR"] - g["DW"] * (g["KW"] - 1) - 1) // g["SW"] + 1
    return g


def _build(cc: str, flags: list[str], out: Path) -> Path:
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}", str(CHECK),
                    str(RT / "kernels/conv_f32.c"), str(RT / "kernels/dwconv_f32.c"), "-o",
                    str(out), "-lm"], check=True)
    return out


def _run(wrapper: list[str], b: Path, case, seed: int, env=None) -> str:
    p = subprocess.run([*wrapper, str(b), *map(str, case), str(seed)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, f"{case}: {p.stdout}{p.stderr}"
    return p.stdout


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fast_f32_depthwise_matches_reference_on_odd_shapes(name, cc, flags, wrapper,
                                                            tmp_path):
    flags = [*flags, "-mfma"] if name == "avx2" else flags
    b = _build(cc, flags, tmp_path / f"dw_{name}")
    for i, case in enumerate(CASES):
        if wrapper and case[1] * case[2] > 5000:
            case = (case[0] // 8, 28, 28, *case[3:])  # emulated: a smaller plane
        _run(wrapper, b, case, i + 1)


def test_fast_f32_depthwise_stays_inside_its_scratch_and_the_generator_plans_it(tmp_path):
    b = _build("cc", ["-O1", "-g", "-march=native", "-fsanitize=address,undefined",
                      "-fno-sanitize-recover"], tmp_path / "dw_asan")
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for i, case in enumerate(CASES):
        out = _run([], b, case, 100 + i, env)
        line = next(x for x in out.splitlines() if x.startswith("scratch"))
        assert int(line.split()[1]) == dw_f32_scratch(_geo(case)), (case, line)
