"""FP32 fast conv paths (im2col + the 8x32 GEMM micro-kernel on packed weights, depthwise)
agree with the portable reference kernel to 1e-5 of the output magnitude (sums are
reordered: the fast kernels add in FMA order, over 16 lanes, so only rounding differs, and
with |x|, |w| <= 1 and K up to 2700 the accumulated error stays orders below that) on the
shapes that stress the blocking and on random ones, portable / AVX2 / AVX-512 / aarch64;
a generated model with packed weights agrees with onnxruntime."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edgesmith.targets import run
from edgesmith.targets.ir import lower
from edgesmith.targets.isa import MCU_ARCHS
from edgesmith.targets.lower import kernels as K
from edgesmith.targets.lower.conv import WINO_G, pack_f32_gemm, pack_f32_wino, use_wino
from tests.targets._helpers import export, generate, ort_run
from tests.targets.test_int8_fast import FLAVOURS, RT, conv_case

CHECK = Path(__file__).parent / "c" / "conv_f32_check.c"


def build_f32_check(out: Path, cc: str = "cc", flags: list[str] | None = None,
                    name: str = "") -> Path:
    """conv_f32_check.c with the reference and every fp32 conv kernel, built by ``cc`` with
    ``flags`` (the AVX2 flavour gets -mfma as well), or with None under AddressSanitizer and
    UBSan at -O1 for this CPU."""
    if flags is None:
        flags = ["-O1", "-g", "-march=native", "-fsanitize=address,undefined",
                 "-fno-sanitize-recover"]
    elif name == "avx2":
        flags = [*flags, "-mfma"]
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/conv_f32.c"),
                    str(RT / "kernels/conv_f32_fast.c"), str(RT / "kernels/dwconv_f32.c"),
                    "-o", str(out), "-lm"], check=True)
    return out


# C H W M KH KW SH SW PT PL DH DW group act seed OH OW: shapes of the packed GEMM's edges
GEMM_CASES = [
    [96, 1, 1, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 201, 1, 1],    # squeeze-excite: channel lanes
    [37, 2, 2, 13, 1, 1, 1, 1, 0, 0, 1, 1, 1, 2, 202, 2, 2],    # 4 pixels, M = 8 + 5
    [40, 7, 7, 20, 1, 1, 1, 1, 0, 0, 1, 1, 1, 2, 203, 7, 7],    # 49 = 32 in place + 17 masked
    [19, 6, 8, 9, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 204, 6, 8],     # last tile of exactly 16
    [3, 15, 17, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 2, 205, 8, 9],   # 3-channel stem, stride 2
    [6, 9, 10, 11, 5, 5, 1, 1, 2, 2, 1, 1, 1, 3, 206, 9, 10],   # 5x5, leaky, M = 11
    [24, 3, 3, 33, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 207, 2, 2],    # 3x3 on a 2x2 output: lanes
    [8, 1, 5, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 208, 1, 5],      # 5 pixels: one masked tile
    [300, 4, 9, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 209, 4, 9],   # K = 2700 (no clip: the sums
    # reach ~20, and the tolerance is relative to the largest output)
    [16, 23, 29, 20, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 210, 23, 29],  # 667 pixels in place: two
    # blocks of 8 tiles, one of 4, a 27-pixel tail through im2col; M = 8 + 8 + 4
    [16, 14, 75, 24, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 211, 7, 38],  # 1x1 s2, odd width: gathered
    # rows of 38 (two permuted blocks of 16, 6 single columns)
    [8, 14, 20, 8, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 213, 8, 11],  # 1x1 s2 whose last row and
    # column lie in bottom / right padding: through the phases, not the gather
    [5, 9, 70, 10, 5, 5, 2, 2, 2, 2, 1, 1, 1, 2, 212, 5, 35],  # 5x5 s2, 2 columns of padding
    # on each side: the first and last blocks of each row load under partial masks
    [32, 36, 35, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 214, 36, 35],  # 1260 pixels, K = 288:
    # channels in the lanes by rows (AVX-512: 64 at a time, each row of 35 in chunks of
    # 6, 6, 6, 6, 6, 5)
    [30, 70, 69, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 2, 215, 35, 35],  # the same at stride 2
    # through the phases, K = 270, M = 32: 32 channels at a time, chunks of 9, 9, 9, 8
    [29, 51, 50, 128, 3, 3, 2, 2, 1, 1, 1, 1, 1, 3, 217, 26, 25],  # stride 2, K = 261,
    # two 64-channel blocks over rows of 25 (chunks 5 x 5), leaky
    # Stride-1 row chunks clear of the padding read the input in place, the rest the edges
    # of the padded plane (pad_edges):
    [40, 12, 20, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 218, 12, 20],  # 32-channel chunks of
    # 7, 7, 6: the middle one in place on rows 1-10
    [16, 30, 40, 64, 5, 5, 1, 1, 4, 4, 2, 2, 1, 2, 219, 30, 40],  # 5x5 dilated 2, pad 4:
    # chunks of 6 x 5 and 5 x 2, the first and the last on the edges, 8 padded rows each end
    [24, 20, 30, 64, 3, 3, 1, 1, 0, 2, 1, 1, 1, 0, 220, 18, 30],  # no padding above, below
    # or right, 2 columns left: every row in the middle, only the first chunk on an edge
    [32, 10, 3, 32, 3, 3, 1, 1, 1, 4, 1, 1, 1, 1, 221, 10, 9],  # rows of 9 from 3 columns:
    # one chunk a row, on both edges (the row's left and right columns meet)
    [32, 10, 2, 32, 3, 3, 1, 1, 1, 4, 1, 1, 1, 1, 222, 10, 9],  # 2 columns under a 3-wide
    # kernel: no chunk can read in place, the whole plane is built
    # In-place 1x1 convs with K >= 40 and M >= 40 run each tile from a packed copy:
    [48, 9, 23, 72, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 223, 9, 23],  # 207 = 6 tiles + a tail of
    # 15 through im2col; M = 64 + 8
    [40, 16, 16, 40, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 224, 16, 16],  # K and M 40, rows 1 KB apart
    [64, 28, 27, 128, 1, 1, 2, 2, 0, 0, 1, 1, 1, 2, 225, 14, 14],  # stride 2: gathered, then
    # packed (a ResNet downsample)
    [40, 7, 7, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1, 2, 234, 7, 7],  # 1x1 on 7 x 7, M in 32s: rows
    # of 7 in pairs (AVX-512 gemm_wide_pairs), the odd last row alone
    [24, 2, 7, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1, 3, 235, 2, 7],  # the same, one pair
    # Stride-2 convs of at most 4 channels read the input rows split into even and odd
    # columns (AVX-512 gemm_stem), in blocks of 128 output columns:
    [3, 11, 300, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 2, 226, 6, 150],  # two column blocks (128
    # and 22), M = 8 + 8 + 4, the last row's taps below the plane
    [3, 23, 37, 13, 7, 7, 2, 2, 3, 3, 1, 1, 1, 1, 227, 12, 19],  # ResNet's 7x7 stem: taps
    # 3 columns either side, 3 padded rows above
    [3, 16, 16, 8, 3, 3, 2, 2, 0, 0, 1, 1, 1, 3, 228, 8, 8],  # "same" at stride 2 on an even
    # plane: no padding above or left, one row and column below and right
    [1, 20, 70, 9, 5, 5, 2, 2, 2, 2, 1, 1, 1, 0, 229, 10, 35],  # one channel, 5x5
    [4, 12, 40, 16, 3, 7, 2, 2, 1, 3, 1, 1, 1, 2, 230, 6, 20],  # four channels, 3 x 7
    [2, 14, 75, 8, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 231, 7, 38],  # 1x1: a ring of one row
    [3, 7, 257, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 232, 4, 129],  # a block of 128, then of 1
    [3, 2, 40, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 2, 233, 1, 20],  # a plane lower than the kernel
]


def _cases(n: int, seed: int = 1):
    yield from GEMM_CASES
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield conv_case(rng, i, 40, lambda _, j: j % 4)


def _stem(args: list[int]) -> bool:
    """Whether AVX-512 runs this conv on gemm_stem (conv_f32_fast.c stem_direct): one group,
    at most 4 channels, stride 2, undilated, kernel sides at most 7."""
    c, kh, kw, sh, sw, dh, dw, group = args[0], *args[4:8], *args[10:13]
    return group == 1 and c <= 4 and kh <= 7 and kw <= 7 and sh == sw == 2 and dh == dw == 1


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_fast_f32_conv_matches_reference(name, cc, flags, wrapper, tmp_path):
    """Every case within 1e-5; with AVX-512 the stems write none of their scratch (they read
    the input rows, not the stride phases) and the other stride-2 convs write some."""
    b = build_f32_check(tmp_path / f"check_{name}", cc, flags, name)
    stems = 0
    for args in _cases(24 if wrapper else 60):
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"
        if name == "avx512vnni" and args[12] == 1 and args[6] == 2:
            used = int(next(x for x in p.stdout.splitlines()
                            if x.startswith("scratch_used")).split()[1])
            assert (used == 0) == _stem(args), (args, used)
            stems += _stem(args)
    assert name != "avx512vnni" or stems >= 9, stems


def test_fast_f32_gemm_stays_inside_its_scratch_and_the_generator_plans_it(tmp_path):
    """Under AddressSanitizer with exactly ES_F32_GEMM_SCRATCH bytes (in place and through
    the stride phases), and kernels.gemm_f32_scratch plans the same bytes as the macro."""
    b = build_f32_check(tmp_path / "check_asan")
    keys = ["C", "H", "W", "M", "KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW", "group"]
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for args in _cases(30, seed=5):
        p = subprocess.run([str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=120, env=env)
        assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"
        if args[12] == 1:
            geo = {**dict(zip(keys, args[:13], strict=True)), "OH": args[15], "OW": args[16]}
            got = int(next(x for x in p.stdout.splitlines() if x.startswith("scratch")).split()[1])
            assert got == K.CONV_F32_GEMM.scratch(geo), (args, got)


def test_generated_f32_model_uses_fast_conv_and_reference_switch(digits_onnx):
    fns = {c.fn for st in lower(digits_onnx, "fp32").steps for c in st.calls}
    assert {"es_conv2d_f32_gemm", "es_dwconv2d_f32"} <= fns and "es_conv2d_f32" not in fns
    fns = {c.fn for st in lower(digits_onnx, "fp32", kernels="reference").steps
           for c in st.calls}
    assert "es_conv2d_f32" in fns and "es_conv2d_f32_gemm" not in fns


def test_generated_model_with_packed_conv_weights_matches_onnxruntime(tmp_path):
    """Convs whose M is not a multiple of the 8-channel block (13, 20), a 1x1 conv on a 1x1
    plane (the channel-lanes path) and a 7x7 plane (a masked tail tile): the weights
    pack_f32_gemm lays out are the ones the C kernel reads."""
    import torch

    w = np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)
    assert pack_f32_gemm(w).shape == (1, 12, 16)
    assert np.array_equal(pack_f32_gemm(w)[0, :, 1], w[1].reshape(-1))
    assert not pack_f32_gemm(w)[0, :, 2:].any()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 13, 3, stride=2, padding=1), torch.nn.ReLU6(),
        torch.nn.Conv2d(13, 20, 1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Conv2d(20, 11, 1), torch.nn.Flatten()).eval()
    x = torch.randn(1, 3, 13, 14)
    onnx_path = export(net, x, tmp_path / "m.onnx")
    out = generate(onnx_path, tmp_path / "c", precision="fp32")
    got = run.run(out, x.numpy())
    ref = ort_run(onnx_path, x.numpy())
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


# C H W M KH KW SH SW PT PL DH DW group act seed OH OW: Winograd F(2x2, 3x3) edges
WINO_CASES = [
    [16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 301, 8, 8],      # one block, 16 tiles
    [17, 9, 11, 21, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 302, 9, 11],    # odd OH and OW: the last
    # tile row and column half outside; M = 16 + 5, C not a multiple of 16
    [32, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 303, 56, 56],  # ResNet layer1-like: 14
    # blocks of 2 tile rows of 28
    [24, 7, 7, 40, 3, 3, 1, 1, 0, 0, 1, 1, 1, 2, 304, 5, 5],      # unpadded, clip
    [20, 10, 13, 19, 3, 3, 1, 1, 2, 0, 1, 1, 1, 3, 305, 12, 11],  # 2 rows of padding on top,
    # none left: the plane's edges in every patch position; leaky
    [40, 70, 3, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 306, 70, 3],    # 2 tiles a row: a block of
    # 32 tile rows (64 tiles), then a partial one of 3 (rb < RB)
    [16, 70, 70, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 307, 70, 70],  # TW = 35 > 32: rows of
    # three vectors' transforms, one tile row a block (RB = 1); HardSwish
    [64, 2, 40, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 308, 2, 40],    # one tile row in all
]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_wino_f32_conv_matches_reference(name, cc, flags, wrapper, tmp_path):
    """es_conv2d_f32_wino on weights transformed by the check (U = G g G^T in double) agrees
    with the direct reference to 1e-5 of the output magnitude: the transforms add and
    subtract at most 4 values twice (input) and 3 values twice (output), with constants
    0, +-1 and +-1/2, so the rounding stays of the direct sum's order."""
    b = build_f32_check(tmp_path / f"check_{name}", cc, flags, name)
    for args in WINO_CASES:
        p = subprocess.run([*wrapper, str(b), *map(str, args), "wino"], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"
        assert p.stdout.splitlines()[-1].startswith("ok"), p.stdout


def test_wino_f32_stays_inside_its_scratch_and_the_generator_plans_it(tmp_path):
    """Under AddressSanitizer and UBSan with exactly ES_F32_WINO_SCRATCH bytes: the
    transforms' whole vectors past a block's tiles stay inside it; kernels.wino_f32_scratch
    plans the same bytes as the macro."""
    b = build_f32_check(tmp_path / "check_asan")
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for args in WINO_CASES:
        p = subprocess.run([str(b), *map(str, args), "wino"], capture_output=True, text=True,
                           timeout=120, env=env)
        assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"
        got = int(next(x for x in p.stdout.splitlines() if x.startswith("scratch")).split()[1])
        assert got == K.CONV_F32_WINO.scratch({"C": args[0], "OH": args[15], "OW": args[16]})


def test_pack_f32_wino_is_g_g_gt_in_16_channel_blocks():
    """A kernel that is one tap at the centre transforms to the outer product of G's middle
    column (U = G g G^T); the layout is u[mb][xi][c][r], channels past M zero."""
    w = np.zeros((3, 2, 3, 3), np.float32)
    w[1, 0, 1, 1] = 1.0
    w[2, 1] = np.arange(9, dtype=np.float32).reshape(3, 3)
    u = pack_f32_wino(w)
    assert u.shape == (1, 16, 2, 16)
    assert np.array_equal(u[0, :, 0, 1], np.outer(WINO_G[:, 1], WINO_G[:, 1]).ravel())
    assert np.allclose(u[0, :, 1, 2], (WINO_G @ w[2, 1].astype(np.float64) @ WINO_G.T).ravel())
    assert not u[0, :, :, 3:].any() and not u[0, :, 1, 1].any()


def _resnet_block():
    import torch

    class Block(torch.nn.Module):
        """a stem, then a ResNet basic block: two 3x3 stride-1 convs and the skip"""

        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 24, 3, 2, 1), torch.nn.ReLU())
            self.a = torch.nn.Sequential(torch.nn.Conv2d(24, 24, 3, 1, 1),
                                         torch.nn.BatchNorm2d(24), torch.nn.ReLU())
            self.b = torch.nn.Sequential(torch.nn.Conv2d(24, 24, 3, 1, 1),
                                         torch.nn.BatchNorm2d(24))
            self.head = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                            torch.nn.Linear(24, 10))

        def forward(self, x):
            y = self.stem(x)
            return self.head(torch.relu(self.b(self.a(y)) + y))

    torch.manual_seed(0)
    net = Block()
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return net.eval()


