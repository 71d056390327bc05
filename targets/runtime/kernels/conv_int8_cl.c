/* Conv2d, int8, one group, with output channels in the vector lanes: the layout of
 * XNNPACK's qs8 "c4" igemm kernels, for convs whose output planes are too small to fill
 * lanes of pixels (es_conv2d_i8_dot, conv_int8_dot.c, puts 16 pixels in a vector; a 4x4
 * plane then leaves lanes idle, or pays an im2col gather and partial sums).
 *
 * Here one vector holds 16 output channels of one pixel. vpdpbusd multiplies 4 unsigned
 * bytes by 4 signed bytes into each int32 lane, so the input is read as uint8 channel quads
 * (u = x + 128, broadcast to all lanes) and the weights as 16 channels x 4 input channels,
 * 64 bytes per step of the reduction. The constant the +128 adds is folded into the bias by
 * the generator, exactly as for es_conv2d_i8_dot (the same bias_u8), and padding reads
 * u = x_zp + 128, i.e. x = x_zp, as the reference does. Sums are exact in int32 and the
 * requantisation is es_mul_q, so results are bit-identical to es_conv2d_i8 (conv_int8.c).
 *
 * wc: [M16][KH][KW][C4][16][4] int8, M16 = ceil(M / 16) blocks of 16 output channels, C4 =
 * ceil(C / 4) input quads; zero-padded. Scratch (es_i8_cl_scratch): the padded input as
 * HWC uint8 quads, xh[r][q][c4], 4 * Hp * Wp * C4 bytes. A tile is n output pixels x 32
 * channels (2n accumulators); each step loads two weight vectors and broadcasts one input
 * word per pixel. A plane of up to 12 pixels is one tile (a 3x3 plane: 9 pixels, not a
 * tile of 8 and one of 1 that computes 8), larger planes run in near-equal tiles of at
 * most 8 (7x7: 7 tiles of 7, not 7 of 8), so no lanes compute pixels that are not there.
 * The tile's bytes per block are transposed to channel rows (three rounds of byte, word
 * and dword interleaves) and stored 8 pixels at a time into the CHW output. Pairs of weight
 * blocks run outside the pixel tiles, so a pair's weights stay in L1 while every tile of
 * pixels uses them. Stride-1 spatial convs on rows of 7 pixels or more run in row tiles
 * instead where that pays (below: up to 14 pixels of a row, the input as channel-quad
 * planes). Without VNNI the same tiles run in plain C. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "../edgesmith_rt.h"
#include "../es_lanes.h"
#include "../es_simd.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ES_CL_VNNI 1
#include <immintrin.h>

#include "../es_quads_i8.h"
#endif

#define NP 12 /* output pixels per tile, at most: 24 accumulators, 2 weight vectors and a
                 broadcast in the 32 vector registers */
#define SP 8  /* pixels per output transpose */
#define NC 16 /* output channels per weight block */

/* every word of xh the input does not cover (padding) reads x_zp + 128 */
static void fill_pad(uint32_t *xh, size_t n, const es_conv_params *p) {
    const uint32_t pad4 = (uint8_t)(p->x_zp + 128) * 0x01010101u;
    size_t i;
    for (i = 0; i < n; ++i) xh[i] = pad4;
}

#if defined(ES_CL_VNNI)
/* fill_pad of the border only: the rows above and below the input and the columns left
 * and right of it, the words the transpose below does not write (it writes every word of
 * every input pixel inside the padded plane, channels past C included) */
static void fill_border(uint32_t *xh, int Hp, int Wp, int C4, const es_conv_params *p) {
    const size_t row = (size_t)Wp * C4;
    const int top = p->PT < Hp ? p->PT : Hp, bot = p->PT + p->H < Hp ? p->PT + p->H : Hp;
    const int left = p->PL < Wp ? p->PL : Wp, right = p->PL + p->W < Wp ? p->PL + p->W : Wp;
    int r;
    fill_pad(xh, (size_t)top * row, p);
    if (bot > top) {
        fill_pad(xh + (size_t)bot * row, (size_t)(Hp - bot) * row, p);
        for (r = top; r < bot; ++r) {
            fill_pad(xh + (size_t)r * row, (size_t)left * C4, p);
            if (right > left)
                fill_pad(xh + (size_t)r * row + (size_t)right * C4, (size_t)(Wp - right) * C4, p);
        }
    } else {
        fill_pad(xh + (size_t)top * row, (size_t)(Hp - top) * row, p);
    }
}

