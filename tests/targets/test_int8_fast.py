"""INT8 fast conv paths (blocked, pointwise GEMM, AVX2 / NEON) are bit-identical to the
portable reference kernel on random shapes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

RT = Path(__file__).parents[2] / "targets" / "runtime"
HARNESS = Path(__file__).parent / "c"
CHECK = Path(__file__).parent / "c" / "conv_fast_check.c"


def conv_case(rng: np.random.Generator, i: int, max_c: int, extra) -> list[int]:
    """A random conv geometry for the C check programs: pointwise, general and depthwise
    in turn. ``extra(rng, i)`` is the program's own field after ``group`` (a zero point for
    int8, an activation for fp32), drawn in the same place of the random stream."""
    kind = i % 3
    k = 1 if kind == 0 else int(rng.choice([1, 3, 5]))
    s = 1 if kind == 0 else int(rng.integers(1, 3))
    pad = 0 if kind == 0 else int(rng.integers(0, k // 2 + 1))
    d = 1 if kind == 0 else int(rng.integers(1, 3))
    c = int(rng.integers(1, max_c))
    group, m = (1, int(rng.integers(1, 20))) if kind != 2 else (c, c)
    h, w = int(rng.integers(d * (k - 1) + 1, 14)), int(rng.integers(d * (k - 1) + 1, 40))
    oh = (h + 2 * pad - d * (k - 1) - 1) // s + 1
    ow = (w + 2 * pad - d * (k - 1) - 1) // s + 1
    return [c, h, w, m, k, k, s, s, pad, pad, d, d, group, extra(rng, i), i + 1, oh, ow]


# Geometries that once broke a fast path, run before the random ones. A tile of 16 pixels
# whose last row segment (1 pixel) lies wholly in the 2-column left padding: im2col zeroed
# past the segment, into the blocked GEMM's partial sums (and, unblocked, past scratch).
EDGE_CASES = [[15, 13, 15, 18, 5, 5, 1, 1, 2, 2, 1, 1, 1, -43, 44, 13, 15],
              # stride-2 direct walks that read one row phase or one column phase only,
              # which es_conv2d_i8_dot alone makes: a 1x1 (ResNet's downsampling shortcut,
              # phase (0, 0) alone; an odd padded plane), rows dilated by 2 (even row phase,
              # both column phases), rows and columns dilated by 2
              [64, 15, 15, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1, -3, 45, 8, 8],
              [20, 13, 17, 24, 3, 3, 2, 2, 2, 1, 2, 1, 1, -5, 46, 7, 9],
              [24, 13, 17, 20, 3, 3, 2, 2, 2, 2, 2, 2, 1, 17, 47, 7, 9]]
# Wide convs on small planes, where es_conv2d_i8_cl puts output channels in the lanes: two
# 16-channel blocks per tile, an odd last block (M = 48, 40), C not a multiple of 4 or 16,
# stride 2, dilation, a partial last tile of pixels (5x7, 3x3) and a 1x1 on 2x2.
WIDE_CASES = [[64, 4, 4, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 101, 4, 4],
              [32, 8, 8, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, -7, 102, 4, 4],
              [22, 5, 7, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, -128, 103, 5, 7],
              [37, 7, 7, 40, 3, 3, 2, 2, 1, 1, 2, 2, 1, 127, 104, 3, 3],
              [1, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 105, 8, 8],
              [96, 2, 2, 80, 1, 1, 1, 1, 0, 0, 1, 1, 1, -1, 106, 2, 2],
              # pixel tiles of every size es_conv2d_i8_cl picks: a 3x3 plane in one tile of
              # 9 (odd last block, M = 72), 12 pixels in one, 13 as 7 + 6, 7x7 as 7 x 7
              [40, 3, 3, 72, 1, 1, 1, 1, 0, 0, 1, 1, 1, 9, 107, 3, 3],
              [21, 3, 4, 33, 1, 1, 1, 1, 0, 0, 1, 1, 1, -60, 108, 3, 4],
              [18, 13, 1, 50, 1, 1, 1, 1, 0, 0, 1, 1, 1, 77, 109, 13, 1],
              [45, 7, 7, 36, 3, 3, 1, 1, 1, 1, 1, 1, 1, -20, 110, 7, 7],
              [67, 11, 10, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 3, 111, 6, 5]]

# es_conv2d_i8_cl's row tiles (stride 1, rows of 12 or more, or of 7 or more when a block
# pair's weights pass 48 KB): rows of 7 two at a time with an odd last row alone, and all in
# pairs; rows of 8 in one tile (no right padding); 12 in one, 15 as 8 + 7, 29 as 10 + 10 + 9
# (dilated), 56 as 4 x 14 (no top padding, bottom padding only); a 1x3 kernel; 7x7, the
# most taps the offset table holds; 9x9, more, on the gathered tiles. Odd last blocks (M =
# 40, 24, 33, 20), one block (M = 16), and a partial last channel quad (C = 198, 5).
ROW_CASES = [[176, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, -7, 121, 7, 7],
             [198, 8, 7, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 60, 122, 8, 7],
             [180, 9, 10, 16, 3, 3, 1, 1, 1, 0, 1, 1, 1, 3, 123, 9, 8],
             [5, 6, 12, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 124, 6, 12],
             [12, 9, 15, 33, 5, 5, 1, 1, 2, 2, 1, 1, 1, -128, 125, 9, 15],
             [8, 5, 29, 32, 3, 3, 1, 1, 2, 2, 2, 2, 1, 127, 126, 5, 29],
             [4, 3, 56, 20, 3, 3, 1, 1, 0, 1, 1, 1, 1, 9, 127, 2, 56],
             [16, 6, 20, 48, 1, 3, 1, 1, 0, 1, 1, 1, 1, -40, 128, 6, 20],
             [6, 14, 14, 32, 7, 7, 1, 1, 3, 3, 1, 1, 1, 44, 129, 14, 14],
             [4, 12, 12, 16, 9, 9, 1, 1, 4, 4, 1, 1, 1, 2, 130, 12, 12]]

# Expanding 1x1 convs that hand their output to a depthwise conv as pixel quads (y_pquads):
# 16-channel blocks, planes of whole quads with whole 32-pixel tile pairs and a partial
# last tile (6x12: 72 pixels), one tile of 16 or fewer (4x4, 2x6), seeds that draw both
# requantisations (fp32 and fixed point).
PQUAD_CASES = [[24, 6, 12, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1, -9, 201, 6, 12],
               [16, 8, 8, 48, 1, 1, 1, 1, 0, 0, 1, 1, 1, 100, 202, 8, 8],
               [16, 8, 8, 48, 1, 1, 1, 1, 0, 0, 1, 1, 1, -128, 203, 8, 8],
               [7, 4, 4, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, 3, 204, 4, 4],
               [33, 2, 6, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1, -70, 205, 2, 6],
               [12, 12, 12, 96, 1, 1, 1, 1, 0, 0, 1, 1, 1, 21, 206, 12, 12],
               # more channels than the dot kernel's per-call scale table holds (DOT_SCALES,
               # 2048): each tile makes its block's scales itself; fp32 requantisation (the
               # seeds draw it), into pixel quads and, 3x3 on 6x6, into split rows
               [16, 4, 8, 2064, 1, 1, 1, 1, 0, 0, 1, 1, 1, -9, 207, 4, 8],
               [8, 6, 6, 2056, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 213, 6, 6]]


def _pquads(args: list[int]) -> bool:
    """Whether conv_fast_check also runs es_conv2d_i8_dot into pixel quads on ``args``."""
    c, h, w, m, kh, kw, sh, sw, pt, pl, _, _, group = args[:13]
    return ((kh, kw, sh, sw, pt, pl, group) == (1, 1, 1, 1, 0, 0, 1) and m % 16 == 0
            and (h * w) % 4 == 0 and (args[15], args[16]) == (h, w))


def _cases(n: int, seed: int = 0):
    yield from EDGE_CASES
    yield from WIDE_CASES
    yield from ROW_CASES
    yield from PQUAD_CASES
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield conv_case(rng, i, 24, lambda r, _: int(r.integers(-128, 128)))


def _build(cc: str, flags: list[str], out: Path) -> Path:
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/conv_int8.c"),
                    str(RT / "kernels/conv_int8_fast.c"), str(RT / "kernels/conv_int8_dot.c"),
                    str(RT / "kernels/conv_int8_cl.c"),
                    "-o", str(out)], check=True)
    return out


def _cpu_has(flag: str) -> bool:
    try:
        return flag in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def _avx2() -> bool:
    return _cpu_has("avx2")


FLAVOURS = [("portable", "cc", ["-O2"], []),
            ("vectorised", "cc", ["-O3"], []),
            pytest.param("avx2", "cc", ["-O3", "-mavx2"], [], marks=pytest.mark.skipif(
                not _avx2(), reason="this CPU has no AVX2")),
            pytest.param("avx512vnni", "cc", ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl",
                                              "-mavx512vnni"], [], marks=pytest.mark.skipif(
                not _cpu_has("avx512_vnni"), reason="this CPU has no AVX-512 VNNI")),
            ("neon", "aarch64-linux-gnu-gcc", ["-O3"],
             ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"])]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fast_int8_conv_is_bit_identical_to_reference(name, cc, flags, wrapper, tmp_path):
    b = _build(cc, flags, tmp_path / f"check_{name}")
    n = 24 if wrapper else 60
    for args in _cases(n):
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"
        assert ("dot_pquads" in p.stdout) == _pquads(args), (args, p.stdout)


def test_fast_int8_conv_stays_inside_its_scratch_under_asan(tmp_path):
    """Every fast kernel gets exactly the scratch its size formula promises (malloc'd to
    size, so AddressSanitizer sees one byte past it), and the dot kernel's scratch size in
    the generator equals es_i8_dot_scratch in C on every geometry (and es_conv2d_i8_cl's
    equals es_i8_cl_scratch)."""
    from edgesmith.targets.lower.kernels import cl_i8_scratch, dot_i8_scratch

    b = _build("cc", ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover",
                      "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]
               if _cpu_has("avx512_vnni") else ["-O1", "-g", "-fsanitize=address,undefined",
                                                "-fno-sanitize-recover"],
               tmp_path / "check_asan")
    keys = ["C", "H", "W", "M", "KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW", "group"]
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    n = nq = 0
    for args in _cases(80, seed=3):
        p = subprocess.run([str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60, env=env)
        assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"
        if args[12] == 1:
            geo = dict(zip(keys, args[:13], strict=True)) | {"OH": args[15], "OW": args[16]}
            line = next(x for x in p.stdout.splitlines() if x.startswith("dot_scratch"))
            assert int(line.split()[1]) == dot_i8_scratch(geo), (args, line)
            line = next(x for x in p.stdout.splitlines() if x.startswith("cl_scratch"))
            assert int(line.split()[1]) == cl_i8_scratch(geo), (args, line)
            n += 1
        line = next((x for x in p.stdout.splitlines() if x.startswith("dotq_scratch")), None)
        if line:  # a 1x1 conv on quad planes (x_quads) needs none
            assert int(line.split()[1]) == dot_i8_scratch({**geo, "x_quads": 1}) == 0
            nq += 1
    assert n > 40 and nq > 5


def test_generated_int8_model_uses_fast_paths_and_reference_switch(work, digits_qdq):
    from edgesmith.targets.ir import lower

    fns = {c.fn for st in lower(digits_qdq, "int8").steps for c in st.calls}
    assert {"es_dwconv2d_i8_hwc", "es_conv2d_i8_gemm"} <= fns and "es_conv2d_i8" not in fns
    fns = {c.fn for st in lower(digits_qdq, "int8", kernels="reference").steps
           for c in st.calls}
    assert "es_conv2d_i8" in fns and "es_conv2d_i8_fast" not in fns


def test_int8_digits_arena_fits_under_tflite_micro(digits_qdq):
    """The K-blocked im2col keeps conv scratch small: the whole digits INT8 arena stays
    under the 12,592 B TFLite Micro's allocator reports for the same model, with the int16
    GEMM and with the VNNI dot-product kernel (in-place taps, tap-blocked im2col), and the
    planner stays within 5% of the liveness lower bound."""
    from edgesmith.targets.ir import lower
    from edgesmith.targets.isa import VNNI
    from edgesmith.targets.lower.kernels import gemm_i8_scratch
    from edgesmith.targets.planner import plan

    gemm = plan(lower(digits_qdq, "int8"))
    assert gemm.arena_bytes <= 12592 and gemm.efficiency >= 0.95
    dot = lower(digits_qdq, "int8", VNNI)
    fns = {c.fn for st in dot.steps for c in st.calls}
    # the 1-channel first conv runs as the stem kernel (whole patches, four taps a word)
    assert {"es_conv2d_i8_stem"} <= fns and fns & {"es_conv2d_i8_dot", "es_conv2d_i8_cl"}, fns
    assert plan(dot).arena_bytes <= 12592 and plan(dot).efficiency >= 0.95
    assert gemm_i8_scratch(27, 32) == 64 * 14  # short reduction: one tile, no partials
    assert gemm_i8_scratch(576, 64) == 64 * 64 + 64 * 64  # blocked: 64 pairs + [M][16]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_requantization_rounds_once_to_the_exact_value(name, cc, flags, wrapper, tmp_path):
    """es_mul_q and its SIMD forms equal floor(x * real + 1/2) for real = mult * 2^(shift-31):
    one rounding, where gemmlowp's doubling-high-multiply-then-shift rounds twice."""
    from edgesmith.targets.lower.requant import quantize_multiplier

    b = tmp_path / f"requant_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(HARNESS / "requant_check.c"), "-o", str(b)], check=True)
    rng = np.random.default_rng(7)
    cases = []
    for real in np.exp(rng.uniform(np.log(1e-7), np.log(40.0), size=400)):
        m, s = quantize_multiplier(float(real))
        bound = 2**31 - 1 if real > 1 and len(cases) % 3 == 0 else \
            min(2**31 - 1, int(2**31 / max(real, 1.0)) - 1)  # some saturate to int32
        for x in (*rng.integers(-bound, bound, size=20), 0, 1, -1, bound, -bound):
            cases.append((int(x), m, s))
    # exact ties round up: x * real = k + 1/2 exactly; real = 1/2 exactly (an Add's larger
    # input) over the whole int32 range
    cases += [(3, 2**30, 0), (-3, 2**30, 0), (5, 2**30, -1), (-5, 2**30, -1)]
    cases += [(x, 2**30, 0) for x in (0, 1, -1, 2, -2, 2**31 - 1, -2**31, 2**31 - 2, -2**31 + 1,
                                      *rng.integers(-2**31, 2**31, size=40))]
    p = subprocess.run([*wrapper, str(b)], input="".join(f"{x} {m} {s}\n" for x, m, s in cases),
                       capture_output=True, text=True, timeout=120, check=True)
    got = [tuple(map(int, line.split())) for line in p.stdout.splitlines()]
    assert len(got) == len(cases)
    for (x, m, s), (scalar, vec, wide, lanes) in zip(cases, got, strict=True):
        exact = (2 * x * m + 2 ** (31 - s)) // 2 ** (32 - s)  # floor(x*m/2^(31-s) + 1/2)
        assert scalar == max(-2**31, min(2**31 - 1, exact)), (x, m, s, scalar, exact)
        assert vec == scalar, (name, x, m, s, vec, scalar)
        assert wide == scalar, (name, "avx512", x, m, s, wide, scalar)
        assert lanes == scalar, (name, "per-lane", x, m, s, lanes, scalar)


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fp32_requantization_is_float32_multiply_rounded_half_to_even(name, cc, flags, wrapper,
                                                                       tmp_path):
    """ES_RQ_FP32 (es_requant and its SIMD forms) is onnxruntime's and XNNPACK's arithmetic:
    float32(acc) * scale in float32, clamped to [qmin - y_zp, qmax - y_zp], rounded half to
    even, + y_zp; the scale is the float32 the generator wrote as (mult, shift), exactly."""
    from edgesmith.targets.lower.requant import fp32_multiplier

    b = tmp_path / f"rqf_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(HARNESS / "requant_f32_check.c"), "-o", str(b)], check=True)
    rng = np.random.default_rng(11)
    f32 = np.float32
    scales = [f32(s) for s in np.exp(rng.uniform(np.log(1e-9), np.log(300.0), size=300))]
    scales += [f32(0.0), f32(0.5), f32(2.0**-126), f32(1.0)]
    rows = []
    for s in scales:
        m, sh = fp32_multiplier(s)
        assert m * 2.0 ** (sh - 31) == float(s)  # the pair is the float32, exactly
        zp = int(rng.integers(-128, 128))
        lo, hi = (-128, 127) if rng.integers(2) else (zp, min(127, zp + 100))
        target = rng.integers(-400, 400, size=12) / max(float(s), 1e-30)
        accs = np.clip(np.concatenate([target, rng.integers(-2**31, 2**31, size=4)]),
                       -2**31, 2**31 - 1).astype(np.int64)
        # exact ties k + 1/2 where the scale allows: acc = (2k + 1) / (2 * scale)
        if s > 0 and float(s) >= 2.0**-20:
            k = rng.integers(-100, 100, size=4)
            tie = (2 * k + 1) / (2 * float(s))
            accs = np.concatenate([accs, tie[tie == np.round(tie)].astype(np.int64)])
        rows += [(int(a), m, sh, zp, lo, hi) for a in accs]
    p = subprocess.run([*wrapper, str(b)], input="".join(" ".join(map(str, r)) + "\n"
                                                         for r in rows),
                       capture_output=True, text=True, timeout=120, check=True)
    got = [tuple(map(int, ln.split())) for ln in p.stdout.splitlines()]
    assert len(got) == len(rows)
    for (acc, m, sh, zp, lo, hi), (scalar, store, lanes) in zip(rows, got, strict=True):
        v = f32(acc) * f32(m * 2.0 ** (sh - 31))
        want = int(np.clip(np.rint(np.clip(v, f32(lo - zp), f32(hi - zp))) + zp, lo, hi))
        assert scalar == want, (name, acc, m, sh, zp, scalar, want)
        assert store == want and lanes == want, (name, acc, m, sh, store, lanes, want)


