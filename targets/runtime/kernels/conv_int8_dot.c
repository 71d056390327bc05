/* Conv2d, int8, one group, as a u8 x s8 dot-product GEMM: the layout of AVX-512 VNNI's
 * vpdpbusd, which multiplies 4 unsigned bytes by 4 signed bytes and adds the four products
 * into one int32 lane, 64 multiply-adds per instruction.
 *
 * vpdpbusd wants one operand unsigned, so activations are moved to uint8 by adding 128
 * (u = x + 128). Then
 *     sum_k (x_k - x_zp) w_k = sum_k u_k w_k - (x_zp + 128) sum_k w_k
 * and the second term is constant per output channel: the generator folds it into the
 * bias it passes here (bias_u8[m] = bias[m] - (x_zp + 128) * sum_k w[m][k]). Padding taps
 * read u = x_zp + 128, i.e. x = x_zp, exactly what the reference treats padding as. Every
 * sum is exact in int32 and requantisation is es_mul_q, so results are bit-identical to
 * es_conv2d_i8 (conv_int8.c), the oracle in tests.
 *
 * w8: [M8][KH][KW][C4][8][4] int8, M8 = ceil(M / 8): the weights tap-major with input
 * channels innermost in quads (zero-padded to a multiple of 4), so 4 channels of one tap
 * share a 32-bit lane, and the 8 output channels of a micro-kernel call side by side, so
 * one step of the reduction reads 32 contiguous bytes from one pointer (rows past M are
 * zero). The input is first rewritten once as padded planes of uint8 channel quads
 * (es_quads_i8.h), xt[c4][r][q]: the 4 channels of quad c4 at padded pixel (r, q) in one
 * 32-bit word. The micro-kernel keeps 8
 * output channels x 16 (or, two tiles at once, 32) pixels in registers and broadcasts 4
 * weight bytes per channel.
 *
 * Stride 1 needs no im2col: output (oh, ow) reads the words at v + kh * DH * Wp + kw * DW
 * of each quad plane, v = oh * Wp + ow, so 16 consecutive v are one 64-byte load per tap
 * and quad. Tiles therefore run over v, the flattened padded plane, computing the
 * (KW - 1) * DW columns at the end of each row too and dropping them on the store (a 1x1
 * conv drops nothing). Stride 2 becomes stride 1 by splitting each plane into its four
 * (row parity, column parity) phases: tap (kh, kw) reads phase (kh*DH % 2, kw*DW % 2)
 * shifted by (kh*DH / 2, kw*DW / 2). When the dropped columns would cost over a quarter
 * more tiles (small rows: 4x4 outputs of a 3x3 conv), for other strides and for kernels
 * over 7x7, tiles of 16 output pixels are gathered into an im2col block col[tap][c4][pixel]
 * first; long reductions then run in blocks of KT taps with [M][16] int32 partial sums
 * carried between them, when that needs less scratch than one whole tile (the arena is
 * sized by the largest scratch). es_i8_dot_plan (edgesmith_rt.h) decides; without VNNI
 * the same tile loops run in plain C. With x_quads (a 1x1 conv right after a depthwise
 * conv that wrote its output as these planes, y_quads) the conversion is skipped. With
 * y_pquads (a 1x1 conv, or the stem below, whose one reader is a depthwise conv) the output
 * is that kernel's input layout, pixel quads: the tile's rows are packed four to a vector,
 * so that each 128-bit lane is one quad's dwords, and stored 32 bytes per quad
 * (put8x16_pquads). */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "../edgesmith_rt.h"
#include "../es_quads_i8.h"
#include "../es_simd.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ES_DOT_VNNI 1
#include <immintrin.h>
#endif

#define TP 16 /* pixels per tile */
#define TM 8  /* output channels per micro-kernel call */

/* taps [t0, t0 + nt) of the 16 output pixels from p0: col[t - t0][c4][j] words, lanes past
 * the last pixel zero. The pixels go in row runs, each a strided copy per tap and quad. */
static void im2col_u8(const uint32_t *xt, uint32_t *col, int p0, int t0, int nt,
                      const es_dot_plan *d, const es_conv_params *p) {
    /* locals: the stores into col may alias *p and *d, which would force reloads */
    const int OW = p->OW, KW = p->KW, SH = p->SH, SW = p->SW, DH = p->DH, DW = p->DW;
    const int C4 = d->C4, Wp = d->Wp, P = p->OH * OW, n = (P - p0) < TP ? (P - p0) : TP;
    const size_t plane = (size_t)d->Hp * Wp; /* words from one quad plane to the next */
    int t, kh = t0 / KW, kw = t0 % KW;
    for (t = 0; t < nt; ++t) {
        uint32_t *ct = col + (size_t)t * C4 * TP;
        int j = 0, oh = p0 / OW, ow = p0 % OW, c4, i;
        while (j < n) {
            const int run = OW - ow < n - j ? OW - ow : n - j;
            const uint32_t *src = xt + (size_t)(oh * SH + kh * DH) * Wp + ow * SW + kw * DW;
            for (c4 = 0; c4 < C4; ++c4)
                for (i = 0; i < run; ++i)
                    ct[(size_t)c4 * TP + j + i] = src[c4 * plane + (size_t)i * SW];
            j += run;
            ow = 0;
            ++oh;
        }
        for (c4 = 0; c4 < C4; ++c4)
            for (i = n; i < TP; ++i) ct[(size_t)c4 * TP + i] = 0;
        if (++kw == KW) {
            kw = 0;
            ++kh;
        }
    }
}

/* one reduction block of one tile: where its words are, where its sums start and where its
 * outputs go. Tap t, quad c4 is the 16 words at base + tap[t] + c4 * c4_step (bytes), weight
 * word k0 + t * C4 + c4, t < ntaps. Lanes [lane[s], lane[s] + len[s]) of the tile are output
 * pixels [pix[s], pix[s] + len[s]) for each of its nseg segments (one for a strided tile;
 * a direct tile drops the lanes of padded columns, so its rows are separate segments). */
typedef struct {
    const uint8_t *base;
    const size_t *tap;  /* byte offset of each tap from base */
    size_t c4_step;
    int ntaps, C4, k0;
    int first, last;     /* it opens the reduction (start from the bias) / closes it */
    int32_t *part;       /* [M][16] int32 partial sums between blocks */
    int nseg, lane[TP], len[TP], pix[TP];
} dot_block;

/* where byte (channel m, pixel j) of an output in pixel quads (y_pquads, es_conv_params)
 * lies: block m / 16 of P * 16 bytes, the 64 bytes of pixels j - j % 4 .. j - j % 4 + 3,
 * the dword of channel m % 16, byte j % 4 */
static size_t pquad_at(int m, int j, int P) {
    return ((size_t)(m / 16) * P + (size_t)(j - j % 4)) * 16 + (size_t)(m % 16) * 4 +
           (size_t)(j % 4);
}

/* requantised lanes to their output pixels of channel m when y is pixel quads: a byte
 * at a time (the tiles a fast path does not take: a plane's last pixels, fixed point) */
static void store_lanes_pquads(const dot_block *b, const int8_t *v, int8_t *y, int m, int P) {
    int s, l;
    for (s = 0; s < b->nseg; ++s)
        for (l = 0; l < b->len[s]; ++l)
            y[pquad_at(m, b->pix[s] + l, P)] = (int8_t)(v[b->lane[s] + l] ^ 0x80);
}

#if defined(ES_DOT_VNNI)
/* 4 weight bytes as one int32 (memcpy: the weights are int8 storage) */
static int32_t quad(const int8_t *w) {
    int32_t v;
    memcpy(&v, w, 4);
    return v;
}

/* the sums of channel row m before this block: its bias, or the partial sums so far */
static __m512i start(const dot_block *b, const int32_t *bias, int m) {
    return b->first ? _mm512_set1_epi32(bias[m]) : _mm512_loadu_si512(b->part + (size_t)m * TP);
}

/* the output side of one call, made once per call (dot_conv, the stem) and read by every
 * tile: requantisation tables and mode, for ES_RQ_FP32 the clamp bounds and zero point
 * broadcast (per tile they cost as much as a K = 16 tile's multiplies: 9 broadcasts, the
 * scales built from mult and shift and shuffled to each row), and the float scales of the
 * channels in a table (out_scales), from which a tile broadcasts each row's scale with one
 * load. MobileNetV2-224 int8 (trained zoo weights, Intel Xeon 6/207, 1 thread), per-step
 * minima of 16 alternating rounds: the 16 -> 96 expand 191 -> 165 us, the stem 105 -> 97
 * us; the whole network's minimum 1.945 -> 1.880 ms. */
