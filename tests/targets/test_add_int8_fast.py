"""INT8 Add/Sub: the SIMD paths of es_add_i8 are bit-identical to the per-element reference
es_add_i8_ref on random lengths, zero points, scales and fused clamps, in both
requantisation modes (same shapes; broadcasting, es_add_i8_bcast, is checked in
test_int8_broadcast), and the fp32 reference is onnxruntime's float arithmetic."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.targets.test_int8_fast import FLAVOURS

RT = Path(__file__).parents[2] / "targets" / "runtime"
CHECK = Path(__file__).parent / "c" / "add_check.c"


def _cases(n: int, seed: int = 0):
    from edgesmith.targets.lower.requant import quantize_multiplier

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


def _f32_cases(n: int, seed: int = 1):
    """The fixed-point cases' geometry with float32 scales (ES_RQ_FP32)."""
    rng = np.random.default_rng(seed)
    for args in _cases(n, seed):
        yield [*args, *(repr(float(np.float32(s))) for s in np.exp(rng.uniform(-6, 0, size=3)))]


def _build(cc: str, flags: list[str], out: Path) -> Path:
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/add_int8.c"), "-o", str(out)], check=True)
    return out


@pytest.mark.parametrize("mode", ["fixed", "fp32"])
@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fast_int8_add_is_bit_identical_to_reference(name, cc, flags, wrapper, mode,
                                                     tmp_path):
    b = _build(cc, flags, tmp_path / f"add_{name}_{mode}")
    n = 20 if wrapper else 60
    for args in _cases(n) if mode == "fixed" else _f32_cases(n):
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fp32_int8_add_matches_reference_on_every_pair_of_bytes(name, cc, flags, wrapper,
                                                                 tmp_path):
    """Every (a, b) byte pair, under scale sets drawn over 2^-17 .. 2^4 and a few at the
    edges of AVX-512's reciprocal path (2^-40 .. 2^40: outside it, vdivps): the SIMD sum's
    quotient rounds as the reference's division does on every input, not on a sample."""
    b = _build(cc, flags, tmp_path / f"add_pairs_{name}")
    rng = np.random.default_rng(7)
    n = 6 if wrapper else 150
    sets = [tuple(np.exp2(rng.uniform(-17, 4, size=3))) for _ in range(n)]
    sets += [(2.0 ** -40, 2.0 ** 40, 2.0 ** -40), (2.0 ** -41, 0.03, 0.05),
             (0.03, 0.02, 1.5 * 2.0 ** 40), (1.1e-13, 9.0e11, 0.02)]
    for i, scales in enumerate(sets):
        zps = map(int, rng.integers(-128, 128, size=3))
        qmin = int(rng.integers(-128, 0)) if i % 2 else -128
        args = [65536, i + 1, *zps, 20, 1 << 30, -1, 1 << 30, -1, 1 << 30, -1, qmin, 127,
                i % 2, *(repr(float(np.float32(s))) for s in scales), "pairs"]
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"


# (a_zp, b_zp, y_zp, sub, s_a, s_b, s_y): scale sets under which the fp32 Add built in GNU
# mode without es_fp_exact.h gave another byte than its reference on some (a, b) pair (6 of
# the 23 such sets among 2,000 drawn over 2^-17 .. 2^4, Intel Xeon, GCC 12, -march=native)
CONTRACTED = [
    (99, 5, 80, 0, "4.532955646514893", "0.8967440128326416", "2.6973049640655518"),
    (-113, 118, -16, 0, "0.06633331626653671", "3.158040271955542e-05", "0.1300874948501587"),
    (106, 3, -47, 1, "0.0025343545712530613", "0.00034432884422130883", "0.02493996173143387"),
    (98, 115, -69, 1, "7.184432506561279", "3.954481601715088", "1.3008512258529663"),
    (103, -2, -23, 0, "4.511402585194446e-05", "1.965777664736379e-05",
     "0.00022205043933354318"),
    (-42, -52, -96, 1, "1.1548265320016071e-05", "2.447592851240188e-05",
     "1.2428014088072814e-05"),
]


def test_fp32_int8_add_keeps_its_rounding_in_gnu_c_mode(tmp_path):
    """Compiled in GCC's GNU mode (-std=gnu99, so -ffp-contract=fast: a multiply fused into
    the add after it rounds once where onnxruntime rounds twice), the fp32 Add still gives its
    reference's byte on every (a, b) pair under scale sets where the contracted build did
    not: the runtime's sources turn contraction off themselves (es_fp_exact.h), so a project
    that compiles them with its own flags gets the bytes the tests check."""
    b = tmp_path / "add_gnu"
    subprocess.run(["cc", "-O3", "-march=native", "-std=gnu99", "-Wall", "-Wextra", "-Werror",
                    f"-I{RT}", str(CHECK), str(RT / "kernels/add_int8.c"), "-o", str(b)],
                   check=True)
    for i, (a_zp, b_zp, y_zp, sub, *scales) in enumerate(CONTRACTED):
        args = [65536, i + 1, a_zp, b_zp, y_zp, 20, 1 << 30, -1, 1 << 30, -1, 1 << 30, -1,
                -128, 127, sub, *scales, "pairs"]
        p = subprocess.run([str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"


def test_fp32_int8_add_is_onnxruntimes_float_arithmetic(tmp_path):
    """ES_RQ_FP32's reference is onnxruntime's DequantizeLinear -> Add -> QuantizeLinear
    in float32, step for step: (a - a_zp) * s_a + (b - b_zp) * s_b, divided by s_y, rounded
    half to even, + y_zp, saturated; the same numbers run through numpy's float32."""
    b = _build("cc", ["-O2"], tmp_path / "add_f32_dump")
    f32 = np.float32
    n_checked = 0
    for args in _f32_cases(40, seed=5):
        p = subprocess.run([str(b), *map(str, args), "dump"], capture_output=True, text=True,
                           timeout=60, check=True)
        a, bb, y = np.array([list(map(int, ln.split())) for ln in p.stdout.splitlines()]).T
        a_zp, b_zp, y_zp, qmin, qmax, sub = *args[2:5], args[12], args[13], args[14]
        sa, sb, sy = (f32(float(s)) for s in args[15:18])
        fa, fb = (a - a_zp).astype(f32) * sa, (bb - b_zp).astype(f32) * sb
        v = (fa - fb if sub else fa + fb) / sy
        want = np.clip(np.rint(v) + y_zp, qmin, qmax)
        assert (want == y).all(), (args, np.flatnonzero(want != y)[:5])
        n_checked += y.size
    assert n_checked > 10000
