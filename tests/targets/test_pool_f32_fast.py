"""fp32 pooling kernels against their oracles on every build (NEON under qemu).

Global average pooling (es_reduce_f32 over the last axes, a sum of each row of n
values): the vector sums (AVX-512, AVX2: two accumulators, a masked tail, the horizontal
sum) and the portable 16-partial-sum loop agree with a double-precision sum, to float
rounding, on every row length from 1 to 80 (every tail of both vector widths, with and
without the 16- or 8-value step after the 32- or 16-value loop) and on the squeeze-excite
and head shapes of MobileNetV3-small and EfficientNet-B0 (576 x 7 x 7, 240 x 14 x 14,
16 x 56 x 56, 1152 x 7 x 7), with a large common offset that a dropped or repeated value
would move far past the tolerance.

Max pooling (es_maxpool2d_f32): bit for bit with es_maxpool2d_f32_ref on widths 1 to 40 of
the stride-2 windows AVX-512 takes a whole row at a time (3 x 3 padded by 1 as in ResNet,
2 x 2 and 3 x 3 unpadded, ceil_mode, taller and dilated-row windows, the real 64 x 112 x
112) and on the shapes the other paths keep, with NaNs that must never win."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.targets.test_int8_fast import FLAVOURS

RT = Path(__file__).resolve().parents[2] / "targets" / "runtime"

CHECK = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "edgesmith_rt.h"

/* rows of n values around 100 (so a value too many or too few is 1 % of the mean) */
static int check(int outer, int n, int op, unsigned seed) {
    float *x = malloc(sizeof(float) * (size_t)outer * n + 64), *y = malloc(sizeof(float) * outer);
    es_reduce_params p;
    int o, k, bad = 0;
    for (k = 0; k < outer * n; ++k) {
        seed = seed * 1103515245u + 12345u;
        x[k] = 100.0f + (float)((seed >> 8) % 20001u) / 1000.0f - 10.0f;
    }
    p.outer = outer, p.n = n, p.inner = 1, p.op = op;
    es_reduce_f32(x, y, &p);
    for (o = 0; o < outer; ++o) {
        double s = 0.0, want;
        for (k = 0; k < n; ++k) s += x[(size_t)o * n + k];
        want = op == ES_R_MEAN ? s / n : s;
        if (fabs(y[o] - want) > 1e-5 * fabs(want)) {
            printf("outer %d n %d op %d row %d: %.9g want %.9g\n", outer, n, op, o, y[o], want);
            bad = 1;
            break;
        }
    }
    free(x);
    free(y);
    return bad;
}

int main(int argc, char **argv) {
    int bad = 0, i;
    for (i = 1; i + 2 < argc; i += 3)
        bad |= check(atoi(argv[i]), atoi(argv[i + 1]), atoi(argv[i + 2]), (unsigned)i);
    return bad;
}
"""

# (outer, n, op): op 0 mean, 1 sum
CASES = [(3, n, n % 2) for n in range(1, 81)] + [
    (576, 49, 0), (240, 196, 0), (96, 196, 0), (16, 3136, 0), (1152, 49, 0), (5, 1517, 1)]


def _build(cc: str, flags: list[str], source: str, out: Path) -> Path:
    """The check program ``source`` (C text) with pool_f32.c, in one build flavour."""
    flags = [*flags, "-mfma"] if out.name.endswith("_avx2") else flags
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}", str(src),
                    str(RT / "kernels/pool_f32.c"), "-o", str(out), "-lm"], check=True)
    return out


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_global_average_pool_rows_match_a_double_sum(name, cc, flags, wrapper, tmp_path):
    b = _build(cc, flags, CHECK, tmp_path / f"gap_{name}")
    args = [str(v) for case in CASES for v in case]
    p = subprocess.run([*wrapper, str(b), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{name}: {p.stdout}{p.stderr}"


MAXPOOL_CHECK = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"

/* one geometry: fast and reference bit for bit, on negative values with a NaN every 37 */
int main(int argc, char **argv) {
    es_pool_params p;
    float *x, *y, *r;
    int i, n, m;
    if (argc != 15) return 2;
    memset(&p, 0, sizeof p);
    p.C = atoi(argv[1]), p.H = atoi(argv[2]), p.W = atoi(argv[3]), p.KH = atoi(argv[4]);
    p.KW = atoi(argv[5]), p.SH = atoi(argv[6]), p.SW = atoi(argv[7]), p.PT = atoi(argv[8]);
    p.PL = atoi(argv[9]), p.PB = atoi(argv[10]), p.PR = atoi(argv[11]), p.DH = atoi(argv[12]);
    p.DW = atoi(argv[13]);
    p.OH = (p.H + p.PT + p.PB - (p.KH - 1) * p.DH - 1) / p.SH + 1 + atoi(argv[14]);
    p.OW = (p.W + p.PL + p.PR - (p.KW - 1) * p.DW - 1) / p.SW + 1 + atoi(argv[14]);
    n = p.C * p.H * p.W, m = p.C * p.OH * p.OW;
    x = malloc(sizeof(float) * (size_t)n), y = malloc(sizeof(float) * (size_t)m);
    r = malloc(sizeof(float) * (size_t)m);
    for (i = 0; i < n; ++i)
        x[i] = i % 37 == 5 ? NAN : -0.5f - (float)((unsigned)i * 7919u % 1000u) / 997.0f;
    es_maxpool2d_f32(x, y, &p);
    es_maxpool2d_f32_ref(x, r, &p);
    for (i = 0; i < m; ++i)
        if (memcmp(&y[i], &r[i], sizeof(float))) {
            printf("output %d: %.9g, reference %.9g\n", i, y[i], r[i]);
            return 1;
        }
    free(x), free(y), free(r);
    return 0;
}
"""


def maxpool_cases() -> list[tuple]:
    """(C, H, W, KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, extra output row/column): ResNet's
    3 x 3 stride-2 pool (padding 1) and the 2 x 2 / 3 x 3 ones at stride 2 without padding
    on widths 1 to 40 (a chunk of 16 outputs part full, one and two chunks), ceil_mode's
    extra column (its window past the padding), taller windows; then stride 1, dilation 2
    and a 4-wide window (the other kernels), and the real 64 x 112 x 112."""
    out = []
    for w in range(1, 41):
        h = w % 7 + 3
        out += [(2, h, w, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0),
                (1, h, w, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, w % 2),
                (1, h + 2, w + 2, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1, 0)]
    out += [(1, 9, 37, 5, 3, 2, 2, 2, 1, 2, 1, 1, 1, 0),
            (1, 11, 33, 3, 3, 2, 2, 1, 1, 1, 1, 2, 1, 0),
            (1, 8, 33, 3, 1, 2, 2, 1, 0, 1, 0, 1, 1, 0),
            (2, 17, 23, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0),
            (1, 13, 40, 3, 3, 2, 2, 0, 0, 0, 0, 2, 2, 0),
            (1, 12, 35, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 0),
            (64, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0)]
    return out


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fast_maxpool_is_bit_identical_to_reference_on_swept_widths(name, cc, flags, wrapper,
                                                                    tmp_path):
    b = _build(cc, flags, MAXPOOL_CHECK, tmp_path / f"maxpool_{name}")
    for case in maxpool_cases():
        p = subprocess.run([*wrapper, str(b), *map(str, case)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {case}: {p.stdout}{p.stderr}"
