/* Depthwise conv2d, int8, computed channel-innermost (HWC) on the runtime's CHW tensors.
 * Bit-identical to the reference es_conv2d_i8 (conv_int8.c) for group == C == M.
 *
 * Why. A depthwise conv sums over taps only, never over channels. es_dwconv2d_i8
 * (conv_int8_fast.c) therefore works one channel plane at a time and vectorises along the
 * output row. Late in a MobileNet the planes are small (4x4 to 16x16) and the channels
 * many (96 to 384): a row is then 4 to 16 lanes and the per-channel setup (padding the
 * plane, loop bounds, requantising a short plane) costs more than the multiplies.
 * XNNPACK puts the channels in the vector lanes instead (NHWC): each tap is one full-width
 * multiply-add over 16 channels whatever the plane size, and the weights, bias and
 * requantisation constants of those channels stay in registers for the whole plane. This
 * kernel does the same on blocks of 16 channels and pays for the layout with two
 * transposes: CHW int8 rows in, CHW int8 rows out. Where the generator hands it an expanding
 * 1x1 conv's output as pixel quads (x_pquads, es_conv_params), the input transpose is gone:
 * each row's dwords of 4 columns x 16 channels are loaded as they are (fill_row_pquads).
 *
 * Method, for each block of 16 channels (the last one padded with zero weights):
 *  1. Input rows. Output row oh reads the padded input rows r = oh*SH + kh*DH. Each such
 *     row is transposed once into a ring of row slots, channel innermost; the left and
 *     right padding stand for 0 (the reference skips padded taps, which is the same as
 *     adding 0). Row r lives in slot (r / DH) % NR, NR = KH: the KH rows of one output row
 *     are consecutive in r / DH, so they never share a slot, and a row the next output rows
 *     need again (stride < kernel) is still there. Rows in the top or bottom padding are
 *     never stored; their taps are skipped.
 *  2. Taps. acc[ow][c] = bias[c] + sum over taps of xrow[ow*SW + kw*DW][c] * w[kh][kw][c],
 *     16 channels per vector, unit stride in memory.
 *  3. Output. Accumulators are requantised per channel (es_requant per lane) into 16 bytes
 *     per output column; once RB = 16 / gcd(OW, 16) output rows are done (whole 16-column
 *     chunks; fewer rows when that would pass 128 columns), the block [column][16 channels]
 *     is transposed into 16 CHW runs of contiguous bytes, or, with
 *     y_quads (the generator hands the tensor to a 1x1 conv on the dot kernel), into the
 *     four uint8 channel-quad planes that kernel reads (a dword transpose, store_quads).
 *
 * Weights are packed by the generator as int8 [KH][KW][Cp], Cp = C rounded up to 16, zero
 * in the padded channels: the 16 weights of one tap and channel block are one load.
 * Scratch (ES_I8_DW_HWC_SCRATCH bytes, from the arena) does not grow with C: the ring of
 * NR rows of Wp columns of 16 channels, the output columns, the block's weights.
 *
 * AVX-512 with VNNI. vpdpbusd multiplies 64 unsigned by signed bytes and adds each four
 * into one int32 lane, so a ring column j holds per channel the four bytes
 * (x[j], x[j+DW], x[j+2DW], x[j+3DW]) + 128: taps kw .. kw+3 of one kernel row, and a
 * 3x3 kernel is one instruction per kernel row for 16 channels (the fourth weight is 0).
 * At stride 1 a 3x3 kernel reads only the even columns: column j with the weights
 * (w0, w1, w2, 0) is output j's kernel row, and with (0, w0, w1, w2) output j+1's, so the
 * fill stores and shifts half the columns (row_taps_3_pairs; 0.92-0.94x the time of
 * MobileNetV2's stride-1 layers of 12x12 and up).
 * The padding is x_zp + 128, and sum (x + 128) w = sum (x - x_zp) w + (x_zp + 128) sum w,
 * so each output row starts from the bias less (x_zp + 128) times the weight sums of the
 * kernel rows it reads. With DW = 1 the four bytes are contiguous in CHW memory: the input
 * row is transposed 16 columns at a time into 32-bit words q[i] = x[4i .. 4i+3] of each
 * channel (16 masked 128-bit broadcast loads and in-lane unpacks when all 16 channels and
 * columns exist; on rows in L1 the loads paired by 256-bit inserts instead), and every
 * ring column is a funnel shift of two neighbours,
 * (q[i] >> 8k) | (q[i+1] << 32-8k) per lane (one vpshrdd with VBMI2), with the padding
 * words on either side, made only where the stride reads it. Narrow rows (W <= 24) are
 * transposed B = 16 / gcd(W, 16) at a time (64 / W where that passes 64 bytes), since a
 * channel's consecutive rows are contiguous: the 16-byte chunks are then full instead of
 * one mostly empty chunk per row (W = 3, 6, 12, 24), each row is realigned by one funnel shift per four columns, and the
 * ring has NR = KH + B - 1 slots so that a batch of B rows never evicts a row the current
 * output row reads. When the padded rows the taps read all fit in those NR slots (planes
 * of 3x3 to 7x7 late in a network), a block holds its whole padded plane, the vertical
 * padding stored once per call, and the output pixels are computed as one flat run
 * (plane_taps): four pixels to a group across row ends, so a 6x6 plane is 9 groups instead
 * of 12 and one call per block instead of one per output row (0.80x the time on
 * MobileNetV2-96's 6x6 layers, 0.85x on its 3x3). With VBMI, a plane that fits 64 bytes
 * padded is padded by one byte permute per channel and transposed whole (fill_plane_vbmi),
 * with no work per row. Other dilations go through a byte
 * transpose of the row. Four output
 * columns share each weight vector and are requantised together (a row's last 1..3 as
 * well, under masks), packed to int8 by saturating packs; when every shift is <= -2 (the
 * usual case) the rounding needs only the high words of the 64-bit products
 * (es_mulq16_short, es_simd.h). The output transpose is 16x16 bytes in four registers:
 * dword permutes, then one byte permute (VBMI), or an in-lane byte shuffle that transposes
 * each 4x4 and a dword permute that puts the rows in place.
 * Portable C (every other target). The ring holds int16 rows of x - x_zp and each tap is a
 * 16-lane multiply-accumulate over 8 output columns that GCC vectorises at -O3. The
 * transposes are 16x16 byte zips where 128-bit vectors exist (SSE2, AArch64 NEON), and
 * the requantisation is per lane in AVX2 (es_mulq8v_avx2) or NEON (vmull, then vrshl and
 * vqmovn, which round and saturate exactly as es_mul_q); plain loops elsewhere. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "../edgesmith_rt.h"
#include "../es_simd.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)
#define ES_DW_HWC_VNNI 1
#include <immintrin.h>
#endif

/* The per-row steps stay separate functions (ES_NOINLINE): inlined into one loop nest,
 * their vector state spills and the kernel runs up to 1.5x slower (GCC 12, AVX-512). */

/* Where things are in scratch: the plan, each region on a multiple of 64 bytes, summing to
 * ES_I8_DW_HWC_SCRATCH(KH, KW, DH, DW, W, OW, Wp), whose terms are these in turn (the
 * weights region holds both builds' layouts, the row sums are used by the VNNI one). */
typedef struct {
    unsigned char *ring; /* nr slots of Wp columns x 64 bytes (16 channels x 4, or x 2 int16) */
    unsigned char *cols; /* DW > 1: one padded row as byte columns of 16 channels */
    int8_t *obuf;        /* obc output columns x 16 channels */
    unsigned char *wts;  /* the block's weights: KH x KQ quads x 16 (VNNI), or KH*KW x 16 int16 */
    int32_t *corr;       /* VNNI: KH x 16, (x_zp + 128) times each kernel row's weight sum */
    int32_t *tag;        /* nr: the padded row each slot holds, -1 when none */
    int32_t *vkh;        /* KH: the kernel rows that exist for the current output row ... */
    int32_t *voff;       /* KH: ... and where their slots start in ring (bytes) */
    int slot;            /* bytes per ring slot */
    int ncols;           /* columns in cols */
    int batch, nr;       /* input rows transposed together, ring slots (KH + batch - 1) */
    int rb, obc;         /* output rows per output transpose, output column capacity */
} dw_scratch;

static dw_scratch dw_layout(int32_t *scratch, const es_conv_params *p, int Wp) {
    dw_scratch s;
    unsigned char *b = (unsigned char *)scratch;
    const int KH = p->KH;
    s.slot = Wp * 64;
#if defined(ES_DW_HWC_VNNI)
    /* pixel quads need no batching: a row of whole quads fills whole vectors already */
    s.batch = p->x_pquads ? 1 : (int)ES_I8_DW_HWC_BATCH(p->KW, p->DH, p->DW, p->W);
#else
    s.batch = 1;
#endif
    s.nr = KH + s.batch - 1;
    s.ncols = p->DW > 1 ? (Wp + 3 * p->DW + 15) / 16 * 16 : 0;
    s.rb = (int)ES_I8_DW_HWC_RB(p->OW);
    s.obc = (int)ES_I8_DW_HWC_OBC(p->OW); /* rb*OW rounded up to 16 */
    s.ring = b;
    b += (size_t)s.nr * (size_t)s.slot;
    s.cols = b;
    b += 16u * (size_t)s.ncols;
    s.obuf = (int8_t *)b;
    b += 16u * (size_t)s.obc;
    s.wts = b;
    b += 64u * (size_t)KH * (size_t)((p->KW + 1) / 2);
    s.corr = (int32_t *)b;
    b += 64u * (size_t)KH;
    s.tag = (int32_t *)b;
    s.vkh = s.tag + s.nr;
    s.voff = s.vkh + KH;
    return s;
}

#if defined(ES_DW_HWC_VNNI)

/* 16 bytes of every channel: columns j0 .. j0+15 of the padded row (x_zp outside input
 * columns 0 .. n-1, which start at padded column lo) into a[k], lane l = channel 4k + l */
static inline void load_rows(__m512i a[4], const int8_t *src, size_t cstride, int nc,
                             int j0, int lo, int n, __m128i zp8) {
    const int first = j0 - lo; /* the input column of padded column j0 */
    const int vb = first < 0 ? -first : 0, ve = n - first < 16 ? n - first : 16;
    const __mmask16 lm = ve > vb ? (__mmask16)(((1u << ve) - 1u) & ~((1u << vb) - 1u)) : 0;
    __m128i r[16];
    int c, k;
    if (nc == 16 && lm == 0xffff) { /* the common case: 16 whole rows (first >= 0) */
        const int8_t *q = src + first;
        for (k = 0; k < 4; ++k, q += 4 * cstride) {
            __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)q));
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + cstride)), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + 2 * cstride)), 2);
            a[k] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(q + 3 * cstride)), 3);
        }
        return;
    }
    for (c = 0; c < 16; ++c) {
        /* padded column j0 of channel c; with left padding that is before the row, so the
         * address is formed in integers (the masked-off bytes are never read) */
        const void *q = (const void *)((uintptr_t)src + (uintptr_t)c * cstride +
                                       (uintptr_t)(intptr_t)first);
        r[c] = c >= nc ? zp8
               : lm == 0xffff ? _mm_loadu_si128((const __m128i *)q)
                              : _mm_mask_loadu_epi8(zp8, lm, q);
    }
    for (k = 0; k < 4; ++k) {
        __m512i v = _mm512_castsi128_si512(r[4 * k]);
        v = _mm512_inserti32x4(v, r[4 * k + 1], 1);
        v = _mm512_inserti32x4(v, r[4 * k + 2], 2);
        a[k] = _mm512_inserti32x4(v, r[4 * k + 3], 3);
    }
}

