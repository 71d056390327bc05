"""An int8 Mul of long runs against one element each (an SE block's channel gate, [1,C,H,W]
x [1,C,1,1]) runs by a 256-entry table of its results where AVX-512 VBMI can look bytes up,
and gives the per-element reference's bytes: runs just under and over the table's
threshold, either operand order, multipliers the SIMD products cannot take, in place."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tests.targets.test_int8_broadcast import CHECK, _mul_case
from tests.targets.test_int8_fast import FLAVOURS, RT, _cpu_has

VBMI = pytest.param("avx512vbmi", "cc", ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vbmi"], [],
                    marks=pytest.mark.skipif(not _cpu_has("avx512vbmi"),
                                             reason="this CPU has no AVX-512 VBMI"))
# (channels, plane) around the table's threshold of 512 (kernels/mul_int8.c LUT_MIN)
PLANES = [(3, 511), (2, 512), (5, 577), (4, 784), (1, 1000)]


def gate_cases(planes, seed: int, case_of):
    """Argument lists for the broadcast check: each (channels, plane) twice, the gate as the
    second operand then the first; ``case_of(i)`` picks _mul_case's multiplier case."""
    from edgesmith.targets.lower.common import bcast_params

    rng = np.random.default_rng(seed)
    for i, (c, hw) in enumerate(planes * 2):
        full, gate = (1, c, hw), (1, c, 1)
        a, b = (full, gate) if i % 2 == 0 else (gate, full)
        bc = bcast_params(full, a, b)
        nd = bc["ndim"]
        yield [1, i + 1, 3, *a, *b, nd, *bc["shape"][:nd], *bc["sa"][:nd], *bc["sb"][:nd],
               *_mul_case(rng, case_of(i))]


def check_gate_mul(name: str, cc: str, flags: list[str], wrapper: list[str], tmp_path,
                   cases) -> None:
    """Build the broadcast check with these flags and run every case through it."""
    b = tmp_path / f"mul_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/add_int8.c"), str(RT / "kernels/mul_int8.c"),
                    "-o", str(b)], check=True)
    for args in cases:
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), [VBMI, *FLAVOURS])
def test_channel_gate_mul_by_table_equals_per_element_reference(name, cc, flags, wrapper,
                                                                tmp_path):
    # case 7 of _mul_case: a multiplier of 2^14.5, past the SIMD products' 2^14
    check_gate_mul(name, cc, flags, wrapper, tmp_path,
                   gate_cases(PLANES, 7, lambda i: 7 if i == 3 else i))