typedef struct {
    const int32_t *mult, *shift;
    int32_t fp32, y_zp, qmin, qmax, pquads;
    __m512 lo, hi;
    __m512i zp, zp16, qmin8, qmax8;
    __m512i zp16u, qmin8u, qmax8u; /* pixel quads: y_zp + 128 and the bounds + 128 */
    const float *scale;            /* es_rq_scale of every channel, or NULL (out_scales) */
    const unsigned char *below1;   /* per TM channels: every scale under 1 */
} dot_out;

static dot_out out_consts(const int32_t *mult, const int32_t *shift, const es_conv_params *p) {
    dot_out o;
    o.mult = mult;
    o.shift = shift;
    o.fp32 = p->rq == ES_RQ_FP32;
    o.pquads = p->y_pquads;
    o.y_zp = p->y_zp;
    o.qmin = p->qmin;
    o.qmax = p->qmax;
    o.lo = _mm512_set1_ps((float)(p->qmin - p->y_zp));
    o.hi = _mm512_set1_ps((float)(p->qmax - p->y_zp));
    o.zp = _mm512_set1_epi32(p->y_zp);
    o.zp16 = _mm512_set1_epi16((short)p->y_zp);
    o.qmin8 = _mm512_set1_epi8((char)p->qmin);
    o.qmax8 = _mm512_set1_epi8((char)p->qmax);
    o.zp16u = _mm512_set1_epi16((short)(p->y_zp + 128));
    o.qmin8u = _mm512_set1_epi8((char)(p->qmin + 128));
    o.qmax8u = _mm512_set1_epi8((char)(p->qmax + 128));
    o.scale = NULL;
    o.below1 = NULL;
    return o;
}

/* channels per call whose scales out_scales tables (on the caller's stack: 8.25 KB) */
#define DOT_SCALES 2048

/* ES_RQ_FP32 with M <= DOT_SCALES: the float scale of every channel into scale, and per
 * block of TM channels whether all are under 1 (put2x32_f32) into below1; o reads them
 * from there. Otherwise o->scale stays NULL and block_scales makes each tile's. */
static void out_scales(dot_out *o, float *scale, unsigned char *below1, int M) {
    int m;
    if (!o->fp32 || M > DOT_SCALES) return;
    for (m = 0; m < M; m += 16) {
        const __mmask16 k = (__mmask16)es_mask16(M - m);
        _mm512_mask_storeu_ps(scale + m, k,
                              es_rq_scale16(_mm512_maskz_loadu_epi32(k, o->mult + m),
                                            _mm512_maskz_loadu_epi32(k, o->shift + m)));
    }
    for (m = 0; m < M; m += TM) {
        const __mmask16 k = (__mmask16)es_mask16(M - m < TM ? M - m : TM);
        below1[m / TM] = (unsigned char)es_rq_scales_below1(_mm512_maskz_loadu_ps(k, scale + m), k);
    }
    o->scale = scale;
    o->below1 = below1;
}

/* one call's dot_out and the scale tables it points into, on the caller's stack */
typedef struct {
    dot_out o;
    float scale[DOT_SCALES];
    unsigned char below1[DOT_SCALES / TM];
} dot_call;

static void call_setup(dot_call *c, const int32_t *mult, const int32_t *shift,
                       const es_conv_params *p) {
    c->o = out_consts(mult, shift, p);
    out_scales(&c->o, c->scale, c->below1, p->M);
}

/* the float32 scales of channels m0 .. m0 + nr - 1 (ES_RQ_FP32; zeros, unused, otherwise),
 * in one vector step */
static void row_scales(float *sc, int m0, int nr, const dot_out *o) {
    const __mmask16 k = (__mmask16)((1u << nr) - 1u);
    const __m512 s = es_rq_scale16(_mm512_maskz_loadu_epi32(k, o->mult + m0),
                                   _mm512_maskz_loadu_epi32(k, o->shift + m0));
    _mm512_mask_storeu_ps(sc, k, o->fp32 ? s : _mm512_setzero_ps());
}

/* the float32 scales of the TM channels m0 .. m0 + TM - 1 for the tiles' fast path
 * (ES_RQ_FP32, nr == TM), and whether all are under 1: the call's table, or, past
 * DOT_SCALES channels, made into sc8 here */
static inline const float *block_scales(const dot_out *o, int m0, float *sc8, int *below1) {
    if (o->scale) {
        *below1 = o->below1[m0 / TM];
        return o->scale + m0;
    }
    row_scales(sc8, m0, TM, o);
    *below1 = es_rq_scales_below1(_mm512_maskz_loadu_ps((__mmask16)0xff, sc8), (__mmask16)0xff);
    return sc8;
}

/* scale sc[r] in every lane */
static inline __m512 scale_of(const float *sc, int r) { return _mm512_set1_ps(sc[r]); }

/* a tile's 16 output bytes of one channel to their pixels in that channel's row ym:
 * straight, or each segment's lanes shuffled down to lane 0 and stored under a mask */
static inline void store_segments(const dot_block *b, __m128i q, int8_t *ym) {
    int s;
    if (b->nseg == 1 && b->lane[0] == 0) {
        if (b->len[0] == TP)
            _mm_storeu_si128((__m128i *)(ym + b->pix[0]), q);
        else
            _mm_mask_storeu_epi8(ym + b->pix[0], (__mmask16)((1u << b->len[0]) - 1u), q);
        return;
    }
    for (s = 0; s < b->nseg; ++s) {
        const __m128i from =
            _mm_add_epi8(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm_set1_epi8((char)b->lane[s]));
        _mm_mask_storeu_epi8(ym + b->pix[s], (__mmask16)((1u << b->len[s]) - 1u),
                             _mm_shuffle_epi8(q, from));
    }
}

/* where a tile that ends the reduction stores: whole, all 16 lanes to the 16 pixels from
 * pix (nearly every tile of a 1x1 conv), or through its segments. Kept in locals by the
 * callers: the int8 stores may alias the block, and reloading it per row costs 3%. */
typedef struct {
    int whole, pix;
} dot_dest;

static dot_dest dest(const dot_block *b) {
    dot_dest d;
    d.whole = b->nseg == 1 && b->lane[0] == 0 && b->len[0] == TP;
    d.pix = b->pix[0];
    return d;
}

/* ES_RQ_FP32 of one channel's 16 sums in a tile that ends the reduction, into row ym */
static inline void put_f32(const dot_block *b, dot_dest d, __m512i acc, int8_t *ym,
                           float scale, const dot_out *o) {
    const __m512i v = es_rqf16_avx512(acc, _mm512_set1_ps(scale), o->lo, o->hi);
    const __m128i q = _mm512_cvtepi32_epi8(_mm512_add_epi32(v, o->zp));
    if (d.whole)
        _mm_storeu_si128((__m128i *)(ym + d.pix), q);
    else
        store_segments(b, q, ym);
}

/* put_f32 of four consecutive channels (rows ym, ym + P, ..), sc their scales, narrowed
 * together as XNNPACK does: only the upper clamp in float (cvtps2dq turns any overflow into
 * INT32_MIN, which the saturating packs and y_zp add carry to -128, then qmin), one
 * saturating pack per pair and per four rows, y_zp added in int16. The bytes are
 * es_requant's; this takes 30 instructions per four rows where put_f32 takes 36. Tiles that
 * are not whole (stride-2 walks: rows split into segments) go row by row, which is faster
 * there than extracting each row from the packed vector. */