/* z[g] = dword g (bytes 4g..4g+3) of the 16 rows in a, row i at dword i */
static inline void tr_dwords(const __m512i a[4], __m512i z[4]) {
    /* dwords (i, g) for the eight rows of a pair of registers, g in {0, 1} or {2, 3}: the
     * eight of the lower g, then the eight of the upper */
    const __m512i g01 =
        _mm512_set_epi32(29, 25, 21, 17, 13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i g23 =
        _mm512_set_epi32(31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2);
    const __m512i p01 = _mm512_permutex2var_epi32(a[0], g01, a[1]); /* rows 0-7 */
    const __m512i q01 = _mm512_permutex2var_epi32(a[2], g01, a[3]); /* rows 8-15 */
    const __m512i p23 = _mm512_permutex2var_epi32(a[0], g23, a[1]);
    const __m512i q23 = _mm512_permutex2var_epi32(a[2], g23, a[3]);
    z[0] = _mm512_shuffle_i64x2(p01, q01, 0x44);
    z[1] = _mm512_shuffle_i64x2(p01, q01, 0xee);
    z[2] = _mm512_shuffle_i64x2(p23, q23, 0x44);
    z[3] = _mm512_shuffle_i64x2(p23, q23, 0xee);
}

/* b = the transpose of the 16x16 byte matrix a (4 rows per register, one per lane) */
static inline void tr16x16(const __m512i a[4], __m512i b[4]) {
    __m512i z[4];
    int g;
#if defined(__AVX512VBMI__)
    /* z[g] byte 4i + k is byte 4g + k of row i; b[g] byte 16k + i wants it: one byte permute */
    const __m512i t = _mm512_set_epi32(
        0x3f3b3733, 0x2f2b2723, 0x1f1b1713, 0x0f0b0703, 0x3e3a3632, 0x2e2a2622, 0x1e1a1612,
        0x0e0a0602, 0x3d393531, 0x2d292521, 0x1d191511, 0x0d090501, 0x3c383430, 0x2c282420,
        0x1c181410, 0x0c080400);
    tr_dwords(a, z);
    for (g = 0; g < 4; ++g) b[g] = _mm512_permutexvar_epi8(t, z[g]);
#else
    /* byte 4k + r of a lane <- byte 4r + k: each lane's 4x4 transposed; the same pattern of
     * dwords (d4) moves dword 4l + k to 4k + l across lanes */
    const __m512i t4 = _mm512_set4_epi32(0x0f0b0703, 0x0e0a0602, 0x0d090501, 0x0c080400);
    const __m512i d4 = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    tr_dwords(a, z);
    for (g = 0; g < 4; ++g) b[g] = _mm512_permutexvar_epi32(d4, _mm512_shuffle_epi8(z[g], t4));
#endif
}

/* the four bytes k .. k+3 of the eight bytes (lo, hi) of each lane, k a constant 1..3.
 * A macro, not a function: VBMI2's shift count must be an immediate even at -O0. */
#if defined(__AVX512VBMI2__)
#define ES_DW_FUNNEL(lo, hi, k) _mm512_shrdi_epi32((lo), (hi), 8 * (k))
#else
#define ES_DW_FUNNEL(lo, hi, k) \
    _mm512_or_si512(_mm512_srli_epi32((lo), 8 * (k)), _mm512_slli_epi32((hi), 32 - 8 * (k)))
#endif

/* Ring columns j .. j+3 that exist (0 <= j < Wp) and that the stride reads (a multiple of
 * step): the quads at bytes 0, 1, 2, 3 of the eight bytes (lo, hi) of each channel. km:
 * bit k set when j + k is a multiple of step (the same for every j = lo mod 4 of a row) */
static inline void four_quads(unsigned char *dst, __m512i lo, __m512i hi, int j, int Wp,
                              unsigned km) {
    if (j >= 0 && j + 4 <= Wp) { /* all four exist: the usual case, one test per column */
        unsigned char *d = dst + (size_t)j * 64;
        if (km & 1u) _mm512_storeu_si512(d, lo);
        if (km & 2u) _mm512_storeu_si512(d + 64, ES_DW_FUNNEL(lo, hi, 1));
        if (km & 4u) _mm512_storeu_si512(d + 128, ES_DW_FUNNEL(lo, hi, 2));
        if (km & 8u) _mm512_storeu_si512(d + 192, ES_DW_FUNNEL(lo, hi, 3));
        return;
    }
    if ((km & 1u) && j >= 0 && j < Wp) _mm512_storeu_si512(dst + (size_t)j * 64, lo);
    if ((km & 2u) && j + 1 >= 0 && j + 1 < Wp)
        _mm512_storeu_si512(dst + (size_t)(j + 1) * 64, ES_DW_FUNNEL(lo, hi, 1));
    if ((km & 4u) && j + 2 >= 0 && j + 2 < Wp)
        _mm512_storeu_si512(dst + (size_t)(j + 2) * 64, ES_DW_FUNNEL(lo, hi, 2));
    if ((km & 8u) && j + 3 >= 0 && j + 3 < Wp)
        _mm512_storeu_si512(dst + (size_t)(j + 3) * 64, ES_DW_FUNNEL(lo, hi, 3));
}

/* four_quads' km for the columns j = lo mod 4: bit k when lo + k is a multiple of step */
static inline unsigned stride_quads(int lo, int step) {
    const int m = step - 1;
    return (((lo & m) == 0) ? 1u : 0u) | ((((lo + 1) & m) == 0) ? 2u : 0u) |
           ((((lo + 2) & m) == 0) ? 4u : 0u) | ((((lo + 3) & m) == 0) ? 8u : 0u);
}

/* z[g] lane k = dword g of lane k of b[0], b[1], b[2], b[3]: a 4x4 dword transpose within
 * each 128-bit lane (two rounds of unpacks), the last step of both row loaders below */
static inline void lanes_tr4x4(__m512i z[4], const __m512i b[4]) {
    const __m512i t0 = _mm512_unpacklo_epi32(b[0], b[1]); /* dwords 0 of b0, b1, 1 of b0, b1 */
    const __m512i t1 = _mm512_unpackhi_epi32(b[0], b[1]); /* 2 of b0, b1, 3 of b0, b1 */
    const __m512i t2 = _mm512_unpacklo_epi32(b[2], b[3]);
    const __m512i t3 = _mm512_unpackhi_epi32(b[2], b[3]);
    z[0] = _mm512_unpacklo_epi64(t0, t2);
    z[1] = _mm512_unpackhi_epi64(t0, t2);
    z[2] = _mm512_unpacklo_epi64(t1, t3);
    z[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* z[g] = bytes i .. i+15 of 16 whole channel rows (src + c*cstride) as dwords, z[g] dword c
 * = bytes 4g .. 4g+3 of channel c: tr_dwords(load_rows(..)) for the common case, in fewer
 * cross-lane shuffles. Each 128-bit load is broadcast into its lane under a mask (a load
 * and a blend, no shuffle), channel 4k + m into lane k of b[m]; then z[g] lane k is dword
 * g of lane k of b[0..3], a 4x4 dword transpose within each lane (unpacks). */
static inline void load_tr_dwords(__m512i z[4], const int8_t *src, size_t cstride) {
    const __mmask16 lane[4] = {0x000f, 0x00f0, 0x0f00, 0xf000};
    __m512i b[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
    int k, m;
    for (k = 0; k < 4; ++k) /* one pointer stepping through the channels */
        for (m = 0; m < 4; ++m, src += cstride)
            b[m] = _mm512_mask_broadcast_i32x4(b[m], lane[k],
                                               _mm_loadu_si128((const __m128i *)src));
    lanes_tr4x4(z, b);
}

/* load_tr_dwords with b[m] built from 128-bit loads paired into 256-bit halves (vinserti128
 * with a memory operand) and one 512-bit insert, instead of four merge-masked broadcasts:
 * the same z. Where the 16 rows are in L1 (the narrow rows of fill_rows_narrow, the whole
 * planes of fill_plane_vbmi) that is 0.96-0.98x the time of MobileNetV2's layers of 24x24
 * and less; on rows of 48 and 112 bytes read from L2 (fill_row_quads, its first layers)
 * it measured 1.02-1.07x, not understood, so those keep the broadcasts. */
static inline void load_tr_dwords_ins(__m512i z[4], const int8_t *src, size_t cstride) {
    __m512i b[4];
    int m;
    for (m = 0; m < 4; ++m) { /* lane k of b[m]: channel 4k + m */
        const int8_t *q = src + (size_t)m * cstride;
        const __m256i e0 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q)),
            _mm_loadu_si128((const __m128i *)(q + 4 * cstride)), 1);
        const __m256i e1 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(q + 8 * cstride))),
            _mm_loadu_si128((const __m128i *)(q + 12 * cstride)), 1);
        b[m] = _mm512_inserti64x4(_mm512_castsi256_si512(e0), e1, 1);
    }
    lanes_tr4x4(z, b);
}

/* One padded row into a ring slot when DW = 1: column j is bytes j .. j+3 of the padded row
 * (+ 128), input bytes o .. o+3 with o = j - lo. The input row is transposed in 16-column
 * chunks into dwords (input bytes 4g .. 4g+3 of the chunk, one dword transpose per chunk,
 * no padding inside), and every column is a funnel shift of two neighbouring dwords; the
 * dword before the row and those past it are the padding. Only the columns the stride
 * reads (j a multiple of step = gcd(SW, 4)) are made. Transposing input rather than padded
 * columns means a W = 16 row is one transpose, not two with the second nearly empty. */
