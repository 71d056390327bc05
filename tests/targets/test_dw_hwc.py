"""The HWC-blocked int8 depthwise kernel (es_dwconv2d_i8_hwc) is bit-identical to the
reference es_conv2d_i8 on random depthwise convs, in every build flavour, and stays inside
the scratch ES_I8_DW_HWC_SCRATCH gives it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.targets.test_int8_fast import FLAVOURS, _cpu_has

RT = Path(__file__).parents[2] / "targets" / "runtime"
CHECK = Path(__file__).parent / "c" / "dw_hwc_check.c"

# MobileNetV2-style layers, then 7x7 planes (224x224 input), a dilated and a 5x5 layer:
# (C, H, W, K, stride, pad, dilation)
FIXED = [(16, 32, 32, 3, 1, 1, 1), (96, 32, 32, 3, 2, 1, 1), (144, 16, 16, 3, 1, 1, 1),
         (144, 16, 16, 3, 2, 1, 1), (192, 8, 8, 3, 1, 1, 1), (192, 8, 8, 3, 2, 1, 1),
         (384, 4, 4, 3, 1, 1, 1), (32, 8, 8, 3, 1, 1, 1), (960, 7, 7, 3, 1, 1, 1),
         (40, 9, 9, 3, 1, 2, 2), (24, 13, 13, 5, 2, 2, 1),
         # whole planes in the ring (plane_taps): MobileNetV2-96's 6x6 and 3x3 layers, a
         # stride-2 6x6, EfficientNet's 5x5 on 7x7, a partial last block and a 1x1 plane
         (384, 6, 6, 3, 1, 1, 1), (576, 6, 6, 3, 2, 1, 1), (960, 3, 3, 3, 1, 1, 1),
         (1152, 7, 7, 5, 1, 2, 1), (40, 6, 6, 3, 1, 1, 1), (24, 1, 1, 3, 1, 1, 1)]


# inputs handed over as pixel quads by an expanding 1x1 conv (x_pquads: odd seeds, C a
# multiple of 16, W of 4): MobileNetV2's 112-, 48-, 24- and 12-wide layers at both strides,
# a 5x5, a 4x4 plane (which leaves the whole-plane path) and a stride-2 row the padded row
# cuts short (8 wide, unpadded: the last quad's last byte lies past Wp)
PQ_FIXED = [(32, 112, 112, 3, 1, 1, 1), (96, 48, 48, 3, 2, 1, 1), (144, 24, 24, 3, 1, 1, 1),
            (144, 24, 24, 3, 2, 1, 1), (192, 12, 12, 3, 1, 1, 1), (48, 20, 20, 5, 2, 2, 1),
            (64, 4, 4, 3, 1, 1, 1), (16, 8, 8, 3, 2, 0, 1)]


def _out(size: int, before: int, after: int, span: int, stride: int) -> int:
    return (size + before + after - span) // stride + 1


def dw_case(rng: np.random.Generator, i: int) -> list[int]:
    """A random depthwise geometry in the check program's argv order: kernels 1/3/5 (now and
    then rectangular), strides 1..3 (now and then different per axis), dilation 1 or 2,
    four independent pads (bottom/right through OH/OW), 1..70 channels, planes 1..40."""
    kh = int(rng.choice([1, 3, 5]))
    kw = kh if rng.random() < 0.8 else int(rng.choice([1, 3, 5]))
    sh = int(rng.integers(1, 4))
    sw = sh if rng.random() < 0.8 else int(rng.integers(1, 4))
    dh = int(rng.integers(1, 3)) if kh > 1 else 1
    dw = dh if kw > 1 else 1
    pt, pb = int(rng.integers(0, kh)), int(rng.integers(0, kh))
    pl, pr = int(rng.integers(0, kw)), int(rng.integers(0, kw))
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    h = int(rng.integers(max(1, span_h - pt - pb), 41))
    w = int(rng.integers(max(1, span_w - pl - pr), 41))
    c = int(rng.integers(1, 71))
    oh, ow = _out(h, pt, pb, span_h, sh), _out(w, pl, pr, span_w, sw)
    return [c, h, w, c, kh, kw, sh, sw, pt, pl, dh, dw, c, int(rng.integers(-128, 128)),
            i + 1, oh, ow]


def _cases(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for i, (c, h, w, k, s, pad, d) in enumerate(FIXED):
        span = d * (k - 1) + 1
        yield [c, h, w, c, k, k, s, s, pad, pad, d, d, c, int(rng.integers(-128, 128)),
               1000 + i, _out(h, pad, pad, span, s), _out(w, pad, pad, span, s)]
    for i, (c, h, w, k, s, pad, d) in enumerate(PQ_FIXED):
        span = d * (k - 1) + 1
        yield [c, h, w, c, k, k, s, s, pad, pad, d, d, c, int(rng.integers(-128, 128)),
               2001 + 2 * i, _out(h, pad, pad, span, s), _out(w, pad, pad, span, s)]
    for i in range(n):
        yield dw_case(rng, i)


def _build(cc: str, flags: list[str], out: Path) -> Path:
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/conv_int8.c"),
                    str(RT / "kernels/dwconv_int8_hwc.c"), "-o", str(out)], check=True)
    return out


def _run_all(binary: Path, wrapper: list[str], cases) -> int:
    """Runs every case; the scratch size the check program used (ES_I8_DW_HWC_SCRATCH)
    must be the one the generator plans for (lower/int8.py dw_hwc_scratch). Returns how
    many ran on pixel quads."""
    from edgesmith.targets.lower.kernels import dw_hwc_scratch

    keys = ["C", "H", "W", "M", "KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW", "group"]
    pq = 0
    for args in cases:
        p = subprocess.run([*wrapper, str(binary), *map(str, args)], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.startswith("ok"), \
            f"{binary.name} {args}: {p.stdout}{p.stderr}"
        geo = dict(zip(keys, args[:13], strict=True)) | {"OH": args[15], "OW": args[16]}
        assert int(p.stdout.split()[2]) == dw_hwc_scratch(geo), (args, p.stdout)
        pq += p.stdout.split()[3:] == ["pq"]
    return pq


# plain C: the kernel's SSE2 transposes switched off as well, so every loop is the C one
PLAIN = ("plain", "cc", ["-O2", "-U__SSE2__"], [])


# the AVX-512 extensions the VNNI path also uses where the compiler targets them (VBMI2
# funnel shifts): the build -march=native gives on recent x86
AVX512_VBMI2 = pytest.param(
    "avx512vbmi2", "cc", ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni",
                          "-mavx512vbmi", "-mavx512vbmi2"], [],
    marks=pytest.mark.skipif(not (_cpu_has("avx512_vnni") and _cpu_has("avx512_vbmi2")),
                             reason="this CPU has no AVX-512 VNNI and VBMI2"))


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), [*FLAVOURS, AVX512_VBMI2, PLAIN])
def test_hwc_depthwise_is_bit_identical_to_reference_and_stays_in_scratch(
        name, cc, flags, wrapper, tmp_path):
    b = _build(cc, flags, tmp_path / f"dw_hwc_{name}")
    # every pixel-quad case ran on pixel quads
    assert _run_all(b, wrapper, _cases(20 if wrapper else 60)) >= len(PQ_FIXED)


SANITIZE = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer"]


@pytest.mark.parametrize("simd", [
    pytest.param([], id="portable"),
    pytest.param(["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"], id="avx512vnni",
                 marks=pytest.mark.skipif(not _cpu_has("avx512_vnni"),
                                          reason="this CPU has no AVX-512 VNNI")),
    # VBMI: small planes padded by a byte permute (fill_plane_vbmi)
    pytest.param(["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mavx512vbmi",
                  "-mavx512vbmi2"], id="avx512vbmi2",
                 marks=pytest.mark.skipif(not (_cpu_has("avx512_vnni") and
                                               _cpu_has("avx512_vbmi2")),
                                          reason="this CPU has no AVX-512 VNNI and VBMI2"))])
def test_hwc_depthwise_runs_clean_under_address_and_undefined_sanitizers(simd, tmp_path):
    b = _build("cc", [*SANITIZE, *simd], tmp_path / "dw_hwc_asan")
    assert _run_all(b, [], _cases(12, seed=3)) >= len(PQ_FIXED)
