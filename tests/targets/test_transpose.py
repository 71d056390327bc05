"""es_transpose (dimensions merged, innermost run copied whole or gathered by element size)
equals numpy's transpose and the element-by-element es_transpose_ref byte for byte over
random permutations of 1-6 dimensions with size-1 axes and 1-, 2-, 4-byte elements; under
AddressSanitizer/UBSan a wrong merge that reads or writes past a buffer fails the run."""

from __future__ import annotations

import ctypes
import itertools
import subprocess
from pathlib import Path

import numpy as np

from tests.targets.test_int8_fast import RT

MAX_DIMS = 6
CHECK = Path(__file__).parent / "c" / "transpose_check.c"


class _Perm(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int32), ("shape", ctypes.c_int32 * MAX_DIMS),
                ("perm", ctypes.c_int32 * MAX_DIMS)]


def _cases(rng: np.random.Generator):
    yield (1,), (0,)
    yield (1, 3, 64, 65), (0, 2, 3, 1)          # NCHW -> NHWC
    yield (1, 65, 3, 64), (0, 2, 1, 3)          # ViT: tokens x heads -> heads x tokens
    yield (1, 3, 65, 64), (0, 1, 3, 2)          # K transposed for Q.K^T
    for nd in range(1, MAX_DIMS + 1):
        for _ in range(12):
            shape = tuple(int(v) for v in rng.integers(1, 6, nd))
            yield shape, tuple(int(v) for v in rng.permutation(nd))
    for perm in itertools.permutations(range(4)):
        yield (2, 1, 3, 4), perm


def test_transpose_equals_numpy(tmp_path):
    so = tmp_path / "copy.so"
    subprocess.run(["cc", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    f"-I{RT}", str(RT / "kernels/copy.c"), "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    rng = np.random.default_rng(7)
    for shape, perm in _cases(rng):
        for dtype in (np.uint8, np.int16, np.float32):
            x = rng.integers(0, 120, shape).astype(dtype)
            want = np.ascontiguousarray(x.transpose(perm))
            p = _Perm(len(shape), (ctypes.c_int32 * MAX_DIMS)(*shape),
                      (ctypes.c_int32 * MAX_DIMS)(*perm))
            for fn in (lib.es_transpose, lib.es_transpose_ref):
                out = np.zeros(want.size + 16, dtype)  # 16 guard elements after y
                fn(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
                   ctypes.c_int(x.itemsize), ctypes.byref(p))
                name = f"{fn.__name__} {shape} {perm} {np.dtype(dtype).name}"
                assert not out[want.size:].any(), f"{name} wrote past y"
                np.testing.assert_array_equal(out[:want.size].reshape(want.shape), want,
                                              err_msg=name)


def test_transpose_matches_reference_under_sanitizers(tmp_path):
    exe = tmp_path / "transpose_check"
    subprocess.run(["cc", "-O1", "-g", "-std=c99", "-Wall", "-Wextra", "-Werror",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/copy.c"), "-o", str(exe)], check=True)
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300,
                       env={"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stdout + p.stderr