/* xh[r][q][c4]: the bytes x[4*c4 + i][r - PT][q - PL] + 128; padding pixels and the channels
 * past C of the last quad (their weights are zero) read the pad byte x_zp + 128. Blocks of
 * 16 channels x 16 consecutive pixels of the CHW input (16 loads, rows past C are x_zp) are
 * transposed by four rounds of interleaves (bytes, words, dwords, qwords) into 16 pixels
 * of 16 channels, each stored to its padded position. */
static void to_hwc_u8(const int8_t *x, uint32_t *xh, int Hp, int Wp, int C4,
                      const es_conv_params *p) {
    const int HW = p->H * p->W, C = p->C;
    const __m128i zp8 = _mm_set1_epi8((char)p->x_zp), flip = _mm_set1_epi8((char)0x80);
    int j0, cb, j, k, r = p->PT, q = p->PL; /* (r, q): where pixel j0 goes */
    fill_border(xh, Hp, Wp, C4, p);
    for (j0 = 0; j0 < HW; j0 += 16) {
        const int nj = HW - j0 < 16 ? HW - j0 : 16;
        const __mmask16 lm = (__mmask16)es_mask16(nj);
        uint32_t *dst[16];
        for (j = 0; j < nj; ++j) { /* where pixel j0 + j goes; NULL: nowhere (not read) */
            dst[j] = r < Hp && q < Wp ? xh + ((size_t)r * Wp + q) * C4 : NULL;
            if (++q == p->PL + p->W) {
                q = p->PL;
                ++r;
            }
        }
        for (cb = 0; 16 * cb < 4 * C4; ++cb) {
            const int nb = 4 * C4 - 16 * cb < 16 ? 4 * C4 - 16 * cb : 16; /* bytes per pixel */
            __m128i a[16], t[16];
            for (k = 0; k < 16; ++k) { /* row k: channel 16 cb + k at pixels j0 .. */
                const int c = 16 * cb + k;
                a[k] = c < C ? _mm_mask_loadu_epi8(zp8, lm, x + (size_t)c * HW + j0) : zp8;
            }
            for (k = 0; k < 8; ++k) { /* t[k]: channel pairs of pixels 0..7, t[k + 8]: 8..15 */
                t[k] = _mm_unpacklo_epi8(a[2 * k], a[2 * k + 1]);
                t[k + 8] = _mm_unpackhi_epi8(a[2 * k], a[2 * k + 1]);
            }
            for (k = 0; k < 4; ++k) { /* a[4h + g]: quad g of pixels 4h .. 4h + 3 */
                a[k] = _mm_unpacklo_epi16(t[2 * k], t[2 * k + 1]);
                a[4 + k] = _mm_unpackhi_epi16(t[2 * k], t[2 * k + 1]);
                a[8 + k] = _mm_unpacklo_epi16(t[8 + 2 * k], t[8 + 2 * k + 1]);
                a[12 + k] = _mm_unpackhi_epi16(t[8 + 2 * k], t[8 + 2 * k + 1]);
            }
            for (k = 0; k < 4; ++k) { /* t[4h + ..]: quads (0,1) and (2,3) of pixel pairs */
                t[4 * k] = _mm_unpacklo_epi32(a[4 * k], a[4 * k + 1]);     /* 4h, 4h+1 */
                t[4 * k + 1] = _mm_unpackhi_epi32(a[4 * k], a[4 * k + 1]); /* 4h+2, 4h+3 */
                t[4 * k + 2] = _mm_unpacklo_epi32(a[4 * k + 2], a[4 * k + 3]);
                t[4 * k + 3] = _mm_unpackhi_epi32(a[4 * k + 2], a[4 * k + 3]);
            }
            for (k = 0; k < 4; ++k) { /* a[j]: the 16 channels of pixel j */
                a[4 * k] = _mm_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
                a[4 * k + 1] = _mm_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
                a[4 * k + 2] = _mm_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
                a[4 * k + 3] = _mm_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
            }
            for (j = 0; j < nj; ++j) {
                if (dst[j] == NULL) continue;
                if (nb == 16)
                    _mm_storeu_si128((__m128i *)(dst[j] + 4 * cb), _mm_xor_si128(a[j], flip));
                else
                    _mm_mask_storeu_epi8(dst[j] + 4 * cb, (__mmask16)((1u << nb) - 1u),
                                         _mm_xor_si128(a[j], flip));
            }
        }
    }
}
#else
/* the same layout one word at a time */
static void to_hwc_u8(const int8_t *x, uint32_t *xh, int Hp, int Wp, int C4,
                      const es_conv_params *p) {
    const int H = p->H, W = p->W, C = p->C;
    const size_t hw = (size_t)H * W;
    int ih, iw, c;
    fill_pad(xh, (size_t)Hp * Wp * C4, p);
    for (ih = 0; ih < H && ih + p->PT < Hp; ++ih)
        for (iw = 0; iw < W && iw + p->PL < Wp; ++iw) {
            unsigned char *dst =
                (unsigned char *)(xh + ((size_t)(ih + p->PT) * Wp + iw + p->PL) * C4);
            for (c = 0; c < C; ++c) dst[c] = (unsigned char)(x[c * hw + (size_t)ih * W + iw] ^ 0x80);
        }
}
#endif

