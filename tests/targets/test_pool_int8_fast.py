"""int8 max pooling without a bounds check per tap (es_maxpool2d_i8: the window clipped once
per output row and border column, the interior a vector sweep) is bit-identical to the
per-tap reference es_maxpool2d_i8_ref in every build flavour, on odd shapes: rectangular
windows, strides 1-3, dilation, asymmetric padding, ceil-mode rows and columns whose
window starts in the padding, planes narrower than the window."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.targets.test_int8_fast import FLAVOURS, RT, _cpu_has

CHECK = Path(__file__).parent / "c" / "maxpool_check.c"

# the int8 kernels' build flavours, and AVX-512 VBMI for the byte-permute rows
POOL_FLAVOURS = [*FLAVOURS, pytest.param(
    "avx512vbmi", "cc", ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vbmi"], [],
    marks=pytest.mark.skipif(not _cpu_has("avx512vbmi"), reason="this CPU has no AVX-512 VBMI"))]

# ResNet-18's stem pool (3x3 s2 p1 on 112x112), a stride-1 3x3 (YOLO-style SPP uses 5x5),
# and one output row wider than 64 (two vectors plus a masked tail). Rows of at most 128
# bytes and 64 outputs take the byte-permute path on AVX-512 VBMI: its edges are rows of
# exactly 64, 65 and 128 bytes, exactly 64 outputs, 65 outputs (stride 1 on 65: back to
# the sweep), windows of 8 and 9 columns (the widest it takes and one more), and a row
# whose last outputs' windows lie wholly in the right padding.
FIXED = [[64, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 56, 56],
         [5, 20, 21, 5, 5, 1, 1, 2, 2, 1, 1, 20, 21],
         [3, 9, 150, 3, 3, 1, 1, 1, 1, 1, 1, 9, 150], [3, 9, 150, 3, 3, 2, 2, 0, 0, 1, 1, 4, 74],
         [2, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 7, 64], [2, 7, 65, 2, 2, 2, 2, 0, 0, 1, 1, 4, 33],
         [2, 6, 128, 2, 2, 2, 2, 0, 0, 1, 1, 3, 64], [2, 6, 65, 3, 3, 1, 1, 1, 1, 1, 1, 6, 65],
         [2, 9, 100, 8, 8, 2, 2, 3, 3, 1, 1, 4, 50], [2, 9, 100, 9, 9, 2, 2, 4, 4, 1, 1, 3, 50],
         [3, 10, 40, 3, 3, 3, 3, 1, 1, 1, 1, 4, 16]]


def pool_case(rng: np.random.Generator) -> list[int]:
    """A random geometry in the check program's argv order (without the seed)."""
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dh, dw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pt, pb, pl, pr = (int(rng.integers(0, k)) for k in (kh, kh, kw, kw))
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    h = int(rng.integers(max(1, span_h - pt - pb), 30))
    w = int(rng.integers(max(1, span_w - pl - pr), 90))
    oh = (h + pt + pb - span_h) // sh + 1
    ow = (w + pl + pr - span_w) // sw + 1
    if rng.random() < 0.3 and oh * sh < h + pt:  # ceil mode: one more row starting inside
        oh += 1
    if rng.random() < 0.3 and ow * sw < w + pl:
        ow += 1
    return [int(rng.integers(1, 9)), h, w, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), POOL_FLAVOURS)
def test_fast_int8_maxpool_is_bit_identical_to_reference(name, cc, flags, wrapper, tmp_path):
    b = tmp_path / f"maxpool_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/pool_int8.c"), "-o", str(b)], check=True)
    rng = np.random.default_rng(5)
    cases = FIXED + [pool_case(rng) for _ in range(40 if wrapper else 150)]
    for i, args in enumerate(cases):
        p = subprocess.run([*wrapper, str(b), *map(str, args), str(i + 1)], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and "ok" in p.stdout, f"{name} {args}: {p.stdout}{p.stderr}"


def test_fast_int8_maxpool_reads_only_its_input_under_asan(tmp_path):
    """The masked vector loads of the interior and the clipped border stay inside the input
    plane: malloc'd to size, AddressSanitizer sees a byte past it (AVX-512 where this CPU
    has it, else the portable loops)."""
    b = tmp_path / "maxpool_asan"
    isa = ["-march=native"] if _cpu_has("avx512bw") else []
    subprocess.run(["cc", "-O1", "-g", *isa, "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=all", "-std=c99", f"-I{RT}", str(CHECK),
                    str(RT / "kernels/pool_int8.c"), "-o", str(b)], check=True)
    rng = np.random.default_rng(9)
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for i, args in enumerate(FIXED + [pool_case(rng) for _ in range(60)]):
        p = subprocess.run([str(b), *map(str, args), str(i + 1)], capture_output=True,
                           text=True, timeout=60, env=env)
        assert p.returncode == 0 and "ok" in p.stdout, f"{args}: {p.stdout}{p.stderr}"