def _slices_clean_under_sanitizers(out: Path) -> None:
    """The build in ``out`` under ASan + UBSan (-march=native), run in resumable slices of
    4 steps: no fault, and the same output as one whole run."""
    from tests.targets._helpers import compile_harness

    h = compile_harness(out, out / "harness_san", ["-O1", "-g", "-march=native",
                                                   "-fsanitize=address,undefined",
                                                   "-fno-sanitize-recover=all"])
    p = subprocess.run([str(h), "slice", "4"], capture_output=True, text=True, cwd=out,
                       timeout=300)
    assert p.returncode == 0 and '"same": 1' in p.stdout, p.stdout + p.stderr


@pytest.mark.skipif(not _cpu_has("avx512_vnni"), reason="this CPU has no AVX-512 VNNI")
def test_depthwise_hands_quad_planes_to_the_next_1x1_conv(work, digits_qdq, digits_c_int8,
                                                          digits_splits):
    """Built for AVX-512 VNNI, a depthwise conv whose only reader is a 1x1 conv writes the
    dot kernel's quad planes (y_quads) and the 1x1 conv reads them as they are (x_quads,
    no scratch for them): the outputs are byte for byte the portable build's."""
    from edgesmith.targets import run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.isa import VNNI
    from tests.targets._helpers import generate

    g = lower(digits_qdq, "int8", VNNI)
    pairs = [(st, c.args[-1]) for st in g.steps for c in st.calls
             if isinstance(c.args[-1], dict) and c.args[-1].get("x_quads")]
    assert pairs and all(st.scratch == 0 and g.tensors[st.inputs[0]].slack == 64
                         for st, _ in pairs)
    out = generate(digits_qdq, work / "digits_c_vnni", precision="int8",
                   cflags="-O3 -march=native")
    text = (out / "model.c").read_text()
    assert ".x_quads = 1" in text and ".y_quads = 1" in text
    x = digits_splits.val_x[:200]
    assert np.array_equal(run.run(out, x), run.run(digits_c_int8, x))
    # the same build under ASan + UBSan: the 1x1 conv's reads of the planes stay in the
    # tensor and its slack, resumable slices and all
    _slices_clean_under_sanitizers(out)