/* one tile: the window origins of its pixels (word offsets into xh; pixels past the last
 * repeat it), its weight blocks, the output pixels and channels it owns */
typedef struct {
    const uint32_t *xh;
    size_t org[NP];
    size_t row_step, col_step; /* words from tap (kh, kw) to (kh + 1, kw) and (kh, kw + 1) */
    const int8_t *w0, *w1;     /* blocks m0 / 16 and m0 / 16 + 1 (w1 = w0 for a last odd
                                  block, whose second half is computed and not stored) */
    int m0, nm;                /* first channel, channels stored (<= 32) */
    int p0, np;                /* first pixel, pixels stored (<= NP) */
#if defined(ES_CL_VNNI)
    es_rq16 rq[2]; /* requantisation constants of the two blocks, set once per block pair */
    int below1[2]; /* ES_RQ_FP32 with every scale of the block under 1 (see store_block) */
#endif
} cl_tile;

#if defined(ES_CL_VNNI)
/* the requantisation constants of the tile's block pair */
static void pair_consts(cl_tile *tl, const int32_t *mult, const int32_t *shift,
                        const es_conv_params *p) {
    const int m1 = tl->m0 + NC;
    int b;
    tl->rq[0] = es_rq16_setup(mult + tl->m0, shift + tl->m0, tl->nm < NC ? tl->nm : NC, p->rq,
                              p->y_zp, p->qmin, p->qmax);
    if (tl->nm > NC)
        tl->rq[1] = es_rq16_setup(mult + m1, shift + m1, tl->nm - NC, p->rq, p->y_zp, p->qmin,
                                  p->qmax);
    for (b = 0; b < 2; ++b) /* lanes past nm hold scale 1/4 (es_rq16_setup) */
        tl->below1[b] = tl->rq[b].fp32 && (b == 0 || tl->nm > NC) &&
                        es_rq_scales_below1(tl->rq[b].scale, (__mmask16)0xffff);
}

/* requantise one block's 8 pixel vectors (16 channels each) and store them to channel
 * rows m0.. of y: y[(m0 + c) * P + p0 + i] for c < nm, i < np. below1 (ES_RQ_FP32, every
 * scale under 1): |acc * scale| < 2^31, so vcvtps2dq cannot overflow and the float clamps
 * are left to the saturating narrow and the byte clamps that follow anyway; rounding is
 * monotone and the bounds integers, so the bytes are es_requant's. */
