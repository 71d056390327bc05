"""An int8 Mul of short runs against one element each (an SE gate on 14x14 and 7x7 planes:
runs of 196 and 49, below the table's threshold) goes 64 bytes at a time on AVX-512 with
the run's last 1..63 bytes under masks, and must give the per-element reference's bytes:
run lengths around every 16 and 64 boundary, either operand order, multipliers with a
left shift, a total shift of exactly 31 and one past the SIMD limit, Relu-like clamps."""

from __future__ import annotations

import pytest

from tests.targets.test_int8_fast import FLAVOURS, _cpu_has
from tests.targets.test_mul_int8_table import check_gate_mul, gate_cases

AVX512BW = pytest.param("avx512bw", "cc", ["-O3", "-mavx512f", "-mavx512bw"], [],
                        marks=pytest.mark.skipif(not _cpu_has("avx512bw"),
                                                 reason="this CPU has no AVX-512 BW"))
# (channels, plane): runs of 1 .. 200 bytes, the SE planes of EfficientNet-B0 at 224 (7x7,
# 14x14) and MobileNetV3-small's
PLANES = [(3, 1), (2, 15), (5, 16), (4, 17), (3, 49), (2, 63), (3, 64), (2, 65), (7, 127),
          (5, 196), (2, 9), (4, 36), (3, 144)]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), [AVX512BW, *FLAVOURS])
def test_channel_gate_mul_on_short_runs_equals_per_element_reference(name, cc, flags, wrapper,
                                                                     tmp_path):
    check_gate_mul(name, cc, flags, wrapper, tmp_path, gate_cases(PLANES, 11, lambda i: i % 9))
