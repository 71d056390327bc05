"""The convolution kernels the lowerings choose between, each with its scratch size.

A kernel's scratch is planned in Python (the planner needs the bytes) and consumed in C,
where edgesmith_rt.h states the same size as a macro. Each ``Kernel`` below names both:
``scratch`` computes the bytes from the kernel's es_conv_params fields, ``scratch_c``
writes the macro call that states them, and codegen emits a compile-time check in model.c
that every planned scratch is at least its macro, so a drift between the two fails the
build instead of overrunning the arena. The quad flags say which kernels read or write
es_conv2d_i8_dot's uint8 channel-quad planes (passes.hand_over_quads), the pixel-quad
flags which read or write es_dwconv2d_i8_hwc's input rows as they are (passes.
hand_over_pixel_quads).
"""

from __future__ import annotations

import math

from ..graph import Kernel


def _args(p: dict, *keys: str) -> str:
    return ", ".join(str(int(p[k])) for k in keys)


def padded(p: dict) -> tuple[int, int]:
    """Rows and columns of the padded input the taps read (ES_DOT_PADDED)."""
    hp = (p["OH"] - 1) * p["SH"] + (p["KH"] - 1) * p["DH"] + 1
    wp = (p["OW"] - 1) * p["SW"] + (p["KW"] - 1) * p["DW"] + 1
    return hp, wp


# -- scratch sizes, mirroring edgesmith_rt.h ---------------------------------------------------
def gemm_i8_scratch(k: int, m: int) -> int:
    """Bytes of es_conv2d_i8_gemm scratch; mirrors ES_I8_GEMM_KB2 / ES_I8_GEMM_SCRATCH."""
    k2 = (k + 1) // 2
    kb2 = 64 if k2 > 64 and 64 + m < k2 else k2
    return 64 * kb2 + (64 * m if kb2 < k2 else 0)