#if defined(__GNUC__)
__attribute__((always_inline)) /* called out of line, its eight vectors went through the stack */
#endif
static inline void put4_f32(const dot_block *b, dot_dest d, __m512i r0, __m512i r1, __m512i r2,
                            __m512i r3, int8_t *ym, size_t P, const float *sc,
                            const dot_out *o) {
    const __m512i rows = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512 hi = o->hi;
    __m512i q0, q1, q2, q3, p01, p23, v;
    if (!d.whole) {
        put_f32(b, d, r0, ym, sc[0], o);
        put_f32(b, d, r1, ym + P, sc[1], o);
        put_f32(b, d, r2, ym + 2 * P, sc[2], o);
        put_f32(b, d, r3, ym + 3 * P, sc[3], o);
        return;
    }
    q0 = es_rqf16_hi_avx512(r0, scale_of(sc, 0), hi);
    q1 = es_rqf16_hi_avx512(r1, scale_of(sc, 1), hi);
    q2 = es_rqf16_hi_avx512(r2, scale_of(sc, 2), hi);
    q3 = es_rqf16_hi_avx512(r3, scale_of(sc, 3), hi);
    p01 = _mm512_adds_epi16(_mm512_packs_epi32(q0, q1), o->zp16);
    p23 = _mm512_adds_epi16(_mm512_packs_epi32(q2, q3), o->zp16);
    /* per 128-bit lane l: 4 bytes of each row; the dword permute puts each row in a lane */
    v = _mm512_permutexvar_epi32(rows,
                                 _mm512_max_epi8(_mm512_packs_epi16(p01, p23), o->qmin8));
    _mm_storeu_si128((__m128i *)(ym + d.pix), _mm512_castsi512_si128(v));
    _mm_storeu_si128((__m128i *)(ym + P + d.pix), _mm512_extracti32x4_epi32(v, 1));
    _mm_storeu_si128((__m128i *)(ym + 2 * P + d.pix), _mm512_extracti32x4_epi32(v, 2));
    _mm_storeu_si128((__m128i *)(ym + 3 * P + d.pix), _mm512_extracti32x4_epi32(v, 3));
}

/* put4_f32 of two whole tiles side by side, a's 16 pixels then b's (pix, pix + 16), two rows
 * at a time: rows r of a and b share their packs, so one vector holds 32 bytes of each of
 * two rows and each row is one 32-byte store (put4_f32 twice stores each 16 bytes through
 * its own extract). Same arithmetic, lane for lane, so the same bytes.
 *
 * below1 (every scale of the 8 rows under 1, as requantisation scales nearly always are):
 * |acc * scale| < 2^31, so vcvtps2dq cannot overflow and the upper clamp moves from the
 * floats to the bytes, beside the lower one: one vpminsb per 64 outputs for a vminps per
 * 16. Rounding is monotone and qmax - y_zp an integer, so clamping before or after it is
 * the same, and the saturating packs keep order; the bytes are es_requant's either way.
 * At K = 16 (MobileNetV2's 16 -> 96 expand) the requantisation is half of a tile. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void put2x32_f32(int pix, __m512i a0, __m512i a1, __m512i b0, __m512i b1,
                               int8_t *ym, size_t P, __m512 s0, __m512 s1, const dot_out *o,
                               const int below1) {
    /* per 128-bit lane l the packs leave dwords a0, b0, a1, b1 (4 pixels each): gathered to
     * row 0's 32 bytes in the low half, row 1's in the high half */
    const __m512i rows = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    __m512i p0, p1, v;
    if (below1) {
        p0 = _mm512_packs_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(a0), s0)),
                                _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(b0), s0)));
        p1 = _mm512_packs_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(a1), s1)),
                                _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(b1), s1)));
    } else {
        p0 = _mm512_packs_epi32(es_rqf16_hi_avx512(a0, s0, o->hi), es_rqf16_hi_avx512(b0, s0, o->hi));
        p1 = _mm512_packs_epi32(es_rqf16_hi_avx512(a1, s1, o->hi), es_rqf16_hi_avx512(b1, s1, o->hi));
    }
    v = _mm512_packs_epi16(_mm512_adds_epi16(p0, o->zp16), _mm512_adds_epi16(p1, o->zp16));
    v = _mm512_max_epi8(v, o->qmin8);
    if (below1) v = _mm512_min_epi8(v, o->qmax8);
    v = _mm512_permutexvar_epi32(rows, v);
    _mm256_storeu_si256((__m256i *)(ym + pix), _mm512_castsi512_si256(v));
    _mm256_storeu_si256((__m256i *)(ym + P + pix), _mm512_extracti64x4_epi64(v, 1));
}

/* Rows 0..3 of one whole tile (r0..r3, 16 pixels each, scales sc[0..3]) for pixel
 * quads (y_pquads): requantised as put2x32_f32 does, but packed four rows of one tile
 * together, so that 128-bit lane l holds the four rows' dwords of pixel quad l, and the
 * y_zp added as y_zp + 128 before an unsigned pack: the bytes come out as x + 128, the
 * layout's own, with no flip (saturating x + 128 to 0..255 is saturating x to -128..127,
 * moved). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline __m512i pack4x16_pquads(__m512i r0, __m512i r1, __m512i r2, __m512i r3,
                                      const float *sc, const dot_out *o, const int below1) {
    __m512i p01, p23, v;
    if (below1) {
        p01 = _mm512_packs_epi32(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(r0), scale_of(sc, 0))),
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(r1), scale_of(sc, 1))));
        p23 = _mm512_packs_epi32(
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(r2), scale_of(sc, 2))),
            _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(r3), scale_of(sc, 3))));
    } else {
        p01 = _mm512_packs_epi32(es_rqf16_hi_avx512(r0, scale_of(sc, 0), o->hi),
                                 es_rqf16_hi_avx512(r1, scale_of(sc, 1), o->hi));
        p23 = _mm512_packs_epi32(es_rqf16_hi_avx512(r2, scale_of(sc, 2), o->hi),
                                 es_rqf16_hi_avx512(r3, scale_of(sc, 3), o->hi));
    }
    v = _mm512_packus_epi16(_mm512_adds_epi16(p01, o->zp16u), _mm512_adds_epi16(p23, o->zp16u));
    v = _mm512_max_epu8(v, o->qmin8u);
    return below1 ? _mm512_min_epu8(v, o->qmax8u) : v;
}

/* The 8 rows of one tile into its 4 pixel quads: x holds rows 0..3 and z rows 4..7 as
 * pack4x16_pquads leaves them, so quad l is lane l of x then lane l of z, 32 bytes at the
 * rows' half of the quad's 64 (yq: quad 0's). One two-source qword permute pairs the lanes
 * for two quads at a time. */
static inline void put8x16_pquads(__m512i x, __m512i z, int8_t *yq) {
    const __m512i q01 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i q23 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    const __m512i a = _mm512_permutex2var_epi64(x, q01, z), b = _mm512_permutex2var_epi64(x, q23, z);
    _mm256_storeu_si256((__m256i *)yq, _mm512_castsi512_si256(a));
    _mm256_storeu_si256((__m256i *)(yq + 64), _mm512_extracti64x4_epi64(a, 1));
    _mm256_storeu_si256((__m256i *)(yq + 128), _mm512_castsi512_si256(b));
    _mm256_storeu_si256((__m256i *)(yq + 192), _mm512_extracti64x4_epi64(b, 1));
}

/* the 16 sums of channel m in one tile: kept as partial sums, or requantised into y */
static inline void put_row(const dot_block *b, __m512i acc, int m, int8_t *y, int P,
                           float scale, const dot_out *o) {
    int8_t v[TP];
    if (!b->last) {
        _mm512_storeu_si512(b->part + (size_t)m * TP, acc);
    } else if (o->pquads) {
        if (o->fp32)
            _mm_storeu_si128((__m128i *)v,
                             _mm512_cvtepi32_epi8(_mm512_add_epi32(
                                 es_rqf16_avx512(acc, _mm512_set1_ps(scale), o->lo, o->hi),
                                 o->zp)));
        else
            es_requant16_avx512(acc, v, TP, o->mult[m], o->shift[m], ES_RQ_FIXED, o->y_zp,
                                o->qmin, o->qmax);
        store_lanes_pquads(b, v, y, m, P);
    } else if (o->fp32) {
        put_f32(b, dest(b), acc, y + (size_t)m * P, scale, o);
    } else {
        es_requant16_avx512(acc, v, TP, o->mult[m], o->shift[m], ES_RQ_FIXED, o->y_zp, o->qmin,
                            o->qmax);
        store_segments(b, _mm_loadu_si128((const __m128i *)v), y + (size_t)m * P);
    }
}

/* 8 channels (rows m0..m0+7, m0 a multiple of 8; rows past nr are computed from zero
 * weights and not stored) x 16 pixels */
