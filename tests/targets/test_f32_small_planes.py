"""The fp32 GEMM's small-plane path (gemm_cl in conv_f32_fast.c: output channels in the
lanes, pixels broadcast, on planes of at most 64 outputs whose 16-pixel vectors would leave
lanes empty, or of at most 1024 when K >= 256 and the pixel path would waste 1/20 of its
cells, more than M rounded up to gemm_cl's channel groups would) agrees with the reference
kernel to 1e-5 of the output magnitude, for every chunk size the pixel split produces (1 to
9 pixels), channel counts that end inside a block of 8 and inside a group of 32, the
in-place 1x1 path and the stride phases of a padded 3x3 / strided conv, AVX-512's wide
tiles (32 channels x up to 14 pixels of a row, or two rows of a 7 x 7 plane, rows or channel
blocks outer), AVX-512's narrowing 1x1 convs on planes of any size, portable / AVX2 /
AVX-512 / aarch64 under qemu; and a model whose 1x1 and 3x3 convs run on 3x3 and 7x7 planes
agrees with onnxruntime."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tests.targets.test_f32_fast import build_f32_check
from tests.targets.test_int8_fast import FLAVOURS

# C H W M KH KW SH SW PT PL DH DW group act seed OH OW
CASES = [
    [320, 3, 3, 72, 1, 1, 1, 1, 0, 0, 1, 1, 1, 2, 401, 3, 3],   # 9 pixels: one chunk of 9
    [17, 2, 5, 40, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 402, 2, 5],    # 10: 5 + 5; M = 32 + 8
    [9, 1, 17, 33, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 403, 1, 17],   # 17: 9 + 8; M = 32 + 1
    [24, 5, 5, 13, 1, 1, 1, 1, 0, 0, 1, 1, 1, 3, 404, 5, 5],    # 25: 9 + 8 + 8 (6 x 4 + 1)
    [5, 1, 7, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 405, 1, 7],      # 7 pixels, M = 3
    [64, 7, 7, 48, 1, 1, 1, 1, 0, 0, 1, 1, 1, 4, 406, 7, 7],    # 49 in place, hard-swish
    [40, 7, 7, 36, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 407, 7, 7],    # 3x3 pad 1: grid WQ 9 > OW 7
    [16, 13, 11, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, 6, 408, 7, 6],  # stride 2 phases, SiLU
    [8, 6, 6, 20, 5, 5, 1, 1, 2, 2, 2, 2, 1, 5, 409, 2, 2],     # dilated 5x5, 4 pixels
    [96, 1, 1, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, 7, 410, 1, 1],    # squeeze-excite 1x1
    [12, 4, 4, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 411, 4, 4],    # 16 pixels: the 16-pixel path
    # bigger planes when K >= 256 (ResNet's 3x3 at 14 x 14): 196 = 20 x 9 + 2 x 8, and M
    # rounded up to the channel group wastes less than the pixel path's 12 of 208 cells
    [32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 412, 14, 14],  # K 288, pad 1: grid WQ 16
    [40, 27, 27, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 2, 413, 14, 14],  # K 360, stride 2 phases
    [300, 14, 14, 456, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 414, 14, 14],  # in place, M = 14 x 32 + 8
    [32, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 416, 28, 28],  # 784 of 848 cells, K 288
    [255, 14, 14, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 415, 14, 14],  # K 255: the pixel path
    [300, 13, 13, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 417, 13, 13],  # 169 of 176: pixel path
    [288, 14, 14, 40, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 418, 14, 14],  # M 40 of 64: pixel path
    # AVX-512 wide tiles (32 channels x up to 14 pixels): 7 x 7 planes in pairs of rows
    [40, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 419, 7, 7],    # 3 pairs + the odd last row
    [32, 8, 7, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 420, 8, 7],    # 4 pairs, hard-swish
    [30, 13, 13, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 2, 421, 7, 7],  # pairs through stride phases
    # rows of 40 = 14 + 13 + 13 (the middle one in place), M 96 (not in 64s, so not the
    # 64 x 6 tiles), rows outer (input 30,720 floats > weights 27,648), 3 blocks
    [32, 24, 40, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 422, 24, 40],
    # 15 = 8 + 7, blocks outer (weights > input), 3 blocks, leaky
    [64, 5, 15, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 423, 5, 15],
    # AVX-512: 1x1 convs that narrow (K >= 96, K >= 1.5 M) on planes of any size, the plane
    # one row of P outputs: 784 in 56 chunks of 14; 400 in 6s and 5s (64 channels); K = 1.5 M
    [192, 28, 28, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1, 3, 424, 28, 28],
    [128, 20, 20, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 425, 20, 20],
    [96, 13, 17, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 426, 13, 17],
]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_small_plane_gemm_matches_reference(name, cc, flags, wrapper, tmp_path):
    b = build_f32_check(tmp_path / f"check_{name}", cc, flags, name)
    for args in CASES:
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"


def test_small_plane_gemm_stays_inside_its_scratch(tmp_path):
    """Under AddressSanitizer, with exactly ES_F32_GEMM_SCRATCH bytes of scratch."""
    b = build_f32_check(tmp_path / "check_asan")
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for args in CASES:
        p = subprocess.run([str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=120, env=env)
        assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"


def test_model_with_convs_on_small_planes_matches_onnxruntime(tmp_path):
    import torch
    from torch import nn

    from edgesmith.targets import run
    from tests.targets._helpers import export, generate, ort_run

    torch.manual_seed(2)
    net = nn.Sequential(nn.Conv2d(3, 40, 3, 2, 1), nn.ReLU6(),          # 14x14 -> 7x7
                        nn.Conv2d(40, 36, 3, 1, 1), nn.Hardswish(),     # 3x3 on 7x7
                        nn.Conv2d(36, 72, 1), nn.ReLU(),                # 1x1 on 7x7
                        nn.Conv2d(72, 72, 3, 2, 0), nn.ReLU(),          # 7x7 -> 3x3
                        nn.Conv2d(72, 100, 1), nn.SiLU()).eval()        # 1x1 on 3x3
    x = torch.randn(1, 3, 14, 14)
    onnx_path = export(net, x, tmp_path / "m.onnx")
    out = generate(onnx_path, tmp_path / "c", precision="fp32")
    np.testing.assert_allclose(run.run(out, x.numpy()), ort_run(onnx_path, x.numpy()),
                               rtol=1e-4, atol=1e-5)
