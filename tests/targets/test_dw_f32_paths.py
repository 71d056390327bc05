"""Each path of the fp32 depthwise kernel against the reference es_conv2d_f32, on odd
shapes swept rather than picked: input widths 1 to 33 with 3x3 and 5x5 taps, stride 1 and
2, padding that differs on every side (top/left/bottom/right), heights that leave the last
block of 8 output rows part full, channel counts that leave a 16-channel block part
full, and the fused activations; plus wide rows: 3x3 and 5x5 rows of 24 to 1100 outputs,
and the shapes the other AVX-512 paths keep (non-square, 7x7, dilated). The shapes route
the cases through all four paths: the AVX-512 rows with the taps fixed at compile time
(square 3x3 / 5x5, stride 1 or 2, rows of 12+ outputs or planes too big for the lanes),
channels in the lanes (at most 64 outputs, or 256 with 25+ taps), the AVX-512 direct rows
(stride 2, 24+ outputs, other kernel sizes and dilations), and the stride phases. Every
build the runtime has (portable, AVX2, AVX-512, NEON under qemu) runs the sweep; under
AddressSanitizer each case gets exactly ES_F32_DW_SCRATCH bytes and the generator's
formula must equal the macro."""

from __future__ import annotations

import pytest

from edgesmith.targets.lower.kernels import dw_f32_lanes, dw_f32_scratch
from tests.targets.test_dw_f32_fast import _build, _geo, _run
from tests.targets.test_int8_fast import FLAVOURS

DWK_ROWS = 8  # ES_DWK_ROWS: output rows per block of the compile-time-tap rows
ACTS = (0, 1, 2, 3, 4, 5, 6, 7)  # none, relu, clip, leaky, hard-swish, sigmoid, silu, hardsigmoid


def _pads(k: int, w: int) -> tuple[int, int, int, int]:
    """Top, left, bottom, right padding, each at most k - 1 and unequal where it can be,
    with at least k padded columns so the plane has an output."""
    pt, pl = (w + 1) % k, w % k
    pb, pr = (w + 2) % k, (2 * w + 1) % k
    pr = max(pr, k - w - pl)
    return pt, pl, pb, pr


def sweep_cases() -> list[tuple]:
    """(C, H, W, KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, act) of the sweep."""
    out = []
    for w in range(1, 34):
        for k in (3, 5):
            for s in (1, 2):
                pt, pl, pb, pr = _pads(k, w)
                h = (w * 5) % 11 + 1 + (k - 1)  # heights 3..15: never the width
                c = (w * 7 + k + s) % 23 + 1  # 1..23: blocks of 16 part full
                act = ACTS[(w + k + s) % len(ACTS)]
                out.append((c, h, w, k, k, s, s, pt, pl, pb, pr, 1, 1, act))
    # rows of 24+ outputs, square 3x3 / 5x5 (the compile-time-tap rows on AVX-512): masks on
    # both edges, a row that ends inside a 16-output chunk, a row of 550 outputs, 5x5
    # stride 1 and 2, 3x3 stride 2 with 16 and 17 output rows (blocks of 8 full, and one
    # over), 5x5 stride 2 with 9
    for c, h, w, k, s, pt, pl, pb, pr, dw_, act in (
            (3, 27, 49, 3, 2, 1, 0, 0, 1, 1, 2), (5, 23, 64, 3, 2, 0, 1, 1, 0, 1, 6),
            (2, 27, 97, 5, 2, 2, 1, 0, 2, 1, 4), (4, 29, 80, 3, 2, 1, 1, 1, 1, 2, 1),
            (7, 22, 113, 5, 2, 1, 2, 2, 1, 1, 3), (2, 5, 1100, 3, 2, 1, 1, 1, 1, 1, 2),
            (3, 12, 33, 5, 1, 2, 0, 1, 2, 1, 5), (6, 15, 40, 5, 1, 0, 2, 2, 1, 1, 7),
            (17, 9, 28, 5, 1, 2, 2, 2, 2, 1, 6), (2, 7, 58, 5, 1, 1, 3, 0, 1, 2, 0),
            (3, 10, 112, 3, 1, 1, 0, 2, 1, 1, 6), (2, 11, 113, 5, 1, 2, 1, 0, 2, 1, 2),
            (3, 32, 30, 3, 2, 1, 1, 1, 1, 1, 2), (2, 34, 40, 3, 2, 0, 1, 1, 0, 1, 6),
            (2, 17, 40, 5, 2, 2, 1, 2, 2, 1, 3),
            # bands of 8 output rows clear of the padding between the edge bands, each K, S
            (3, 40, 30, 3, 1, 1, 1, 1, 1, 1, 2), (3, 41, 35, 3, 2, 1, 1, 0, 1, 1, 1),
            (2, 37, 29, 5, 1, 2, 1, 0, 2, 1, 5), (2, 45, 41, 5, 2, 1, 2, 2, 1, 1, 6)):
        out.append((c, h, w, k, k, s, s, pt, pl, pb, pr, 1, dw_, act))
    # the flattened small planes (ES_DW_FLAT): 16 vectors (16x16), 13 with a last one of 4
    # lanes (14x14), 7x7 with 5x5 taps and 2 channel pairs, the smallest plane (3x3: rows
    # only for the channels clear of both ends), a taller input than output (PT = PB = 0),
    # padding 2 above and 0 below, and 5x5 and 3x3 with the columns off centre (masked loads
    # only)
    for c, h, w, k, pt, pl, pb, pr, act in (
            (21, 16, 16, 3, 1, 1, 1, 1, 2), (40, 14, 14, 3, 1, 1, 1, 1, 6),
            (19, 7, 7, 5, 2, 2, 2, 2, 1), (9, 3, 3, 3, 1, 1, 1, 1, 0),
            (7, 12, 10, 3, 0, 1, 0, 1, 4), (5, 11, 13, 3, 2, 1, 0, 1, 5),
            (6, 8, 8, 5, 1, 3, 3, 1, 2), (11, 9, 9, 3, 1, 0, 1, 2, 3)):
        out.append((c, h, w, k, k, 1, 1, pt, pl, pb, pr, 1, 1, act))
    # what the compile-time rows leave to the direct rows (3x5, 7x7, dilated along the row)
    # and to the phases (dilated rows, a row past ES_DWD_MAXOW, stride 3)
    out += [(3, 9, 70, 3, 5, 2, 2, 1, 2, 1, 2, 1, 1, 2),
            (2, 15, 90, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 6),
            (3, 12, 30, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 5),
            (2, 5, 1100, 3, 3, 2, 2, 1, 1, 1, 1, 1, 2, 2),
            (4, 14, 40, 3, 3, 3, 3, 1, 0, 1, 2, 1, 1, 4)]
    return out