static void tile_8x16(const dot_block *b, const int8_t *w8, int K4, const int32_t *bias,
                      const dot_out *out, int m0, int nr, int8_t *y, int P,
                      const es_conv_params *p) {
    const int8_t *wk = w8 + ((size_t)(m0 / TM) * K4 + b->k0) * TM * 4;
    __m512i s0, s1, s2, s3, s4, s5, s6, s7;
    int r, t, c4;
    s0 = start(b, bias, m0);
    s1 = start(b, bias, m0 + (nr > 1 ? 1 : 0));
    s2 = start(b, bias, m0 + (nr > 2 ? 2 : 0));
    s3 = start(b, bias, m0 + (nr > 3 ? 3 : 0));
    s4 = start(b, bias, m0 + (nr > 4 ? 4 : 0));
    s5 = start(b, bias, m0 + (nr > 5 ? 5 : 0));
    s6 = start(b, bias, m0 + (nr > 6 ? 6 : 0));
    s7 = start(b, bias, m0 + (nr > 7 ? 7 : 0));
    for (t = 0; t < b->ntaps; ++t) {
        const uint8_t *cb = b->base + b->tap[t];
        for (c4 = 0; c4 < b->C4; ++c4, wk += TM * 4) {
            const __m512i c = _mm512_loadu_si512(cb + (size_t)c4 * b->c4_step);
            s0 = _mm512_dpbusd_epi32(s0, c, _mm512_set1_epi32(quad(wk)));
            s1 = _mm512_dpbusd_epi32(s1, c, _mm512_set1_epi32(quad(wk + 4)));
            s2 = _mm512_dpbusd_epi32(s2, c, _mm512_set1_epi32(quad(wk + 8)));
            s3 = _mm512_dpbusd_epi32(s3, c, _mm512_set1_epi32(quad(wk + 12)));
            s4 = _mm512_dpbusd_epi32(s4, c, _mm512_set1_epi32(quad(wk + 16)));
            s5 = _mm512_dpbusd_epi32(s5, c, _mm512_set1_epi32(quad(wk + 20)));
            s6 = _mm512_dpbusd_epi32(s6, c, _mm512_set1_epi32(quad(wk + 24)));
            s7 = _mm512_dpbusd_epi32(s7, c, _mm512_set1_epi32(quad(wk + 28)));
        }
    }
    {
        /* locals: the int8 stores below may alias *out, which would force reloads */
        const dot_out o = *out;
        float sc8[TM];
        int b1;
        (void)p;
        if (o.fp32 && nr == TM && b->last && o.pquads && dest(b).whole) {
            /* one whole tile into pixel quads */
            const float *sc = block_scales(&o, m0, sc8, &b1);
            put8x16_pquads(pack4x16_pquads(s0, s1, s2, s3, sc, &o, b1),
                           pack4x16_pquads(s4, s5, s6, s7, sc + 4, &o, b1),
                           y + pquad_at(m0, dest(b).pix, P));
            return;
        }
        if (o.fp32 && nr == TM && b->last && !o.pquads) { /* as in tile_8x32 */
            int8_t *ym = y + (size_t)m0 * P;
            const size_t P2 = (size_t)P;
            const dot_dest db = dest(b);
            const float *sc = block_scales(&o, m0, sc8, &b1);
            put4_f32(b, db, s0, s1, s2, s3, ym, P2, sc, &o);
            put4_f32(b, db, s4, s5, s6, s7, ym + 4 * P2, P2, sc + 4, &o);
            return;
        }
    }
    {
        const __m512i s[TM] = {s0, s1, s2, s3, s4, s5, s6, s7};
        const dot_out o = *out;
        float sc[TM];
        row_scales(sc, m0, nr, &o);
        for (r = 0; r < nr; ++r) put_row(b, s[r], m0 + r, y, P, sc[r], &o);
    }
}

/* two direct tiles side by side (a's 16 pixels, then b's, the next 16 words of the same
 * taps): 16 accumulators share each weight broadcast and the per-call work, which for the
 * short reductions of 1x1 convs over few channels is a large part of a tile */
static void tile_8x32(const dot_block *a, const dot_block *b, const int8_t *w8, int K4,
                      const int32_t *bias, const dot_out *out, int m0, int nr, int8_t *y,
                      int P, const es_conv_params *p) {
    const int8_t *wk = w8 + (size_t)(m0 / TM) * K4 * TM * 4;
    __m512i s0, s1, s2, s3, s4, s5, s6, s7, u0, u1, u2, u3, u4, u5, u6, u7;
    int r, t, c4;
    s0 = u0 = _mm512_set1_epi32(bias[m0]);
    s1 = u1 = _mm512_set1_epi32(bias[m0 + (nr > 1 ? 1 : 0)]);
    s2 = u2 = _mm512_set1_epi32(bias[m0 + (nr > 2 ? 2 : 0)]);
    s3 = u3 = _mm512_set1_epi32(bias[m0 + (nr > 3 ? 3 : 0)]);
    s4 = u4 = _mm512_set1_epi32(bias[m0 + (nr > 4 ? 4 : 0)]);
    s5 = u5 = _mm512_set1_epi32(bias[m0 + (nr > 5 ? 5 : 0)]);
    s6 = u6 = _mm512_set1_epi32(bias[m0 + (nr > 6 ? 6 : 0)]);
    s7 = u7 = _mm512_set1_epi32(bias[m0 + (nr > 7 ? 7 : 0)]);
    for (t = 0; t < a->ntaps; ++t) {
        const uint8_t *cb = a->base + a->tap[t];
        for (c4 = 0; c4 < a->C4; ++c4, wk += TM * 4) {
            const __m512i ca = _mm512_loadu_si512(cb + (size_t)c4 * a->c4_step);
            const __m512i cc = _mm512_loadu_si512(cb + (size_t)c4 * a->c4_step + TP * 4);
            __m512i w = _mm512_set1_epi32(quad(wk));
            s0 = _mm512_dpbusd_epi32(s0, ca, w);
            u0 = _mm512_dpbusd_epi32(u0, cc, w);
            w = _mm512_set1_epi32(quad(wk + 4));
            s1 = _mm512_dpbusd_epi32(s1, ca, w);
            u1 = _mm512_dpbusd_epi32(u1, cc, w);
            w = _mm512_set1_epi32(quad(wk + 8));
            s2 = _mm512_dpbusd_epi32(s2, ca, w);
            u2 = _mm512_dpbusd_epi32(u2, cc, w);
            w = _mm512_set1_epi32(quad(wk + 12));
            s3 = _mm512_dpbusd_epi32(s3, ca, w);
            u3 = _mm512_dpbusd_epi32(u3, cc, w);
            w = _mm512_set1_epi32(quad(wk + 16));
            s4 = _mm512_dpbusd_epi32(s4, ca, w);
            u4 = _mm512_dpbusd_epi32(u4, cc, w);
            w = _mm512_set1_epi32(quad(wk + 20));
            s5 = _mm512_dpbusd_epi32(s5, ca, w);
            u5 = _mm512_dpbusd_epi32(u5, cc, w);
            w = _mm512_set1_epi32(quad(wk + 24));
            s6 = _mm512_dpbusd_epi32(s6, ca, w);
            u6 = _mm512_dpbusd_epi32(u6, cc, w);
            w = _mm512_set1_epi32(quad(wk + 28));
            s7 = _mm512_dpbusd_epi32(s7, ca, w);
            u7 = _mm512_dpbusd_epi32(u7, cc, w);
        }
    }
    {
        const dot_out o = *out; /* locals: the int8 stores may alias *out */
        (void)p;
        if (o.fp32 && nr == TM && a->last && b->last) {
            /* the common case, written out: the accumulators stay in registers (through the
             * arrays above they are stored and reloaded, which costs more than the
             * requantisation itself) */
            int8_t *ym = y + (size_t)m0 * P;
            const size_t P2 = (size_t)P;
            const dot_dest da = dest(a), db = dest(b);
            float sc8[TM];
            int b1;
            const float *sc = block_scales(&o, m0, sc8, &b1);
            if (da.whole && db.whole && db.pix == da.pix + TP && o.pquads) {
                int8_t *yq = y + pquad_at(m0, da.pix, P);
                put8x16_pquads(pack4x16_pquads(s0, s1, s2, s3, sc, &o, b1),
                               pack4x16_pquads(s4, s5, s6, s7, sc + 4, &o, b1), yq);
                put8x16_pquads(pack4x16_pquads(u0, u1, u2, u3, sc, &o, b1),
                               pack4x16_pquads(u4, u5, u6, u7, sc + 4, &o, b1), yq + 4 * 64);
                return;
            }
            if (da.whole && db.whole && db.pix == da.pix + TP) { /* 32 pixels in a row */
#define ES_PUT8X32(below1)                                                                    \
    do {                                                                                       \
        put2x32_f32(da.pix, s0, s1, u0, u1, ym, P2, scale_of(sc, 0), scale_of(sc, 1), &o,      \
                    below1);                                                                   \
        put2x32_f32(da.pix, s2, s3, u2, u3, ym + 2 * P2, P2, scale_of(sc, 2), scale_of(sc, 3), \
                    &o, below1);                                                               \
        put2x32_f32(da.pix, s4, s5, u4, u5, ym + 4 * P2, P2, scale_of(sc, 4), scale_of(sc, 5), \
                    &o, below1);                                                               \
        put2x32_f32(da.pix, s6, s7, u6, u7, ym + 6 * P2, P2, scale_of(sc, 6), scale_of(sc, 7), \
                    &o, below1);                                                               \
    } while (0)
                /* below1 a constant in each: the byte clamps or the float one, no branch */
                if (b1)
                    ES_PUT8X32(1);
                else
                    ES_PUT8X32(0);
#undef ES_PUT8X32
                return;
            }
            if (!o.pquads) {
                put4_f32(a, da, s0, s1, s2, s3, ym, P2, sc, &o);
                put4_f32(b, db, u0, u1, u2, u3, ym, P2, sc, &o);
                put4_f32(a, da, s4, s5, s6, s7, ym + 4 * P2, P2, sc + 4, &o);
                put4_f32(b, db, u4, u5, u6, u7, ym + 4 * P2, P2, sc + 4, &o);
                return;
            }
        }
    }
    { /* the rest (fixed point, a last block of fewer rows, partial sums): row by row,
         the accumulators through arrays, outside the fast path's scope so that they are not
         spilled there */
        const __m512i s[TM] = {s0, s1, s2, s3, s4, s5, s6, s7};
        const __m512i u[TM] = {u0, u1, u2, u3, u4, u5, u6, u7};
        const dot_out o = *out;
        float sc[TM];
        row_scales(sc, m0, nr, &o);
        for (r = 0; r < nr; ++r) {
            put_row(a, s[r], m0 + r, y, P, sc[r], &o);
            put_row(b, u[r], m0 + r, y, P, sc[r], &o);
        }
    }
}
#else
/* the output side of one call: the requantisation tables (es_requant reads the rest from
 * the conv's parameters) */