ES_NOINLINE static void fill_row_quads(unsigned char *dst, const int8_t *src,
                                          size_t cstride, int nc, int lo, int n, int Wp,
                                          int step, int32_t xzp) {
    const __m128i zp8 = _mm_set1_epi8((char)xzp);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i pad = _mm512_xor_si512(_mm512_broadcast_i32x4(zp8), flip);
    __m512i prev = pad; /* input bytes i0-4 .. i0-1 */
    const unsigned km = stride_quads(lo, step);
    int i0, j;
    for (j = 0; j < lo - 4; j += step) /* a wide left padding: quads of padding only */
        _mm512_storeu_si512(dst + (size_t)j * 64, pad);
    for (i0 = 0; lo + i0 - 4 < Wp; i0 += 16) {
        __m512i z[4] = {pad, pad, pad, pad}; /* z[g]: input bytes i0+4g .. i0+4g+3 */
        const int jb = lo + i0 - 4;         /* the column that starts at byte i0 - 4 */
        if (i0 < n) {
            __m512i a[4];
            if (nc == 16 && i0 + 16 <= n) {
                load_tr_dwords(z, src + i0, cstride);
            } else {
                load_rows(a, src, cstride, nc, i0, 0, n, zp8);
                tr_dwords(a, z);
            }
            z[0] = _mm512_xor_si512(z[0], flip);
            z[1] = _mm512_xor_si512(z[1], flip);
            z[2] = _mm512_xor_si512(z[2], flip);
            z[3] = _mm512_xor_si512(z[3], flip);
        }
        /* spelled out, not a loop, so that z stays in registers (GCC 12) */
        four_quads(dst, prev, z[0], jb, Wp, km);
        four_quads(dst, z[0], z[1], jb + 4, Wp, km);
        four_quads(dst, z[1], z[2], jb + 8, Wp, km);
        four_quads(dst, z[2], z[3], jb + 12, Wp, km);
        prev = z[3];
    }
}

/* fill_row_quads of a row that is already pixel quads (x_pquads, es_conv_params): dword g
 * of the chunk at input byte i0 is the 64 bytes at src + (i0 / 4 + g) * 64 as they are,
 * +128 included, so the row costs one load per four columns and no transpose. A quad that
 * holds the last input column the padded row takes (n) is loaded whole: its bytes past n,
 * where Wp cuts the row, sit at padded columns >= Wp, which only zero weights read. */
ES_NOINLINE static void fill_row_pquads(unsigned char *dst, const unsigned char *src, int lo,
                                        int n, int Wp, int step, int32_t xzp) {
    const __m512i pad = _mm512_set1_epi8((char)(xzp + 128));
    __m512i prev = pad; /* input bytes i0-4 .. i0-1 */
    const unsigned km = stride_quads(lo, step);
    int i0, j, g;
    for (j = 0; j < lo - 4; j += step) /* a wide left padding: quads of padding only */
        _mm512_storeu_si512(dst + (size_t)j * 64, pad);
    for (i0 = 0; lo + i0 - 4 < Wp; i0 += 16) {
        __m512i z[4];
        const int jb = lo + i0 - 4;
        for (g = 0; g < 4; ++g)
            z[g] = i0 + 4 * g < n ? _mm512_loadu_si512(src + (size_t)(i0 + 4 * g) * 16) : pad;
        four_quads(dst, prev, z[0], jb, Wp, km);
        four_quads(dst, z[0], z[1], jb + 4, Wp, km);
        four_quads(dst, z[1], z[2], jb + 8, Wp, km);
        four_quads(dst, z[2], z[3], jb + 12, Wp, km);
        prev = z[3];
    }
}

/* the four bytes k .. k+3 of the eight bytes (lo, hi) of each lane, k = 0..3 */
static inline __m512i funnel(__m512i lo, __m512i hi, int k) {
#if defined(__AVX512VBMI2__)
    return _mm512_shrdv_epi32(lo, hi, _mm512_set1_epi32(8 * k));
#else
    const __m128i r = _mm_cvtsi32_si128(8 * k), l = _mm_cvtsi32_si128(32 - 8 * k);
    return k ? _mm512_or_si512(_mm512_srl_epi32(lo, r), _mm512_sll_epi32(hi, l)) : lo;
#endif
}

/* padded columns j .. j+3 (j a multiple of 4) of the row whose input column 0 is flat byte
 * f0 of zz (zz[0] the padding dword before flat byte 0, zz[g + 1] flat bytes 4g .. 4g+3):
 * the row's bytes where the input columns 0 .. n-1 land (padded column lo on), the
 * padding elsewhere */
static inline __m512i padded_dword(const __m512i *zz, __m512i pad, int f0, int j, int lo,
                                   int n) {
    const int o = j - lo; /* the input column of byte 0 */
    /* bytes e with 0 <= o + e < n: those below n - o, less those below -o */
    const int hi = n - o < 0 ? 0 : n - o > 4 ? 4 : n - o, lo_ = -o < 0 ? 0 : -o > 4 ? 4 : -o;
    const unsigned keep = ((1u << hi) - 1u) & ~((1u << lo_) - 1u);
    int z;
    __m512i q;
    if (!keep) return pad;
    z = f0 + o + 4; /* >= 1: some byte is in the row, so o >= -3 */
    q = funnel(zz[z >> 2], zz[(z >> 2) + 1], z & 3);
    return keep == 15u ? q
                       : _mm512_mask_blend_epi8((__mmask64)(keep * 0x1111111111111111ULL), pad, q);
}

/* Narrow rows (W <= 24, DH = DW = 1, ES_I8_DW_HWC_BATCH): nb rows, nb*W <= 64, are nb*W
 * contiguous bytes of each channel plane, transposed in chunks of 16 into flat dwords (row
 * r + b into the ring slot after row r + b - 1's, row r's being slot). Batching up to 64
 * bytes rather than 16 keeps the chunks full: a row of 12 or 24 bytes alone fills 3/4 of
 * its last chunk, four or two of them fill three chunks (from W = 25 on, batching saves
 * no chunk and fill_row_quads' immediate shifts are cheaper). The quad at padded column j of
 * row b is flat bytes f .. f+3, f = b*W + j - lo; bytes outside the row's input columns
 * are replaced by the padding. */
ES_NOINLINE static void fill_rows_narrow(const dw_scratch *s, const int8_t *src,
                                            size_t cstride, int nc, int nb, int W, int lo,
                                            int n, int Wp, int r, int slot, int step,
                                            int32_t xzp) {
    const __m128i zp8 = _mm_set1_epi8((char)xzp);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i pad = _mm512_xor_si512(_mm512_broadcast_i32x4(zp8), flip);
    const int nf = nb * W; /* flat bytes, <= 64 */
    __m512i a[4], zz[18]; /* zz[g + 1]: flat bytes 4g .. 4g+3; zz[0], zz[nd + 1] padding */
    int g, b, j, c, nd = 0;
    for (c = 0; 16 * c < nf; ++c, nd += 4) {
        if (nc == 16 && 16 * c + 16 <= nf) {
            load_tr_dwords_ins(zz + 1 + nd, src + 16 * c, cstride);
        } else {
            load_rows(a, src, cstride, nc, 16 * c, 0, nf, zp8);
            tr_dwords(a, zz + 1 + nd);
        }
    }
    for (g = 1; g <= nd; ++g) zz[g] = _mm512_xor_si512(zz[g], flip);
    zz[0] = zz[nd + 1] = pad;
    if ((W & 3) == 0 && n == W) {
        /* each row whole dwords, all of it in the padded row (W = 4, 8, ...): it is
         * fill_row_quads' row with the padding dwords on either side */
        const unsigned km = stride_quads(lo, step);
        const int wd = W / 4; /* dwords per row */
        for (b = 0; b < nb; ++b, slot = slot + 1 < s->nr ? slot + 1 : 0) {
            const __m512i *d = zz + 1 + b * wd;
            unsigned char *dst = s->ring + (size_t)slot * s->slot;
            for (j = 0; j < lo - 4; j += step) /* a wide left padding */
                _mm512_storeu_si512(dst + (size_t)j * 64, pad);
            for (g = 0; lo - 4 + 4 * g < Wp; ++g) /* the dwords before, in and after the row */
                four_quads(dst, g > 0 && g <= wd ? d[g - 1] : pad, g < wd ? d[g] : pad,
                           lo - 4 + 4 * g, Wp, km);
            s->tag[slot] = r + b;
        }
        return;
    }
    for (b = 0; b < nb; ++b, slot = slot + 1 < s->nr ? slot + 1 : 0) {
        /* Row b realigned: the padded row's dwords (padded columns 4k .. 4k+3), one funnel
         * shift by the row's offset each, and then fill_row_quads' immediate funnels. One
         * variable shift per four columns instead of one per column: a row of W = 3, 6, 12
         * is not whole dwords, and a loop over columns was most of a 6x6 layer's time. */
        const unsigned km = stride_quads(0, step); /* the columns j = 0 mod 4 */
        unsigned char *dst = s->ring + (size_t)slot * s->slot;
        __m512i cur = padded_dword(zz, pad, b * W, 0, lo, n), nxt;
        for (j = 0; j < Wp; j += 4, cur = nxt) {
            nxt = padded_dword(zz, pad, b * W, j + 4, lo, n);
            four_quads(dst, cur, nxt, j, Wp, km);
        }
        s->tag[slot] = r + b;
    }
}

#if defined(__AVX512VBMI__)
/* A whole plane of at most 64 bytes whose padded rows the taps read are at most 64 bytes too
 * (plane_taps; 6x6 and 3x3 planes): each channel's plane is padded by one byte permute (ix:
 * the input byte of each padded position f = r*Wp + j, or 64 for the padding), the 16
 * padded planes are transposed to dwords, and the quad of padded row r, column j is a
 * funnel shift of the dwords around f, stored at ring slot r, column j (slots are Wp
 * columns apart). The bytes of a quad past its row's end are the next row's; the weights
 * there are 0. No work per row or column: fill_rows_narrow's per-row realignment took as
 * long as the taps on these planes. Positions f0 .. f1-1 (the input rows) are stored; the
 * vertical padding is stored once per call. */
ES_NOINLINE static void fill_plane_vbmi(unsigned char *ring, const int8_t *src, size_t cstride,
                                        int nc, int hw, const unsigned char *ix, int f0,
                                        int f1, int32_t xzp) {
    const __m512i zp = _mm512_set1_epi8((char)xzp), flip = _mm512_set1_epi8((char)0x80);
    const __m512i idx = _mm512_loadu_si512(ix);
    const __mmask64 lm = hw >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << hw) - 1u);
    const int nk = (f1 + 3 + 15) / 16 < 4 ? (f1 + 3 + 15) / 16 : 4; /* 16-byte chunks read */
    int8_t pl[16 * 64];
    __m512i d[17];
    int c, k, g;
    for (c = 0; c < 16; ++c)
        _mm512_storeu_si512(pl + 64 * c,
                            c < nc ? _mm512_permutex2var_epi8(
                                         _mm512_maskz_loadu_epi8(lm, src + (size_t)c * cstride),
                                         idx, zp)
                                   : zp);
    for (k = 0; k < 4; ++k) {
        if (k < nk) {
            load_tr_dwords_ins(d + 4 * k, pl + 16 * k, 64);
            for (g = 4 * k; g < 4 * k + 4; ++g) d[g] = _mm512_xor_si512(d[g], flip);
        } else {
            d[4 * k] = d[4 * k + 1] = d[4 * k + 2] = d[4 * k + 3] = _mm512_xor_si512(zp, flip);
        }
    }
    d[16] = _mm512_xor_si512(zp, flip);
    for (g = f0 / 4; 4 * g < f1; ++g) {
        unsigned char *q = ring + (size_t)g * 256;
        const int f = 4 * g;
        if (f >= f0 && f + 4 <= f1) {
            _mm512_storeu_si512(q, d[g]);
            _mm512_storeu_si512(q + 64, ES_DW_FUNNEL(d[g], d[g + 1], 1));
            _mm512_storeu_si512(q + 128, ES_DW_FUNNEL(d[g], d[g + 1], 2));
            _mm512_storeu_si512(q + 192, ES_DW_FUNNEL(d[g], d[g + 1], 3));
            continue;
        }
        if (f >= f0 && f < f1) _mm512_storeu_si512(q, d[g]);
        if (f + 1 >= f0 && f + 1 < f1) _mm512_storeu_si512(q + 64, ES_DW_FUNNEL(d[g], d[g + 1], 1));
        if (f + 2 >= f0 && f + 2 < f1) _mm512_storeu_si512(q + 128, ES_DW_FUNNEL(d[g], d[g + 1], 2));
        if (f + 3 >= f0 && f + 3 < f1) _mm512_storeu_si512(q + 192, ES_DW_FUNNEL(d[g], d[g + 1], 3));
    }
}
#endif