static void store_block(const __m512i *acc, const es_rq16 *rq, int below1, int m0, int nm,
                        int8_t *y, int P, int p0, int np, const es_conv_params *p) {
    const __m512i zp = _mm512_set1_epi32(p->y_zp);
    const __m128i lo = _mm_set1_epi8((char)p->qmin), hi = _mm_set1_epi8((char)p->qmax);
    const __mmask16 kp = (__mmask16)((1u << np) - 1u);
    __m128i r[SP], t[SP], u[SP], v[SP];
    int i, c;
    for (i = 0; i < SP; ++i) {
        __m512i q;
        if (i >= np) { /* past the tile's pixels: not stored */
            r[i] = _mm_setzero_si128();
            continue;
        }
        q = below1 ? _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[i]), rq->scale))
                   : es_rq16_apply(acc[i], rq);
        q = _mm512_add_epi32(q, zp);
        r[i] = _mm_min_epi8(_mm_max_epi8(_mm512_cvtsepi32_epi8(q), lo), hi);
    }
    /* 8 pixels x 16 channels -> 16 channels x 8 pixels: t pairs pixels, u quads, v octets */
    for (i = 0; i < SP; i += 2) {
        t[i] = _mm_unpacklo_epi8(r[i], r[i + 1]);     /* channels 0..7 */
        t[i + 1] = _mm_unpackhi_epi8(r[i], r[i + 1]); /* channels 8..15 */
    }
    for (i = 0; i < 2; ++i) { /* i = 0: pixels 0..3, 1: pixels 4..7 */
        u[4 * i + 0] = _mm_unpacklo_epi16(t[4 * i], t[4 * i + 2]);     /* channels 0..3 */
        u[4 * i + 1] = _mm_unpackhi_epi16(t[4 * i], t[4 * i + 2]);     /* 4..7 */
        u[4 * i + 2] = _mm_unpacklo_epi16(t[4 * i + 1], t[4 * i + 3]); /* 8..11 */
        u[4 * i + 3] = _mm_unpackhi_epi16(t[4 * i + 1], t[4 * i + 3]); /* 12..15 */
    }
    for (i = 0; i < 4; ++i) { /* v[j]: channels 2j and 2j + 1, 8 pixels each */
        v[2 * i] = _mm_unpacklo_epi32(u[i], u[4 + i]);
        v[2 * i + 1] = _mm_unpackhi_epi32(u[i], u[4 + i]);
    }
    for (c = 0; c < nm && c < NC; ++c) {
        const __m128i row = c & 1 ? _mm_unpackhi_epi64(v[c / 2], v[c / 2]) : v[c / 2];
        int8_t *dst = y + (size_t)(m0 + c) * P + p0;
        if (np == SP)
            _mm_storel_epi64((__m128i *)dst, row);
        else
            _mm_mask_storeu_epi8(dst, kp, row);
    }
}

/* store_block of a whole tile: its first 8 pixels, then the rest */
static void store_tile(const __m512i *acc, const es_rq16 *rq, int below1, int m0, int nm,
                       int8_t *y, int P, int p0, int np, const es_conv_params *p) {
    store_block(acc, rq, below1, m0, nm, y, P, p0, np < SP ? np : SP, p);
    if (np > SP) store_block(acc + SP, rq, below1, m0, nm, y, P, p0 + SP, np - SP, p);
}

/* both blocks of a tile's pair: s the first 16 channels, u the next (when there are any) */
static void store_pair(const __m512i *s, const __m512i *u, const cl_tile *tl, int8_t *y, int P,
                       const es_conv_params *p) {
    store_tile(s, &tl->rq[0], tl->below1[0], tl->m0, tl->nm, y, P, tl->p0, tl->np, p);
    if (tl->nm > NC)
        store_tile(u, &tl->rq[1], tl->below1[1], tl->m0 + NC, tl->nm - NC, y, P, tl->p0, tl->np,
                   p);
}

