"""INT8 Add/Sub: the AVX2 / NEON paths of es_add_i8 are bit-identical to the per-element
reference es_add_i8_ref on random lengths, zero points, scales and fused clamps (same
shapes; broadcasting, es_add_i8_bcast, is checked in test_int8_broadcast)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.targets.test_int8_fast import FLAVOURS

RT = Path(__file__).parents[2] / "targets" / "runtime"
CHECK = Path(__file__).parent / "c" / "add_check.c"


def _cases(n: int, seed: int = 0):
    from edgesmith.targets.lower.int8 import quantize_multiplier

    rng = np.random.default_rng(seed)
    for i in range(n):
        sa, sb, sy = np.exp(rng.uniform(-6, 0, size=3))
        left = 20
        twice_max = 2 * max(sa, sb)
        am, ash = quantize_multiplier(sa / twice_max)
        bm, bsh = quantize_multiplier(sb / twice_max)
        ym, ysh = quantize_multiplier(twice_max / ((1 << left) * sy))
        qmin, qmax = (-128, 127) if i % 3 else (int(rng.integers(-128, 0)), 127)
        length = int(rng.choice([1, 15, 16, 17, 33, 100, 1000, int(rng.integers(1, 5000))]))
        yield [length, i + 1, *map(int, rng.integers(-128, 128, size=3)), left, am, ash, bm,
               bsh, ym, ysh, qmin, qmax, i % 2]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fast_int8_add_is_bit_identical_to_reference(name, cc, flags, wrapper, tmp_path):
    b = tmp_path / f"add_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/add_int8.c"), "-o", str(b)], check=True)
    for args in _cases(20 if wrapper else 60):
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"