/* (c0, c1, c2, c3) byte columns of 16 channels -> 16 quads (c0[c], c1[c], c2[c], c3[c]) */
static inline __m512i quads16(__m128i c0, __m128i c1, __m128i c2, __m128i c3) {
    const __m128i t0 = _mm_unpacklo_epi8(c0, c1), t1 = _mm_unpackhi_epi8(c0, c1);
    const __m128i t2 = _mm_unpacklo_epi8(c2, c3), t3 = _mm_unpackhi_epi8(c2, c3);
    __m512i q = _mm512_castsi128_si512(_mm_unpacklo_epi16(t0, t2));
    q = _mm512_inserti32x4(q, _mm_unpackhi_epi16(t0, t2), 1);
    q = _mm512_inserti32x4(q, _mm_unpacklo_epi16(t1, t3), 2);
    return _mm512_inserti32x4(q, _mm_unpackhi_epi16(t1, t3), 3);
}

/* One padded row into a ring slot for any DW: transposed into byte columns (+ 128) in
 * s->cols, Wp + 3 DW of them, then column j gathers columns j, j+DW, j+2DW, j+3DW */
ES_NOINLINE static void fill_row_dilated(const dw_scratch *s, unsigned char *dst,
                                            const int8_t *src, size_t cstride, int nc, int lo,
                                            int n, int Wp, int DW, int32_t xzp) {
    const __m128i zp8 = _mm_set1_epi8((char)xzp);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    int j0, j, k;
    for (j0 = 0; j0 < s->ncols; j0 += 16) {
        __m512i a[4], b[4];
        load_rows(a, src, cstride, nc, j0, lo, n, zp8);
        tr16x16(a, b);
        for (k = 0; k < 4; ++k)
            _mm512_storeu_si512(s->cols + (size_t)(j0 + 4 * k) * 16, _mm512_xor_si512(b[k], flip));
    }
    for (j = 0; j < Wp; ++j) {
        const unsigned char *cj = s->cols + (size_t)j * 16;
        const size_t d = (size_t)DW * 16;
        _mm512_storeu_si512(dst + (size_t)j * 64,
                            quads16(_mm_loadu_si128((const __m128i *)cj),
                                    _mm_loadu_si128((const __m128i *)(cj + d)),
                                    _mm_loadu_si128((const __m128i *)(cj + 2 * d)),
                                    _mm_loadu_si128((const __m128i *)(cj + 3 * d))));
    }
}

/* The block's weights as KH x KQ quads (w[kh][4q + e][c], e < 4, 0 past KW), and
 * corr[kh] = (x_zp + 128) * sum over kw of w[kh][kw][c] */
static void block_weights(const dw_scratch *s, const int8_t *w, int KH, int KW, int Cp,
                          int32_t xzp) {
    const int KQ = (KW + 3) / 4;
    const __m512i zu = _mm512_set1_epi8((char)(xzp + 128));
    int kh, q, e;
    for (kh = 0; kh < KH; ++kh) {
        __m512i corr = _mm512_setzero_si512();
        for (q = 0; q < KQ; ++q) {
            __m128i t[4];
            __m512i wq;
            for (e = 0; e < 4; ++e)
                t[e] = 4 * q + e < KW ? _mm_loadu_si128((const __m128i *)(
                                            w + (size_t)(kh * KW + 4 * q + e) * Cp))
                                      : _mm_setzero_si128();
            wq = quads16(t[0], t[1], t[2], t[3]);
            _mm512_storeu_si512(s->wts + (size_t)(kh * KQ + q) * 64, wq);
            corr = _mm512_dpbusd_epi32(corr, zu, wq);
        }
        _mm512_storeu_si512(s->corr + (size_t)kh * 16, corr);
    }
}

/* requantisation constants of a block of 16 channels (es_rq16, es_simd.h) and the output
 * range, broadcast once per block */
typedef struct {
    es_rq16 r;
    __m512i yzp, qmin, qmax, yzp16, qmin8, qmax8;
} dw_rq;

static void block_consts(__m512i *bias, dw_rq *q, const int32_t *b, const int32_t *mult,
                         const int32_t *shift, int nc, const es_conv_params *p) {
    *bias = _mm512_maskz_loadu_epi32((__mmask16)((1u << nc) - 1u), b);
    q->r = es_rq16_setup(mult, shift, nc, p->rq, p->y_zp, p->qmin, p->qmax);
    q->yzp = _mm512_set1_epi32(p->y_zp);
    q->qmin = _mm512_set1_epi32(p->qmin);
    q->qmax = _mm512_set1_epi32(p->qmax);
    q->yzp16 = _mm512_set1_epi16((short)p->y_zp);
    q->qmin8 = _mm512_set1_epi8((char)p->qmin);
    q->qmax8 = _mm512_set1_epi8((char)p->qmax);
}

/* es_mul_q of 16 lanes */
static inline __m512i rescale(__m512i acc, const dw_rq *q) { return es_rq16_apply(acc, &q->r); }

/* four output columns, 64 bytes (those in store mask m). Packing to int16 with saturation
 * before adding y_zp
 * (saturating) and clamping gives the same bytes: a value outside int16 is outside
 * [qmin - y_zp, qmax - y_zp] either way. The packs interleave the four columns by lane;
 * the dword permute puts each column's 16 bytes together. */
static inline void store4(int8_t *o, const __m512i acc[4], const dw_rq *q, __mmask16 m) {
    const __m512i d4 = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i p01 =
        _mm512_adds_epi16(_mm512_packs_epi32(rescale(acc[0], q), rescale(acc[1], q)), q->yzp16);
    const __m512i p23 =
        _mm512_adds_epi16(_mm512_packs_epi32(rescale(acc[2], q), rescale(acc[3], q)), q->yzp16);
    __m512i v = _mm512_packs_epi16(p01, p23);
    v = _mm512_min_epi8(_mm512_max_epi8(v, q->qmin8), q->qmax8);
    _mm512_mask_storeu_epi32(o, m, _mm512_permutexvar_epi32(d4, v));
}

/* acc[t] += the quads at x + t*sc times w, t = 0..3: four taps for four output columns */
static inline void tap4(__m512i acc[4], const unsigned char *x, size_t sc, __m512i w) {
    acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_loadu_si512(x), w);
    acc[1] = _mm512_dpbusd_epi32(acc[1], _mm512_loadu_si512(x + sc), w);
    acc[2] = _mm512_dpbusd_epi32(acc[2], _mm512_loadu_si512(x + 2 * sc), w);
    acc[3] = _mm512_dpbusd_epi32(acc[3], _mm512_loadu_si512(x + 3 * sc), w);
}

/* tap4 for the last 1..3 columns of a row (n of them): the quads of the columns that do not
 * exist are not read (a masked load reads nothing and cannot fault; their addresses, which
 * may lie past the ring, are formed in integers), so the tail costs one group of four
 * columns instead of one requantisation per column: on narrow rows (OW = 3, 6, 7, 14) the
 * tail is most of the row */
static inline void tap4_tail(__m512i acc[4], const unsigned char *x, size_t sc, __m512i w,
                             int n) {
    const uintptr_t b = (uintptr_t)x;
    acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_loadu_si512(x), w);
    acc[1] = _mm512_dpbusd_epi32(
        acc[1], _mm512_maskz_loadu_epi32(n > 1 ? 0xffff : 0, (const void *)(b + sc)), w);
    acc[2] = _mm512_dpbusd_epi32(
        acc[2], _mm512_maskz_loadu_epi32(n > 2 ? 0xffff : 0, (const void *)(b + 2 * sc)), w);
    acc[3] = _mm512_dpbusd_epi32(acc[3], _mm512_setzero_si512(), w);
}

/* the store mask of the first n of four 16-byte output columns */
static inline __mmask16 cols_mask(int n) { return (__mmask16)((1u << (4 * n)) - 1u); }

/* one output row of the block: OW columns of 16 bytes into o; any kernel */
static void row_taps(int8_t *o, const dw_scratch *s, int nv, __m512i bias, const dw_rq *rqp,
                     int OW, int SW, int DW, int KQ) {
    const dw_rq rc = *rqp, *rq = &rc; /* a local copy: stores to o cannot alias it */
    const size_t sc = (size_t)SW * 64, dq = (size_t)DW * 256; /* to the next column, quad */
    int ow, i, q;
    for (ow = 0; ow < OW; ow += 4) {
        const int n = OW - ow; /* columns left; under 4 only in the row's last group */
        __m512i a[4], b[4];
        a[0] = a[1] = a[2] = a[3] = bias;
        b[0] = b[1] = b[2] = b[3] = _mm512_setzero_si512();
        for (i = 0; i < nv; ++i) {
            const unsigned char *xr = s->ring + s->voff[i] + (size_t)ow * sc;
            const unsigned char *wr = s->wts + (size_t)s->vkh[i] * KQ * 64;
            for (q = 0; q < KQ; ++q) {
                const __m512i wq = _mm512_loadu_si512(wr + (size_t)q * 64);
                /* odd quads into a second set of sums: a 5x5 kernel is then two chains of 5
                 * dependent multiply-adds per column, not one of 10 (0.93-0.95x the time of
                 * EfficientNet's and MobileNetV3's 5x5 layers) */
                if (n >= 4) {
                    if (q & 1)
                        tap4(b, xr + (size_t)q * dq, sc, wq);
                    else
                        tap4(a, xr + (size_t)q * dq, sc, wq);
                } else {
                    if (q & 1)
                        tap4_tail(b, xr + (size_t)q * dq, sc, wq, n);
                    else
                        tap4_tail(a, xr + (size_t)q * dq, sc, wq, n);
                }
            }
        }
        a[0] = _mm512_add_epi32(a[0], b[0]);
        a[1] = _mm512_add_epi32(a[1], b[1]);
        a[2] = _mm512_add_epi32(a[2], b[2]);
        a[3] = _mm512_add_epi32(a[3], b[3]);
        store4(o + (size_t)ow * 16, a, rq, n >= 4 ? 0xffff : cols_mask(n));
    }
}