typedef struct {
    const int32_t *mult, *shift;
} dot_out;

typedef struct {
    dot_out o;
} dot_call;

static void call_setup(dot_call *c, const int32_t *mult, const int32_t *shift,
                       const es_conv_params *p) {
    (void)p;
    c->o.mult = mult;
    c->o.shift = shift;
}

/* requantised lanes to their output pixels in row m (a byte loop: segments are short, and
 * a memcpy of a variable length is a library call) */
static void store_lanes(const dot_block *b, const int8_t *v, int8_t *ym) {
    int s, l;
    for (s = 0; s < b->nseg; ++s) {
        const int8_t *src = v + b->lane[s];
        int8_t *dst = ym + b->pix[s];
        for (l = 0; l < b->len[s]; ++l) dst[l] = src[l];
    }
}

/* the same tile in plain C: acc[l] = bias (or the partial sums) + this block's u * w */
static void tile_8x16(const dot_block *b, const int8_t *w8, int K4, const int32_t *bias,
                      const dot_out *out, int m0, int nr, int8_t *y, int P,
                      const es_conv_params *p) {
    int r, t, c4, e, l;
    for (r = 0; r < nr; ++r) {
        const int m = m0 + r;
        const int8_t *wm = w8 + ((size_t)(m0 / TM) * K4 + b->k0) * TM * 4 + 4 * r;
        int32_t acc[TP];
        int8_t v[TP];
        for (l = 0; l < TP; ++l) acc[l] = b->first ? bias[m] : b->part[(size_t)m * TP + l];
        for (t = 0; t < b->ntaps; ++t)
            for (c4 = 0; c4 < b->C4; ++c4) {
                const uint8_t *cb = b->base + b->tap[t] + (size_t)c4 * b->c4_step;
                const int8_t *wk = wm + (size_t)(t * b->C4 + c4) * TM * 4;
                for (e = 0; e < 4; ++e)
                    for (l = 0; l < TP; ++l) acc[l] += wk[e] * (int32_t)cb[4 * l + e];
            }
        if (!b->last) {
            memcpy(b->part + (size_t)m * TP, acc, sizeof acc);
            continue;
        }
        for (l = 0; l < TP; ++l)
            v[l] = es_requant(acc[l], out->mult[m], out->shift[m], p->rq, p->y_zp, p->qmin,
                              p->qmax);
        if (p->y_pquads)
            store_lanes_pquads(b, v, y, m, P);
        else
            store_lanes(b, v, y + (size_t)m * P);
    }
}
#endif

#if !defined(ES_DOT_VNNI)
/* two direct tiles: in plain C, one after the other */
static void tile_8x32(const dot_block *a, const dot_block *b, const int8_t *w8, int K4,
                      const int32_t *bias, const dot_out *out, int m0, int nr, int8_t *y,
                      int P, const es_conv_params *p) {
    tile_8x16(a, w8, K4, bias, out, m0, nr, y, P, p);
    tile_8x16(b, w8, K4, bias, out, m0, nr, y, P, p);
}
#endif

/* every channel block of one tile block */
static void tile_all(const dot_block *b, const int8_t *w8, int K4, const int32_t *bias,
                     const dot_out *out, int8_t *y, const es_conv_params *p) {
    const int P = p->OH * p->OW;
    int m0;
    for (m0 = 0; m0 < p->M; m0 += TM)
        tile_8x16(b, w8, K4, bias, out, m0, (p->M - m0) < TM ? (p->M - m0) : TM, y, P, p);
}

/* the segments of direct tile v0: lanes whose padded column v % Wp is an output column,
 * one segment per output row the tile touches (merged when the rows are contiguous) */
static void direct_segments(dot_block *b, int v0, int V, int Wp, int OW) {
    int j = 0;
    b->nseg = 0;
    while (j < TP && v0 + j < V) {
        const int v = v0 + j, oh = v / Wp, ow = v % Wp;
        const int run = OW - ow < TP - j ? OW - ow : TP - j;
        if (ow >= OW) { /* a padded column: skip to the next row */
            j += Wp - ow;
            continue;
        }
        if (b->nseg > 0 && b->lane[b->nseg - 1] + b->len[b->nseg - 1] == j &&
            b->pix[b->nseg - 1] + b->len[b->nseg - 1] == oh * OW + ow) {
            b->len[b->nseg - 1] += run;
        } else {
            b->lane[b->nseg] = j;
            b->len[b->nseg] = run;
            b->pix[b->nseg] = oh * OW + ow;
            ++b->nseg;
        }
        j += run;
    }
}

/* The residual add fused into the conv (es_conv2d_i8_dot_add): output pixels [lo, hi) of
 * every channel, just requantised into y and still in cache, become es_add_i8(conv, skip)
 * in place, the same function (and so the same bytes) the separate Add step computes (the
 * generated call passes es_add_i8 itself, so this file does not depend on add_int8.c). The
 * walks call it every ADD_CHUNK flattened positions, so a chunk of all M channels (M x 256
 * bytes) is still in L1 when it is added; the conv's output never makes a round trip
 * through memory and the Add step's second pass over it is gone. */
#define ADD_CHUNK 256

typedef struct {
    const int8_t *skip;      /* NULL: a plain conv */
    const es_qadd_params *q; /* a = the conv's output, b = skip */
    es_add_i8_fn add;        /* es_add_i8, passed in: this file links without add_int8.c */
} dot_add;

static void add_pixels(const dot_add *a, int8_t *y, int M, int P, int lo, int hi) {
    int m;
    if (a->skip == NULL || hi <= lo) return;
    for (m = 0; m < M; ++m) {
        int8_t *ym = y + (size_t)m * P + lo;
        a->add(ym, a->skip + (size_t)m * P + lo, ym, hi - lo, a->q);
    }
}

/* output pixels before flattened (phase-plane) position v of a direct walk: whole rows
 * above it, and the row's columns before it up to OW (the rest are padded columns) */
