"""int8 global average pooling (es_global_avgpool_i8) equals the plain per-channel sum and
es_requant on every plane size a network hands it, 1 to 200 values (3x3 and 7x7 planes, the
64-byte steps and their masked last bytes on AVX-512 BW), channel counts that are not a
multiple of 16, either requantisation; also under ASan and UBSan."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.targets.test_int8_fast import FLAVOURS, RT, _cpu_has

CHECK = Path(__file__).parent / "c" / "gavgpool_check.c"
AVX512BW = pytest.param("avx512bw", "cc", ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl"], [],
                        marks=pytest.mark.skipif(not _cpu_has("avx512bw"),
                                                 reason="this CPU has no AVX-512 BW"))
SANITIZE = ("asan", "cc", ["-O1", "-g", "-fsanitize=address,undefined",
                           "-fno-sanitize-recover=all", "-march=native"], [])
PLANES = [1, 2, 9, 15, 16, 17, 36, 49, 63, 64, 65, 127, 128, 129, 144, 196, 200]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), [AVX512BW, SANITIZE, *FLAVOURS])
def test_global_average_pool_equals_plain_sum_on_every_plane_size(name, cc, flags, wrapper,
                                                                  tmp_path):
    b = tmp_path / f"gap_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/pool_int8.c"), "-o", str(b)], check=True)
    for i, hw in enumerate(PLANES):
        for c, zp in ((37, -128), (16, 5), (3, 127)):
            p = subprocess.run([*wrapper, str(b), str(c), str(hw), str(zp), str(100 + i)],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0 and p.stdout.startswith("ok"), \
                f"{name} C={c} HW={hw}: {p.stdout}{p.stderr}"