/* the same for three kernel rows of up to four taps (3x3), the quads in registers. A
 * row in the vertical padding comes as another row's pointer and a zero weight. */
static void row_taps_3(int8_t *o, const unsigned char *const r[3], const __m512i w[3],
                       __m512i bias, const dw_rq *rqp, int OW, int SW) {
    const dw_rq rc = *rqp, *rq = &rc; /* a local copy: stores to o cannot alias it */
    const size_t sc = (size_t)SW * 64;
    const __m512i w0 = w[0], w1 = w[1], w2 = w[2];
    const unsigned char *r0 = r[0], *r1 = r[1], *r2 = r[2];
    int ow;
    for (ow = 0; ow + 4 <= OW; ow += 4) {
        const size_t off = (size_t)ow * sc;
        __m512i a[4];
        a[0] = a[1] = a[2] = a[3] = bias;
        tap4(a, r0 + off, sc, w0);
        tap4(a, r1 + off, sc, w1);
        tap4(a, r2 + off, sc, w2);
        store4(o + (size_t)ow * 16, a, rq, 0xffff);
    }
    if (ow < OW) { /* the last 1..3 columns as one group */
        const size_t off = (size_t)ow * sc;
        __m512i a[4];
        a[0] = a[1] = a[2] = a[3] = bias;
        tap4_tail(a, r0 + off, sc, w0, OW - ow);
        tap4_tail(a, r1 + off, sc, w1, OW - ow);
        tap4_tail(a, r2 + off, sc, w2, OW - ow);
        store4(o + (size_t)ow * 16, a, rq, cols_mask(OW - ow));
    }
}

/* store4's bytes for the two common requantisations (fp32, short fixed point), with every
 * constant passed by value: the fast row and plane loops keep them in local variables, as
 * GCC 12 reloads them from the stack when they sit in a struct, and this helper, inlined,
 * reads those locals. Four output columns' 64 bytes, each column's 16 together. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline __m512i quads_fast(const __m512i a[4], int fp32, __m512 scale, __m512 hi,
                                 __m512i mult, __m512i mult_o, __m512i rnd, __m512i rest,
                                 __m512i yzp16, __m512i qmin8, __m512i qmax8, __m512i d4) {
    __m512i p01, p23, v;
    if (fp32) {
        p01 = _mm512_packs_epi32(es_rqf16_hi_avx512(a[0], scale, hi),
                                 es_rqf16_hi_avx512(a[1], scale, hi));
        p23 = _mm512_packs_epi32(es_rqf16_hi_avx512(a[2], scale, hi),
                                 es_rqf16_hi_avx512(a[3], scale, hi));
    } else {
        p01 = _mm512_packs_epi32(es_mulq16_short(a[0], mult, mult_o, rnd, rest),
                                 es_mulq16_short(a[1], mult, mult_o, rnd, rest));
        p23 = _mm512_packs_epi32(es_mulq16_short(a[2], mult, mult_o, rnd, rest),
                                 es_mulq16_short(a[3], mult, mult_o, rnd, rest));
    }
    v = _mm512_packs_epi16(_mm512_adds_epi16(p01, yzp16), _mm512_adds_epi16(p23, yzp16));
    /* fp32 clamped to qmax - y_zp in float already */
    v = fp32 ? _mm512_max_epi8(v, qmin8) : _mm512_min_epi8(_mm512_max_epi8(v, qmin8), qmax8);
    return _mm512_permutexvar_epi32(d4, v);
}

/* row_taps_3 for the two common requantisations, es_rqf16_avx512 (fp32) and
 * es_mulq16_short, every constant in a local variable: with them in a struct GCC 12 keeps
 * reloading them from the stack */
static void row_taps_3_short(int8_t *o, const unsigned char *const r[3], const __m512i w[3],
                            __m512i bias, const dw_rq *rq, int OW, int SW) {
    const __m512i d4 = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i mult = rq->r.mult, mult_o = rq->r.mult_o, rest = rq->r.rest1, rnd = rq->r.rnd;
    const __m512 scale = rq->r.scale, hi = rq->r.hi;
    const int fp32 = rq->r.fp32;
    const __m512i yzp16 = rq->yzp16, qmin8 = rq->qmin8, qmax8 = rq->qmax8;
    const __m512i w0 = w[0], w1 = w[1], w2 = w[2];
    const unsigned char *r0 = r[0], *r1 = r[1], *r2 = r[2];
    const size_t sc = (size_t)SW * 64;
    int ow;
    for (ow = 0; ow < OW; ow += 4) {
        const size_t off = (size_t)ow * sc;
        const int n = OW - ow; /* columns left; under 4 only in the row's last group */
        __m512i a[4], v;
        a[0] = a[1] = a[2] = a[3] = bias;
        if (n >= 4) {
            tap4(a, r0 + off, sc, w0);
            tap4(a, r1 + off, sc, w1);
            tap4(a, r2 + off, sc, w2);
        } else {
            tap4_tail(a, r0 + off, sc, w0, n);
            tap4_tail(a, r1 + off, sc, w1, n);
            tap4_tail(a, r2 + off, sc, w2, n);
        }
        v = quads_fast(a, fp32, scale, hi, mult, mult_o, rnd, rest, yzp16, qmin8, qmax8, d4);
        if (n >= 4)
            _mm512_storeu_si512(o + (size_t)ow * 16, v);
        else
            _mm512_mask_storeu_epi32(o + (size_t)ow * 16, cols_mask(n), v);
    }
}

/* whether a block's rows go through row_taps_3_pairs, and its ring holds even columns only */
static inline int dw_pairs(const es_conv_params *p, const dw_rq *rq) {
    return p->KH == 3 && p->KW == 3 && p->SW == 1 && p->DW == 1 && (rq->r.short_ || rq->r.fp32);
}

/* one kernel row of row_taps_3_pairs' four output columns: the quad at x serves columns 0
 * and 1 (weights w, then v = w one byte up), the quad 128 bytes on columns 2 and 3 */
static inline void pair_taps(__m512i a[4], const unsigned char *x, __m512i w, __m512i v) {
    __m512i q = _mm512_loadu_si512(x);
    a[0] = _mm512_dpbusd_epi32(a[0], q, w);
    a[1] = _mm512_dpbusd_epi32(a[1], q, v);
    q = _mm512_loadu_si512(x + 128);
    a[2] = _mm512_dpbusd_epi32(a[2], q, w);
    a[3] = _mm512_dpbusd_epi32(a[3], q, v);
}

/* row_taps_3_short for a 3x3 kernel at stride 1 (DW = 1), reading only the ring's even
 * columns (the fill makes no others: half the stores and funnel shifts). The quad at column
 * j holds x[j .. j+3]; output j takes it with the weights (w0, w1, w2, 0), output j+1 with
 * (0, w0, w1, w2), the same bytes one place up. Four output columns are two quads of each
 * kernel row and as many multiply-adds as before. Output j+1 < OW reads x[j+3], which lies
 * in the padded row (Wp = OW + 2); the quad at j+2 of a last group with fewer than four
 * columns exists as well, its results not stored. */
static void row_taps_3_pairs(int8_t *o, const unsigned char *const r[3], const __m512i w[3],
                             __m512i bias, const dw_rq *rq, int OW) {
    const __m512i d4 = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i mult = rq->r.mult, mult_o = rq->r.mult_o, rest = rq->r.rest1, rnd = rq->r.rnd;
    const __m512 scale = rq->r.scale, hi = rq->r.hi;
    const int fp32 = rq->r.fp32;
    const __m512i yzp16 = rq->yzp16, qmin8 = rq->qmin8, qmax8 = rq->qmax8;
    const __m512i w0 = w[0], w1 = w[1], w2 = w[2];
    const __m512i v0 = _mm512_slli_epi32(w0, 8), v1 = _mm512_slli_epi32(w1, 8);
    const __m512i v2 = _mm512_slli_epi32(w2, 8);
    const unsigned char *r0 = r[0], *r1 = r[1], *r2 = r[2];
    int ow;
    for (ow = 0; ow < OW; ow += 4) {
        const size_t off = (size_t)ow * 64;
        const int n = OW - ow; /* columns left; under 4 only in the row's last group */
        __m512i a[4], v;
        a[0] = a[1] = a[2] = a[3] = bias;
        pair_taps(a, r0 + off, w0, v0);
        pair_taps(a, r1 + off, w1, v1);
        pair_taps(a, r2 + off, w2, v2);
        v = quads_fast(a, fp32, scale, hi, mult, mult_o, rnd, rest, yzp16, qmin8, qmax8, d4);
        if (n >= 4)
            _mm512_storeu_si512(o + (size_t)ow * 16, v);
        else
            _mm512_mask_storeu_epi32(o + (size_t)ow * 16, cols_mask(n), v);
    }
}

/* one output row of the block into o, OW columns of 16 bytes; the bias less the
 * unsigned-input correction of the kernel rows that exist */
ES_NOINLINE static void block_row(int8_t *o, const dw_scratch *s, int nv, __m512i bias,
                                     const dw_rq *rq, const es_conv_params *p) {
    int i;
    for (i = 0; i < nv; ++i)
        bias = _mm512_sub_epi32(bias, _mm512_loadu_si512(s->corr + (size_t)s->vkh[i] * 16));
    if (p->KH == 3 && p->KW <= 4 && nv > 0) {
        const unsigned char *r[3];
        __m512i wk[3];
        int kh, v = 0;
        for (kh = 0; kh < 3; ++kh) {
            const int on = v < nv && s->vkh[v] == kh;
            r[kh] = s->ring + s->voff[on ? v : 0];
            wk[kh] = on ? _mm512_loadu_si512(s->wts + kh * 64) : _mm512_setzero_si512();
            v += on;
        }
        if (dw_pairs(p, rq))
            row_taps_3_pairs(o, r, wk, bias, rq, p->OW);
        else if (rq->r.short_ || rq->r.fp32)
            row_taps_3_short(o, r, wk, bias, rq, p->OW, p->SW);
        else
            row_taps_3(o, r, wk, bias, rq, p->OW, p->SW);
    } else {
        row_taps(o, s, nv, bias, rq, p->OW, p->SW, p->KW > 1 ? p->DW : 1, (p->KW + 3) / 4);
    }
}

/* Small planes (ES_I8_DW_HWC_BATCH > 1 and every padded row the taps read fits the ring):
 * the whole padded plane of a block lies in the ring, padded row r in slot r, the rows of
 * the vertical padding stored as padding once per call. Output pixels are then one flat
 * run, oh*OW + ow, four to a group whatever the row width: a 6x6 plane is 9 groups, not 12
 * (a row of 6 is a group and a half), with one call per block instead of one per output row.
 * toff[t]: the ring offset of output pixel t's first tap; tap (kh, q) adds kh*slot + q*256.
 * The pixels past n in the last group read nothing (masked loads) and are not stored. */