def _flat(g: dict) -> bool:
    """ES_DW_FLAT: stride 1, undilated, the input as wide as the output, 3x3 on planes of 9
    to 256 outputs, 5x5 on planes of 9 to 64."""
    n = g["OH"] * g["OW"]
    return (g["SH"] == g["SW"] == 1 and g["DH"] == g["DW"] == 1 and g["OW"] == g["W"]
            and n >= 9 and ((g["KH"] == g["KW"] == 3 and n <= 256)
                            or (g["KH"] == g["KW"] == 5 and n <= 64)))


def _flat_rows(g: dict) -> bool:
    """Whether some channels of a flat plane share each tap row's loads (dwf_channel_rows):
    centred columns (PL = K / 2) and a channel whose whole-vector reads stay inside the
    tensor (dwf_nv's lo < hi)."""
    hw, k, nv = g["H"] * g["W"], g["KH"], -(-g["OH"] * g["OW"] // 16)
    lo = -(-(g["PT"] * g["W"] + 16) // hw)
    above = 16 * (nv + 1) + (k - 1 - g["PT"]) * g["W"] - hw
    return g["PL"] == k // 2 and lo < g["C"] - (-(-above // hw) if above > 0 else 0)


def _path(g: dict) -> str:
    """The path es_dwconv2d_f32 takes on an AVX-512 build (its dispatch, in Python)."""
    if _flat(g):
        return "flat rows" if _flat_rows(g) else "flat"
    k = (g["KH"] == g["KW"] and g["KH"] in (3, 5) and g["SH"] == g["SW"] and g["SH"] in (1, 2)
         and g["DH"] == 1 and g["DW"] == 1)
    if k and (g["OW"] >= 12 or not dw_f32_lanes(g)):
        return "rows"
    if dw_f32_lanes(g):
        return "lanes"
    if g["SW"] == 2 and g["DH"] == 1 and 24 <= g["OW"] <= 512 and g["KW"] <= 16:
        return "direct"
    return "phases"


def _clear_band(g: dict) -> bool:
    """Whether a block of ES_DWK_ROWS output rows reads no padding row (dwk_inner): the
    compile-time rows then run their test-free instance there."""
    return any(0 <= oh * g["SH"] - g["PT"] and oh * g["SH"] - g["PT"] + (DWK_ROWS - 1) * g["SH"]
               + g["KH"] <= g["H"] for oh in range(0, g["OH"], DWK_ROWS))


def test_the_sweep_reaches_every_path():
    """Every path gets cases, the compile-time rows with every K, S and every count of rows
    in the last block (ES_DWK_ROWS), and with every K, S on a plane with a block clear of
    the padding."""
    geos = [_geo(c) for c in sweep_cases()]
    paths = [_path(g) for g in geos]
    rows = [g for g, p in zip(geos, paths, strict=True) if p == "rows"]
    assert paths.count("lanes") >= 5 and paths.count("direct") >= 3
    assert paths.count("flat") >= 3 and paths.count("flat rows") >= 6
    assert paths.count("phases") >= 3 and len(rows) >= 40
    assert {(g["KH"], g["SH"], g["OH"] % DWK_ROWS) for g in rows} >= {
        (k, s, r) for k in (3, 5) for s in (1, 2) for r in range(DWK_ROWS)}
    assert {(g["KH"], g["SH"]) for g in rows if _clear_band(g)} == {(3, 1), (3, 2), (5, 1),
                                                                    (5, 2)}
    assert all(g["OH"] >= 1 and g["OW"] >= 1 for g in geos)
    assert len({(g["PT"], g["PB"]) for g in geos if g["PT"] != g["PB"]}) > 2


@pytest.mark.slow
@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_every_depthwise_path_matches_reference_on_swept_odd_shapes(name, cc, flags, wrapper,
                                                                    tmp_path):
    flags = [*flags, "-mfma"] if name == "avx2" else flags
    b = _build(cc, flags, tmp_path / f"dw_{name}")
    for i, case in enumerate(sweep_cases()):
        _run(wrapper, b, case, 300 + i)


@pytest.mark.slow
def test_every_depthwise_path_stays_inside_its_scratch(tmp_path):
    b = _build("cc", ["-O1", "-g", "-march=native", "-fsanitize=address,undefined",
                      "-fno-sanitize-recover"], tmp_path / "dw_asan")
    env = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    for i, case in enumerate(sweep_cases()):
        out = _run([], b, case, 600 + i, env)
        line = next(x for x in out.splitlines() if x.startswith("scratch"))
        assert int(line.split()[1]) == dw_f32_scratch(_geo(case)), (case, line)