static int pixels_before(int v, int Wq, int OW) {
    const int ow = v % Wq;
    return v / Wq * OW + (ow < OW ? ow : OW);
}

static void dot_conv(const int8_t *x, const int8_t *w8, const int32_t *bias_u8,
                     const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                     const es_conv_params *p, const dot_add *add) {
    const es_dot_plan d = es_i8_dot_plan(p);
    const int C4 = d.C4, T = d.T, K4 = T * C4, P = p->OH * p->OW, S = d.S;
    const size_t phase = (size_t)d.Hq * d.Wq;
    uint32_t *col = (uint32_t *)scratch;
    int32_t *part = scratch + (d.direct ? 0 : (size_t)d.KT * C4 * TP);
    uint32_t *planes = (uint32_t *)part + (d.KT < T ? (size_t)p->M * TP : 0);
    uint32_t *rowbuf = planes + phase * S * S * C4 + 16; /* after the 64 bytes of slack */
    /* with x_quads (a 1x1, stride-1, unpadded conv: one phase, Hp * Wp = H * W), x already
     * is the planes, 64 readable bytes after them */
    const uint32_t *xt = p->x_quads ? (const uint32_t *)(const void *)x : planes;
    size_t tap[ES_DOT_MAXT];
    dot_block b;
    dot_call call;
    call_setup(&call, mult, shift, p);
    b.part = part;
    b.C4 = C4;
    b.c4_step = phase * S * S * 4;
    if (!p->x_quads) to_quads_u8(x, planes, rowbuf, &d, p);
    if (d.direct) {
        /* flattened phase-plane positions up to the last output; tap (kh, kw) reads phase
         * (kh*DH % S, kw*DW % S) shifted by (kh*DH / S, kw*DW / S) */
        const int V = (p->OH - 1) * d.Wq + p->OW;
        int v0, t;
        for (t = 0; t < T; ++t) {
            const int rh = t / p->KW * p->DH, rw = t % p->KW * p->DW;
            tap[t] = (((size_t)(rh % S) * S + (size_t)(rw % S)) * phase +
                      (size_t)(rh / S) * d.Wq + (size_t)(rw / S)) * 4;
        }
        b.tap = tap;
        b.ntaps = T;
        b.k0 = 0;
        b.first = b.last = 1;
        for (v0 = 0; v0 < V; v0 += 2 * TP) { /* tiles in pairs where there are two */
            dot_block b2 = b;
            int m0;
            if (v0 > 0 && v0 % ADD_CHUNK == 0) /* the chunk before this tile is complete */
                add_pixels(add, y, p->M, P, pixels_before(v0 - ADD_CHUNK, d.Wq, p->OW),
                           pixels_before(v0, d.Wq, p->OW));
            b.base = (const uint8_t *)(xt + v0);
            b2.base = (const uint8_t *)(xt + v0 + TP);
            direct_segments(&b, v0, V, d.Wq, p->OW);
            direct_segments(&b2, v0 + TP, V, d.Wq, p->OW);
            if (b.nseg == 0 || b2.nseg == 0) { /* one tile (or none) has outputs */
                if (b.nseg > 0) tile_all(&b, w8, K4, bias_u8, &call.o, y, p);
                if (b2.nseg > 0) tile_all(&b2, w8, K4, bias_u8, &call.o, y, p);
                continue;
            }
            for (m0 = 0; m0 < p->M; m0 += TM)
                tile_8x32(&b, &b2, w8, K4, bias_u8, &call.o, m0,
                          (p->M - m0) < TM ? (p->M - m0) : TM, y, P, p);
        }
        add_pixels(add, y, p->M, P, pixels_before((V - 1) / ADD_CHUNK * ADD_CHUNK, d.Wq, p->OW),
                   P); /* the last chunk */
        return;
    }
    /* the block's nt taps are consecutive in col: one run of nt * C4 quads */
    tap[0] = 0;
    b.base = (const uint8_t *)col;
    b.tap = tap;
    b.ntaps = 1;
    b.c4_step = TP * 4;
    b.nseg = 1;
    b.lane[0] = 0;
    for (b.pix[0] = 0; b.pix[0] < P; b.pix[0] += TP) {
        int t0;
        b.len[0] = (P - b.pix[0]) < TP ? (P - b.pix[0]) : TP;
        for (t0 = 0; t0 < T; t0 += d.KT) {
            const int nt = (T - t0) < d.KT ? (T - t0) : d.KT;
            im2col_u8(xt, col, b.pix[0], t0, nt, &d, p);
            b.C4 = nt * C4;
            b.k0 = t0 * C4;
            b.first = t0 == 0;
            b.last = t0 + nt == T;
            tile_all(&b, w8, K4, bias_u8, &call.o, y, p);
        }
        if ((b.pix[0] + TP) % ADD_CHUNK == 0 || b.pix[0] + TP >= P)
            add_pixels(add, y, p->M, P, b.pix[0] / ADD_CHUNK * ADD_CHUNK,
                       b.pix[0] + TP < P ? b.pix[0] + TP : P);
    }
}

void es_conv2d_i8_dot(const int8_t *x, const int8_t *w8, const int32_t *bias_u8,
                      const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                      const es_conv_params *p) {
    const dot_add none = {NULL, NULL, NULL};
    dot_conv(x, w8, bias_u8, mult, shift, scratch, y, p, &none);
}

void es_conv2d_i8_dot_add(const int8_t *x, const int8_t *w8, const int32_t *bias_u8,
                          const int32_t *mult, const int32_t *shift, int32_t *scratch,
                          int8_t *y, const int8_t *skip, const es_qadd_params *q,
                          es_add_i8_fn add_fn, const es_conv_params *p) {
    dot_add add;
    add.skip = skip;
    add.q = q;
    add.add = add_fn;
    dot_conv(x, w8, bias_u8, mult, shift, scratch, y, p, &add);
}

/* ---- the stem: few input channels (C <= 3), patch taps packed four to a word ----------
 *
 * A network's first conv reads 3 channels (RGB). In channel quads every tap fills 3 of a
 * word's 4 bytes, so a quarter of each vpdpbusd multiplies padding. Here the reduction runs
 * over the whole patch instead: its K = C * KH * KW taps in the reference's (c, kh, kw)
 * order, four consecutive taps per word, K4 = ceil(K / 4) words (a 3x3 RGB patch: 27 taps
 * in 7 words, not 9). The generator packs the weights the same way, [M8][K4][8][4] with the
 * taps past K zero (lower/int8_conv.py), and folds the u8 shift into the bias as for
 * es_conv2d_i8_dot.
 *
 * The input is copied into padded rows dealt out by column phase (the stride):
 * rows[c][r][ph][q] = x[c][r - PT][q * SW + ph - PL], or x_zp where that is padding. Tap
 * (c, kh, kw) of output row oh is then the contiguous bytes from rows[c][oh * SH + kh * DH]
 * [kw * DW % SW][kw * DW / SW], one per output column. Only the rows one block of output
 * rows reads are kept (ES_STEM_WINDOW: 9 of ResNet-18's 229, 5 of MobileNetV2-224's 225):
 * the rows a block shares with the one before move to the window's front and the others
 * are made from x, so no step holds a second copy of the input (ResNet-18-224's stem
 * scratch 191,391 -> 39,591 B, at the step that was its arena's peak). Per output row,
 * four such tap rows make one row of words of the im2col block col[K4][NP] (+128), R output
 * rows side by side (about 256 pixels): with VBMI by one byte permute per 16 words
 * (stem_col_gather), otherwise interleaved as the quad planes above are (quads_row). The
 * same 8 x 32 micro-kernel as the direct walk multiplies the block: 16 output pixels per
 * vector, stored straight into each channel's rows. */

/* padded input rows r0 .. r1 - 1 dealt by column phase (see above), row r into slot r - base
 * of each channel's NW slots; rowbuf holds one padded row */
