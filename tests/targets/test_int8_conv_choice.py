"""The VNNI int8 conv kernel chosen per shape (lower/kernels.use_cl): output channels in
lanes (es_conv2d_i8_cl) or pixels in lanes (es_conv2d_i8_dot), as measured on the nets'
layers (issue 16). Both kernels are bit-identical to the reference on every shape
(test_int8_fast), so this pins speed choices only."""

from __future__ import annotations

import pytest

from edgesmith.targets.lower.kernels import use_cl


def _conv(c: int, m: int, side: int, k: int = 1, s: int = 1) -> dict:
    return {"C": c, "M": m, "OH": side, "OW": side, "KH": k, "KW": k, "SH": s, "SW": s}


@pytest.mark.parametrize(("conv", "cl"), [
    # 1x1 on planes whose 16-pixel tiles leave a fifth of the lanes idle, long reductions
    # and wide: MobileNetV2-224's 960->320 projection on 7x7
    (_conv(960, 320, 7), True),
    # narrower projections there (their depthwise conv hands over quad planes), shorter
    # reductions (the expands, the last 1x1 conv); planes that fill the lanes; larger planes
    (_conv(960, 160, 7), False), (_conv(576, 160, 7), False), (_conv(576, 96, 6), False),
    (_conv(96, 576, 6), False), (_conv(384, 64, 6), False), (_conv(320, 1280, 7), False),
    (_conv(160, 960, 7), False), (_conv(256, 256, 7), False),
    (_conv(256, 1024, 8), False), (_conv(576, 96, 14), False),
    # planes of at most 16 pixels: always channels in lanes
    (_conv(160, 960, 3), True), (_conv(64, 64, 4), True),
    # spatial kernels: channels in lanes up to 28x28 and when strided; pixel lanes (and
    # the residual Add fused) on stride-1 planes from 40x40, ResNet-18's 56x56 layer1
    (_conv(128, 128, 28, 3), True), (_conv(256, 256, 14, 3), True),
    (_conv(128, 128, 28, 3, 2), True), (_conv(64, 64, 56, 3, 2), True),
    (_conv(64, 64, 56, 3), False), (_conv(32, 32, 40, 3), False), (_conv(32, 32, 39, 3), True),
    # M = 16 would compute 32 channels: pixel lanes
    (_conv(3, 16, 4, 3), False),
])
def test_int8_conv_kernel_choice_follows_the_measured_shapes(conv, cl):
    assert use_cl(conv) is cl