/* one tile of n pixels (n <= NP, a constant where each tile_<n> below inlines it) x 32
 * channels: 2n accumulators, each step loads the two weight vectors once and broadcasts
 * one input word per pixel, so a tile of n pixels costs n / NP of a full one and the last
 * pixels of a plane need not run a whole tile of 8 */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void tile_n(const cl_tile *tl, int KH, int KW, int C4, const int32_t *bias,
                          int8_t *y, int P, const es_conv_params *p, const int n) {
    const __mmask16 k0 = (__mmask16)es_mask16(tl->nm);
    const __mmask16 k1 = (__mmask16)es_mask16(tl->nm - 16);
    const __m512i b0 = _mm512_maskz_loadu_epi32(k0, bias + tl->m0);
    const __m512i b1 = _mm512_maskz_loadu_epi32(k1, bias + tl->m0 + NC);
    const int8_t *w0 = tl->w0, *w1 = tl->w1;
    __m512i s[NP], u[NP];
    const uint32_t *a[NP];
    int kh, kw, c4, i;
#pragma GCC unroll 12
    for (i = 0; i < NP; ++i) s[i] = u[i] = _mm512_setzero_si512();
#pragma GCC unroll 12
    for (i = 0; i < n; ++i) {
        s[i] = b0;
        u[i] = b1;
    }
    for (kh = 0; kh < KH; ++kh)
        for (kw = 0; kw < KW; ++kw) {
            const size_t off = kh * tl->row_step + kw * tl->col_step;
#pragma GCC unroll 12
            for (i = 0; i < n; ++i) a[i] = tl->xh + tl->org[i] + off;
            for (c4 = 0; c4 < C4; ++c4, w0 += 64, w1 += 64) {
                const __m512i wa = _mm512_loadu_si512(w0), wb = _mm512_loadu_si512(w1);
#pragma GCC unroll 12
                for (i = 0; i < n; ++i) {
                    const __m512i v = _mm512_set1_epi32((int)a[i][c4]);
                    s[i] = _mm512_dpbusd_epi32(s[i], v, wa);
                    u[i] = _mm512_dpbusd_epi32(u[i], v, wb);
                }
            }
        }
    store_pair(s, u, tl, y, P, p);
}

#define CL_TILE(N)                                                                             \
    static void tile_##N(const cl_tile *tl, int KH, int KW, int C4, const int32_t *bias,      \
                         int8_t *y, int P, const es_conv_params *p) {                          \
        tile_n(tl, KH, KW, C4, bias, y, P, p, N);                                              \
    }
CL_TILE(1)
CL_TILE(2)
CL_TILE(3)
CL_TILE(4)
CL_TILE(5)
CL_TILE(6)
CL_TILE(7)
CL_TILE(8)
CL_TILE(9)
CL_TILE(10)
CL_TILE(11)
CL_TILE(12)

/* the tile of tl->np pixels */
static void tile(const cl_tile *tl, int KH, int KW, int C4, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *y, int P,
                 const es_conv_params *p) {
    typedef void (*tile_fn)(const cl_tile *, int, int, int, const int32_t *, int8_t *, int,
                            const es_conv_params *);
    static const tile_fn by_n[NP + 1] = {NULL,   tile_1, tile_2,  tile_3,  tile_4,
                                         tile_5, tile_6, tile_7,  tile_8,  tile_9,
                                         tile_10, tile_11, tile_12};
    (void)mult;
    (void)shift;
    by_n[tl->np](tl, KH, KW, C4, bias, y, P, p);
}

/* ---- row tiles: stride-1 spatial convs on rows of 7 output pixels or more ----------------
 *
 * The tiles above gather their pixels' windows from xh through a pointer per pixel, so a
 * tile of more than 8 pixels runs out of general registers (tiles of 9..12 spill them).
 * Here a tile is n consecutive pixels of one output row (or, on rows of 7, two whole
 * rows), and the input is the pixel-lane conv's channel-quad planes (es_quads_i8.h): word
 * (c4, r, q) of the planes holds the quad's 4 channels at padded pixel (r, q), so pixel i
 * of the tile reads the word i places after pixel 0's for every tap and quad. One pointer
 * (two for two rows) and constant displacements address all n broadcasts, and a tile can
 * hold RT_MAX = 14 pixels: 28 accumulators, two weight vectors and the broadcast, 31 of
 * the 32 vector registers. Each step of the reduction then loads the pair's 128 bytes of
 * weights for 14 pixels instead of 7 or 8, and issues 28 vpdpbusd per 16 loads where the
 * gathered tiles issue 14 or 16 per 9 or 10.
 *
 * Measured on the Intel Xeon (AVX-512 VNNI) against the gathered tiles, one conv alone,
 * random weights, per-call minima in alternating rounds: 3x3 256->256 on 14x14 0.91-0.93x
 * (ResNet-18's layer3), 3x3 512->512 on 7x7 0.82-0.94x as pairs of rows (layer4; tiles of
 * one 7-pixel row 0.96-0.98x), 3x3 128->128 on 28x28 0.97x (layer2). Inside ResNet-18-224
 * int8 (trained zoo weights, 200 runs) those convs' share of perf samples went from 12.7 K
 * to 11.7 K of about 22 K; prefetching the weights 2 KB ahead took layer4's 3x3 convs
 * from 318-321 to 305-306 us and layer3's from 315-316 to 309-312 (per-step minima, 12
 * alternating rounds). Strided convs keep the gathered tiles: their phase planes cost
 * more to build than the tiles save (3x3 s2 256->512 to 7x7 1.08-1.14x as rows). */
