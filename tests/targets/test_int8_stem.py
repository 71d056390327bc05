"""The int8 stem kernel (es_conv2d_i8_stem: few input channels, whole patches packed four
taps to a word) is bit-identical to the portable reference kernel on odd shapes, in its
portable, AVX2, AVX-512 VNNI (with and without VBMI and VBMI2) and aarch64 (qemu) builds,
stays inside the scratch its size formula promises, and is what a VNNI build of a network's
RGB stem runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_tools

RT = Path(__file__).parents[2] / "targets" / "runtime"
CHECK = Path(__file__).parent / "c" / "stem_check.c"
VNNI = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]
KEYS = ["C", "H", "W", "M", "KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW"]


def _cpu_has(flag: str) -> bool:
    try:
        return flag in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def _vbmi() -> bool:
    """AVX-512 VNNI with VBMI (/proc/cpuinfo spells it without the underscore) and VBMI2."""
    return all(_cpu_has(f) for f in ("avx512_vnni", "avx512vbmi", "avx512_vbmi2"))


def _out(size: int, pad: int, k: int, s: int, d: int) -> int:
    return (size + 2 * pad - d * (k - 1) - 1) // s + 1


def stem_case(rng: np.random.Generator, i: int) -> list[int]:
    """A random conv over 1-3 channels: odd planes, stride 1-3 per axis, padding, dilation,
    square or not, M not a multiple of 8 or 16 (stem_check.c's argv)."""
    kh, kw = int(rng.choice([1, 3, 5, 7])), int(rng.choice([1, 2, 3, 5, 7]))
    kh = 3 if kh * kw == 1 else kh  # a 1x1 conv is not a stem (use_stem)
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dh, dw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pt, pl = int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))
    h = int(rng.integers(dh * (kh - 1) + 1, 30))
    w = int(rng.integers(dw * (kw - 1) + 1, 75))
    c, m = int(rng.integers(1, 4)), int(rng.integers(1, 41))
    return [c, h, w, m, kh, kw, sh, sw, pt, pl, dh, dw, int(rng.integers(-128, 128)), i + 1,
            _out(h, pt, kh, sh, dh), _out(w, pl, kw, sw, dw)]


# the shapes real stems have, and the edges: MobileNetV2's 3x3 stride-2 RGB stem (odd input,
# 32 channels) and ResNet's 7x7 stride-2 (64), one output column, one row, a grey stem,
# M = 1 and 17, an output row of exactly one tile pair (32) and one more pixel (33)
FIXED = [[3, 97, 97, 32, 3, 3, 2, 2, 1, 1, 1, 1, -3, 900, 49, 49],
         [3, 45, 45, 64, 7, 7, 2, 2, 3, 3, 1, 1, 17, 901, 23, 23],
         [3, 9, 3, 17, 3, 3, 1, 1, 1, 0, 1, 1, 127, 902, 9, 1],
         [2, 3, 40, 9, 3, 3, 1, 1, 0, 1, 1, 1, -128, 903, 1, 40],
         [1, 28, 28, 1, 5, 5, 1, 1, 2, 2, 1, 1, 0, 904, 28, 28],
         [3, 8, 34, 16, 3, 3, 1, 1, 0, 0, 1, 1, 5, 905, 6, 32],
         [3, 8, 35, 24, 3, 3, 1, 1, 0, 0, 1, 1, 5, 906, 6, 33],
         # output into pixel quads (y_pquads, 16k channels, rows of whole quads):
         # MobileNetV2-96's stem, and rows of 24 whose tiles straddle them
         [3, 96, 96, 32, 3, 3, 2, 2, 1, 1, 1, 1, -11, 907, 48, 48],
         [3, 17, 24, 16, 3, 3, 1, 1, 1, 1, 1, 1, -7, 908, 17, 24],
         # a patch of over 256 taps (91 words: the interleave, not the gathers), words of
         # taps from three and four rows (a 1-wide and a 2-wide kernel, stride 3)
         [3, 30, 33, 12, 11, 11, 2, 2, 5, 5, 1, 1, 9, 909, 15, 17],
         [3, 20, 21, 16, 5, 1, 1, 1, 2, 0, 1, 1, 3, 910, 20, 21],
         [2, 19, 40, 8, 3, 2, 1, 3, 1, 1, 1, 1, -50, 911, 19, 13]]


def _cases(n: int, seed: int):
    yield from FIXED
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield stem_case(rng, i)


def _build(cc: str, flags: list[str], out: Path) -> Path:
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/conv_int8.c"),
                    str(RT / "kernels/conv_int8_dot.c"), "-o", str(out)], check=True)
    return out


