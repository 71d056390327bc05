"""fp32 global average pooling (es_reduce_f32 over the last axes, a sum of each row of n
values): the vector sums (AVX-512, AVX2: two accumulators, a masked tail, the horizontal
sum) and the portable 16-partial-sum loop agree with a double-precision sum, to float
rounding, on every row length from 1 to 80 (every tail of both vector widths, with and
without the 16- or 8-value step after the 32- or 16-value loop) and on the squeeze-excite
and head shapes of MobileNetV3-small and EfficientNet-B0 (576 x 7 x 7, 240 x 14 x 14,
16 x 56 x 56, 1152 x 7 x 7), with a large common offset that a dropped or repeated value
would move far past the tolerance. Every build the runtime has runs it (NEON under qemu)."""

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


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_global_average_pool_rows_match_a_double_sum(name, cc, flags, wrapper, tmp_path):
    flags = [*flags, "-mfma"] if name == "avx2" else flags
    src = tmp_path / "gap_check.c"
    src.write_text(CHECK)
    b = tmp_path / f"gap_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}", str(src),
                    str(RT / "kernels/pool_f32.c"), "-o", str(b), "-lm"], check=True)
    args = [str(v) for case in CASES for v in case]
    p = subprocess.run([*wrapper, str(b), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{name}: {p.stdout}{p.stderr}"