#define RT_MAX 14

typedef struct {
    const uint32_t *xt; /* the padded input as channel-quad planes */
    size_t plane;       /* words from one quad's plane to the next */
    size_t row;         /* words from one padded row to the next */
    const size_t *tap;  /* words from a pixel's window origin to tap t */
    int T, C4;
} cl_rows;

/* Whether es_conv2d_i8_cl runs in row tiles: stride 1, a spatial kernel whose taps fit the
 * offset table, and either rows of 12 pixels or more, or rows of 7 or more where a block
 * pair's weights (T * C4 * 128 bytes) overflow the 48 KB L1 and so come from L2 for every
 * tile: a tile of 14 pixels reads them half as often as one of 7 or 8. Smaller convs keep
 * the gathered tiles, whose HWC input is cheaper to build than the planes are a row at a
 * time (3x3 64->64 on 7x7 and 9x9, 18 KB a pair: 1.06-1.13x as rows; 3x3 16->32 on 12x12
 * 0.91-0.96x, 32->32 on 14x14 0.73x). The planes take the same scratch as xh, 4 * Hp * Wp
 * * C4 bytes: stride 1 has no phases. */
static int use_rows(const es_conv_params *p) {
    const size_t pair = (size_t)p->KH * p->KW * ((p->C + 3) / 4) * 128;
    return p->SH == 1 && p->SW == 1 && p->KH * p->KW > 1 && p->KH * p->KW <= ES_DOT_MAXT &&
           (p->OW >= 12 || (p->OW >= 7 && pair > 48 * 1024));
}

/* one row tile of n pixels from flattened padded position v0, R rows of them (R = 2: n is
 * OW, and the second row's pixels start r->row words further), x 32 channels */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void row_tile_n(const cl_rows *r, size_t v0, const cl_tile *tl,
                              const int32_t *bias, int8_t *y, int P, const es_conv_params *p,
                              const int n, const int R) {
    const __mmask16 k0 = (__mmask16)es_mask16(tl->nm);
    const __mmask16 k1 = (__mmask16)es_mask16(tl->nm - 16);
    const __m512i b0 = _mm512_maskz_loadu_epi32(k0, bias + tl->m0);
    const __m512i b1 = _mm512_maskz_loadu_epi32(k1, bias + tl->m0 + NC);
    const int8_t *w0 = tl->w0, *w1 = tl->w1;
    __m512i s[2 * SP], u[2 * SP];
    int t, c4, i;
#pragma GCC unroll 16
    for (i = 0; i < 2 * SP; ++i) s[i] = u[i] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (i = 0; i < n * R; ++i) {
        s[i] = b0;
        u[i] = b1;
    }
    for (t = 0; t < r->T; ++t) {
        const uint32_t *a = r->xt + v0 + r->tap[t];
        for (c4 = 0; c4 < r->C4; ++c4, a += r->plane, w0 += 64, w1 += 64) {
            const __m512i wa = _mm512_loadu_si512(w0), wb = _mm512_loadu_si512(w1);
            const uint32_t *a2 = a + r->row;
            /* a pair's first tile reads its weights from L3 (ResNet-18's layer4: 147 KB a
             * pair, 4 tiles of 7x7); the streams 2 KB ahead are 32 lines the hardware has
             * not fetched yet */
            _mm_prefetch((const char *)(w0 + 2048), _MM_HINT_T0);
            _mm_prefetch((const char *)(w1 + 2048), _MM_HINT_T0);
#pragma GCC unroll 16
            for (i = 0; i < n * R; ++i) {
                const __m512i v = _mm512_set1_epi32((int)(i < n ? a[i] : a2[i - n]));
                s[i] = _mm512_dpbusd_epi32(s[i], v, wa);
                u[i] = _mm512_dpbusd_epi32(u[i], v, wb);
            }
        }
    }
    store_pair(s, u, tl, y, P, p);
}