static void stem_rows(const int8_t *x, int8_t *rows, int8_t *rowbuf, int r0, int r1, int base,
                      int NW, int Wp, int S, int Wq, const es_conv_params *p) {
    const int8_t pad = (int8_t)p->x_zp;
    const int lo = p->PL < Wp ? p->PL : Wp, hi = p->PL + p->W < Wp ? p->PL + p->W : Wp;
    int c, r, q, ph;
    for (c = 0; c < p->C; ++c)
        for (r = r0; r < r1; ++r) {
            const int ih = r - p->PT;
            int8_t *dst = rows + ((size_t)c * NW + (size_t)(r - base)) * S * Wq;
            int8_t *row = S == 1 ? dst : rowbuf;
#if defined(ES_DOT_VNNI) && defined(__AVX512VBMI2__)
            if (S == 2) { /* 64 padded columns per step, read straight from x: expand-load
                             puts the input bytes in the lanes of their columns and pad in
                             the rest. Through rowbuf (memcpy, then 64-byte loads) each load
                             waited on the copy's narrower stores, a third of the stem. */
                const __m512i padv = _mm512_set1_epi8(pad);
                const int8_t *xrow = x + ((size_t)c * p->H + (ih >= 0 && ih < p->H ? ih : 0)) * p->W;
                for (q = 0; q < Wq; q += 32) {
                    /* padded columns [a, b) of this step's [2q, 2q + 64) hold input */
                    const int a = 2 * q > lo ? 2 * q : lo;
                    const int b = 2 * q + 64 < hi ? 2 * q + 64 : hi;
                    const int nw = Wq - q < 32 ? Wq - q : 32;
                    const __mmask64 kin = ih < 0 || ih >= p->H || b <= a ? 0
                        : (b - a == 64 ? ~(__mmask64)0 : (((__mmask64)1 << (b - a)) - 1))
                              << (a - 2 * q);
                    const __mmask32 kw = nw == 32 ? ~(__mmask32)0 : ((__mmask32)1 << nw) - 1;
                    const __m512i v = _mm512_mask_expandloadu_epi8(
                        padv, kin, xrow + (b > a ? a - p->PL : 0));
                    _mm256_mask_storeu_epi8(dst + q, kw, _mm512_cvtepi16_epi8(v));
                    _mm256_mask_storeu_epi8(dst + Wq + q, kw,
                                            _mm512_cvtepi16_epi8(_mm512_srli_epi16(v, 8)));
                }
                continue;
            }
#endif
            if (ih < 0 || ih >= p->H) {
                memset(row, pad, (size_t)Wp);
            } else {
                memset(row, pad, (size_t)lo);
                if (hi > lo)
                    memcpy(row + lo, x + ((size_t)c * p->H + ih) * p->W, (size_t)(hi - lo));
                memset(row + (hi > lo ? hi : lo), pad, (size_t)(Wp - (hi > lo ? hi : lo)));
            }
            if (S == 1) continue;
#if defined(ES_DOT_VNNI)
            if (S == 2) { /* 32 columns of each phase per step: the low and high bytes */
                int8_t *even = dst, *odd = dst + Wq;
                for (q = 0; 2 * q + 64 <= Wp; q += 32) {
                    const __m512i v = _mm512_loadu_si512(rowbuf + 2 * q);
                    _mm256_storeu_si256((__m256i *)(even + q), _mm512_cvtepi16_epi8(v));
                    _mm256_storeu_si256((__m256i *)(odd + q),
                                        _mm512_cvtepi16_epi8(_mm512_srli_epi16(v, 8)));
                }
                if (q < Wq) { /* the last Wq - q <= 32 columns, under masks: bytes past Wp
                                 read as pad, nothing stored past Wq */
                    const int nb = Wp - 2 * q, nw = Wq - q;
                    const __mmask64 kb = nb >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << nb) - 1;
                    const __mmask32 kw = nw >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << nw) - 1;
                    const __m512i v =
                        _mm512_mask_loadu_epi8(_mm512_set1_epi8(pad), kb, rowbuf + 2 * q);
                    _mm256_mask_storeu_epi8(even + q, kw, _mm512_cvtepi16_epi8(v));
                    _mm256_mask_storeu_epi8(odd + q, kw,
                                            _mm512_cvtepi16_epi8(_mm512_srli_epi16(v, 8)));
                }
                continue;
            }
#endif
            for (ph = 0; ph < S; ++ph) { /* deal column q * S + ph to phase ph, column q */
                int8_t *restrict d = dst + (size_t)ph * Wq;
                const int8_t *restrict s = rowbuf + ph;
                const int n = (Wp - ph + S - 1) / S;
                for (q = 0; q < n; ++q) d[q] = s[(size_t)q * S];
                for (; q < Wq; ++q) d[q] = pad;
            }
        }
}


/* Where the four taps of each word of the im2col block lie in the window of padded rows,
 * for output row 0 of the block: tap i of word k4 (tap t = 4 * k4 + i, counted up in
 * (c, kh, kw) order) reads byte q of row slot (c, kh * DH) and column phase kw * DW % S,
 * q = j + kw * DW / S for output column j. Taps past K repeat the word's first tap (their
 * weights are zero). Walked in order, (c, kh, kw) counted up rather than divided out of t:
 * three divisions per tap, for every quad of every block, were 4 % of ResNet-18's 7x7 stem. */
typedef struct {
    int t, c, kh, kw;
} stem_walk;

static void stem_word(stem_walk *w, size_t tap[4], int NW, int S, int Wq,
                      const es_conv_params *p) {
    const int K = p->C * p->KH * p->KW;
    int i;
    for (i = 0; i < 4; ++i, ++w->t) {
        const int rr = w->kh * p->DH, cw = w->kw * p->DW;
        if (w->t >= K) { /* (a word never starts past K) */
            tap[i] = i ? tap[0] : 0;
            continue;
        }
        tap[i] = (((size_t)w->c * NW + rr) * S + (size_t)(cw % S)) * Wq + (size_t)(cw / S);
        if (++w->kw == p->KW) {
            w->kw = 0;
            if (++w->kh == p->KH) {
                w->kh = 0;
                ++w->c;
            }
        }
    }
}

#if defined(ES_DOT_VNNI) && defined(__AVX512VBMI__)
/* With VBMI a word row is made by one byte permute, not by interleaving four tap rows. The
 * four taps of a word read at most four distinct phase rows (sources); 16 output columns
 * of one source are at most 32 bytes from column j0 + its first tap's offset (16 columns
 * and the tap's offset past the first, at most 16). Four 32-byte loads, two to a vector,
 * are then one 128-byte table, and one two-source byte permute (vpermt2b) gathers the 16
 * words: byte i of lane j is byte j + (the tap's offset past its source's first) of its
 * source's quarter. That is one shuffle per 16 words where the interleave takes four (byte
 * and word unpacks, qword and lane permutes), and 32-byte loads, not 64: one from an
 * arbitrary offset crosses a cache line half as often, and such loads cost more here than
 * the shuffles (ResNet-18's 7x7 stem, 29,008 word vectors: a permute of two 64-byte loads
 * took 1.1 ns a vector in isolation, of two 32-byte loads 0.7, on the AVX-512 VNNI Intel
 * Xeon the benchmarks name; the stem 621 -> 593 us in the net). The sources and indices of
 * each word are found once per call (stem_plan), for up to STEM_PLAN words; a longer
 * patch, or taps further apart in one source than 16 columns (a dilation past 5), takes
 * the interleave. */
#define STEM_PLAN 64

typedef struct {
    size_t src[4];   /* window offsets of the sources (unused ones repeat the first) */
    uint32_t idx;    /* byte i: where tap i lies in the 128-byte table */
    int two;         /* more than two sources: the table's second half is loaded */
} stem_gather;

/* the gather of each word of the patch into g[0 .. K4 - 1]; 0 if some source would need
 * more than 32 bytes */
static int stem_plan(stem_gather *g, int K4, int NW, int S, int Wq, const es_conv_params *p) {
    stem_walk w = {0, 0, 0, 0};
    int k4, i, s;
    for (k4 = 0; k4 < K4; ++k4) {
        size_t tap[4], row[4];
        int n = 0, of[4];
        stem_word(&w, tap, NW, S, Wq, p);
        /* a source is a phase row (its offset rounded down to a row start); its first
         * byte is where its earliest tap in the word reads */
        for (i = 0; i < 4; ++i) {
            const size_t r = tap[i] - tap[i] % (size_t)Wq;
            for (s = 0; s < n && row[s] != r; ++s) continue;
            if (s == n) {
                row[n] = r;
                g[k4].src[n++] = tap[i];
            } else if (tap[i] < g[k4].src[s]) {
                g[k4].src[s] = tap[i];
            }
            of[i] = s;
        }
        for (s = n; s < 4; ++s) g[k4].src[s] = g[k4].src[0];
        g[k4].idx = 0;
        for (i = 0; i < 4; ++i) {
            const size_t b = tap[i] - g[k4].src[of[i]];
            if (b > TP) return 0;
            g[k4].idx |= (uint32_t)(32 * of[i] + (int)b) << (8 * i);
        }
        g[k4].two = n > 2;
    }
    return 1;
}