ES_NOINLINE static void plane_taps(int8_t *o, const unsigned char *ring, const int32_t *toff,
                                   int n, size_t slot, int KH, int KQ, const unsigned char *wts,
                                   __m512i bias, const dw_rq *rqp) {
    /* the constants are read once into variables (no copy of the struct per block): only
     * store4, for the rare requantisations, reads through rq */
    const dw_rq *rq = rqp;
    const __m512i w0 = _mm512_loadu_si512(wts), w1 = _mm512_loadu_si512(wts + 64);
    const __m512i w2 = _mm512_loadu_si512(wts + 128);
    const int k3 = KH == 3 && KQ == 1; /* 3x3: the weights in registers */
    const __m512i d4 = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i mult = rq->r.mult, mult_o = rq->r.mult_o, rest = rq->r.rest1, rnd = rq->r.rnd;
    const __m512 scale = rq->r.scale, hi = rq->r.hi;
    const int fp32 = rq->r.fp32, fast = rq->r.fp32 || rq->r.short_;
    const __m512i yzp16 = rq->yzp16, qmin8 = rq->qmin8, qmax8 = rq->qmax8;
    int t, kh, q;
    for (t = 0; t < n; t += 4) {
        const int m = n - t; /* pixels left; under 4 only in the last group */
        const __mmask16 l1 = m > 1 ? 0xffff : 0, l2 = m > 2 ? 0xffff : 0, l3 = m > 3 ? 0xffff : 0;
        const unsigned char *x0 = ring + toff[t];
        /* a pixel that does not exist takes pixel t's offset, its loads masked off */
        const unsigned char *x1 = ring + toff[m > 1 ? t + 1 : t];
        const unsigned char *x2 = ring + toff[m > 2 ? t + 2 : t];
        const unsigned char *x3 = ring + toff[m > 3 ? t + 3 : t];
        __m512i a[4], v;
        a[0] = a[1] = a[2] = a[3] = bias;
        if (k3) {
            const size_t d1 = slot, d2 = 2 * slot;
            a[0] = _mm512_dpbusd_epi32(a[0], _mm512_loadu_si512(x0), w0);
            a[1] = _mm512_dpbusd_epi32(a[1], _mm512_maskz_loadu_epi32(l1, x1), w0);
            a[2] = _mm512_dpbusd_epi32(a[2], _mm512_maskz_loadu_epi32(l2, x2), w0);
            a[3] = _mm512_dpbusd_epi32(a[3], _mm512_maskz_loadu_epi32(l3, x3), w0);
            a[0] = _mm512_dpbusd_epi32(a[0], _mm512_loadu_si512(x0 + d1), w1);
            a[1] = _mm512_dpbusd_epi32(a[1], _mm512_maskz_loadu_epi32(l1, x1 + d1), w1);
            a[2] = _mm512_dpbusd_epi32(a[2], _mm512_maskz_loadu_epi32(l2, x2 + d1), w1);
            a[3] = _mm512_dpbusd_epi32(a[3], _mm512_maskz_loadu_epi32(l3, x3 + d1), w1);
            a[0] = _mm512_dpbusd_epi32(a[0], _mm512_loadu_si512(x0 + d2), w2);
            a[1] = _mm512_dpbusd_epi32(a[1], _mm512_maskz_loadu_epi32(l1, x1 + d2), w2);
            a[2] = _mm512_dpbusd_epi32(a[2], _mm512_maskz_loadu_epi32(l2, x2 + d2), w2);
            a[3] = _mm512_dpbusd_epi32(a[3], _mm512_maskz_loadu_epi32(l3, x3 + d2), w2);
        } else
        for (kh = 0; kh < KH; ++kh)
            for (q = 0; q < KQ; ++q) {
                const size_t d = (size_t)kh * slot + (size_t)q * 256;
                const __m512i wq = _mm512_loadu_si512(wts + (size_t)(kh * KQ + q) * 64);
                a[0] = _mm512_dpbusd_epi32(a[0], _mm512_loadu_si512(x0 + d), wq);
                a[1] = _mm512_dpbusd_epi32(a[1], _mm512_maskz_loadu_epi32(l1, x1 + d), wq);
                a[2] = _mm512_dpbusd_epi32(a[2], _mm512_maskz_loadu_epi32(l2, x2 + d), wq);
                a[3] = _mm512_dpbusd_epi32(a[3], _mm512_maskz_loadu_epi32(l3, x3 + d), wq);
            }
        if (!fast) {
            store4(o + (size_t)t * 16, a, rq, m >= 4 ? 0xffff : cols_mask(m));
            continue;
        }
        v = quads_fast(a, fp32, scale, hi, mult, mult_o, rnd, rest, yzp16, qmin8, qmax8, d4);
        _mm512_mask_storeu_epi32(o + (size_t)t * 16, m >= 4 ? 0xffff : cols_mask(m), v);
    }
}

/* n output columns of 16 bytes (o, capacity rounded up to 16 columns) to CHW y: channel c
 * gets its n bytes at y + c*plane */
static void store_cols(int8_t *y, const int8_t *o, int n, size_t plane, int nc) {
    int j0, k;
    for (j0 = 0; j0 < n; j0 += 16) {
        const int m = n - j0 < 16 ? n - j0 : 16;
        const __mmask16 lm = (__mmask16)((1u << m) - 1u);
        __m512i a[4], b[4];
        __m128i r[16];
        for (k = 0; k < 4; ++k) a[k] = _mm512_loadu_si512(o + (size_t)(j0 + 4 * k) * 16);
        tr16x16(a, b);
        if (m == 16 && nc == 16) { /* the usual case: each extract stores straight to y */
            int8_t *d = y + j0;
            for (k = 0; k < 4; ++k, d += 4 * plane) {
                _mm_storeu_si128((__m128i *)d, _mm512_castsi512_si128(b[k]));
                _mm_storeu_si128((__m128i *)(d + plane), _mm512_extracti32x4_epi32(b[k], 1));
                _mm_storeu_si128((__m128i *)(d + 2 * plane), _mm512_extracti32x4_epi32(b[k], 2));
                _mm_storeu_si128((__m128i *)(d + 3 * plane), _mm512_extracti32x4_epi32(b[k], 3));
            }
            continue;
        }
        for (k = 0; k < 4; ++k) {
            r[4 * k] = _mm512_castsi512_si128(b[k]);
            r[4 * k + 1] = _mm512_extracti32x4_epi32(b[k], 1);
            r[4 * k + 2] = _mm512_extracti32x4_epi32(b[k], 2);
            r[4 * k + 3] = _mm512_extracti32x4_epi32(b[k], 3);
        }
        for (k = 0; k < nc; ++k) _mm_mask_storeu_epi8(y + (size_t)k * plane + j0, lm, r[k]);
    }
}

/* n output columns of 16 bytes (o, capacity rounded up to 16 columns) as the dot kernel's
 * uint8 channel-quad planes (es_conv_params.y_quads): word j of plane q is bytes 4q..4q+3
 * of column j, + 128, at y + q*qstride + 4j; nc a multiple of 4. One dword transpose per
 * 16 columns, where store_cols needs a byte transpose. */
static void store_quads(int8_t *y, const int8_t *o, int n, size_t qstride, int nc) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    int j0, q;
    for (j0 = 0; j0 < n; j0 += 16) {
        const int m = n - j0 < 16 ? n - j0 : 16;
        const __mmask16 lm = (__mmask16)((1u << m) - 1u);
        __m512i a[4], z[4];
        for (q = 0; q < 4; ++q) a[q] = _mm512_loadu_si512(o + (size_t)(j0 + 4 * q) * 16);
        tr_dwords(a, z);
        for (q = 0; q < nc / 4; ++q)
            _mm512_mask_storeu_epi32(y + (size_t)q * qstride + (size_t)j0 * 4, lm,
                                     _mm512_xor_si512(z[q], flip));
    }
}

#else /* portable C */

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* 16x16 byte transposes for the two layout changes, where 128-bit vectors exist (SSE2,
 * AArch64 NEON); plain loops elsewhere. zip_k(a, b) interleaves the low (zlo) or high (zhi)
 * halves of a and b in k-bit units: SSE2 unpack, NEON zip1 / zip2. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define ES_DW_TR16 1
typedef __m128i dw_v16;
static inline dw_v16 zlo8(dw_v16 a, dw_v16 b) { return _mm_unpacklo_epi8(a, b); }
static inline dw_v16 zhi8(dw_v16 a, dw_v16 b) { return _mm_unpackhi_epi8(a, b); }
static inline dw_v16 zlo16(dw_v16 a, dw_v16 b) { return _mm_unpacklo_epi16(a, b); }
static inline dw_v16 zhi16(dw_v16 a, dw_v16 b) { return _mm_unpackhi_epi16(a, b); }
static inline dw_v16 zlo32(dw_v16 a, dw_v16 b) { return _mm_unpacklo_epi32(a, b); }
static inline dw_v16 zhi32(dw_v16 a, dw_v16 b) { return _mm_unpackhi_epi32(a, b); }
static inline dw_v16 zlo64(dw_v16 a, dw_v16 b) { return _mm_unpacklo_epi64(a, b); }
static inline dw_v16 zhi64(dw_v16 a, dw_v16 b) { return _mm_unpackhi_epi64(a, b); }
static inline dw_v16 ld16(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
static inline void st16(void *p, dw_v16 v) { _mm_storeu_si128((__m128i *)p, v); }
/* the 16 bytes of v as int16 minus zp, into d[0..15] */
static inline void widen16(int16_t *d, dw_v16 v, int32_t zp) {
    const __m128i z = _mm_set1_epi16((short)zp);
    st16(d, _mm_sub_epi16(_mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8), z));
    st16(d + 8, _mm_sub_epi16(_mm_srai_epi16(_mm_unpackhi_epi8(v, v), 8), z));
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define ES_DW_TR16 1
typedef uint8x16_t dw_v16;
static inline dw_v16 zlo8(dw_v16 a, dw_v16 b) { return vzip1q_u8(a, b); }
static inline dw_v16 zhi8(dw_v16 a, dw_v16 b) { return vzip2q_u8(a, b); }
static inline dw_v16 zlo16(dw_v16 a, dw_v16 b) {
    return vreinterpretq_u8_u16(vzip1q_u16(vreinterpretq_u16_u8(a), vreinterpretq_u16_u8(b)));
}
static inline dw_v16 zhi16(dw_v16 a, dw_v16 b) {
    return vreinterpretq_u8_u16(vzip2q_u16(vreinterpretq_u16_u8(a), vreinterpretq_u16_u8(b)));
}
static inline dw_v16 zlo32(dw_v16 a, dw_v16 b) {
    return vreinterpretq_u8_u32(vzip1q_u32(vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b)));
}
static inline dw_v16 zhi32(dw_v16 a, dw_v16 b) {
    return vreinterpretq_u8_u32(vzip2q_u32(vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b)));
}
static inline dw_v16 zlo64(dw_v16 a, dw_v16 b) {
    return vreinterpretq_u8_u64(vzip1q_u64(vreinterpretq_u64_u8(a), vreinterpretq_u64_u8(b)));
}
static inline dw_v16 zhi64(dw_v16 a, dw_v16 b) {
    return vreinterpretq_u8_u64(vzip2q_u64(vreinterpretq_u64_u8(a), vreinterpretq_u64_u8(b)));
}
static inline dw_v16 ld16(const void *p) { return vld1q_u8((const uint8_t *)p); }
static inline void st16(void *p, dw_v16 v) { vst1q_u8((uint8_t *)p, v); }
static inline void widen16(int16_t *d, dw_v16 v, int32_t zp) {
    const int8x16_t s = vreinterpretq_s8_u8(v);
    const int16x8_t z = vdupq_n_s16((int16_t)zp);
    vst1q_s16(d, vsubq_s16(vmovl_s8(vget_low_s8(s)), z));
    vst1q_s16(d + 8, vsubq_s16(vmovl_s8(vget_high_s8(s)), z));
}
#endif