typedef void (*row_tile_fn)(const cl_rows *, size_t, const cl_tile *, const int32_t *,
                            int8_t *, int, const es_conv_params *);
#define CL_ROW_TILE(N, R)                                                                      \
    static void row_tile_##N##x##R(const cl_rows *r, size_t v0, const cl_tile *tl,             \
                                   const int32_t *bias, int8_t *y, int P,                      \
                                   const es_conv_params *p) {                                  \
        row_tile_n(r, v0, tl, bias, y, P, p, N, R);                                            \
    }
CL_ROW_TILE(7, 1)
CL_ROW_TILE(8, 1)
CL_ROW_TILE(9, 1)
CL_ROW_TILE(10, 1)
CL_ROW_TILE(11, 1)
CL_ROW_TILE(12, 1)
CL_ROW_TILE(13, 1)
CL_ROW_TILE(14, 1)
CL_ROW_TILE(7, 2)

/* the conv in row tiles: rows split into near-equal tiles of at most RT_MAX (56 = 4 x 14,
 * 15 = 8 + 7: 7..14 pixels), rows of 7 two at a time (an odd last row alone) */
static void conv_rows(const int8_t *x, const int8_t *wc, const int32_t *bias_u8,
                      const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                      const es_conv_params *p) {
    static const row_tile_fn one_row[RT_MAX + 1] = {
        NULL,         NULL,         NULL,          NULL,          NULL,
        NULL,         NULL,         row_tile_7x1,  row_tile_8x1,  row_tile_9x1,
        row_tile_10x1, row_tile_11x1, row_tile_12x1, row_tile_13x1, row_tile_14x1};
    const es_dot_plan d = es_i8_dot_plan(p); /* stride 1: one phase, Hq x Wq = Hp x Wp */
    const int M16 = (p->M + NC - 1) / NC, P = p->OH * p->OW, OW = p->OW;
    const int per_row = (OW + RT_MAX - 1) / RT_MAX; /* tiles per row (rows of 8 or more) */
    const size_t block = (size_t)d.T * d.C4 * 64;   /* bytes of one weight block */
    size_t tap[ES_DOT_MAXT];
    cl_rows r;
    cl_tile tl;
    int b, t, oh, j;
    to_quads_u8(x, (uint32_t *)scratch, NULL, &d, p); /* S = 1 reads no row buffer */
    for (t = 0; t < d.T; ++t)
        tap[t] = (size_t)(t / p->KW * p->DH) * d.Wp + (size_t)(t % p->KW * p->DW);
    r.xt = (const uint32_t *)scratch;
    r.plane = (size_t)d.Hp * d.Wp;
    r.row = (size_t)d.Wp;
    r.tap = tap;
    r.T = d.T;
    r.C4 = d.C4;
    /* block pairs outside, as in es_conv2d_i8_cl */
    for (b = 0; b < M16; b += 2) {
        tl.m0 = b * NC;
        tl.nm = p->M - tl.m0 < 2 * NC ? p->M - tl.m0 : 2 * NC;
        tl.w0 = wc + (size_t)b * block;
        tl.w1 = b + 1 < M16 ? tl.w0 + block : tl.w0;
        pair_consts(&tl, mult, shift, p);
        for (oh = 0; oh < p->OH; ++oh) {
            int ow = 0;
            if (OW == 7 && oh + 1 < p->OH) { /* two whole rows */
                tl.p0 = oh * OW;
                tl.np = 2 * OW;
                row_tile_7x2(&r, (size_t)oh * d.Wp, &tl, bias_u8, y, P, p);
                ++oh;
                continue;
            }
            for (j = 0; j < per_row; ++j) {
                const int n = OW / per_row + (j < OW % per_row);
                tl.p0 = oh * OW + ow;
                tl.np = n;
                one_row[n](&r, (size_t)oh * d.Wp + ow, &tl, bias_u8, y, P, p);
                ow += n;
            }
        }
    }
}
#else
static void pair_consts(cl_tile *tl, const int32_t *mult, const int32_t *shift,
                        const es_conv_params *p) {
    (void)tl;
    (void)mult;
    (void)shift;
    (void)p;
}