/* 32 bytes from x as the low half of a vector, 32 from y as the high */
static inline __m512i load_2x32(const int8_t *x, const int8_t *y) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x)),
                              _mm256_loadu_si256((const __m256i *)y), 1);
}

/* nr rows of the im2col block from the gathers (see above): 16 words per step, +128 */
static void stem_col_gather(uint32_t *col, int NP, const int8_t *rows, int nr, int S, int Wq,
                            int K4, const stem_gather *g, const es_conv_params *p) {
    const int OW = p->OW, whole = OW - OW % TP;
    const size_t row_step = (size_t)p->SH * S * Wq;
    const __m512i lane = _mm512_set_epi32(0x0f0f0f0f, 0x0e0e0e0e, 0x0d0d0d0d, 0x0c0c0c0c,
                                          0x0b0b0b0b, 0x0a0a0a0a, 0x09090909, 0x08080808,
                                          0x07070707, 0x06060606, 0x05050505, 0x04040404,
                                          0x03030303, 0x02020202, 0x01010101, 0x00000000);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __mmask16 tail = (__mmask16)es_mask16(OW - whole);
    int k4, r, j;
    for (k4 = 0; k4 < K4; ++k4) {
        /* locals: the stores into col may alias the plan */
        const size_t s0 = g[k4].src[0], s1 = g[k4].src[1], s2 = g[k4].src[2], s3 = g[k4].src[3];
        const __m512i idx = _mm512_add_epi8(lane, _mm512_set1_epi32((int)g[k4].idx));
        const int two = g[k4].two;
        for (r = 0; r < nr; ++r) {
            const int8_t *x = rows + (size_t)r * row_step;
            uint32_t *dst = col + (size_t)k4 * NP + (size_t)r * OW;
#define ES_STEM_GATHER(j)                                                                   \
    _mm512_xor_si512(_mm512_permutex2var_epi8(                                               \
                         load_2x32(x + s0 + (j), x + s1 + (j)), idx,                         \
                         two ? load_2x32(x + s2 + (j), x + s3 + (j)) : _mm512_setzero_si512()), \
                     flip)
            for (j = 0; j < whole; j += TP) _mm512_storeu_si512(dst + j, ES_STEM_GATHER(j));
            if (j < OW) _mm512_mask_storeu_epi32(dst + j, tail, ES_STEM_GATHER(j));
#undef ES_STEM_GATHER
        }
    }
}
#endif

/* nr rows of the im2col block: word (k4, r * OW + j) holds taps 4*k4 .. 4*k4 + 3 of output
 * column j of the block's row r (+128), read from the window of padded rows whose slot 0 is
 * the block's first output row's first tap row. A tap's offset in the window does not
 * depend on the output row, so each quad of taps is located once and then read for every
 * row of the block: four tap rows interleaved into one row of words. */
static void stem_col_rows(uint32_t *col, int NP, const int8_t *rows, int nr, int NW, int S,
                          int Wq, int K4, const es_conv_params *p) {
    const int OW = p->OW;
    const size_t row_step = (size_t)p->SH * S * Wq; /* bytes from one output row's taps to
                                                       the next one's */
    stem_walk w = {0, 0, 0, 0};
    int k4, r;
    for (k4 = 0; k4 < K4; ++k4) {
        uint32_t *dst = col + (size_t)k4 * NP;
        size_t tap[4];
        stem_word(&w, tap, NW, S, Wq, p);
        for (r = 0; r < nr; ++r, dst += OW) {
            const int8_t *x = rows + (size_t)r * row_step;
#if defined(ES_DOT_VNNI)
            quads_row_masked(dst, (size_t)OW, x + tap[0], x + tap[1], x + tap[2], x + tap[3]);
#else
            quads_row(dst, (size_t)OW, x + tap[0], x + tap[1], x + tap[2], x + tap[3],
                      0xffffffffu, 0);
#endif
        }
    }
}

void es_conv2d_i8_stem(const int8_t *x, const int8_t *w8, const int32_t *bias_u8,
                       const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                       const es_conv_params *p) {
    const int K4 = ES_DOT_CEIL(p->C * p->KH * p->KW, 4), OW = p->OW, P = p->OH * OW;
    const int R = ES_STEM_ROWS(p->OH, OW), NP = ES_STEM_NP(p->OH, OW), S = p->SW;
    const int NW = ES_STEM_WINDOW(p->OH, OW, p->KH, p->SH, p->DH);
    const int Wp = ES_DOT_PADDED(OW, p->SW, p->KW, p->DW), Wq = ES_DOT_CEIL(Wp, S);
    const size_t slot = (size_t)S * Wq; /* bytes of one padded row, dealt by phase */
    uint32_t *col = (uint32_t *)scratch;
    int8_t *rows = (int8_t *)(col + (size_t)K4 * NP);
    int8_t *rowbuf = rows + (size_t)p->C * NW * slot;
    size_t tap0 = 0;
    int oh0, v0, m0, c, base = 0, end = 0; /* the window holds padded rows [base, end) */
    dot_block a;
    dot_call call;
#if defined(ES_DOT_VNNI) && defined(__AVX512VBMI__)
    stem_gather gather[STEM_PLAN];
    const int gathered = K4 <= STEM_PLAN && stem_plan(gather, K4, NW, S, Wq, p);
#endif
    call_setup(&call, mult, shift, p);
    /* lanes past a block's pixels are computed and never stored; zeroed once so that they
     * are defined */
    memset(col, 0, 4 * (size_t)K4 * NP);
    a.part = NULL;
    a.tap = &tap0;
    a.ntaps = 1;
    a.C4 = K4;
    a.c4_step = 4 * (size_t)NP;
    a.k0 = 0;
    a.first = a.last = 1;
    a.nseg = 1;
    a.lane[0] = 0;
    /* R output rows at a time: their pixels are consecutive in y, so the block's tiles run
     * over them flattened, in pairs, whatever the row length */
    for (oh0 = 0; oh0 < p->OH; oh0 += R) {
        const int nr = p->OH - oh0 < R ? p->OH - oh0 : R, n = nr * OW;
        const int lo = oh0 * p->SH, hi = lo + (nr - 1) * p->SH + (p->KH - 1) * p->DH + 1;
        /* the block's padded rows [lo, hi) into the window: the ones the last block made
         * too (the kernel is taller than the stride) move to its front, the rest are made */
        if (lo < end && lo > base)
            for (c = 0; c < p->C; ++c)
                memmove(rows + (size_t)c * NW * slot, rows + ((size_t)c * NW + (lo - base)) * slot,
                        (size_t)(end - lo) * slot);
        stem_rows(x, rows, rowbuf, lo < end ? end : lo, hi, lo, NW, Wp, S, Wq, p);
        base = lo;
        end = hi;
#if defined(ES_DOT_VNNI) && defined(__AVX512VBMI__)
        if (gathered)
            stem_col_gather(col, NP, rows, nr, S, Wq, K4, gather, p);
        else
#endif
            stem_col_rows(col, NP, rows, nr, NW, S, Wq, K4, p);
        for (v0 = 0; v0 < n; v0 += 2 * TP) { /* tiles in pairs where there are two */
            dot_block b;
            a.base = (const uint8_t *)(col + v0);
            a.len[0] = n - v0 < TP ? n - v0 : TP;
            a.pix[0] = oh0 * OW + v0;
            if (n - v0 <= TP) {
                tile_all(&a, w8, K4, bias_u8, &call.o, y, p);
                continue;
            }
            b = a;
            b.base = (const uint8_t *)(col + v0 + TP);
            b.len[0] = n - v0 - TP < TP ? n - v0 - TP : TP;
            b.pix[0] = oh0 * OW + v0 + TP;
            for (m0 = 0; m0 < p->M; m0 += TM)
                tile_8x32(&a, &b, w8, K4, bias_u8, &call.o, m0,
                          (p->M - m0) < TM ? (p->M - m0) : TM, y, P, p);
        }
    }
}