FLAVOURS = [("portable", "cc", ["-O2"], []),
            pytest.param("avx2", "cc", ["-O3", "-mavx2"], [], marks=pytest.mark.skipif(
                not _cpu_has("avx2"), reason="this CPU has no AVX2")),
            pytest.param("avx512vnni", "cc", ["-O3", *VNNI], [], marks=pytest.mark.skipif(
                not _cpu_has("avx512_vnni"), reason="this CPU has no AVX-512 VNNI")),
            # with VBMI the im2col words are byte-permuted from the rows (stem_col_gather),
            # with VBMI2 the stride-2 rows are expand-loaded straight from x (-march=native
            # on Zen 4 and Ice Lake on)
            pytest.param("avx512vbmi2", "cc", ["-O3", *VNNI, "-mavx512vbmi", "-mavx512vbmi2"], [],
                         marks=pytest.mark.skipif(not _vbmi(),
                                                  reason="this CPU has no AVX-512 VNNI, VBMI "
                                                         "and VBMI2")),
            ("neon", "aarch64-linux-gnu-gcc", ["-O3"],
             ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"])]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_stem_conv_is_bit_identical_to_reference_on_odd_shapes(name, cc, flags, wrapper,
                                                               tmp_path):
    require_tools(cc, *wrapper[:1])
    b = _build(cc, flags, tmp_path / f"stem_{name}")
    for args in _cases(25 if wrapper else 60, seed=1):
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"
        # the pixel-quad output is checked wherever its conditions hold
        assert ("stem_pquads" in p.stdout) == (args[3] % 16 == 0 and args[15] % 4 == 0)


def test_stem_conv_stays_inside_its_scratch_and_the_generator_sizes_it_alike(tmp_path):
    """Scratch malloc'd to exactly es_i8_stem_scratch bytes under ASan/UBSan, and
    lower/kernels.py's stem_i8_scratch equal to it on every geometry."""
    from edgesmith.targets.lower.kernels import stem_i8_scratch

    flags = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover"]
    simd = VNNI + (["-mavx512vbmi", "-mavx512vbmi2"] if _vbmi() else [])
    b = _build("cc", flags + (simd if _cpu_has("avx512_vnni") else []), tmp_path / "asan")
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for args in _cases(40, seed=2):
        p = subprocess.run([str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60, env=env)
        assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"
        geo = dict(zip(KEYS, args[:12], strict=True)) | {"OH": args[14], "OW": args[15]}
        line = next(x for x in p.stdout.splitlines() if x.startswith("stem_scratch"))
        assert int(line.split()[1]) == stem_i8_scratch(geo), (args, line)


def _stem_qdq(path: Path) -> Path:
    """An RGB stem (3x3 stride 2, 20 channels, an odd 23x37 input) -> ReLU6 -> a 3x3 conv ->
    ReLU, quantized by onnxruntime's static QDQ quantizer on random data."""
    import torch

    from tests.targets._helpers import _qdq, export

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 20, 3, 2, 1), torch.nn.ReLU6(),
                              torch.nn.Conv2d(20, 12, 3, 1, 1), torch.nn.ReLU())
    x = np.random.default_rng(0).standard_normal((32, 3, 23, 37)).astype(np.float32)
    fp32 = export(net.eval(), torch.from_numpy(x[:1]), path.with_suffix(".fp32.onnx"))
    return _qdq(fp32, x, path)


@pytest.mark.skipif(not _cpu_has("avx512_vnni"), reason="this CPU has no AVX-512 VNNI")
def test_vnni_build_runs_the_rgb_stem_as_the_stem_kernel_and_matches_reference(tmp_path):
    """Lowered for VNNI, the 3-channel conv (and only it) is es_conv2d_i8_stem, with the
    weights the generator packed; the built model's int8 outputs equal the reference
    kernels' build."""
    from edgesmith.targets import codegen, run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.isa import VNNI as ISA_VNNI
    from edgesmith.targets.planner import plan

    src = _stem_qdq(tmp_path / "stem.onnx")
    fns = [c.fn for st in lower(src, "int8", ISA_VNNI).steps for c in st.calls]
    assert fns.count("es_conv2d_i8_stem") == 1, fns
    assert "es_conv2d_i8_stem" not in [c.fn for st in lower(src, "int8").steps
                                       for c in st.calls]
    ref = lower(src, "int8", kernels="reference")
    codegen.generate(ref, plan(ref), tmp_path / "ref")
    run.build(tmp_path / "ref")
    fast = codegen.from_onnx(src, tmp_path / "fast", precision="int8",
                             cflags="-O3 " + " ".join(VNNI)).out_dir
    assert "es_conv2d_i8_stem" in (fast / "model.c").read_text()
    x = np.random.default_rng(1).standard_normal((3, 3, 23, 37)).astype(np.float32)
    assert np.array_equal(run.run(fast, x), run.run(tmp_path / "ref", x))