@pytest.mark.skipif(not _cpu_has("avx512_vnni"), reason="this CPU has no AVX-512 VNNI")
def test_expansions_hand_pixel_quads_to_their_depthwise_convs(work, mnv2_qdq, mnv2):
    """Built for AVX-512 VNNI, the MobileNetV2-style net's expanding 1x1 convs write their
    output as pixel quads (y_pquads) and the depthwise conv after each reads its rows as
    they are (x_pquads); a tensor with a second reader (the stem's, which a residual Add
    also reads) stays CHW. The outputs are byte for byte the portable build's (no
    hand-over there), with the heavy steps cut over 2 threads too (the dot kernel's slices
    then start on 16-channel blocks) and with the first layers run in patches, and the
    build runs clean under ASan + UBSan."""
    from edgesmith.targets import codegen, run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.isa import VNNI
    from tests.targets._helpers import generate

    g = lower(mnv2_qdq, "int8", VNNI)
    made = {st.outputs[0]: c for st in g.steps for c in st.calls
            if isinstance(c.args[-1], dict) and c.args[-1].get("y_pquads")}
    read = [st.inputs[0] for st in g.steps for c in st.calls
            if isinstance(c.args[-1], dict) and c.args[-1].get("x_pquads")]
    assert len(read) >= 4 and sorted(read) == sorted(made)
    assert all(c.fn == "es_conv2d_i8_dot" for c in made.values())
    stem = next(st for st in g.steps if st.calls[0].fn == "es_conv2d_i8_stem")
    assert not stem.calls[0].args[-1].get("y_pquads")  # read by the dw conv and an Add
    x, _ = mnv2.sample_data(32, seed=5)
    ref = run.run(generate(mnv2_qdq, work / "mnv2_pq_portable", precision="int8"), x)
    for threads in (1, 2):
        out = generate(mnv2_qdq, work / f"mnv2_pq_vnni_t{threads}", precision="int8",
                       cflags="-O3 -march=native", threads=threads)
        text = (out / "model.c").read_text()
        assert ".x_pquads = 1" in text and ".y_pquads = 1" in text
        assert np.array_equal(run.run(out, x), ref), threads
    _slices_clean_under_sanitizers(out)
    # patch-based: inside the tiled segment the pairs hand over CHW (a patch's rows need not be
    # whole quads; stripes of full rows would be), outside it they keep pixel quads
    arena = codegen.from_onnx(mnv2_qdq, work / "mnv2_pq_plan", precision="int8",
                              cflags="-O3 -march=native").plan.arena_bytes
    out = work / "mnv2_pq_tiled"
    gen = codegen.from_onnx(mnv2_qdq, out, precision="int8", cflags="-O3 -march=native",
                            arena_budget=int(arena * 0.7))
    assert gen.plan.tiling["applied"]
    text = (out / "model.c").read_text()
    assert ".x_pquads = 1" in text and text.count(".y_pquads = 1") < len(made)
    run.build(out)
    assert np.array_equal(run.run(out, x), ref)