def dot_i8_scratch(p: dict) -> int:
    """Bytes of es_conv2d_i8_dot scratch for conv params ``p`` (conv_params' fields);
    mirrors es_i8_dot_plan / ES_I8_DOT_SCRATCH in edgesmith_rt.h: stride-1 and stride-2
    convs with at most 7x7 taps read the (2x2-phase split) padded input in place, unless
    the dropped padded columns cost over 1/4 more tiles; the rest add an im2col block,
    blocked by the fewest taps that fill 32 words when that plus the [M][16] int32
    partial sums is the smaller."""
    hp, wp = padded(p)
    c4, taps = (p["C"] + 3) // 4, p["KH"] * p["KW"]
    s = p["SH"] if p["SH"] == p["SW"] and p["SH"] <= 2 else 0
    hq, wq = -(-hp // max(s, 1)), -(-wp // max(s, 1))
    tiles = -(-(p["OH"] * p["OW"]) // 16)
    direct = s > 0 and taps <= 49 and 4 * -(-((p["OH"] - 1) * wq + p["OW"]) // 16) <= 5 * tiles
    if not direct:
        s, hq, wq = 1, hp, wp
    tb = min(-(-32 // c4), taps)
    kt = tb if not direct and tb * c4 + p["M"] < taps * c4 else taps
    n = (0 if p.get("x_quads") else 4 * s * s * hq * wq * c4 + 64) + (4 * wp if s > 1 else 0)
    if not direct:
        n += 64 * kt * c4
    return n + (64 * p["M"] if kt < taps else 0)


def cl_i8_scratch(p: dict) -> int:
    """Bytes of es_conv2d_i8_cl scratch; mirrors ES_I8_CL_SCRATCH: the padded input (the
    rows and columns the taps read) as HWC uint8 channel quads, or, for the row tiles of a
    stride-1 conv, as channel-quad planes of the same size."""
    hp, wp = padded(p)
    return 4 * hp * wp * ((p["C"] + 3) // 4)


def dw_hwc_scratch(p: dict) -> int:
    """Bytes of es_dwconv2d_i8_hwc scratch for conv params ``p``; mirrors
    ES_I8_DW_HWC_SCRATCH: a ring of KH + B - 1 transposed input rows (B rows of a narrow
    plane transposed at once), a byte row when DW > 1, the output columns, the block's
    weights and row sums. It does not grow with the channel count."""
    kh, kw, dh, dw, w, ow = p["KH"], p["KW"], p["DH"], p["DW"], p["W"], p["OW"]
    wp = padded(p)[1]
    b = 16 // math.gcd(w, 16)  # rows that fill whole 16-byte chunks, at most 64 bytes
    b = (b if b * w <= 64 else 64 // w) if dh == 1 and (dw == 1 or kw == 1) and w <= 24 else 1
    rb = 16 // math.gcd(ow, 16)  # output rows that fill whole 16-column transposes
    rb = rb if rb * ow <= 128 else 1 if ow >= 16 else (15 + ow) // ow
    obc = (rb * ow + 15) // 16 * 16
    return (64 * (kh + b - 1) * wp + (16 * ((wp + 3 * dw + 15) // 16 * 16) if dw > 1 else 0)
            + 16 * obc + 64 * kh * ((kw + 1) // 2 + 1) + 4 * (3 * kh + b - 1))


def dw_hwc_whole_plane(p: dict) -> bool:
    """Whether es_dwconv2d_i8_hwc (AVX-512 VNNI) holds a block's whole padded plane in its
    ring (plane_taps); mirrors ``whole`` there: rows batched (B > 1), every padded row the
    taps read within the KH + B - 1 slots, the outputs within one output transpose."""
    kh, kw, dh, dw, w = p["KH"], p["KW"], p["DH"], p["DW"], p["W"]
    b = 16 // math.gcd(w, 16)
    b = (b if b * w <= 64 else 64 // w) if dh == 1 and (dw == 1 or kw == 1) and w <= 24 else 1
    rb = 16 // math.gcd(p["OW"], 16)
    rb = rb if rb * p["OW"] <= 128 else 1 if p["OW"] >= 16 else (15 + p["OW"]) // p["OW"]
    obc = (rb * p["OW"] + 15) // 16 * 16
    hr = (p["OH"] - 1) * p["SH"] + (kh - 1) * dh + 1
    n = p["OH"] * p["OW"]
    return b > 1 and hr <= kh + b - 1 and n <= obc and n <= 128


def dw_f32_lanes(p: dict) -> bool:
    """Whether es_dwconv2d_f32 runs 16 channels in the lanes; mirrors ES_F32_DW_LANES."""
    n = p["OH"] * p["OW"]
    return n <= 64 or (n <= 256 and p["KH"] * p["KW"] >= 25)


def dw_f32_scratch(p: dict) -> int:
    """Bytes of es_dwconv2d_f32 scratch; mirrors ES_F32_DW_SCRATCH: on planes in the lanes
    (ES_F32_DW_LANES) 16 channels' padded input, one output row, weights and biases;
    otherwise the SH x SW stride phases of one padded channel plane (HQ x WQ each, plus
    WQ + 32 floats read past the end), the OH x WQ output grid + 32, and one padded row of
    WQ * SW floats."""
    def q(o: str, k: str, s: str, d: str) -> int:
        return ((p[o] - 1) * p[s] + (p[k] - 1) * p[d] + p[s]) // p[s]

    if dw_f32_lanes(p):
        hp, wp = padded(p)
        return 64 * (hp * wp + p["OW"] + p["KH"] * p["KW"] + 1)
    hq, wq = q("OH", "KH", "SH", "DH"), q("OW", "KW", "SW", "DW")
    return 4 * (p["SH"] * p["SW"] * (hq * wq + wq + 32) + p["OH"] * wq + 32 + wq * p["SW"])


def stem_i8_scratch(p: dict) -> int:
    """Bytes of es_conv2d_i8_stem scratch; mirrors ES_I8_STEM_SCRATCH: the im2col block of
    the output rows it takes at once (K4 rows of their pixels rounded up to 32 words), the
    window of padded input rows those output rows read (ES_STEM_WINDOW), split into SW
    column phases, one padded row (at least 64 bytes: a vector load of the window's last row
    may read on into it)."""
    wp = padded(p)[1]
    k4 = -(-(p["C"] * p["KH"] * p["KW"]) // 4)
    rows = min(p["OH"], max(1, 256 // p["OW"]))  # ES_STEM_ROWS
    window = (rows - 1) * p["SH"] + (p["KH"] - 1) * p["DH"] + 1  # ES_STEM_WINDOW
    return (4 * k4 * -(-(rows * p["OW"]) // 32) * 32
            + p["C"] * window * p["SW"] * -(-wp // p["SW"]) + max(wp, 64))


def use_stem(p: dict) -> bool:
    """Whether a one-group conv is a stem for es_conv2d_i8_stem: under 4 input channels,
    where channel quads would leave a quarter or more of every word padding (3 of 4 bytes
    for RGB) and whole patches packed four taps to a word do not (27 taps in 7 words)."""
    return p["group"] == 1 and p["C"] < 4 and p["KH"] * p["KW"] > 1


def gemm_f32_direct(p: dict) -> bool:
    """Whether es_conv2d_f32_gemm reads the input in place (ES_F32_GEMM_DIRECT): a 1x1,
    stride-1, unpadded conv, whose input is already the [C][P] matrix."""
    return (p["KH"] == p["KW"] == p["SH"] == p["SW"] == 1 and p["PT"] == p["PL"] == 0
            and p["OH"] == p["H"] and p["OW"] == p["W"])


def gemm_f32_scratch(p: dict) -> int:
    """Bytes of es_conv2d_f32_gemm scratch; mirrors ES_F32_GEMM_SCRATCH. In place: two
    tables of K row offsets and a K x 32 im2col tile for the last partial tile. Otherwise:
    K row offsets over the phases and over the input (a stride-1 conv's chunks clear of the
    padding read it in place), an 8 x 32 output tile, each channel's SH x SW stride phases of its
    padded plane (HQ x WQ + WQ + 32 floats each, as dw_f32_scratch) and one padded row."""
    def k16(k: int) -> int:
        return -(-k // 16) * 16

    if gemm_f32_direct(p):
        return 4 * (2 * k16(p["C"]) + 32 * p["C"])
    hq = ((p["OH"] - 1) * p["SH"] + (p["KH"] - 1) * p["DH"] + p["SH"]) // p["SH"]
    wq = ((p["OW"] - 1) * p["SW"] + (p["KW"] - 1) * p["DW"] + p["SW"]) // p["SW"]
    return 4 * (2 * k16(p["C"] * p["KH"] * p["KW"]) + 256
                + p["C"] * p["SH"] * p["SW"] * (hq * wq + wq + 32) + wq * p["SW"])


def wino_f32_geometry(oh: int, ow: int) -> tuple[int, int, int, int]:
    """Tile rows TH, tiles per row TW, tile rows per block RB and the rows' pitch TP of
    es_conv2d_f32_wino (ES_F32_WINO_*): 2 x 2 outputs a tile, blocks of about 64 tiles, rows
    16 floats longer than a block's tiles at least (the transforms' whole vectors spill)."""
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    rb = min(th, max(1, 64 // tw))
    return th, tw, rb, -(-(rb * tw + 16) // 32) * 32


def wino_f32_scratch(p: dict) -> int:
    """Bytes of es_conv2d_f32_wino scratch; mirrors ES_F32_WINO_SCRATCH: C row offsets, the
    block's transformed input (16 planes of C rows of TP floats, 16 floats apart beyond
    that) and one 8-channel block's 16 x 8 GEMM rows (TP floats each), the column transforms
    of the block's 2 RB + 2 input rows and those rows padded, two output rows and their
    four halves."""
    _, tw, rb, tp = wino_f32_geometry(p["OH"], p["OW"])
    twp = -(-tw // 16) * 16
    return 4 * (-(-p["C"] // 16) * 16 + 16 * (p["C"] * tp + 16) + 128 * tp
                + ((2 * rb + 2) * 4 + 8) * twp + (2 * rb + 2) * (2 * twp + 16))


def use_cl(p: dict) -> bool:
    """Whether es_conv2d_i8_cl (output channels in lanes) beats es_conv2d_i8_dot (pixels in
    lanes) for conv params ``p``, unless rounding M up to its 32-channel tiles wastes over a
    third (M = 16 computes 32; 3->16 stem on 64x64, 10.6 vs 23 us as pixel lanes). Measured
    per conv, both kernels in one binary (issue 6 note; issue 16: alternating rounds, min),
    cl vs dot:

    - spatial kernels: 3x3 64->64 on 4x4 3.0 vs 5.7 us, 8x8 3.4 vs 5.4 us, 28x28
      (128->128) 528 vs 555 us, all strided ones. On stride-1 planes of 40x40 and more pixel
      lanes are faster (ResNet-18's layer1 at 56x56: 564 vs 542 us alone), and there the
      second conv of each block fuses its residual Add (es_conv2d_i8_dot_add). That fused
      Add, a call per channel on runs of about 250 pixels, cost more than the separate Add
      while es_add_i8 finished each run's last n % 16 bytes one scalar division at a time
      (layer1 2420 vs 2437 us then, AMD EPYC); with that tail one masked vector, layer1
      takes 1760 us as pixel lanes against 1943 us as channel lanes with separate Adds
      (sums of per-step minima, 16 alternating rounds, Intel Xeon, trained weights);
    - 1x1 convs on planes of at most 16 pixels (192->64 on 4x4 1.3 vs 2.1 us), and on planes
      of at most 64 whose pixel tiles of 16 leave a fifth or more of the lanes idle when the
      reduction is long and the conv wide, C >= 512 and M >= 256: 960->320 on 7x7 72 vs 88
      us alone, and in MobileNetV2-224 with the depthwise conv before it 106 vs 114 (load 8).
      Such a 1x1 is a projection after a depthwise conv, which hands the pixel-lane kernel
      its output as quad planes (passes.hand_over_quads) and writes CHW more slowly (18 ->
      19-21 us there); what the channel lanes save grows with M, that cost does not. So
      960->160 on 7x7 (37.5 vs 45 alone) is 63-66 vs 65 with its depthwise conv, 576->160
      56 vs 55, and they keep pixel lanes, as do 576->96 and 384->64 on 6x6 (10.7 vs 13.0,
      6.0 vs 7.0 alone; 6.0 vs 5.6 in MobileNetV2-96), the last conv 320->1280 on 7x7 (106
      vs 119 alone, 127 vs 126 in the net: its 400 KB of weights come from memory there),
      shorter reductions (96->576 on 6x6 14.9 vs 13.8 us, 160->960 on 7x7 57 vs 51), planes
      that fill the lanes (256->1024 on 8x8 103 vs 79 us) and larger planes."""
    m32 = -(-p["M"] // 32) * 32
    plane = p["OH"] * p["OW"]
    if 3 * m32 > 4 * p["M"]:
        return False
    if p["KH"] * p["KW"] > 1:
        return not (p["SH"] == p["SW"] == 1 and plane >= 40 * 40)
    idle = 5 * plane <= 4 * (-(-plane // 16) * 16)
    return plane <= 16 or (plane <= 64 and idle and p["C"] >= 512 and p["M"] >= 256)


# -- the kernels -----------------------------------------------------------------------------
_GEO = ("C", "M", "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW")

# int8, the portable reference (the oracle): an int32 accumulator plane
CONV_I8 = Kernel("es_conv2d_i8", lambda p: 4 * p["OH"] * p["OW"],
                 lambda p: f"ES_I8_CONV_SCRATCH({_args(p, 'OH', 'OW')})")
# int8, any grouping: four int32 planes and the int16 input
CONV_I8_FAST = Kernel(
    "es_conv2d_i8_fast", lambda p: 16 * p["OH"] * p["OW"] + 2 * p["C"] * p["H"] * p["W"] + 4,
    lambda p: f"ES_I8_FAST_SCRATCH({_args(p, 'C', 'H', 'W', 'OH', 'OW')})")
# int8, one group: im2col tiles of int16 pairs and a blocked GEMM
CONV_I8_GEMM = Kernel(
    "es_conv2d_i8_gemm", lambda p: gemm_i8_scratch(p["C"] * p["KH"] * p["KW"], p["M"]),
    lambda p: f"ES_I8_GEMM_SCRATCH({p['C'] * p['KH'] * p['KW']}, {int(p['M'])})")
# int8, one group, u8 x s8 dot products with pixels in the lanes (AVX-512 VNNI)
CONV_I8_DOT = Kernel(
    "es_conv2d_i8_dot", dot_i8_scratch,
    lambda p: f"ES_I8_DOT_SCRATCH({_args(p, *_GEO)}, {int(p.get('x_quads', 0))})",
    reads_quads=True, writes_pquads=True)
# the same with a residual add in its epilogue (fuse_int8.py): same walk, same scratch
CONV_I8_DOT_ADD = Kernel(
    "es_conv2d_i8_dot_add", dot_i8_scratch,
    lambda p: f"ES_I8_DOT_SCRATCH({_args(p, *_GEO)}, {int(p.get('x_quads', 0))})")
# int8, one group, output channels in the lanes (small planes)
CONV_I8_CL = Kernel("es_conv2d_i8_cl", cl_i8_scratch,
                    lambda p: f"ES_I8_CL_SCRATCH({_args(p, *_GEO)})")
# int8, one group, few input channels (a stem): the reduction over whole patches, four taps
# to a word
CONV_I8_STEM = Kernel(
    "es_conv2d_i8_stem", stem_i8_scratch,
    lambda p: "ES_I8_STEM_SCRATCH({})".format(
        _args(p, "C", "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW")),
    writes_pquads=True)
# int8 depthwise in 16-channel HWC blocks
DWCONV_I8_HWC = Kernel(
    "es_dwconv2d_i8_hwc", dw_hwc_scratch,
    lambda p: "ES_I8_DW_HWC_SCRATCH({}, {})".format(
        _args(p, "KH", "KW", "DH", "DW", "W", "OW"), padded(p)[1]),
    writes_quads=True, reads_pquads=True)
# float32: the reference needs no scratch; the GEMM offsets and the stride phases of the
# padded input (or an im2col tile, in place), depthwise one channel's phases
CONV_F32 = Kernel("es_conv2d_f32")
CONV_F32_GEMM = Kernel("es_conv2d_f32_gemm", lambda p: gemm_f32_scratch(p),
                       lambda p: "ES_F32_GEMM_SCRATCH({}, {})".format(
                           _args(p, "C", "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW"),
                           int(gemm_f32_direct(p))))
# float32, 3 x 3 stride 1: Winograd F(2 x 2, 3 x 3), the transformed input and one channel
# block's 16 GEMM outputs
CONV_F32_WINO = Kernel("es_conv2d_f32_wino", lambda p: wino_f32_scratch(p),
                       lambda p: "ES_F32_WINO_SCRATCH({})".format(_args(p, "C", "OH", "OW")))
DWCONV_F32 = Kernel("es_dwconv2d_f32", lambda p: dw_f32_scratch(p),
                    lambda p: "ES_F32_DW_SCRATCH({})".format(
                        _args(p, "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW")))

# kernels whose bias is bias_u8 (the u8 shift folded in)
U8_KERNELS = (CONV_I8_DOT, CONV_I8_CL, CONV_I8_STEM, CONV_I8_DOT_ADD)