/* the same tile in plain C: each stored pixel and channel on its own */
static void tile(const cl_tile *tl, int KH, int KW, int C4, const int32_t *bias,
                 const int32_t *mult, const int32_t *shift, int8_t *y, int P,
                 const es_conv_params *p) {
    int i, c, kh, kw, c4, e;
    for (c = 0; c < tl->nm; ++c) {
        const int8_t *wc = (c < NC ? tl->w0 : tl->w1) + 4 * (c % NC);
        const int m = tl->m0 + c;
        for (i = 0; i < tl->np; ++i) {
            const int8_t *w = wc;
            int32_t acc = bias[m];
            for (kh = 0; kh < KH; ++kh)
                for (kw = 0; kw < KW; ++kw) {
                    const uint32_t *a =
                        tl->xh + tl->org[i] + kh * tl->row_step + kw * tl->col_step;
                    for (c4 = 0; c4 < C4; ++c4, w += 64)
                        for (e = 0; e < 4; ++e)
                            acc += w[e] * (int32_t)(uint8_t)(a[c4] >> 8 * e);
                }
            y[(size_t)m * P + tl->p0 + i] =
                es_requant(acc, mult[m], shift[m], p->rq, p->y_zp, p->qmin, p->qmax);
        }
    }
}
#endif

/* how many tiles the P pixels of a plane run in, near-equal in size: one for up to NP
 * (a 3x3 plane in one tile of 9, its weights read once), else tiles of at most SP (tiles
 * of 9..12 pixels spill pointers and run slower per pixel than tiles of 8: 1x1 160->960 on
 * 7x7, 64 vs 55 us) */
static int pixel_tiles(int P) {
    return P <= NP ? 1 : (P + SP - 1) / SP;
}

void es_conv2d_i8_cl(const int8_t *x, const int8_t *wc, const int32_t *bias_u8,
                     const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                     const es_conv_params *p) {
    const int Hp = (p->OH - 1) * p->SH + (p->KH - 1) * p->DH + 1;
    const int Wp = (p->OW - 1) * p->SW + (p->KW - 1) * p->DW + 1;
    const int C4 = (p->C + 3) / 4, M16 = (p->M + NC - 1) / NC, P = p->OH * p->OW;
    const size_t block = (size_t)p->KH * p->KW * C4 * 64; /* bytes of one weight block */
    uint32_t *xh = (uint32_t *)scratch;
    const int nt = pixel_tiles(P);
    cl_tile tl;
    int b, i, t;
#if defined(ES_CL_VNNI)
    if (use_rows(p)) {
        conv_rows(x, wc, bias_u8, mult, shift, scratch, y, p);
        return;
    }
#endif
    to_hwc_u8(x, xh, Hp, Wp, C4, p);
    tl.xh = xh;
    tl.row_step = (size_t)p->DH * Wp * C4;
    tl.col_step = (size_t)p->DW * C4;
    /* block pairs outside, pixels inside: a pair's weights (KH*KW*C4*128 bytes) stay in L1
     * across the tiles of pixels, and its requantisation constants are set once */
    for (b = 0; b < M16; b += 2) {
        int oh = 0, ow = 0; /* the position of pixel p0 */
        tl.m0 = b * NC;
        tl.nm = p->M - tl.m0 < 2 * NC ? p->M - tl.m0 : 2 * NC;
        tl.w0 = wc + (size_t)b * block;
        tl.w1 = b + 1 < M16 ? tl.w0 + block : tl.w0;
        pair_consts(&tl, mult, shift, p);
        for (tl.p0 = 0, t = 0; tl.p0 < P; tl.p0 += tl.np, ++t) {
            int r = oh, q = ow;
            tl.np = P / nt + (t < P % nt); /* nt tiles as even as can be: 9 = 5 + 4 */
            for (i = 0; i < NP; ++i) { /* window origins; pixels past the last repeat it */
                tl.org[i] = ((size_t)r * p->SH * Wp + (size_t)q * p->SW) * C4;
                if (i + 1 < tl.np && ++q == p->OW) {
                    q = 0;
                    ++r;
                }
            }
            tile(&tl, p->KH, p->KW, C4, bias_u8, mult, shift, y, P, p);
            for (ow += tl.np; ow >= p->OW; ow -= p->OW) ++oh;
        }
    }
}