#if defined(ES_DW_TR16)
/* r[0..15] := its transpose (r[i] byte j becomes r[j] byte i): zips of 8, 16, 32 and 64 bits */
static void tr16(dw_v16 r[16]) {
    dw_v16 t[16], u[16];
    int i, g;
    for (i = 0; i < 8; ++i) { /* rows 2i, 2i+1 interleaved: columns 0-7, then 8-15 */
        t[i] = zlo8(r[2 * i], r[2 * i + 1]);
        t[i + 8] = zhi8(r[2 * i], r[2 * i + 1]);
    }
    for (g = 0; g < 2; ++g) /* rows 4i..4i+3: columns 8g + 0-3, then 8g + 4-7 */
        for (i = 0; i < 4; ++i) {
            u[8 * g + i] = zlo16(t[8 * g + 2 * i], t[8 * g + 2 * i + 1]);
            u[8 * g + i + 4] = zhi16(t[8 * g + 2 * i], t[8 * g + 2 * i + 1]);
        }
    for (g = 0; g < 4; ++g) { /* u[4g..4g+3]: columns 4g..4g+3 of row quads 0..3 */
        const dw_v16 v0 = zlo32(u[4 * g], u[4 * g + 1]), v1 = zhi32(u[4 * g], u[4 * g + 1]);
        const dw_v16 v2 = zlo32(u[4 * g + 2], u[4 * g + 3]);
        const dw_v16 v3 = zhi32(u[4 * g + 2], u[4 * g + 3]);
        r[4 * g] = zlo64(v0, v2);
        r[4 * g + 1] = zhi64(v0, v2);
        r[4 * g + 2] = zlo64(v1, v3);
        r[4 * g + 3] = zhi64(v1, v3);
    }
}
#endif

/* fill_row of a row of pixel quads (x_pquads): column i, channel c is byte
 * (i / 4) * 64 + c * 4 + i % 4 of the row, x + 128 */
static void fill_row_pquads(unsigned char *slot, const unsigned char *src, int lo, int n,
                            int32_t xzp) {
    int16_t *dst = (int16_t *)(void *)slot + (size_t)lo * 16;
    int i, c;
    for (i = 0; i < n; ++i)
        for (c = 0; c < 16; ++c)
            dst[(size_t)i * 16 + c] =
                (int16_t)((int32_t)src[(size_t)(i / 4) * 64 + c * 4 + i % 4] - 128 - xzp);
}

/* one input row into its ring slot as int16 x - x_zp (the padding columns stay 0) */
static void fill_row(unsigned char *slot, const int8_t *src, size_t cstride, int nc, int lo,
                     int n, int32_t xzp) {
    int16_t *dst = (int16_t *)(void *)slot + (size_t)lo * 16;
    int c, j = 0;
#if defined(ES_DW_TR16)
    for (; j + 16 <= n && nc == 16; j += 16) { /* 16 whole columns of 16 channels */
        dw_v16 r[16];
        int t;
        for (c = 0; c < 16; ++c) r[c] = ld16(src + (size_t)c * cstride + j);
        tr16(r);
        for (t = 0; t < 16; ++t) widen16(dst + (size_t)(j + t) * 16, r[t], xzp);
    }
#endif
    for (c = 0; c < nc; ++c) {
        const int8_t *sr = src + (size_t)c * cstride;
        int i;
        for (i = j; i < n; ++i) dst[(size_t)i * 16 + c] = (int16_t)((int32_t)sr[i] - xzp);
    }
}

/* acc[t][c] += x[t*SW][c] * w[c], t < nt, c < 16: one tap for nt output columns */
static void tap_cols(int32_t *restrict acc, const int16_t *restrict x,
                     const int16_t *restrict w, int nt, int SW) {
    int t, c;
    for (t = 0; t < nt; ++t)
        for (c = 0; c < 16; ++c)
            acc[t * 16 + c] += (int32_t)x[(size_t)t * SW * 16 + c] * (int32_t)w[c];
}

/* a block's bias and requantisation constants; wide: some shift > 0 or multiplier < 0;
 * scale: es_rq_scale of each channel (ES_RQ_FP32) */
typedef struct {
    int32_t bias[16], mult[16], shift[16];
    float scale[16];
    int wide;
} dw_consts;

/* o[c] = es_requant(a[c], mult[c], shift[c], ...), c < 16 */
static void requant16(int8_t *o, const int32_t *a, const dw_consts *k, const es_conv_params *p) {
    int c;
#if defined(__ARM_NEON)
    if (p->rq == ES_RQ_FP32) {
#if defined(__aarch64__) /* vcvtnq rounds half to even, as es_round_even */
        const float32x4_t lo = vdupq_n_f32((float)(p->qmin - p->y_zp));
        const float32x4_t hi = vdupq_n_f32((float)(p->qmax - p->y_zp));
        int16x8_t v[2];
        for (c = 0; c < 2; ++c) {
            int32x4_t r[2];
            int h;
            for (h = 0; h < 2; ++h) {
                const int j = 8 * c + 4 * h;
                float32x4_t f = vmulq_f32(vcvtq_f32_s32(vld1q_s32(a + j)),
                                          vld1q_f32(k->scale + j));
                f = vminq_f32(vmaxq_f32(f, lo), hi);
                r[h] = vaddq_s32(vcvtnq_s32_f32(f), vdupq_n_s32(p->y_zp));
            }
            v[c] = vcombine_s16(vmovn_s32(r[0]), vmovn_s32(r[1]));
        }
        vst1_s8(o, vmovn_s16(v[0]));
        vst1_s8(o + 8, vmovn_s16(v[1]));
#else /* 32-bit NEON has no round-to-nearest conversion */
        for (c = 0; c < 16; ++c)
            o[c] = es_requant(a[c], k->mult[c], k->shift[c], p->rq, p->y_zp, p->qmin, p->qmax);
#endif
        return;
    }
    /* vrshl by -(31 - shift) is the single round-half-up right shift, exact in 64 bits;
     * vqmovn saturates to int32 as es_mul_q does: any shift and multiplier */
    for (c = 0; c < 16; c += 8) {
        int32x4_t v[2];
        int h;
        for (h = 0; h < 2; ++h) {
            const int32x4_t x = vld1q_s32(a + c + 4 * h), m = vld1q_s32(k->mult + c + 4 * h);
            const int32x4_t nt = vsubq_s32(vld1q_s32(k->shift + c + 4 * h), vdupq_n_s32(31));
            const int64x2_t lo = vrshlq_s64(vmull_s32(vget_low_s32(x), vget_low_s32(m)),
                                            vmovl_s32(vget_low_s32(nt)));
            const int64x2_t hi = vrshlq_s64(vmull_s32(vget_high_s32(x), vget_high_s32(m)),
                                            vmovl_s32(vget_high_s32(nt)));
            v[h] = vaddq_s32(vcombine_s32(vqmovn_s64(lo), vqmovn_s64(hi)), vdupq_n_s32(p->y_zp));
            v[h] = vminq_s32(vmaxq_s32(v[h], vdupq_n_s32(p->qmin)), vdupq_n_s32(p->qmax));
        }
        vst1_s8(o + c, vmovn_s16(vcombine_s16(vmovn_s32(v[0]), vmovn_s32(v[1]))));
    }
#else
#if defined(__AVX2__)
    if (p->rq == ES_RQ_FP32) {
        const __m256 lo = _mm256_set1_ps((float)(p->qmin - p->y_zp));
        const __m256 hi = _mm256_set1_ps((float)(p->qmax - p->y_zp));
        const __m256i zp = _mm256_set1_epi32(p->y_zp);
        __m256i v[2], w;
        for (c = 0; c < 2; ++c)
            v[c] = _mm256_add_epi32(
                es_rqf8_avx2(_mm256_loadu_si256((const __m256i *)(a + 8 * c)),
                             _mm256_loadu_ps(k->scale + 8 * c), lo, hi), zp);
        w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xd8);
        _mm_storeu_si128((__m128i *)o, _mm_packs_epi16(_mm256_castsi256_si128(w),
                                                       _mm256_extracti128_si256(w, 1)));
        return;
    }
    if (!k->wide) {
        const __m256i zp = _mm256_set1_epi32(p->y_zp);
        const __m256i lo = _mm256_set1_epi32(p->qmin), hi = _mm256_set1_epi32(p->qmax);
        __m256i v[2], w;
        for (c = 0; c < 2; ++c) {
            v[c] = es_mulq8v_avx2(_mm256_loadu_si256((const __m256i *)(a + 8 * c)),
                                  _mm256_loadu_si256((const __m256i *)(k->mult + 8 * c)),
                                  _mm256_loadu_si256((const __m256i *)(k->shift + 8 * c)));
            v[c] = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(v[c], zp), lo), hi);
        }
        /* the packs interleave 128-bit lanes: put them back in order before the last one */
        w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xd8);
        _mm_storeu_si128((__m128i *)o, _mm_packs_epi16(_mm256_castsi256_si128(w),
                                                       _mm256_extracti128_si256(w, 1)));
        return;
    }
#endif
    for (c = 0; c < 16; ++c)
        o[c] = es_requant(a[c], k->mult[c], k->shift[c], p->rq, p->y_zp, p->qmin, p->qmax);
#endif
}

/* one output row of the block into o, OW columns of 16 bytes, 8 columns at a time */
ES_NOINLINE static void block_row(int8_t *o, const dw_scratch *s, int nv,
                                     const dw_consts *k, const es_conv_params *p) {
    const int KW = p->KW, SW = p->SW, DW = p->DW;
    int32_t acc[8 * 16];
    int ow, nt, t, i, kw, c;
    for (ow = 0; ow < p->OW; ow += nt) {
        nt = p->OW - ow < 8 ? p->OW - ow : 8;
        for (t = 0; t < nt; ++t)
            for (c = 0; c < 16; ++c) acc[t * 16 + c] = k->bias[c];
        for (i = 0; i < nv; ++i) {
            const int16_t *xr = (const int16_t *)(const void *)(s->ring + s->voff[i]);
            const int16_t *wr = (const int16_t *)(const void *)s->wts;
            for (kw = 0; kw < KW; ++kw)
                tap_cols(acc, xr + ((size_t)ow * SW + (size_t)kw * DW) * 16,
                         wr + ((size_t)s->vkh[i] * KW + kw) * 16, nt, SW);
        }
        for (t = 0; t < nt; ++t) requant16(o + (size_t)(ow + t) * 16, acc + t * 16, k, p);
    }
}