@pytest.mark.parametrize("threads", [1, 2])
def test_generated_model_with_winograd_convs_matches_onnxruntime(threads, tmp_path):
    """A ResNet basic block on a 30 x 27 input (15 x 14 planes: odd tile columns, 56 tiles):
    both 3 x 3 stride-1 convs run as Winograd, the stride-2 stem as the GEMM, and the C
    output matches onnxruntime, single-threaded and with the convs' channels split over two
    threads (the packed U sliced in 16-channel blocks)."""
    import torch

    x = torch.randn(1, 3, 30, 27)
    onnx_path = export(_resnet_block(), x, tmp_path / "m.onnx")
    fns = [c.fn for st in lower(onnx_path, "fp32").steps for c in st.calls]
    assert fns.count("es_conv2d_f32_wino") == 2 and fns.count("es_conv2d_f32_gemm") == 1
    out = generate(onnx_path, tmp_path / "c", precision="fp32", threads=threads,
                   split_min_macs=0)
    if threads > 1:  # each conv's 24 channels as two calls, 16 + 8
        assert (out / "model.c").read_text().count("es_conv2d_f32_wino(") == 4
    got = run.run(out, x.numpy())
    np.testing.assert_allclose(got, ort_run(onnx_path, x.numpy()), rtol=1e-4, atol=1e-5)


def test_winograd_is_not_chosen_for_small_planes_strides_or_microcontrollers(tmp_path):
    """7 x 7 planes (16 tiles: the GEMM, see use_wino), stride 2, 1x1, fewer than 16
    channels, and any conv for a Cortex-M (its flash would hold 16 / 9 of the weights)."""
    base = {"C": 64, "M": 64, "H": 28, "W": 28, "OH": 28, "OW": 28, "KH": 3, "KW": 3,
            "SH": 1, "SW": 1, "DH": 1, "DW": 1}
    host = SimpleNamespace(isa=frozenset())  # what use_wino reads of the Lowerer
    assert use_wino(host, base)
    for change in ({"OH": 7, "OW": 7, "H": 7, "W": 7}, {"SH": 2, "SW": 2, "OH": 14, "OW": 14},
                   {"KH": 1, "KW": 1}, {"C": 8}, {"M": 12}, {"DH": 2, "DW": 2}):
        assert not use_wino(host, {**base, **change}), change
    mcu = SimpleNamespace(isa=frozenset({sorted(MCU_ARCHS)[0], "__ARM_FEATURE_DSP"}))
    assert not use_wino(mcu, base)
