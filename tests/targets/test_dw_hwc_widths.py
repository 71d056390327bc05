"""es_dwconv2d_i8_hwc on every row width from 1 to 33: the widths that are not a multiple of
16 (MobileNetV2-96's 24, 12, 6 and 3, EfficientNet's 7 and 14, tiled patch rows of 13 and 26)
go through the batched narrow-row fill (W <= 24: several rows per 16-byte chunk, up to 64
bytes), the realigned padded dwords, the masked last group of output columns and output
batches of 16 / gcd(OW, 16) rows. Each must stay bit-identical to the reference es_conv2d_i8
and inside ES_I8_DW_HWC_SCRATCH, with a channel count that is not a multiple of 16."""

from __future__ import annotations

import pytest

from tests.targets.test_dw_hwc import AVX512_VBMI2, FLAVOURS, PLAIN, _build, _out, _run_all


def width_cases(widths: range, heights: tuple[int, ...], channels: tuple[int, ...]):
    """Depthwise 3x3 and 5x5, stride 1 and 2, 'same' padding, every width in ``widths``; the
    heights take a plane shorter than one batch of narrow rows and one several batches tall."""
    i = 0
    for w in widths:
        for k in (3, 5):
            for s in (1, 2):
                for h in heights:
                    c = channels[i % len(channels)]
                    pad = k // 2
                    i += 1
                    yield [c, h, w, c, k, k, s, s, pad, pad, 1, 1, c, -128 + 37 * i % 256,
                           7000 + i, _out(h, pad, pad, k, s), _out(w, pad, pad, k, s)]


def _flavour_id(f) -> str:
    return f.values[0] if hasattr(f, "values") else f[0]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"),
                         [f for f in [*FLAVOURS, AVX512_VBMI2, PLAIN]
                          if _flavour_id(f) in ("portable", "avx512vnni", "avx512vbmi2",
                                                "plain", "neon")])
def test_depthwise_is_bit_identical_on_every_row_width_from_1_to_33(
        name, cc, flags, wrapper, tmp_path):
    b = _build(cc, flags, tmp_path / f"dw_widths_{name}")
    # under qemu a coarser sweep: the portable code shares only the output batching
    widths = range(1, 34, 4) if wrapper else range(1, 34)
    _run_all(b, wrapper, width_cases(widths, (3, 13), (20, 37, 4)))