/* n output columns of 16 bytes (o, capacity rounded up to 16 columns) to CHW y: channel c
 * gets its n bytes at y + c*plane */
static void store_cols(int8_t *y, const int8_t *o, int n, size_t plane, int nc) {
    int c, j = 0;
#if defined(ES_DW_TR16)
    for (; j < n; j += 16) {
        const int m = n - j < 16 ? n - j : 16;
        dw_v16 r[16];
        int8_t part[16];
        int t;
        for (t = 0; t < 16; ++t) r[t] = ld16(o + (size_t)(j + t) * 16);
        tr16(r);
        for (c = 0; c < nc; ++c) {
            if (m == 16) {
                st16(y + (size_t)c * plane + j, r[c]);
            } else {
                st16(part, r[c]);
                memcpy(y + (size_t)c * plane + j, part, (size_t)m);
            }
        }
    }
#endif
    for (c = 0; c < nc; ++c) {
        int8_t *d = y + (size_t)c * plane;
        int i;
        for (i = j; i < n; ++i) d[i] = o[(size_t)i * 16 + c];
    }
}

/* store_cols for y_quads: word j of plane q is bytes 4q..4q+3 of column j, + 128 */
static void store_quads(int8_t *y, const int8_t *o, int n, size_t qstride, int nc) {
    int q, j, k;
    for (q = 0; q < nc / 4; ++q) {
        int8_t *d = y + (size_t)q * qstride;
        for (j = 0; j < n; ++j)
            for (k = 0; k < 4; ++k)
                d[4 * j + k] = (int8_t)(uint8_t)((uint8_t)o[(size_t)j * 16 + 4 * q + k] ^ 0x80u);
    }
}

#endif

void es_dwconv2d_i8_hwc(const int8_t *x, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                        const es_conv_params *p) {
    const int C = p->C, H = p->H, W = p->W, OH = p->OH, OW = p->OW, KH = p->KH, KW = p->KW;
    const int SH = p->SH, DH = p->DH, PT = p->PT, PL = p->PL;
    const int Cp = (C + 15) / 16 * 16;
    const int Wp = (OW - 1) * p->SW + (KW - 1) * p->DW + 1;
    const size_t plane = (size_t)OH * OW, cstride = (size_t)H * W;
    /* the input columns that land in the padded row: lo .. lo + n - 1 */
    const int lo = PL < Wp ? PL : Wp;
    const int n = (PL + W < Wp ? PL + W : Wp) - lo;
    const dw_scratch s = dw_layout(scratch, p, Wp);
    const int sh_q = SH / DH, sh_r = SH % DH; /* a stride in slots, and what is left over */
    int cb, oh, kh;
#if defined(ES_DW_HWC_VNNI)
    /* the padded rows the taps read; all of them in the ring: plane_taps */
    const int hr = (OH - 1) * SH + (KH - 1) * DH + 1;
    const int whole = s.batch > 1 && hr <= s.nr && OH * OW <= s.obc && OH * OW <= 128;
    const int hin = (hr - PT < H ? hr - PT : H); /* input rows read: 0 .. hin-1 */
    int32_t toff[128];
#if defined(__AVX512VBMI__)
    const int vplane = whole && H * W <= 64 && hr * Wp <= 64; /* fill_plane_vbmi */
    unsigned char ix[64];
#endif
    if (whole) {
        const __m512i pad = _mm512_set1_epi8((char)(p->x_zp + 128));
        int r, j;
        for (r = 0; r < hr; ++r) /* the vertical padding, stored once for every block */
            if (r < PT || r >= PT + H)
                for (j = 0; j < Wp; ++j)
                    _mm512_storeu_si512(s.ring + (size_t)r * s.slot + (size_t)j * 64, pad);
        for (oh = 0; oh < OH; ++oh)
            for (j = 0; j < OW; ++j)
                toff[oh * OW + j] = oh * SH * s.slot + j * p->SW * 64;
#if defined(__AVX512VBMI__)
        for (j = 0; j < 64 && vplane; ++j) { /* padded position j: row j / Wp, column j % Wp */
            const int ih = j / Wp - PT, iw = j % Wp - PL;
            ix[j] = (unsigned char)(j / Wp < hr && ih >= 0 && ih < H && iw >= 0 && iw < W
                                        ? ih * W + iw : 64);
        }
#endif
    }
#else
    memset(s.ring, 0, (size_t)s.nr * s.slot); /* the padding columns stay 0 */
#endif
    for (cb = 0; cb < C; cb += 16) {
        const int nc = C - cb < 16 ? C - cb : 16;
        int orow = 0;        /* output rows waiting in s.obuf */
        int rem = 0, s0 = 0; /* (oh*SH) % DH, and (oh*SH / DH) % nr: the slot of kernel row 0 */
#if defined(ES_DW_HWC_VNNI)
        int step;
        __m512i bv;
        dw_rq rq;
        block_consts(&bv, &rq, bias + cb, mult + cb, shift + cb, nc, p);
        /* the ring columns the taps read: multiples of gcd(SW, 4), or of 2 for the pairs */
        step = !whole && dw_pairs(p, &rq) ? 2 : (p->SW & 1) ? 1 : (p->SW & 3) ? 2 : 4;
        block_weights(&s, w + cb, KH, KW, Cp, p->x_zp);
        if (whole) {
            int ih;
            __m512i b = bv;
#if defined(__AVX512VBMI__)
            if (vplane)
                fill_plane_vbmi(s.ring, x + (size_t)cb * cstride, cstride, nc, H * W, ix,
                                PT * Wp, (PT + hin) * Wp, p->x_zp);
            else
#endif
            for (ih = 0; ih < hin; ih += s.batch) /* padded row PT + ih in slot PT + ih */
                fill_rows_narrow(&s, x + (size_t)cb * cstride + (size_t)ih * W, cstride, nc,
                                 s.batch < hin - ih ? s.batch : hin - ih, W, lo, n, Wp,
                                 PT + ih, PT + ih, step, p->x_zp);
            for (kh = 0; kh < KH; ++kh) /* every kernel row reads stored bytes, padding too */
                b = _mm512_sub_epi32(b, _mm512_loadu_si512(s.corr + (size_t)kh * 16));
            plane_taps(s.obuf, s.ring, toff, OH * OW, (size_t)s.slot, KH, (KW + 3) / 4, s.wts,
                       b, &rq);
            if (p->y_quads)
                store_quads(y + (size_t)cb * plane, s.obuf, OH * OW, 4 * plane, nc);
            else
                store_cols(y + (size_t)cb * plane, s.obuf, OH * OW, plane, nc);
            continue;
        }
#else
        dw_consts k;
        int i;
        int16_t *wts = (int16_t *)(void *)s.wts;
        k.wide = 0;
        for (i = 0; i < 16; ++i) {
            k.bias[i] = i < nc ? bias[cb + i] : 0;
            k.mult[i] = i < nc ? mult[cb + i] : 0;
            k.shift[i] = i < nc ? shift[cb + i] : 0;
            k.wide |= k.shift[i] > 0 || k.mult[i] < 0;
            k.scale[i] = i < nc && p->rq == ES_RQ_FP32 ? es_rq_scale(k.mult[i], k.shift[i]) : 0.0f;
        }
        for (i = 0; i < KH * KW * 16; ++i) wts[i] = w[(size_t)(i / 16) * Cp + cb + i % 16];
#endif
        for (kh = 0; kh < s.nr; ++kh) s.tag[kh] = -1;
        for (oh = 0; oh < OH; ++oh) {
            int nv = 0;
            if (oh > 0) { /* advanced by SH without dividing */
                s0 += sh_q;
                rem += sh_r;
                if (rem >= DH) {
                    rem -= DH;
                    ++s0;
                }
                while (s0 >= s.nr) s0 -= s.nr;
            }
            for (kh = 0; kh < KH; ++kh) { /* the rows this output row reads, each filled once */
                /* row r = oh*SH + kh*DH is in slot (r / DH) % nr = (s0 + kh) % nr */
                const int r = oh * SH + kh * DH, ih = r - PT;
                const int slot = s0 + kh < s.nr ? s0 + kh : s0 + kh - s.nr;
                if (ih < 0 || ih >= H) continue;
                if (s.tag[slot] != r) {
                    const int8_t *src = x + (size_t)cb * cstride + (size_t)ih * W;
                    unsigned char *dst = s.ring + (size_t)slot * s.slot;
#if defined(ES_DW_HWC_VNNI)
                    if (p->x_pquads) /* block cb's rows are 16 W bytes each */
                        fill_row_pquads(dst, (const unsigned char *)x + (size_t)cb * cstride +
                                                 (size_t)ih * W * 16,
                                        lo, n, Wp, step, p->x_zp);
                    else if (s.batch > 1)
                        fill_rows_narrow(&s, src, cstride, nc, s.batch < H - ih ? s.batch : H - ih,
                                         W, lo, n, Wp, r, slot, step, p->x_zp);
                    else if (p->DW == 1 || KW == 1)
                        fill_row_quads(dst, src, cstride, nc, lo, n, Wp, step, p->x_zp);
                    else
                        fill_row_dilated(&s, dst, src, cstride, nc, lo, n, Wp, p->DW, p->x_zp);
#else
                    if (p->x_pquads)
                        fill_row_pquads(dst, (const unsigned char *)x + (size_t)cb * cstride +
                                                 (size_t)ih * W * 16,
                                        lo, n, p->x_zp);
                    else
                        fill_row(dst, src, cstride, nc, lo, n, p->x_zp);
#endif
                    s.tag[slot] = r;
                }
                s.vkh[nv] = kh;
                s.voff[nv] = slot * s.slot;
                ++nv;
            }
#if defined(ES_DW_HWC_VNNI)
            block_row(s.obuf + (size_t)orow * OW * 16, &s, nv, bv, &rq, p);
#else
            block_row(s.obuf + (size_t)orow * OW * 16, &s, nv, &k, p);
#endif
            if (++orow == s.rb || oh == OH - 1) {
                const size_t pix = (size_t)(oh + 1 - orow) * OW; /* the first row's pixel */
                if (p->y_quads) /* block cb is quad planes cb/4 .. of 4*plane bytes each */
                    store_quads(y + (size_t)cb * plane + 4 * pix, s.obuf, orow * OW,
                                4 * plane, nc);
                else
                    store_cols(y + (size_t)cb * plane + pix, s.obuf, orow * OW, plane, nc);
                orow = 0;
            }
        }
    }
}
