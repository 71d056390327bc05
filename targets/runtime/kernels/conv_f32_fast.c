/* Conv2d, float32, fast paths; es_conv2d_f32 (conv_f32.c) stays the reference and the
 * oracle in tests (results agree to float rounding, not bit for bit: sums are reordered).
 *
 * es_conv2d_f32_gemm: one group. Output pixels in tiles of ES_F32_TP; for each tile the
 * im2col block col[k][j] (k over C*KH*KW, zero where padded) is built in scratch (or read in
 * place for a 1x1 stride-1 unpadded conv), then a micro-kernel on weights the generator
 * packed in 16-channel rows computes 8 output channels x 32 pixels in registers (see
 * below); bias and the fused activation are applied on the way out. Scratch:
 * ES_F32_GEMM_SCRATCH(C*KH*KW) bytes.
 *
 * The depthwise kernel es_dwconv2d_f32 is in dwconv_f32.c; the vector activations
 * (es_act_simd.h) and the stride phases (es_phases_f32.h) are shared with it. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>
#include <string.h>

#include "../edgesmith_rt.h"
#include "../es_act.h"
#include "../es_act_simd.h"
#include "../es_lanes.h"
#include "../es_phases_f32.h"

#define ES_F32_TP 32

/* output columns [lo, hi) of [o0, o1) whose input column o*SW + dw lies in [0, W) */
static void valid_cols(int o0, int o1, int SW, int dw, int W, int *lo, int *hi) {
    int a = dw < 0 ? (-dw + SW - 1) / SW : 0, b = (W - 1 - dw) >= 0 ? (W - 1 - dw) / SW + 1 : 0;
    a = a < o0 ? o0 : (a > o1 ? o1 : a); /* a segment may lie wholly in the padding */
    b = b > o1 ? o1 : (b < a ? a : b);
    *lo = a;
    *hi = b;
}

static void im2col_f32(const float *x, float *col, int p0, int K, const es_conv_params *p) {
    const int P = p->OH * p->OW, ksz = p->KH * p->KW;
    const int H = p->H, W = p->W, OW = p->OW, SH = p->SH, SW = p->SW;
    const int n = (P - p0) < ES_F32_TP ? (P - p0) : ES_F32_TP;
    int k, j;
    for (k = 0; k < K; ++k) {
        float *dst = col + (size_t)k * ES_F32_TP;
        const int c = k / ksz, r = k % ksz, kh = r / p->KW, kw = r % p->KW;
        const float *xc = x + (size_t)c * H * W;
        const int dh = kh * p->DH - p->PT, dw = kw * p->DW - p->PL;
        int oh = p0 / OW, ow = p0 % OW;
        j = 0;
        while (j < n) {
            const int seg = (OW - ow) < (n - j) ? (OW - ow) : (n - j);
            const int ih = oh * SH + dh;
            float *d = dst + j; /* d[o - ow]: output column o */
            int o, lo, hi;
            if (ih < 0 || ih >= H) {
                for (o = ow; o < ow + seg; ++o) d[o - ow] = 0.0f;
            } else {
                const float *xr = xc + (size_t)ih * W;
                valid_cols(ow, ow + seg, SW, dw, W, &lo, &hi);
                for (o = ow; o < lo; ++o) d[o - ow] = 0.0f;
                for (o = lo; o < hi; ++o) d[o - ow] = xr[o * SW + dw];
                for (o = hi; o < ow + seg; ++o) d[o - ow] = 0.0f;
            }
            j += seg;
            ow = 0;
            ++oh;
        }
        for (; j < ES_F32_TP; ++j) dst[j] = 0.0f;
    }
}

/* ---- one group: a GEMM on packed weights -------------------------------------------------
 * Y[M][P] = W[M][K] . col[K][P] + b, col the im2col matrix (a 1x1, stride-1, unpadded
 * conv's input is that matrix already and is read in place). The generator packs W in
 * blocks of ES_F32_WB = 16 output channels, k-major (lower/conv.py pack_f32_gemm):
 * wp[(mb K + k) 16 + r] = W[16 mb + r][k], rows past M zero; the micro-kernel's 8-channel
 * block m0 is one half of a row, read at stride 16 from wblock(). One k step of it
 * reads the 8 weights of k from one cache line and broadcasts each against vectors of
 * pixels loaded from col row k, so the 8 x 32 output block (AVX-512: 16 zmm accumulators,
 * 2 loads and 8 broadcasts per 16 FMAs) stays in registers for the whole K: bias first,
 * activation in registers, stored under a mask at the plane's end. This is XNNPACK's
 * "broadcast" GEMM (src/f32-gemm, e.g. 7x16-minmax-avx512f-broadcast, weights packed by
 * xnn_pack_f32_gemm_goi_w) with pixels and channels swapped, as our planes are NCHW; the
 * old kernel, 4 channels x 16 pixels on 8 ymm with 4 separate weight rows, ran 1x1 convs at
 * 14-20 GMAC/s. AVX2: 4 x 16 blocks of the same packing; NEON: 8 x 8 by lane FMAs.
 * Small planes put output channels in the lanes instead (gemm_cl, below), so no lane
 * computes a pixel that is not there. */
#define ES_F32_MR 8

#if defined(__GNUC__)
#define ES_ALWAYS_INLINE static inline __attribute__((always_inline))
#define ES_NOINLINE static __attribute__((noinline))
#else
#define ES_ALWAYS_INLINE static inline
#define ES_NOINLINE static
#endif
/* Channels per packed row, the stride of k. 16, not 8, for the small-plane kernel
 * (gemm_cl): its vectors are 16 channels, and two 8-channel rows K floats apart had to be
 * joined per k (two half loads and a vinsertf64x4 per vector: 8-11 % of the time of a
 * 7 x 7 3x3 conv or a 6 x 6 1x1 conv, measured against full-vector loads). */
#define ES_F32_WB 16

/* the packed weights of output channels [m0, m0 + 8), m0 a multiple of 8 */
static const float *wblock(const float *w, int m0, int K) {
    return w + (size_t)(m0 / ES_F32_WB) * K * ES_F32_WB + m0 % ES_F32_WB;
}

/* Prefetch, ES_F32_PF tiles ahead: each k step of a block asks for row k's floats two
 * tiles on (the tile after next), and each stored row for its lines two tiles on (for
 * writing). A 1x1 conv on a big plane reads K rows and writes M rows that lie a plane
 * apart: 16 + 96 streams for EfficientNet-B0's 16 -> 96 expand at 112 x 112, more than
 * the hardware prefetchers follow, so every tile waited on L3 or memory for each row.
 * Kernel alone, inputs out of cache (48 MB touched between runs), best of 4 alternating
 * rounds, load ~9, AMD EPYC AVX-512: 16 -> 96 SiLU 1.59-1.66 ms -> 0.83-0.86 ms, 32 -> 16
 * 112 x 112 463-472 -> 346 us. A prefetch is one load-port op per 8 or 16 FMAs. */
#define ES_F32_PF 2
#define ES_F32_PF_AHEAD (ES_F32_PF * ES_F32_TP)
#if defined(__GNUC__)
#define ES_PREFETCH(a) __builtin_prefetch((a), 0, 3)
#define ES_PREFETCHW(a) __builtin_prefetch((a), 1, 3)
#else
#define ES_PREFETCH(a) ((void)(a))
#define ES_PREFETCHW(a) ((void)(a))
#endif

#if defined(__AVX512F__)
/* act(b8[r] + sum_k wp[8k + r] col[k][j]) for r < nr and the columns j < 16 nv set in keep:
 * 8 output channels x 16 nv pixels (nv = 1 only for a plane's last 16 or fewer), row r's
 * kept columns stored one after another from y + r ldy. keep is the first nj columns for
 * an output plane; for a tile of the phases' OH x WQ grid it leaves out the WQ - OW cells
 * past each output row, and what is kept is one contiguous run of the output plane, so
 * vcompressps packs each vector and one masked store writes it (no tile, no copy).
 * nv and act are constants in each copy (mk_f32_keep), and the three row loops are unrolled
 * by pragma: with a runtime act the epilogue reloaded p->act and jumped through act512v's
 * switch per vector, and with the row loop over a runtime nr GCC kept a0/a1 on the stack,
 * storing and reloading all 16 accumulators per block. At K = 16 to 40 that was a quarter
 * of the time (see mk_f32_keep). */
ES_ALWAYS_INLINE void mk_f32_8xv(const float *col, const int32_t *off, int K, const float *wp,
                                 const float *b8, float *y, size_t ldy, int nr, uint32_t keep,
                                 const int nv, const int act, const es_conv_params *p) {
    __m512 a0[ES_F32_MR], a1[ES_F32_MR];
    const __mmask16 k0 = (__mmask16)(keep & 0xFFFFu), k1 = (__mmask16)(keep >> 16);
    const int n0 = __builtin_popcount(k0), prefix = (keep & (keep + 1u)) == 0u;
    const __mmask16 s0 = (__mmask16)es_mask16(n0), s1 = (__mmask16)es_mask16(__builtin_popcount(k1));
    int r, k;
#if defined(__GNUC__)
#pragma GCC unroll 8
#endif
    for (r = 0; r < ES_F32_MR; ++r) a0[r] = a1[r] = _mm512_set1_ps(b8[r]);
    for (k = 0; k < K; ++k) {
        const float *cp = col + off[k], *wk = wp + (size_t)k * ES_F32_WB;
        const __m512 c0 = _mm512_loadu_ps(cp);
        const __m512 c1 = nv > 1 ? _mm512_loadu_ps(cp + 16) : c0;
        ES_PREFETCH(cp + ES_F32_PF_AHEAD);
        ES_PREFETCH(cp + ES_F32_PF_AHEAD + 16);
#if defined(__GNUC__)
#pragma GCC unroll 8
#endif
        for (r = 0; r < ES_F32_MR; ++r) {
            const __m512 w = _mm512_set1_ps(wk[r]);
            a0[r] = _mm512_fmadd_ps(c0, w, a0[r]);
            if (nv > 1) a1[r] = _mm512_fmadd_ps(c1, w, a1[r]);
        }
    }
#if defined(__GNUC__)
#pragma GCC unroll 8
#endif
    for (r = 0; r < ES_F32_MR; ++r) {
        float *yr = y + (size_t)r * ldy;
        __m512 v0, v1;
        if (r >= nr) break;
        v0 = act512v(a0[r], act, p->a0, p->a1);
        v1 = nv > 1 ? act512v(a1[r], act, p->a0, p->a1) : v0;
        ES_PREFETCHW(yr + ES_F32_PF_AHEAD);
        ES_PREFETCHW(yr + ES_F32_PF_AHEAD + 16);
        if (prefix) { /* the first nj columns: plain masked stores */
            _mm512_mask_storeu_ps(yr, k0, v0);
            if (nv > 1) _mm512_mask_storeu_ps(yr + 16, k1, v1);
        } else {
            _mm512_mask_storeu_ps(yr, s0, _mm512_maskz_compress_ps(k0, v0));
            if (nv > 1) _mm512_mask_storeu_ps(yr + n0, s1, _mm512_maskz_compress_ps(k1, v1));
        }
    }
}

/* the kept columns of a 32-column block (see mk_f32_8xv): one copy per activation and
 * vector count. Kernel old/new in one process, alternating, thread CPU time, per-round min
 * of 5 rounds, load 3.0: EfficientNet-B0 1x1 16 -> 96 SiLU at 112 x 112 688 -> 632 us,
 * 32 -> 16 at 112 x 112 135 -> 119, 24 -> 144 SiLU at 56 x 56 320 -> 297, 3x3 s2 stem
 * 3 -> 32 SiLU 364 -> 339; MobileNetV2 16 -> 96 ReLU6 at 112 x 112 470 -> 387, 24 -> 144
 * at 56 x 56 237 -> 205, stem 291 -> 259; MobileNetV3-small's HardSwish stem 172 -> 154;
 * K >= 64 (ResNet-18's 3x3s) 0.99-1.00. With SiLU what remains is the sigmoid's own
 * operations, about as many as the 16 FMAs of an output vector at K = 16. */
static void mk_f32_keep(const float *col, const int32_t *off, int K, const float *wp,
                        const float *b8, float *y, size_t ldy, int nr, int nj, uint32_t keep,
                        const es_conv_params *p) {
#define ES_MK_ACT(A)                                                                  \
    case A:                                                                           \
        if (nj > 16)                                                                  \
            mk_f32_8xv(col, off, K, wp, b8, y, ldy, nr, keep, 2, A, p);               \
        else                                                                          \
            mk_f32_8xv(col, off, K, wp, b8, y, ldy, nr, keep, 1, A, p);               \
        break
    switch (p->act) {
        ES_MK_ACT(ES_ACT_RELU);
        ES_MK_ACT(ES_ACT_CLIP);
        ES_MK_ACT(ES_ACT_LEAKY);
        ES_MK_ACT(ES_ACT_HARDSWISH);
        ES_MK_ACT(ES_ACT_SIGMOID);
        ES_MK_ACT(ES_ACT_SILU);
        ES_MK_ACT(ES_ACT_HARDSIGMOID);
    default: ES_MK_ACT(ES_ACT_NONE); /* act512v passes any other code through unchanged */
    }
#undef ES_MK_ACT
}

static void mk_f32_block(const float *col, const int32_t *off, int K, const float *wp,
                         const float *b8, float *y, size_t ldy, int nr, int nj,
                         const es_conv_params *p) {
    const uint32_t keep = nj >= 32 ? 0xFFFFFFFFu : (1u << nj) - 1u;
    mk_f32_keep(col, off, K, wp, b8, y, ldy, nr, nj, keep, p);
}
#define ES_F32_HAS_KEEP 1
#elif defined(__AVX2__) && defined(__FMA__)
static __m256 act256(__m256 v, const es_conv_params *p) {
    return act256v(v, p->act, p->a0, p->a1);
}

/* 4 of the block's 8 channels (wp, b4 offset to the first) x 16 pixels on 8 ymm */
static void mk_f32_4x16(const float *col, const int32_t *off, int K, const float *wp, const float *b4,
                        float *y, size_t ldy, int nr, int nj, const es_conv_params *p) {
    __m256 s[4][2];
    int r, k;
    for (r = 0; r < 4; ++r) s[r][0] = s[r][1] = _mm256_set1_ps(b4[r]);
    for (k = 0; k < K; ++k) {
        const float *cp = col + off[k], *wk = wp + (size_t)k * ES_F32_WB;
        const __m256 c0 = _mm256_loadu_ps(cp), c1 = _mm256_loadu_ps(cp + 8);
        ES_PREFETCH(cp + ES_F32_PF_AHEAD);
        for (r = 0; r < 4; ++r) {
            const __m256 w = _mm256_broadcast_ss(wk + r);
            s[r][0] = _mm256_fmadd_ps(c0, w, s[r][0]);
            s[r][1] = _mm256_fmadd_ps(c1, w, s[r][1]);
        }
    }
    for (r = 0; r < nr; ++r) {
        float *yr = y + (size_t)r * ldy, t[16];
        const __m256 v0 = act256(s[r][0], p), v1 = act256(s[r][1], p);
        ES_PREFETCHW(yr + ES_F32_PF_AHEAD);
        if (nj == 16) {
            _mm256_storeu_ps(yr, v0);
            _mm256_storeu_ps(yr + 8, v1);
        } else {
            _mm256_storeu_ps(t, v0);
            _mm256_storeu_ps(t + 8, v1);
            memcpy(yr, t, sizeof(float) * (size_t)nj);
        }
    }
}

static void mk_f32_block(const float *col, const int32_t *off, int K, const float *wp,
                         const float *b8, float *y, size_t ldy, int nr, int nj,
                         const es_conv_params *p) {
    int h, j;
    for (h = 0; h < 2 && 4 * h < nr; ++h)
        for (j = 0; j < nj; j += 16)
            mk_f32_4x16(col + j, off, K, wp + 4 * h, b8 + 4 * h, y + (size_t)4 * h * ldy + j,
                        ldy, nr - 4 * h < 4 ? nr - 4 * h : 4, nj - j < 16 ? nj - j : 16, p);
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
static float32x4_t act_neon(float32x4_t v, const es_conv_params *p) {
    return act_neonv(v, p->act, p->a0, p->a1);
}

/* 8 channels x 8 pixels on 16 q registers: the 8 weights of k in two registers, each
 * multiplied by lane into both pixel vectors */
static void mk_f32_8x8(const float *col, const int32_t *off, int K, const float *wp, const float *b8,
                       float *y, size_t ldy, int nr, int nj, const es_conv_params *p) {
    float32x4_t s[8][2];
    int r, k;
    for (r = 0; r < 8; ++r) s[r][0] = s[r][1] = vdupq_n_f32(b8[r]);
    for (k = 0; k < K; ++k) {
        const float *cp = col + off[k], *wk = wp + (size_t)k * ES_F32_WB;
        const float32x4_t c0 = vld1q_f32(cp), c1 = vld1q_f32(cp + 4);
        const float32x4_t w0 = vld1q_f32(wk), w1 = vld1q_f32(wk + 4);
        ES_PREFETCH(cp + ES_F32_PF_AHEAD);
#define ES_LANE(R, W, L)                                 \
    s[R][0] = vfmaq_laneq_f32(s[R][0], c0, W, L);        \
    s[R][1] = vfmaq_laneq_f32(s[R][1], c1, W, L)
        ES_LANE(0, w0, 0); ES_LANE(1, w0, 1); ES_LANE(2, w0, 2); ES_LANE(3, w0, 3);
        ES_LANE(4, w1, 0); ES_LANE(5, w1, 1); ES_LANE(6, w1, 2); ES_LANE(7, w1, 3);
#undef ES_LANE
    }
    for (r = 0; r < nr; ++r) {
        float *yr = y + (size_t)r * ldy, t[8];
        ES_PREFETCHW(yr + ES_F32_PF_AHEAD);
        vst1q_f32(t, act_neon(s[r][0], p));
        vst1q_f32(t + 4, act_neon(s[r][1], p));
        memcpy(yr, t, sizeof(float) * (size_t)nj);
    }
}

static void mk_f32_block(const float *col, const int32_t *off, int K, const float *wp,
                         const float *b8, float *y, size_t ldy, int nr, int nj,
                         const es_conv_params *p) {
    int j;
    for (j = 0; j < nj; j += 8)
        mk_f32_8x8(col + j, off, K, wp, b8, y + j, ldy, nr, nj - j < 8 ? nj - j : 8, p);
}
#else
/* portable: the same block as plain loops (GCC -O3 vectorises the pixel loop) */
static void mk_f32_block(const float *col, const int32_t *off, int K, const float *wp,
                         const float *b8, float *y, size_t ldy, int nr, int nj,
                         const es_conv_params *p) {
    float s[ES_F32_MR][ES_F32_TP];
    int r, k, j;
    for (r = 0; r < ES_F32_MR; ++r)
        for (j = 0; j < ES_F32_TP; ++j) s[r][j] = b8[r];
    for (k = 0; k < K; ++k) {
        const float *cp = col + off[k], *wk = wp + (size_t)k * ES_F32_WB;
        ES_PREFETCH(cp + ES_F32_PF_AHEAD);
        ES_PREFETCH(cp + ES_F32_PF_AHEAD + 16);
        for (r = 0; r < ES_F32_MR; ++r)
            for (j = 0; j < ES_F32_TP; ++j) s[r][j] += wk[r] * cp[j];
    }
    for (r = 0; r < nr; ++r)
        for (j = 0; j < nj; ++j) y[(size_t)r * ldy + j] = es_act_f32(s[r][j], p->act, p->a0, p->a1);
}
#endif

/* ---- small planes: output channels in the lanes ------------------------------------------
 * On a plane of at most ES_F32_CL_P output pixels whose 16-pixel vectors would leave lanes
 * empty (3 x 3: 9 of 16; 7 x 7: 49 of 64; and the WQ - OW grid columns of a padded 3 x 3
 * conv on top), or of at most ES_F32_CL_PK with K >= ES_F32_CL_K where the pixel path would
 * waste 1/20 of its cells or more (use_cl), the GEMM turns around, as
 * XNNPACK's f32-gemm does on NHWC: the packed weights' 16-channel rows are the vectors,
 * each pixel's input value is broadcast, and
 * ES_CL_CH channels x ES_CL_NP pixels stay in registers for the whole K (AVX-512: 32 x 9 in
 * 18 zmm, one packed row a vector; AVX2: 16 x 6 in 12 ymm; NEON: 16 x 4 in 16 q). Per k
 * that is ES_CL_CH / 16 weight rows and NP broadcasts for ES_CL_CH NP / lanes vector FMAs;
 * the plane's pixels are split into equal chunks of at most ES_CL_NP, and a chunk's
 * ES_CL_CH x NP results go out through a small tile (the channel planes are NCHW). Each
 * weight block is read once per chunk, from cache after the first. Pixel j of a chunk
 * reads grid cell g[j] of each K row (its flat index, or oh WQ + ow through the phases). */
#define ES_F32_CL_P 64
/* Bigger planes with a long K: ResNet's 3x3 at 14 x 14 runs 224 grid cells for 196
 * outputs on the pixel path (1/8 of its FMAs wasted), at 28 x 28 848 for 784, and none
 * here. A chunk's scalar transpose out of the tile costs about ES_CL_CH NP moves against
 * its K ES_CL_CH NP / 16 FMAs, so a short K loses (measured so; AVX-512 now transposes in
 * registers, tile_out). Kernel alone, thread CPU time, p50 of
 * 7-11 alternating rounds, load 1.7-6.5, this path over the pixel path: 3x3 256 -> 256 at
 * 14 x 14 0.86-0.87x, 3x3 128 -> 256 stride 2 (14 x 14) 0.90-0.92x, 1x1 384 -> 64 at
 * 14 x 14 0.88-0.91x, 3x3 128 -> 128 at 28 x 28 0.92-0.95x; at K 96 and 128 (1x1 96 -> 576,
 * 1x1 128 -> 256 stride 2, 14 x 14) 1.13x and 1.04x; with under 1/20 of the cells wasted
 * no gain (3x3 64 -> 128 stride 2 to 28 x 28, 3.5 %: 1.00-1.01x) or a loss (3x3 64 -> 64 at
 * 56 x 56, 3.4 %: 1.03x). Those figures predate the chunks within rows (gemm_cl_rows): with
 * them AVX-512 takes every padded or strided plane with K >= ES_F32_CL_K and whole
 * ES_CL_CH blocks, whatever its size (ResNet-18-224's four 3x3 64 -> 64 at 56 x 56, per-step
 * minima of 7 alternating rounds in the network: 2.12 -> 2.08 ms each; 3x3 64 -> 128 stride
 * 2: 1.11 -> 1.08 ms). */
#define ES_F32_CL_PK 1024
#define ES_F32_CL_K 256


#if defined(__AVX512F__)
#define ES_CL_CH 32
#define ES_CL_NP 9
/* Weight rows are prefetched ES_CL_PF steps of k (2 KB) ahead. A block's rows are read once
 * per chunk, and by the first chunk from L3 (a network's weights do not fit L2): in the
 * network the 7 x 7 convs of MobileNetV2-224 ran 1.06-1.18x their time alone until then.
 * Per-step minima of 10 alternating rounds in the network: 320 -> 1280 422 -> 396 us,
 * 960 -> 320 305 -> 281, the 160 -> 960 and 960 -> 160 convs -7 to -10 each, 102 us in
 * all; 16 or 64 steps ahead the same. */
#define ES_CL_PF 32
ES_ALWAYS_INLINE void cl_tile_n(const float *col, const int32_t *off, const int *g, int K,
                                const float *const *wb, const float *bb, float *t,
                                const es_conv_params *p, const int NP) {
    __m512 a0[ES_CL_NP], a1[ES_CL_NP];
    const __m512 b0 = _mm512_loadu_ps(bb), b1 = _mm512_loadu_ps(bb + 16);
    int j, k;
    for (j = 0; j < NP; ++j) {
        a0[j] = b0;
        a1[j] = b1;
    }
    for (k = 0; k < K; ++k) {
        const float *cp = col + off[k];
        const size_t kk = (size_t)k * ES_F32_WB;
        const __m512 w0 = _mm512_loadu_ps(wb[0] + kk), w1 = _mm512_loadu_ps(wb[1] + kk);
        ES_PREFETCH(wb[0] + kk + ES_CL_PF * ES_F32_WB);
        ES_PREFETCH(wb[1] + kk + ES_CL_PF * ES_F32_WB);
        for (j = 0; j < NP; ++j) {
            const __m512 xv = _mm512_set1_ps(cp[g[j]]);
            a0[j] = _mm512_fmadd_ps(w0, xv, a0[j]);
            a1[j] = _mm512_fmadd_ps(w1, xv, a1[j]);
        }
    }
    for (j = 0; j < NP; ++j) {
        _mm512_storeu_ps(t + j * ES_CL_CH, act512v(a0[j], p->act, p->a0, p->a1));
        _mm512_storeu_ps(t + j * ES_CL_CH + 16, act512v(a1[j], p->act, p->a0, p->a1));
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
#define ES_CL_CH 16
#define ES_CL_NP 6
ES_ALWAYS_INLINE void cl_tile_n(const float *col, const int32_t *off, const int *g, int K,
                                const float *const *wb, const float *bb, float *t,
                                const es_conv_params *p, const int NP) {
    __m256 a0[ES_CL_NP], a1[ES_CL_NP];
    const __m256 b0 = _mm256_loadu_ps(bb), b1 = _mm256_loadu_ps(bb + 8);
    int j, k;
    for (j = 0; j < NP; ++j) {
        a0[j] = b0;
        a1[j] = b1;
    }
    for (k = 0; k < K; ++k) {
        const float *cp = col + off[k];
        const size_t kk = (size_t)k * ES_F32_WB;
        const __m256 w0 = _mm256_loadu_ps(wb[0] + kk), w1 = _mm256_loadu_ps(wb[0] + kk + 8);
        for (j = 0; j < NP; ++j) {
            const __m256 xv = _mm256_broadcast_ss(cp + g[j]);
            a0[j] = _mm256_fmadd_ps(w0, xv, a0[j]);
            a1[j] = _mm256_fmadd_ps(w1, xv, a1[j]);
        }
    }
    for (j = 0; j < NP; ++j) {
        _mm256_storeu_ps(t + j * ES_CL_CH, act256v(a0[j], p->act, p->a0, p->a1));
        _mm256_storeu_ps(t + j * ES_CL_CH + 8, act256v(a1[j], p->act, p->a0, p->a1));
    }
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define ES_CL_CH 16
#define ES_CL_NP 4
ES_ALWAYS_INLINE void cl_tile_n(const float *col, const int32_t *off, const int *g, int K,
                                const float *const *wb, const float *bb, float *t,
                                const es_conv_params *p, const int NP) {
    float32x4_t a[ES_CL_NP][4];
    int i, j, k;
    for (j = 0; j < NP; ++j)
        for (i = 0; i < 4; ++i) a[j][i] = vld1q_f32(bb + 4 * i);
    for (k = 0; k < K; ++k) {
        const float *cp = col + off[k];
        const size_t kk = (size_t)k * ES_F32_WB;
        const float32x4_t w0 = vld1q_f32(wb[0] + kk), w1 = vld1q_f32(wb[0] + kk + 4);
        const float32x4_t w2 = vld1q_f32(wb[0] + kk + 8), w3 = vld1q_f32(wb[0] + kk + 12);
        for (j = 0; j < NP; ++j) {
            const float xv = cp[g[j]];
            a[j][0] = vfmaq_n_f32(a[j][0], w0, xv);
            a[j][1] = vfmaq_n_f32(a[j][1], w1, xv);
            a[j][2] = vfmaq_n_f32(a[j][2], w2, xv);
            a[j][3] = vfmaq_n_f32(a[j][3], w3, xv);
        }
    }
    for (j = 0; j < NP; ++j)
        for (i = 0; i < 4; ++i)
            vst1q_f32(t + j * ES_CL_CH + 4 * i, act_neonv(a[j][i], p->act, p->a0, p->a1));
}
#else
#define ES_CL_CH 16
#define ES_CL_NP 4
/* portable: the same tile as plain loops */
ES_ALWAYS_INLINE void cl_tile_n(const float *col, const int32_t *off, const int *g, int K,
                                const float *const *wb, const float *bb, float *t,
                                const es_conv_params *p, const int NP) {
    float a[ES_CL_NP][ES_CL_CH];
    int i, j, k, r;
    for (j = 0; j < NP; ++j)
        for (r = 0; r < ES_CL_CH; ++r) a[j][r] = bb[r];
    for (k = 0; k < K; ++k) {
        const float *cp = col + off[k];
        for (j = 0; j < NP; ++j) {
            const float xv = cp[g[j]];
            for (i = 0; i < ES_CL_CH / ES_F32_WB; ++i)
                for (r = 0; r < ES_F32_WB; ++r)
                    a[j][i * ES_F32_WB + r] += wb[i][(size_t)k * ES_F32_WB + r] * xv;
        }
    }
    for (j = 0; j < NP; ++j) act_row(t + j * ES_CL_CH, a[j], ES_CL_CH, p->act, p->a0, p->a1);
}
#endif

/* one chunk of np <= ES_CL_NP pixels, np a constant in each case so the tile's
 * accumulators are registers */
ES_ALWAYS_INLINE void cl_tile_np(const float *col, const int32_t *off, const int *g, int K,
                                 const float *const *wb, const float *bb, float *t, int np,
                                 const es_conv_params *p) {
    switch (np) {
#if ES_CL_NP > 6
    case 9: cl_tile_n(col, off, g, K, wb, bb, t, p, 9); break;
    case 8: cl_tile_n(col, off, g, K, wb, bb, t, p, 8); break;
    case 7: cl_tile_n(col, off, g, K, wb, bb, t, p, 7); break;
#endif
#if ES_CL_NP > 4
    case 6: cl_tile_n(col, off, g, K, wb, bb, t, p, 6); break;
    case 5: cl_tile_n(col, off, g, K, wb, bb, t, p, 5); break;
#endif
    case 4: cl_tile_n(col, off, g, K, wb, bb, t, p, 4); break;
    case 3: cl_tile_n(col, off, g, K, wb, bb, t, p, 3); break;
    case 2: cl_tile_n(col, off, g, K, wb, bb, t, p, 2); break;
    default: cl_tile_n(col, off, g, K, wb, bb, t, p, 1); break;
    }
}

/* pixel j of the chunk at grid cell g[j]: a chunk across row ends */
static void cl_tile(const float *col, const int32_t *off, const int *g, int K,
                    const float *const *wb, const float *bb, float *t, int np,
                    const es_conv_params *p) {
    cl_tile_np(col, off, g, K, wb, bb, t, np, p);
}

/* pixel j of the chunk at cell j of col: a chunk within one row, col moved to its first
 * cell. g is a constant here, so the offsets fold into the broadcasts' addresses: per k
 * one base for all pixels, where g[j] cost an index add per pixel and, past the free
 * registers, a reload from the stack. Tile alone on L1-resident rows, K 576: 56 -> 58
 * GMAC/s, 99 % of this CPU's 512-bit FMA peak (58.3-58.8 GMAC/s, one vfmadd231ps a cycle). */
static void cl_tile_row(const float *col, const int32_t *off, int K, const float *const *wb,
                        const float *bb, float *t, int np, const es_conv_params *p) {
    static const int seq[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    cl_tile_np(col, off, seq, K, wb, bb, t, np, p);
}

/* ---- out of the tile: channel r < nr of a chunk's np pixels (t[j ES_CL_CH + r]) to y + r ys
 * Copied one value at a time that is ES_CL_CH np moves per chunk against the chunk's
 * K ES_CL_CH np / 16 FMAs: about 15 % at K 64-96. AVX-512 transposes 8 pixels x 16 channels
 * in registers instead (cl_store16). The tile stays: storing from the accumulators inside
 * cl_tile_n changed how GCC allocates the K loop's registers, and the 9-pixel tiles ran 3-4 %
 * slower over the whole K (1x1 960 -> 160 on 3 x 3). */
static void tile_copy(const float *t, int np, int nr, float *y, size_t ys) {
    int r, j;
    for (r = 0; r < nr; ++r)
        for (j = 0; j < np; ++j) y[r * ys + j] = t[j * ES_CL_CH + r];
}

#if defined(__AVX512F__)
/* v[j], j < np <= 9: 16 channels of pixel j; channel r < nr to y + r ys. Two in-lane shuffle
 * stages leave in 128-bit lane l of q[c][h] channel 4 l + c of pixels 4 h .. 4 h + 3; a
 * two-source permute pairs the lanes of h = 0 and 1 into channels c and 4 + c (lo), 8 + c
 * and 12 + c (hi), 8 pixels each; a masked store writes a row's np pixels and no further
 * (the next row's first pixels are already out). Pixel 8 is scattered: read back from the
 * tile one float at a time, the loads wait on the tile's 64-byte stores, which undid the
 * gain on 9-pixel chunks (4 % slower than the plain copy on 6 x 6). */
ES_ALWAYS_INLINE void cl_store16(const __m512 *v, const int np, int nr, float *y, size_t ys) {
    const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19,
                                             4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i hi_idx = _mm512_add_epi32(lo_idx, _mm512_set1_epi32(8));
    const __mmask16 m = (__mmask16)((1u << (np < 8 ? np : 8)) - 1);
    __m512 x[8], s[8], q[4][2];
    int j, c, h;
    for (j = 0; j < 8; ++j) x[j] = j < np ? v[j] : _mm512_setzero_ps();
    for (j = 0; j < 4; ++j) {
        s[2 * j] = _mm512_unpacklo_ps(x[2 * j], x[2 * j + 1]);
        s[2 * j + 1] = _mm512_unpackhi_ps(x[2 * j], x[2 * j + 1]);
    }
    for (h = 0; h < 2; ++h) {
        q[0][h] = _mm512_shuffle_ps(s[4 * h], s[4 * h + 2], 0x44);
        q[1][h] = _mm512_shuffle_ps(s[4 * h], s[4 * h + 2], 0xEE);
        q[2][h] = _mm512_shuffle_ps(s[4 * h + 1], s[4 * h + 3], 0x44);
        q[3][h] = _mm512_shuffle_ps(s[4 * h + 1], s[4 * h + 3], 0xEE);
    }
    for (c = 0; c < 4; ++c) {
        const __m512 lo = _mm512_permutex2var_ps(q[c][0], lo_idx, q[c][1]);
        const __m512 hi = _mm512_permutex2var_ps(q[c][0], hi_idx, q[c][1]);
        if (c < nr) _mm512_mask_storeu_ps(y + c * ys, m, lo);
        if (4 + c < nr)
            _mm512_mask_storeu_ps(y + (4 + c) * ys, m, _mm512_shuffle_f32x4(lo, lo, 0x4E));
        if (8 + c < nr) _mm512_mask_storeu_ps(y + (8 + c) * ys, m, hi);
        if (12 + c < nr)
            _mm512_mask_storeu_ps(y + (12 + c) * ys, m, _mm512_shuffle_f32x4(hi, hi, 0x4E));
    }
    if (np > 8) {
        const __m512i rows = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32((int)ys));
        _mm512_mask_i32scatter_ps(y + 8, (__mmask16)es_mask16(nr), rows,
                                  v[8], 4);
    }
}

ES_ALWAYS_INLINE void tile_out_n(const float *t, const int np, int nr, float *y, size_t ys) {
    __m512 v0[ES_CL_NP], v1[ES_CL_NP];
    int j;
    for (j = 0; j < np; ++j) {
        v0[j] = _mm512_loadu_ps(t + j * ES_CL_CH);
        v1[j] = _mm512_loadu_ps(t + j * ES_CL_CH + 16);
    }
    cl_store16(v0, np, nr, y, ys);
    if (nr > 16) cl_store16(v1, np, nr - 16, y + 16 * ys, ys);
}

/* np a constant in each case; 1 or 2 pixels (squeeze-excite 1x1 on 1 x 1) would transpose
 * mostly zeros, and copy */
static void tile_out(const float *t, int np, int nr, float *y, size_t ys) {
    switch (np) {
    case 9: tile_out_n(t, 9, nr, y, ys); break;
    case 8: tile_out_n(t, 8, nr, y, ys); break;
    case 7: tile_out_n(t, 7, nr, y, ys); break;
    case 6: tile_out_n(t, 6, nr, y, ys); break;
    case 5: tile_out_n(t, 5, nr, y, ys); break;
    case 4: tile_out_n(t, 4, nr, y, ys); break;
    case 3: tile_out_n(t, 3, nr, y, ys); break;
    default: tile_copy(t, np, nr, y, ys); break;
    }
}
#else
#define tile_out tile_copy
#endif

/* the cells the pixel path computes on a grid of n: tiles of 32, the last one 16 wide when
 * that is enough */
static int pixel_cells(int n) {
    const int r = n % ES_F32_TP;
    return n - r + (r == 0 ? 0 : r <= 16 ? 16 : ES_F32_TP);
}

#if defined(__AVX512F__)
/* A 1x1 conv in place that narrows, K >= 1.5 M and K >= 96 (MobileNetV2's projections), M in
 * whole channel groups, runs channels in the lanes on a plane of any size: the 8 x 32 pixel
 * tiles cycle through few channel blocks per input tile there (53-61 GMAC/s on 192 -> 64 and
 * 128 -> 64 at 28 x 28). Kernel alone, random weights, Intel Xeon, per-call minima of 60
 * alternating rounds, channel lanes over the pixel path: 192 -> 64 at 28 x 28 0.67 and at
 * 14 x 14 0.69-0.71, 192 -> 32 at 28 x 28 0.74-0.76, 144 -> 32 0.77-0.78, 128 -> 64
 * 0.78-0.86, 128 -> 32 0.81, 96 -> 64 0.93-0.94, 96 -> 32 at 56 x 56 0.98-0.99; where it
 * widens or K is short it loses (64 -> 384 at 14 x 14 1.17-1.23, 64 -> 128 at 56 x 56
 * 1.22-1.25, 64 -> 32 at 56 x 56 1.04-1.16) or ties (96 -> 576 0.95-1.00): a chunk's
 * transpose out is paid once per K, and wide outputs keep the pixel tiles busy. */
static int narrowing_1x1(int P, int n, int K, int M) {
    return n == P && M % ES_CL_CH == 0 && K >= 96 && 2 * K >= 3 * M;
}
#endif

/* whether a plane of P outputs on a grid of n cells, K long, M channels, goes to gemm_cl:
 * small, and 16-pixel vectors over the grid would leave lanes empty; or bigger, K long, 1/20
 * of the pixel path's cells would be wasted, and a smaller share of gemm_cl's channel rows,
 * M rounded up to ES_CL_CH. Kernel alone, thread CPU time, p50 of 9 alternating rounds, load
 * 2.5, pixel path over gemm_cl at 14 x 14 (12 of 208 cells wasted): 1x1 480 -> 80 (16 of 96
 * rows wasted) 0.90x, 672 -> 112 0.94x, 480 -> 112 0.94x, 288 -> 48 0.83x; whole groups of
 * 32 stay with gemm_cl: 384 -> 64 1.09x, 576 -> 96 1.07x, 3x3 256 -> 256 1.12x. */
static int use_cl(int P, int n, int K, int M, int OW) {
    const int cells = pixel_cells(n), mc = (M + ES_CL_CH - 1) / ES_CL_CH * ES_CL_CH;
    if (P <= ES_F32_CL_P) return (n + 15) / 16 * 16 != P;
#if defined(__AVX512F__)
    if (K >= ES_F32_CL_K && OW >= ES_CL_NP && n != P && M % ES_CL_CH == 0)
        return 1; /* any size: rows of whole chunks (gemm_cl_rows), no cell wasted */
    if (narrowing_1x1(P, n, K, M)) return 1;
#else
    (void)OW;
#endif
    return P <= ES_F32_CL_PK && K >= ES_F32_CL_K && 20 * (cells - P) >= cells &&
           (mc - M) * cells < (cells - P) * mc;
}

/* ---- where a row chunk reads its K rows -----------------------------------------------
 * From the padded plane (ph, K row offsets off over the phases), or, for a stride-1 conv's
 * chunk none of whose taps falls in the padding, from the input in place (x at row
 * oh - PT, column ow - PL; offsets offx over C H W). The plane then holds only what the
 * other chunks read (pad_edges), where building all of it cost a memset and a copy of
 * every input row: a 3x3 64 -> 64 conv alone at 56 x 56, random weights, Intel Xeon,
 * 4.6 -> 2.7 % of its perf samples (the rest is the kernel). Chunks in place: rows
 * r0 <= oh < r1 and columns c0 <= ow, ow + np <= c1 (r0 = r1: none). */
typedef struct {
    const float *ph, *x;
    const int32_t *off, *offx;
    int WQ, W, PT, PL, r0, r1, c0, c1;
} cl_src;

static inline const float *cl_src_at(const cl_src *s, int oh, int ow, int np,
                                     const int32_t **off) {
    if (oh >= s->r0 && oh < s->r1 && ow >= s->c0 && ow + np <= s->c1) {
        *off = s->offx;
        return s->x + (size_t)(oh - s->PT) * s->W + (ow - s->PL);
    }
    *off = s->off;
    return s->ph + (size_t)oh * s->WQ + ow;
}

/* A row of OW outputs in rc chunks of consecutive pixels, as equal as they go: the first
 * OW % rc have OW / rc + 1 pixels, the rest OW / rc. The kernels and pad_edges (which
 * writes the columns the edge chunks read) split a row by this one rule. */
static inline int chunk_len(int OW, int rc, int i) { return OW / rc + (i < OW % rc); }

/* the packed weight rows and the biases of output channels [m0, m0 + ch), ch a multiple of
 * 16, of which the returned count are real (rows past M read row 0 and their lanes are not
 * stored) */
static int cl_block(const float *wp, const float *b, int K, int M, int m0, int ch,
                    const float **wb, float *bb) {
    const int nr = M - m0 < ch ? M - m0 : ch, nblk = (M + ES_F32_WB - 1) / ES_F32_WB;
    int i, r;
    for (i = 0; i < ch / ES_F32_WB; ++i) {
        const int blk = m0 / ES_F32_WB + i;
        wb[i] = wp + (size_t)(blk < nblk ? blk : 0) * K * ES_F32_WB;
    }
    for (r = 0; r < ch; ++r) bb[r] = r < nr ? b[m0 + r] : 0.0f;
    return nr;
}

#if defined(__AVX512F__)
/* ---- wide rows, 64 channels at a time (AVX-512) -------------------------------------------
 * On rows of ES_CL64_OW outputs or more and M in whole 64s, a chunk is 64 channels x at most
 * 6 pixels: 24 accumulators, and per k four weight rows and six broadcasts for 24 FMAs,
 * where the 32 x 8 tile loads two rows and eight broadcasts (and prefetches two lines) for
 * 16. A core with two FMA ports (Intel) issues 16 FMAs in 8 cycles and was then bound by
 * those loads; ResNet-18-224 fp32, per-step minima of 10 alternating rounds, Intel Xeon:
 * 3x3 64 -> 64 at 56 x 56 1571-1603 -> 1502-1535 us, 128 -> 128 at 28 x 28 1484-1561 ->
 * 1443-1460 us, the stride-2 64 -> 128 897 -> 836 us. Rows of 14 (chunks of 5, 5, 4)
 * gained nothing and rows of 7 (4, 3) lost (1.25x); they take the wide tiles below. This is
 * the shape of onnxruntime's NCHWc kernel (MLAS: 4 filter blocks x 6 outputs) on our CHW
 * planes. */
#define ES_CL64_NP 6
#define ES_CL64_OW 24

ES_ALWAYS_INLINE void cl64_tile_n(const float *cp0, const int32_t *off, int K,
                                  const float *const *wb, const float *bb, float *t,
                                  const es_conv_params *p, const int NP) {
    __m512 a[4][ES_CL64_NP];
    int i, j, k;
    for (i = 0; i < 4; ++i)
        for (j = 0; j < NP; ++j) a[i][j] = _mm512_loadu_ps(bb + 16 * i);
    for (k = 0; k < K; ++k) {
        const float *cp = cp0 + off[k];
        const size_t kk = (size_t)k * ES_F32_WB;
        const __m512 w0 = _mm512_loadu_ps(wb[0] + kk), w1 = _mm512_loadu_ps(wb[1] + kk);
        const __m512 w2 = _mm512_loadu_ps(wb[2] + kk), w3 = _mm512_loadu_ps(wb[3] + kk);
        ES_PREFETCH(wb[0] + kk + ES_CL_PF * ES_F32_WB);
        ES_PREFETCH(wb[1] + kk + ES_CL_PF * ES_F32_WB);
        ES_PREFETCH(wb[2] + kk + ES_CL_PF * ES_F32_WB);
        ES_PREFETCH(wb[3] + kk + ES_CL_PF * ES_F32_WB);
        for (j = 0; j < NP; ++j) {
            const __m512 xv = _mm512_set1_ps(cp[j]);
            a[0][j] = _mm512_fmadd_ps(w0, xv, a[0][j]);
            a[1][j] = _mm512_fmadd_ps(w1, xv, a[1][j]);
            a[2][j] = _mm512_fmadd_ps(w2, xv, a[2][j]);
            a[3][j] = _mm512_fmadd_ps(w3, xv, a[3][j]);
        }
    }
    for (j = 0; j < NP; ++j)
        for (i = 0; i < 4; ++i)
            _mm512_storeu_ps(t + j * 64 + 16 * i, act512v(a[i][j], p->act, p->a0, p->a1));
}

/* channel r < nr of the chunk's np pixels (t[j 64 + r]) to y + r ys, 16 channels at a time */
ES_ALWAYS_INLINE void cl64_out_n(const float *t, const int np, int nr, float *y, size_t ys) {
    __m512 v[ES_CL64_NP];
    int h, j;
    for (h = 0; h < 4 && 16 * h < nr; ++h) {
        for (j = 0; j < np; ++j) v[j] = _mm512_loadu_ps(t + j * 64 + 16 * h);
        cl_store16(v, np, nr - 16 * h, y + (size_t)16 * h * ys, ys);
    }
}

/* one chunk of np <= 6 pixels at cp0, np a constant in each copy */
static void cl64_chunk(const float *cp0, const int32_t *off, int K, const float *const *wb,
                       const float *bb, float *y, size_t ys, int np, int nr,
                       const es_conv_params *p) {
    float t[ES_CL64_NP * 64];
    switch (np) {
    case 6: cl64_tile_n(cp0, off, K, wb, bb, t, p, 6); cl64_out_n(t, 6, nr, y, ys); break;
    case 5: cl64_tile_n(cp0, off, K, wb, bb, t, p, 5); cl64_out_n(t, 5, nr, y, ys); break;
    case 4: cl64_tile_n(cp0, off, K, wb, bb, t, p, 4); cl64_out_n(t, 4, nr, y, ys); break;
    case 3: cl64_tile_n(cp0, off, K, wb, bb, t, p, 3); cl64_out_n(t, 3, nr, y, ys); break;
    case 2: cl64_tile_n(cp0, off, K, wb, bb, t, p, 2); cl64_out_n(t, 2, nr, y, ys); break;
    default: cl64_tile_n(cp0, off, K, wb, bb, t, p, 1); cl64_out_n(t, 1, nr, y, ys); break;
    }
}

/* gemm_cl_rows with 64-channel chunks of at most 6 pixels */
static void gemm_cl64_rows(const cl_src *s, int K, const float *wp, const float *b, float *y,
                           int P, int OW, const es_conv_params *p) {
    const int rc = (OW + ES_CL64_NP - 1) / ES_CL64_NP;
    int m0, c, oh, ow;
    for (m0 = 0; m0 < p->M; m0 += 64) {
        const float *wb[4];
        float bb[64];
        const int nr = cl_block(wp, b, K, p->M, m0, 64, wb, bb);
        for (oh = 0; oh < P / OW; ++oh)
            for (c = 0, ow = 0; c < rc; ++c) {
                const int np = chunk_len(OW, rc, c);
                const int32_t *off;
                const float *cp = cl_src_at(s, oh, ow, np, &off);
                cl64_chunk(cp, off, K, wb, bb, y + (size_t)m0 * P + (size_t)oh * OW + ow,
                           (size_t)P, np, nr, p);
                ow += np;
            }
    }
}
#endif

#if defined(__AVX512F__)
/* ---- wide tiles, 32 channels x 14 pixels (AVX-512) ---------------------------------------
 * On rows of ES_WIDE_OW outputs or more and M in whole 32s, a chunk is 32 channels x at most
 * 14 consecutive pixels of one row; a 7 x 7 plane goes in chunks of two whole rows. 28
 * accumulators, and per k two weight rows and 14 broadcasts for 28 FMAs: 31 of the 32
 * registers, no spill (objdump). Against the 32 x 9 tiles these rows and planes took
 * before: two weight rows per 28 FMAs instead of per 18, a row of 14 is one chunk (not
 * 7 + 7), and a 7 x 7 plane runs 4 chunks of up to 14 where it ran 6 of up to 9, each
 * re-reading the block's weights. Kernel alone,
 * random weights, Intel Xeon (AVX-512, fp32 peak 93 GMAC/s), per-call minima of 60
 * alternating rounds, wide tiles over the kernels before: 3x3 512 -> 512 at 7 x 7 0.87-0.88
 * (89 GMAC/s), 256 -> 256 at 14 x 14 0.90-0.93 (90-92 GMAC/s), 128 -> 256 stride 2 to
 * 14 x 14 0.87-0.89. In ResNet-18-224 (per-step minima of 10 alternating rounds) layer4's
 * 3x3 convs went 1485 / 1485 / 1517 -> 1317 / 1316 / 1363 us, layer3's 1317 / 1328 / 1315
 * -> 1295 / 1306 / 1309, their stride-2 convs 813 -> 727 and 741 -> 694. Rows of 24 or
 * more with M in whole 64s keep the 64 x 6 tiles above: alone at 56 x 56 and 28 x 28 the
 * wide tiles measured 0.96-0.98x, but in the network 1.00-1.01x, and layer2's stride-2
 * conv (rows of 28) 728 -> 779 us. */
#define ES_WIDE_NP 14
#define ES_WIDE_OW 14

/* 32 channels of np pixels into t[j 32 + r]: pixel j < H at cp + j of each K row, pixel
 * j >= H (the second row of a pair) at cp + rs + j - H; NP and H are constants in each copy.
 * cl_tile_n's loop with a second row and 14 pixels; one function for both (the gathered
 * offsets or these) left GCC's cl_tile and cl_tile_row out of line, changing the 32 x 9
 * tiles' code, so each keeps its own copy. */
ES_ALWAYS_INLINE void wide_tile_n(const float *cp0, const int32_t *off, int K,
                                  const float *const *wb, const float *bb, float *t,
                                  const es_conv_params *p, const int NP, const int H,
                                  size_t rs) {
    __m512 a0[ES_WIDE_NP], a1[ES_WIDE_NP];
    const __m512 b0 = _mm512_loadu_ps(bb), b1 = _mm512_loadu_ps(bb + 16);
    int j, k;
    for (j = 0; j < NP; ++j) {
        a0[j] = b0;
        a1[j] = b1;
    }
    for (k = 0; k < K; ++k) {
        const float *cp = cp0 + off[k];
        const size_t kk = (size_t)k * ES_F32_WB;
        const __m512 w0 = _mm512_loadu_ps(wb[0] + kk), w1 = _mm512_loadu_ps(wb[1] + kk);
        ES_PREFETCH(wb[0] + kk + ES_CL_PF * ES_F32_WB);
        ES_PREFETCH(wb[1] + kk + ES_CL_PF * ES_F32_WB);
        for (j = 0; j < NP; ++j) {
            const __m512 xv = _mm512_set1_ps(j < H ? cp[j] : cp[rs + j - H]);
            a0[j] = _mm512_fmadd_ps(w0, xv, a0[j]);
            a1[j] = _mm512_fmadd_ps(w1, xv, a1[j]);
        }
    }
    for (j = 0; j < NP; ++j) {
        _mm512_storeu_ps(t + j * 32, act512v(a0[j], p->act, p->a0, p->a1));
        _mm512_storeu_ps(t + j * 32 + 16, act512v(a1[j], p->act, p->a0, p->a1));
    }
}

/* channel r < nr of the chunk's np consecutive outputs (t[j 32 + r]) to y + r ys: 16
 * channels at a time, transposed 8 pixels and then the rest (cl_store16) */
ES_ALWAYS_INLINE void wide_out_n(const float *t, const int np, int nr, float *y, size_t ys) {
    __m512 v[ES_WIDE_NP];
    int h, j;
    for (h = 0; h < 2 && 16 * h < nr; ++h) {
        float *yh = y + (size_t)16 * h * ys;
        for (j = 0; j < np; ++j) v[j] = _mm512_loadu_ps(t + j * 32 + 16 * h);
        cl_store16(v, np < 8 ? np : 8, nr - 16 * h, yh, ys);
        if (np > 8) cl_store16(v + 8, np - 8, nr - 16 * h, yh + 8, ys);
    }
}

/* one chunk of 7 <= np <= 14 pixels of a row at cp0, np a constant in each copy */
static void wide_chunk(const float *cp0, const int32_t *off, int K, const float *const *wb,
                       const float *bb, float *y, size_t ys, int np, int nr,
                       const es_conv_params *p) {
    float t[ES_WIDE_NP * 32];
#define ES_WIDE_CASE(n)                                                                    \
    case n:                                                                                \
        wide_tile_n(cp0, off, K, wb, bb, t, p, n, n, 0);                                   \
        wide_out_n(t, n, nr, y, ys);                                                       \
        break;
    switch (np) {
        ES_WIDE_CASE(14)
        ES_WIDE_CASE(13)
        ES_WIDE_CASE(12)
        ES_WIDE_CASE(11)
        ES_WIDE_CASE(10)
        ES_WIDE_CASE(9)
        ES_WIDE_CASE(8)
    default: ES_WIDE_CASE(7)
    }
#undef ES_WIDE_CASE
}

/* rows of OW >= ES_WIDE_OW in chunks of at most 14. Rows outer when the input planes hold
 * more floats than the weights: every 32-channel block then reads a row's input while it is
 * still in cache, where blocks outer read the whole input once per block (3x3 128 -> 128
 * at 56 x 56 on these tiles, kernel alone: 1.04-1.06x the 64 x 6 tiles with blocks outer,
 * 0.95-0.97x with rows outer); blocks outer when the weights are bigger, each block's
 * weights then read once per row from L2 rather than all of them per row (ResNet's 14 x 14
 * layers). */
static void gemm_wide_rows(const cl_src *s, int K, const float *wp, const float *b, float *y,
                           int P, int OW, const es_conv_params *p) {
    const int rc = (OW + ES_WIDE_NP - 1) / ES_WIDE_NP, OH = P / OW, nb = p->M / 32;
    const int rows_outer = (size_t)p->C * p->H * p->W > (size_t)K * p->M;
    const int n_outer = rows_outer ? OH : nb, n_inner = rows_outer ? nb : OH;
    int io, ii, c, ow;
    for (io = 0; io < n_outer; ++io)
        for (ii = 0; ii < n_inner; ++ii) {
            const int oh = rows_outer ? io : ii, m0 = 32 * (rows_outer ? ii : io);
            const float *wb[2];
            float bb[32];
            const int nr = cl_block(wp, b, K, p->M, m0, 32, wb, bb);
            for (c = 0, ow = 0; c < rc; ++c) {
                const int np = chunk_len(OW, rc, c);
                const int32_t *off;
                const float *cp = cl_src_at(s, oh, ow, np, &off);
                wide_chunk(cp, off, K, wb, bb, y + (size_t)m0 * P + (size_t)oh * OW + ow,
                           (size_t)P, np, nr, p);
                ow += np;
            }
        }
}

/* a 7 x 7 plane (OW 7, OH >= 2) in chunks of two rows, the second at grid row + WQ, and an
 * odd last row alone; the pair's 14 outputs are consecutive in the output plane */
static void gemm_wide_pairs(const cl_src *s, int K, const float *wp, const float *b, float *y,
                            int P, const es_conv_params *p) {
    const int OH = P / 7;
    float t[ES_WIDE_NP * 32];
    int m0, oh;
    for (m0 = 0; m0 < p->M; m0 += 32) {
        const float *wb[2];
        float bb[32];
        const int nr = cl_block(wp, b, K, p->M, m0, 32, wb, bb);
        float *ym = y + (size_t)m0 * P;
        for (oh = 0; oh + 1 < OH; oh += 2) {
            wide_tile_n(s->ph + (size_t)oh * s->WQ, s->off, K, wb, bb, t, p, 14, 7,
                        (size_t)s->WQ);
            wide_out_n(t, 14, nr, ym + oh * 7, (size_t)P);
        }
        if (oh < OH)
            wide_chunk(s->ph + (size_t)oh * s->WQ, s->off, K, wb, bb, ym + oh * 7, (size_t)P, 7,
                       nr, p);
    }
}
#endif

/* the most pixels gemm_cl_rows puts in one chunk of a row of OW, M channels */
static int cl_np(int M, int OW) {
#if defined(__AVX512F__)
    if (M % 64 == 0 && OW >= ES_CL64_OW) return ES_CL64_NP;
    if (M % 32 == 0 && OW >= ES_WIDE_OW) return ES_WIDE_NP;
#else
    (void)M;
    (void)OW;
#endif
    return ES_CL_NP;
}

/* gemm_cl on rows of at least ES_CL_NP outputs: each row in equal chunks of at most
 * ES_CL_NP consecutive pixels (cl_tile_row), none across a row end. Out of line: inlined
 * into gemm_cl it changed that function's register allocation, and the 7 x 7 planes'
 * chunks (ResNet-18's layer4 then, which stayed in gemm_cl) ran 4-5 % slower. */
ES_NOINLINE void gemm_cl_rows(const cl_src *s, int K, const float *wp, const float *b,
                              float *y, int P, int OW, const es_conv_params *p) {
    const int M = p->M, rc = (OW + ES_CL_NP - 1) / ES_CL_NP;
    int m0, c, p0, oh, ow;
#if defined(__AVX512F__)
    if (cl_np(M, OW) == ES_CL64_NP) {
        gemm_cl64_rows(s, K, wp, b, y, P, OW, p);
        return;
    }
    if (cl_np(M, OW) == ES_WIDE_NP) {
        gemm_wide_rows(s, K, wp, b, y, P, OW, p);
        return;
    }
#endif
    for (m0 = 0; m0 < M; m0 += ES_CL_CH) {
        const float *wb[ES_CL_CH / ES_F32_WB];
        float bb[ES_CL_CH], t[ES_CL_NP * ES_CL_CH];
        const int nr = cl_block(wp, b, K, M, m0, ES_CL_CH, wb, bb);
        for (oh = 0, p0 = 0; oh < P / OW; ++oh)
            for (c = 0, ow = 0; c < rc; ++c) {
                const int np = chunk_len(OW, rc, c);
                const int32_t *off;
                const float *cp = cl_src_at(s, oh, ow, np, &off);
                cl_tile_row(cp, off, K, wb, bb, t, np, p);
                tile_out(t, np, nr, y + (size_t)m0 * P + p0, (size_t)P);
                p0 += np;
                ow += np;
            }
    }
}

/* y[m][o] for every m < M and output o < P, o = oh OW + ow read at grid cell oh WQ + ow of
 * each K row col + off[k] */
static void gemm_cl(const cl_src *s, int K, const float *wp, const float *b, float *y, int P,
                    int OW, const es_conv_params *p) {
    const int M = p->M, nc = (P + ES_CL_NP - 1) / ES_CL_NP, base = P / nc, extra = P % nc;
    const float *col = s->ph;
    const int32_t *off = s->off;
    const int WQ = s->WQ;
    int m0, c, j, p0;
    if (OW >= ES_CL_NP) {
        gemm_cl_rows(s, K, wp, b, y, P, OW, p);
        return;
    }
#if defined(__AVX512F__)
    if (OW == 7 && P >= 14 && M % 32 == 0) {
        gemm_wide_pairs(s, K, wp, b, y, P, p);
        return;
    }
#endif
    for (m0 = 0; m0 < M; m0 += ES_CL_CH) {
        const float *wb[ES_CL_CH / ES_F32_WB];
        float bb[ES_CL_CH], t[ES_CL_NP * ES_CL_CH];
        const int nr = cl_block(wp, b, K, M, m0, ES_CL_CH, wb, bb);
        for (c = 0, p0 = 0; c < nc; ++c) {
            const int np = base + (c < extra);
            int g[ES_CL_NP];
            for (j = 0; j < np; ++j) g[j] = (p0 + j) / OW * WQ + (p0 + j) % OW;
            cl_tile(col, off, g, K, wb, bb, t, np, p);
            tile_out(t, np, nr, y + (size_t)m0 * P + p0, (size_t)P);
            p0 += np;
        }
    }
}

/* ---- one group: where the GEMM's K rows come from ----------------------------------------
 * A 1x1, stride-1, unpadded conv reads its input in place: row k at k P, whole 32-pixel
 * tiles (the last partial tile is copied by im2col_f32). Every other conv reads the SH x SW
 * stride phases of each channel's padded plane (es_f32_phases, as the depthwise kernel does):
 * over the flat index o = oh WQ + ow of the OH x WQ grid, tap (kh, kw) of channel c is one
 * contiguous row at a fixed offset off[k], so a 32-wide tile's K rows are read in place and
 * nothing is copied per tile (im2col copied K x 32 floats per tile, as much work as the
 * multiplies when M is 16 to 64: stems, ResNet's first stage). The WQ - OW grid columns
 * past each output row are computed and dropped on the way out: AVX-512 packs each vector's
 * kept cells with vcompressps and stores them straight into the output plane (the stem of
 * EfficientNet-B0, 3 -> 32 3x3 s2 SiLU at 224: 830 -> 553 us alone, load 9; the copy out of
 * a tile cost 16 memcpy calls per 8 x 32 block, as much as K = 27's FMAs); the other ISAs
 * compute into a tile and copy each output row's part out. A stride-1 conv on channels in
 * the lanes (gemm_cl_rows) reads its input planes in place wherever a chunk's taps miss the
 * padding, and the phase plane holds only the border the other chunks read (cl_src). */

#if !defined(ES_F32_HAS_KEEP) /* AVX-512 stores kept columns itself (mk_f32_8xv) */
/* y[r][oh OW + ow] = tile[r][g - o0] for the grid cells g in [o0, o0 + nj) with ow < OW */
static void scatter_tile(const float *tile, int nr, int o0, int nj, int WQ, int OW, float *y,
                         size_t P) {
    int g = o0, r;
    while (g < o0 + nj) {
        const int oh = g / WQ, ow = g % WQ;
        const int seg = WQ - ow < o0 + nj - g ? WQ - ow : o0 + nj - g;
        const int nv = ow >= OW ? 0 : (ow + seg < OW ? seg : OW - ow);
        if (nv > 0)
            for (r = 0; r < nr; ++r)
                memcpy(y + (size_t)r * P + (size_t)oh * OW + ow, tile + r * ES_F32_TP + (g - o0),
                       sizeof(float) * (size_t)nv);
        g += seg;
    }
}
#endif

static void gemm_blocks(const float *col, const int32_t *off, int K, const float *w,
                        const float *b, float *y, size_t ldy, int nj, const es_conv_params *p) {
    int m0, r;
    for (m0 = 0; m0 < p->M; m0 += ES_F32_MR) {
        const int nr = p->M - m0 < ES_F32_MR ? p->M - m0 : ES_F32_MR;
        float b8[ES_F32_MR];
        for (r = 0; r < ES_F32_MR; ++r) b8[r] = r < nr ? b[m0 + r] : 0.0f;
        mk_f32_block(col, off, K, wblock(w, m0, K), b8, y + (size_t)m0 * ldy, ldy, nr, nj, p);
    }
}

/* A 1x1 conv reads its K input rows in place, ES_F32_PB whole tiles at a time: every 8-channel
 * block runs over those 256 pixels before the next, so each output row gets 1 KB of
 * consecutive stores instead of 128 bytes, and the K x 1 KB of input stays in L1 across
 * the blocks (16 KB at K = 16). Kernel old (tile by tile, all blocks) / new in one
 * process, alternating, per-round min of 5 rounds, load 4.2: 1x1 16 -> 96 at 112 x 112
 * SiLU 626 -> 612 us, ReLU6 388 -> 380, 32 -> 16 119 -> 117.5, 40 -> 240 SiLU at 28 x 28
 * 0.95-0.99; K 144-240 unchanged (1.00). */
#define ES_F32_PB 8

/* With a longer K the K rows of a tile in place are K separate 128-byte runs a plane
 * apart, over 32-float boundaries of every alignment: 8 tiles of them (ES_F32_PB) hold
 * K x 8 x 2-3 lines, over L1 from K = 24 or so, and on planes of 256 or 1024 floats the rows
 * fall into a few L1 sets besides. From K = ES_F32_PACK_K each tile's K x 32 floats are
 * copied into one contiguous, aligned block (the im2col tile's scratch) and every channel
 * block runs over it while it sits in L1, tile by tile.
 *
 * Kernel alone, random weights, Intel Xeon, per-call minima of 25 alternating rounds,
 * packed over in place: 1x1 96 -> 576 at 14 x 14 0.88-0.90, 64 -> 384 0.84-1.00,
 * 112 -> 672 0.87, 672 -> 112 0.80-0.81, 480 -> 80 0.67-0.84, 240 -> 40 at 28 x 28
 * 0.77-0.78, 40 -> 240 0.85-0.98, 96 -> 24 and 144 -> 24 at 56 x 56 0.90-0.93 and
 * 0.87-0.90, ResNet-18's downsamples after their gather (64 -> 128 at 28 x 28, 128 -> 256
 * at 14 x 14) 0.81-0.98 and 0.83-0.88; on the aliasing planes 96 -> 576 at 16 x 16 0.74,
 * 32 -> 192 at 32 x 32 0.86. Short K loses the copy and the block order's long output
 * runs: 32 -> 16 and 16 -> 96 at 112 x 112 1.13-1.19 and 1.16-1.26, 24 -> 144 at 56 x 56
 * 1.08-1.12, 32 -> 192 at 28 x 28 0.97-1.01.
 *
 * A copy also needs enough channel blocks to pay for it inside a network: MobileNetV2-224's
 * 96 -> 24 and 144 -> 24 at 56 x 56 (3 blocks) went 102 -> 111 and 165 -> 174 us packed
 * (per-step minima, 12 alternating rounds), EfficientNet-B0's 144 -> 40 and 240 -> 40 at
 * 28 x 28 (5 blocks) 64 -> 60 and 112 -> 104 us (8 rounds); hence ES_F32_PACK_M. Copying
 * a 3x3 conv's phase rows the same way lost (1.10-1.28: its taps' rows overlap in cache
 * already). */
#define ES_F32_PACK_K 40
#define ES_F32_PACK_M 40

/* columns [p0, p0 + 32) of the K rows x + k P, into col[k][32] */
static void pack_tile(const float *x, size_t P, int K, float *col) {
    int k;
    for (k = 0; k < K; ++k, x += P, col += ES_F32_TP) {
#if defined(__AVX512F__)
        _mm512_storeu_ps(col, _mm512_loadu_ps(x));
        _mm512_storeu_ps(col + 16, _mm512_loadu_ps(x + 16));
#else
        memcpy(col, x, ES_F32_TP * sizeof(float));
#endif
    }
}

static void gemm_direct(const float *x, const float *w, const float *b, float *scratch,
                        float *y, const es_conv_params *p) {
    const int K = p->C, P = p->OH * p->OW, Pw = P / ES_F32_TP * ES_F32_TP;
    int32_t *off = (int32_t *)scratch, *off32 = off + ES_F32_K16(K);
    float *col = scratch + 2 * ES_F32_K16(K);
    int k, p0, q0, m0, r;
    for (k = 0; k < K; ++k) {
        off[k] = k * P;
        off32[k] = k * ES_F32_TP;
    }
    if (use_cl(P, P, K, p->M, P)) {
        /* The plane is one row of P pixels to gemm_cl, except a 7 x 7 plane: as rows of 7 it
         * takes the two-row wide tiles (gemm_wide_pairs, 4 chunks of up to 14 pixels, where
         * one row of 49 took 9 chunks of 64 channels x 5-6 pixels). Alone, random weights,
         * Intel Xeon, per-call minima, two alternating rounds, one row / rows of 7: 1x1
         * 160 -> 960 145-153 / 142-143 us, 96 -> 576 56.4-56.6 / 53.9-54.1, 320 -> 1280
         * 364 / 359-362, 960 -> 320 261-262 / 260; 960 -> 160 and 576 -> 96 unchanged. */
        const int ow = p->OW == 7 && p->OH >= 2 ? 7 : P;
        const cl_src s = {x, NULL, off, NULL, ow, ow, 0, 0, 0, 0, 0, 0};
        gemm_cl(&s, K, w, b, y, P, ow, p);
        return;
    }
    if (K >= ES_F32_PACK_K && p->M >= ES_F32_PACK_M) { /* tile by tile, packed copies */
        for (p0 = 0; p0 < Pw; p0 += ES_F32_TP) {
            pack_tile(x + p0, (size_t)P, K, col);
            gemm_blocks(col, off32, K, w, b, y + p0, (size_t)P, ES_F32_TP, p);
        }
    } else {
        for (q0 = 0; q0 < Pw; q0 += ES_F32_PB * ES_F32_TP) {
            const int q1 = q0 + ES_F32_PB * ES_F32_TP < Pw ? q0 + ES_F32_PB * ES_F32_TP : Pw;
            for (m0 = 0; m0 < p->M; m0 += ES_F32_MR) {
                const int nr = p->M - m0 < ES_F32_MR ? p->M - m0 : ES_F32_MR;
                const float *wb = wblock(w, m0, K);
                float b8[ES_F32_MR];
                for (r = 0; r < ES_F32_MR; ++r) b8[r] = r < nr ? b[m0 + r] : 0.0f;
                for (p0 = q0; p0 < q1; p0 += ES_F32_TP)
                    mk_f32_block(x + p0, off, K, wb, b8, y + (size_t)m0 * P + p0, (size_t)P,
                                 nr, ES_F32_TP, p);
            }
        }
    }
    if (Pw < P) { /* the last partial tile, through im2col_f32 */
        im2col_f32(x, col, Pw, K, p);
        gemm_blocks(col, off32, K, w, b, y + Pw, (size_t)P, P - Pw, p);
    }
}

/* A strided 1x1 conv without padding (ResNet's downsamples) reads one output-sized plane
 * per channel, x[c][oh SH][ow SW]: gathered once into scratch (AVX-512, SW = 2: the even
 * lanes of 32 input columns by one two-source permute) and run as the in-place 1x1 GEMM,
 * instead of building all SH x SW phases when its one tap reads only the first. Scratch:
 * the gathered C x P and the in-place GEMM's own fit in the phases' share of
 * ES_F32_GEMM_SCRATCH, as C SH SW pq >= 2 C pq >= C P + C (WQ + 32). ResNet-18's 64 -> 128
 * downsample at 56 x 56, kernel old/new alternating, per-round min, 8 rounds x 30 at load
 * 3.9 (the quiet rounds): 157.6 -> 131.5 us; 128 -> 256 at 28 x 28 unchanged (151). */
static void gemm_strided_1x1(const float *x, const float *w, const float *b, float *scratch,
                             float *y, const es_conv_params *p) {
    const int C = p->C, OH = p->OH, OW = p->OW, P = OH * OW;
    float *xs = scratch + 2 * ES_F32_K16(C) + ES_F32_TP * C;
    es_conv_params q = *p;
    int c, oh, ow;
    for (c = 0; c < C; ++c)
        for (oh = 0; oh < OH; ++oh) {
            const float *xr = x + ((size_t)c * p->H + (size_t)oh * p->SH) * p->W;
            float *d = xs + (size_t)c * P + (size_t)oh * OW;
            ow = 0;
#if defined(__AVX512F__)
            if (p->SW == 2) {
                const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                                     24, 26, 28, 30);
                for (; ow + 16 <= OW && 2 * ow + 32 <= p->W; ow += 16) {
                    const __m512 v0 = _mm512_loadu_ps(xr + 2 * ow);
                    const __m512 v1 = _mm512_loadu_ps(xr + 2 * ow + 16);
                    _mm512_storeu_ps(d + ow, _mm512_permutex2var_ps(v0, ev, v1));
                }
            }
#endif
            for (; ow < OW; ++ow) d[ow] = xr[(size_t)ow * p->SW];
        }
    q.H = OH;
    q.W = OW;
    q.SH = q.SW = 1;
    gemm_direct(xs, w, b, scratch, y, &q);
}

/* off[c T + t] = c cs + off[t] for channels c >= 1, given channel 0's T taps: the K row
 * offsets without a division per k (those cost 0.6 % of the samples of ResNet-18-224 fp32,
 * trained zoo weights, Intel Xeon) */
static void by_channel(int32_t *off, int C, int T, size_t cs) {
    int c, t;
    for (c = 1; c < C; ++c)
        for (t = 0; t < T; ++t) off[c * T + t] = (int32_t)((size_t)off[t] + (size_t)c * cs);
}

/* The cells of the phase planes es_f32_phases leaves to its caller: where it writes whole
 * rows (es_f32_phases_whole_rows) only the padding rows and each plane's slack are zeroed
 * here (the memset of whole planes was most of the phase build: 923 KB a call for
 * ResNet-18-224's 3x3 s2 64 -> 128); otherwise everything. */
static void zero_phases(float *ph, const es_conv_params *p, int HQ, int WQ, size_t pq) {
    const size_t cs = (size_t)p->SH * p->SW * pq;
    int c, a, b, q;
    if (!es_f32_phases_whole_rows(p)) {
        memset(ph, 0, sizeof(float) * (size_t)p->C * cs);
        return;
    }
    for (c = 0; c < p->C; ++c)
        for (a = 0; a < p->SH; ++a)
            for (b = 0; b < p->SW; ++b) {
                float *pl = ph + (size_t)c * cs + (size_t)(a * p->SW + b) * pq;
                for (q = 0; q < HQ; ++q) {
                    const int ih = q * p->SH + a - p->PT;
                    if (ih < 0 || ih >= p->H)
                        memset(pl + (size_t)q * WQ, 0, sizeof(float) * (size_t)WQ);
                }
                memset(pl + (size_t)HQ * WQ, 0, sizeof(float) * (pq - (size_t)HQ * WQ));
            }
}

/* every channel's stride phases of its padded plane, whole (es_f32_phases) */
static void build_phases(float *ph, float *row, const float *x, const es_conv_params *p, int HQ,
                         int WQ, size_t pq) {
    const size_t cs = (size_t)p->SH * p->SW * pq;
    int c;
    zero_phases(ph, p, HQ, WQ, pq); /* padding and slack, see es_f32_phases */
    memset(row, 0, sizeof(float) * (size_t)WQ * p->SW);
    for (c = 0; c < p->C; ++c)
        es_f32_phases(ph + (size_t)c * cs, row, x + (size_t)c * p->H * p->W, p, HQ, WQ, pq);
}

/* The rows and columns of a stride-1 conv's row chunks (gemm_cl_rows' split of OW) that read
 * the input in place, and their K row offsets over C H W; 0 where no chunk can (a plane
 * narrower than its kernel: s then has no rows in place), and then the whole plane is built
 * as before. */
static int in_place_rows(cl_src *s, const es_conv_params *p) {
    const int KH = p->KH, KW = p->KW, eh = (p->KH - 1) * p->DH, ew = (p->KW - 1) * p->DW;
    int32_t *offx = (int32_t *)s->offx;
    int k;
    s->r0 = p->PT < p->OH ? p->PT : p->OH;
    s->r1 = p->H + p->PT - eh < p->OH ? p->H + p->PT - eh : p->OH;
    s->c0 = p->PL;
    s->c1 = p->W + p->PL - ew;
    if (s->r1 <= s->r0 || s->c1 - s->c0 < 1) {
        s->r0 = s->r1 = 0;
        return 0;
    }
    for (k = 0; k < KH * KW; ++k)
        offx[k] = (int32_t)((size_t)(k / KW * p->DH) * p->W + (size_t)(k % KW * p->DW));
    by_channel(offx, p->C, KH * KW, (size_t)p->H * p->W);
    return 1;
}

/* padded row r, columns [a, b), of one channel's plane d (row stride WQ): the input xc where
 * both fall inside it, zero elsewhere; the one write of each of those cells */
static void pad_segment(float *d, const float *xc, int r, int a, int b, const es_conv_params *p) {
    const int ih = r - p->PT;
    int lo = p->PL, hi = p->PL + p->W, u;
    if (a >= b) return;
    if (ih < 0 || ih >= p->H) lo = hi = a; /* a padding row */
    lo = lo < a ? a : (lo > b ? b : lo);
    hi = hi < lo ? lo : (hi > b ? b : hi);
#if defined(__AVX512F__)
    {
        const float *xr = xc + (size_t)(lo < hi ? ih : 0) * p->W - p->PL; /* xr[i]: column i */
        for (u = a; u < b; u += 16) {
            const __mmask16 m = es_f32_lanes(lo - u, hi - u);
            _mm512_mask_storeu_ps(d + u, es_f32_lanes(0, b - u),
                                  _mm512_maskz_loadu_ps(m, xr + u));
        }
    }
#else
    for (u = a; u < lo; ++u) d[u] = 0.0f;
    if (hi > lo)
        memcpy(d + lo, xc + (size_t)ih * p->W + (lo - p->PL), sizeof(float) * (size_t)(hi - lo));
    for (u = hi; u < b; ++u) d[u] = 0.0f;
#endif
}

/* The cells of each channel's padded plane that the chunks not in place read (cl_src): whole
 * rows above r0 + KH - 1 and from r1 on, and between them the columns of the row's first
 * and last chunks when those fall out of [c0, c1). Nothing else of the plane is written. */
static void pad_edges(float *ph, const float *x, const cl_src *s, size_t pq,
                      const es_conv_params *p) {
    const int OW = p->OW, WQ = s->WQ, eh = (p->KH - 1) * p->DH, ew = (p->KW - 1) * p->DW;
    const int HQ = p->OH + eh, cn = cl_np(p->M, OW), rc = (OW + cn - 1) / cn;
    int L = 0, R = WQ, c, r, ow, i;
    for (i = 0, ow = 0; i < rc; ++i) { /* the columns of the edge chunks of a middle row */
        const int np = chunk_len(OW, rc, i);
        if (ow < s->c0 && ow + np + ew > L) L = ow + np + ew;
        if (ow + np > s->c1 && ow < R) R = ow;
        ow += np;
    }
    if (R < L) R = L;
#if defined(__AVX512F__)
    /* columns [0, L) and [R, WQ) of an input row: stored, and loaded where in the input */
    const __mmask16 kl = es_f32_lanes(0, L), kr = es_f32_lanes(0, WQ - R);
    const __mmask16 ml = kl & es_f32_lanes(p->PL, p->PL + p->W);
    const __mmask16 mr = kr & es_f32_lanes(p->PL - R, p->PL + p->W - R);
#endif
    for (c = 0; c < p->C; ++c) {
        float *d = ph + (size_t)c * pq;
        const float *xc = x + (size_t)c * p->H * p->W;
        for (r = 0; r < HQ; ++r) {
            float *dr = d + (size_t)r * WQ;
            if ((s->r0 > 0 && r < s->r0 + eh) || r >= s->r1) { /* r1 <= H + PT - eh */
                pad_segment(dr, xc, r, 0, WQ, p);
                continue;
            }
#if defined(__AVX512F__)
            if (L <= 16 && WQ - R <= 16) { /* an input row: one vector each side, fixed masks */
                const float *xr = xc + (size_t)(r - p->PT) * p->W - p->PL;
                _mm512_mask_storeu_ps(dr, kl, _mm512_maskz_loadu_ps(ml, xr));
                _mm512_mask_storeu_ps(dr + R, kr, _mm512_maskz_loadu_ps(mr, xr + R));
                continue;
            }
#endif
            pad_segment(dr, xc, r, 0, L, p);
            pad_segment(dr, xc, r, R, WQ, p);
        }
    }
}

static void gemm_phases(const float *x, const float *w, const float *b, float *scratch,
                        float *y, const es_conv_params *p) {
    const int C = p->C, KH = p->KH, KW = p->KW, SH = p->SH, SW = p->SW, OH = p->OH, OW = p->OW;
    const int K = C * KH * KW, P = OH * OW;
    const int HQ = ES_F32_DW_HQ(OH, KH, SH, p->DH), WQ = ES_F32_DW_HQ(OW, KW, SW, p->DW);
    const size_t pq = (size_t)HQ * WQ + (size_t)WQ + ES_F32_TP, cs = (size_t)SH * SW * pq;
    const int n = OH * WQ;
    int32_t *off = (int32_t *)scratch, *offx = off + ES_F32_K16(K);
    float *tile = scratch + 2 * ES_F32_K16(K), *ph = tile + ES_F32_MR * ES_F32_TP;
    float *row = ph + (size_t)C * cs;
    int k, o0, m0, r;
    if (KH == 1 && KW == 1 && p->PT == 0 && p->PL == 0 && SH * SW >= 2 &&
        (OH - 1) * SH < p->H && (OW - 1) * SW < p->W) { /* no padding read at either end */
        gemm_strided_1x1(x, w, b, scratch, y, p);
        return;
    }
    for (k = 0; k < KH * KW; ++k) {
        const int dh = k / KW * p->DH, dw = k % KW * p->DW;
        off[k] = (int32_t)((size_t)((dh % SH) * SW + dw % SW) * pq + (size_t)(dh / SH) * WQ +
                           (size_t)(dw / SW));
    }
    by_channel(off, C, KH * KW, cs);
    if (use_cl(P, n, K, p->M, OW)) {
        cl_src s = {ph, x, off, offx, WQ, p->W, p->PT, p->PL, 0, 0, 0, 0};
        if (SH == 1 && SW == 1 && OW >= ES_CL_NP && in_place_rows(&s, p))
            pad_edges(ph, x, &s, pq, p);
        else
            build_phases(ph, row, x, p, HQ, WQ, pq);
        gemm_cl(&s, K, w, b, y, P, OW, p);
        return;
    }
    build_phases(ph, row, x, p, HQ, WQ, pq);
    for (o0 = 0; o0 < n; o0 += ES_F32_TP) {
        const int nj = n - o0 < ES_F32_TP ? n - o0 : ES_F32_TP;
#if defined(ES_F32_HAS_KEEP)
        int first = -1, j;
        uint32_t keep = 0;
        for (j = 0; j < nj; ++j)
            if ((o0 + j) % WQ < OW) {
                keep |= 1u << j;
                if (first < 0) first = (o0 + j) / WQ * OW + (o0 + j) % WQ;
            }
        if (!keep) continue; /* only cells past the rows' ends */
#endif
        for (m0 = 0; m0 < p->M; m0 += ES_F32_MR) {
            const int nr = p->M - m0 < ES_F32_MR ? p->M - m0 : ES_F32_MR;
            float b8[ES_F32_MR];
            for (r = 0; r < ES_F32_MR; ++r) b8[r] = r < nr ? b[m0 + r] : 0.0f;
#if defined(ES_F32_HAS_KEEP) /* straight to the output plane */
            mk_f32_keep(ph + o0, off, K, wblock(w, m0, K), b8, y + (size_t)m0 * P + first,
                        (size_t)P, nr, nj, keep, p);
#else /* through a tile, then each output row's part copied out */
            mk_f32_block(ph + o0, off, K, wblock(w, m0, K), b8, tile, ES_F32_TP, nr, nj, p);
            scatter_tile(tile, nr, o0, nj, WQ, OW, y + (size_t)m0 * P, (size_t)P);
#endif
        }
    }
}

#if defined(__AVX512F__)
/* ---- stems: a few input channels at stride 2, from the input rows ----------------------
 * A network's first conv (3 -> 32 3x3 s2 at 224 x 224 in the MobileNets and EfficientNet,
 * 3 -> 64 7x7 s2 in ResNet) has K = C KH KW of only 27 to 147, so building the stride
 * phases (gemm_phases) costs as much as a tenth of its multiplies: an input-sized scratch
 * written and read back each run, and a keep mask per 32-cell tile for the grid columns
 * past OW. This path keeps only the C KH input rows under the current output row, each
 * split into its even and odd columns, and runs the same micro-kernel over them, in the
 * same k order from the bias, so its sums are the phase path's bit for bit.
 * Alone (hot caches), random weights, Intel Xeon, per-call minima, phases / this: 3 -> 32
 * 3x3 s2 at 224 x 224 248-251 / 225 us, 3 -> 16 (MobileNetV3-small) 141-170 / 122-142,
 * 3 -> 64 7x7 s2 (ResNet-18) 2164 / 2089, 3 -> 32 at 96 x 96 47 / 45. In the networks,
 * the stem step's minimum over 6 alternating rounds of 100 runs: MobileNetV2-224 351 -> 295
 * us, MobileNetV3-small-224 257 -> 206, EfficientNet-B0 432 -> 390, ResNet-18 (4 x 30)
 * 2333 -> 2227, MobileNetV2-96 56 -> 55. Two designs that lost: a vpermt2ps per tap and
 * block inside the K loop (a shuffle per 8 FMAs, on a port the FMAs share: 272 us), and
 * masked loads there as well (316 us). */
#define ES_F32_STEM_C 4
#define ES_F32_STEM_KW 7

static int stem_direct(const es_conv_params *p) {
    return p->C <= ES_F32_STEM_C && p->KH <= ES_F32_STEM_KW && p->KW <= ES_F32_STEM_KW &&
           p->SH == 2 && p->SW == 2 && p->DH == 1 && p->DW == 1;
}

/* Output columns go in blocks of ES_F32_STEM_OB; a block's input row is kept as its even and
 * odd columns, ES_F32_STEM_HALF floats each (the block, the taps' reach of up to 3 columns
 * and the last 32-float load past it). */
#define ES_F32_STEM_OB 128
#define ES_F32_STEM_HALF (ES_F32_STEM_OB + 16)

/* Output row by row, 32 outputs at a time, every 8-channel block by the GEMM micro-kernel
 * (mk_f32_block) over the input rows under the output row, held split into their even and
 * odd columns (zero in the padding) in L1: tap (c, kh, 2 a + b) is column a of half b of
 * the row of channel c at 2 oh + kh - PT. The rows sit in a ring of KH per channel, so an
 * input row is split once however many output rows read it. */
static void gemm_stem(const float *x, const float *w, const float *b, float *y,
                      const es_conv_params *p) {
    enum { R = ES_F32_STEM_C * ES_F32_STEM_KW, T = R * ES_F32_STEM_KW }; /* rows, taps */
    const int C = p->C, KH = p->KH, KW = p->KW, K = C * KH * KW;
    const size_t P = (size_t)p->OH * p->OW;
    int32_t off[T];
    int held[R];
    float ring[R * 2 * ES_F32_STEM_HALF];
    int ob, oh, o, m0, r, k, c, kh;
    for (ob = 0; ob < p->OW; ob += ES_F32_STEM_OB) {
        const int oe = p->OW - ob < ES_F32_STEM_OB ? p->OW : ob + ES_F32_STEM_OB;
        for (r = 0; r < C * KH; ++r) held[r] = -p->PT - 1 - KH; /* no row */
        for (oh = 0; oh < p->OH; ++oh) {
            for (c = 0; c < C; ++c)
                for (kh = 0; kh < KH; ++kh) {
                    const int ih = 2 * oh + kh - p->PT, slot = c * KH + (ih + p->PT + KH) % KH;
                    float *e = ring + (size_t)slot * 2 * ES_F32_STEM_HALF;
                    if (held[slot] != ih) {
                        held[slot] = ih;
                        if (ih >= 0 && ih < p->H)
                            es_f32_split2(e, e + ES_F32_STEM_HALF,
                                          x + ((size_t)c * p->H + (size_t)ih) * p->W +
                                              (2 * ob - p->PL),
                                          p->PL - 2 * ob, p->W + p->PL - 2 * ob,
                                          ES_F32_STEM_HALF);
                        else
                            memset(e, 0, sizeof(float) * 2 * ES_F32_STEM_HALF);
                    }
                    for (k = 0; k < KW; ++k)
                        off[(c * KH + kh) * KW + k] =
                            slot * 2 * ES_F32_STEM_HALF + k % 2 * ES_F32_STEM_HALF + k / 2;
                }
            for (o = ob; o < oe; o += ES_F32_TP) {
                const int nj = oe - o < ES_F32_TP ? oe - o : ES_F32_TP;
                for (m0 = 0; m0 < p->M; m0 += ES_F32_MR) {
                    const int nr = p->M - m0 < ES_F32_MR ? p->M - m0 : ES_F32_MR;
                    float b8[ES_F32_MR];
                    for (r = 0; r < ES_F32_MR; ++r) b8[r] = r < nr ? b[m0 + r] : 0.0f;
                    mk_f32_block(ring + (o - ob), off, K, wblock(w, m0, K), b8,
                                 y + (size_t)m0 * P + (size_t)oh * p->OW + o, P, nr, nj, p);
                }
            }
        }
    }
}
#endif

void es_conv2d_f32_gemm(const float *x, const float *w, const float *b, float *scratch,
                        float *y, const es_conv_params *p) {
#if defined(__AVX512F__)
    if (stem_direct(p)) {
        gemm_stem(x, w, b, y, p);
        return;
    }
#endif
    if (ES_F32_GEMM_DIRECT(p->C, p->H, p->W, p->OH, p->OW, p->KH, p->KW, p->SH, p->SW, p->PT,
                           p->PL))
        gemm_direct(x, w, b, scratch, y, p);
    else
        gemm_phases(x, w, b, scratch, y, p);
}

/* ---- 3 x 3, stride 1: Winograd F(2 x 2, 3 x 3) ------------------------------------------
 * Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2016). Each 2 x 2
 * block of outputs (a tile) is computed from the 4 x 4 input patch d under it as
 *     Y = A^T [ U (.) V ] A,   V = B^T d B,   U = G g G^T (g the 3 x 3 kernel),
 * (.) elementwise, summed over the input channels inside the brackets: for each of the 16
 * positions xi of the 4 x 4 transformed domain, one GEMM M_xi[M][T] = U_xi[M][C] V_xi[C][T]
 * over the T tiles. 16 multiplies per tile and channel pair where the direct conv does
 * 4 x 9 = 36, and the GEMMs run on the micro-kernel above (mk_f32_block); the transforms
 * are additions only, O(C T) and O(M T), not O(M C T):
 *     B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  A^T = [1 1 1 0; 0 1 -1 -1],
 *     G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
 * The generator computes U once (lower/conv.py pack_f32_wino) and packs it as the GEMM
 * packs its weights, in blocks of 16 output channels: u[mb][xi][C][16]. The larger tiles
 * F(4 x 4, 3 x 3) would cut the multiplies to 36 / 144, but their U is 36 / 9 = 4 times the
 * weights (16 / 9 here) and their transforms' constants (up to 8) cost float precision.
 *
 * Work goes in blocks of ES_F32_WINO_RB whole tile rows (Tb tiles, about 64): the block's
 * V (16 x C rows of Tp = Tb + 16 rounded up to 32 floats) is built channel by channel, each
 * input row's column transform once (ct) and then the row transform of each tile row; then
 * for each 8-channel block, the 16 GEMMs into mx (16 x 8 rows of Tp) and the output
 * transform, bias and activation, two output rows per tile row. Tiles past the plane's
 * last row or column read zero padding and their outputs are dropped. */
/* input row h of channel plane xc, zero outside the plane, into prow[0, n): column j of prow
 * is input column j - PL */
static void wino_pad_row(const float *xc, int h, float *prow, int n, const es_conv_params *p) {
    const int a = p->PL < n ? p->PL : n, w = p->W < n - a ? p->W : n - a;
    memset(prow, 0, sizeof(float) * (size_t)ES_F32_WINO_PROW(p->OW));
    if (h >= 0 && h < p->H && w > 0) memcpy(prow + a, xc + (size_t)h * p->W, sizeof(float) * (size_t)w);
}

/* the column transform d B of one padded row: t[k TWp + q] over the row's 4-column patches
 * 2q .. 2q + 3. These loops run to TWp, a multiple of 16: whole vectors, no scalar tail
 * (with one, at TW = 28, 7 and 4, the transforms took as long as the GEMMs); the lanes
 * past TW compute on zero padding and are never stored to the output. */
static void wino_cols(const float *restrict d, float *restrict t, int TWp) {
    int q;
    for (q = 0; q < TWp; ++q) {
        t[q] = d[2 * q] - d[2 * q + 2];
        t[TWp + q] = d[2 * q + 1] + d[2 * q + 2];
        t[2 * TWp + q] = d[2 * q + 2] - d[2 * q + 1];
        t[3 * TWp + q] = d[2 * q + 1] - d[2 * q + 3];
    }
}

/* the row transform B^T over 4 column-transformed rows r0..r3, into v0..v3 (xi rows 4i + k) */
static void wino_rows(const float *restrict r0, const float *restrict r1,
                      const float *restrict r2, const float *restrict r3, float *restrict v0,
                      float *restrict v1, float *restrict v2, float *restrict v3, int n) {
    int q;
    for (q = 0; q < n; ++q) {
        v0[q] = r0[q] - r2[q];
        v1[q] = r1[q] + r2[q];
        v2[q] = r2[q] - r1[q];
        v3[q] = r1[q] - r3[q];
    }
}

/* channel c of the block's tile rows [ty0, ty0 + rb) into V[4 i + k][c][lr TW + tx]: each of
 * the 2 rb + 2 input rows column-transformed once (ct), then the rows of each tile row */
static void wino_in(const float *xc, int c, int ty0, int rb, float *ct, float *prow, float *v,
                    int C, int Tp, const es_conv_params *p) {
    const int TW = ES_F32_WINO_TW(p->OW), TWp = ES_F32_WINO_TWP(p->OW);
    const size_t vs = ES_F32_WINO_VS(C, p->OH, p->OW), xs = 4 * vs; /* xi to xi + 4 */
    const int pr = ES_F32_WINO_PROW(p->OW);
    int i, k, lr;
    /* all the rows first, then their transforms: a vector load of a row just written by
     * memset and memcpy, in other widths, waits for those stores to drain */
    for (i = 0; i < 2 * rb + 2; ++i)
        wino_pad_row(xc, 2 * ty0 - p->PT + i, prow + (size_t)i * pr, 2 * TW + 2, p);
    for (i = 0; i < 2 * rb + 2; ++i)
        wino_cols(prow + (size_t)i * pr, ct + (size_t)i * 4 * TWp, TWp);
    for (lr = 0; lr < rb; ++lr) {
        const float *r0 = ct + (size_t)(2 * lr) * 4 * TWp;
        for (k = 0; k < 4; ++k) {
            float *v0 = v + (size_t)k * vs + (size_t)c * Tp + (size_t)lr * TW;
            const size_t o = (size_t)k * TWp;
            wino_rows(r0 + o, r0 + 4 * TWp + o, r0 + 8 * TWp + o, r0 + 12 * TWp + o, v0, v0 + xs,
                      v0 + 2 * xs, v0 + 3 * xs, TWp); /* the lanes past TW: overwritten by
                      the next tile row, or in the Tp - RB TW >= 16 slack of the last */
        }
    }
}

/* A^T M A for one tile row (TWp tiles, as wino_cols): m + xi s + q is tile q's M[xi]; the
 * 2 x 2 outputs, + bias, as output rows 0 and 1 (o0, o1: columns 2q and 2q + 1), through e
 * (4 TWp floats). a_i0, a_i1: row i of M A. */
static void wino_out_row(const float *restrict m, size_t s, int TWp, float bias,
                         float *restrict e, float *restrict o0, float *restrict o1) {
    const float *m1 = m + 4 * s, *m2 = m + 8 * s, *m3 = m + 12 * s;
    float *restrict e00 = e, *restrict e01 = e + TWp, *restrict e10 = e + 2 * TWp,
                    *restrict e11 = e + 3 * TWp;
    int q;
    for (q = 0; q < TWp; ++q) {
        const float a00 = m[q] + m[s + q] + m[2 * s + q], a01 = m[s + q] - m[2 * s + q] - m[3 * s + q];
        const float a10 = m1[q] + m1[s + q] + m1[2 * s + q],
                    a11 = m1[s + q] - m1[2 * s + q] - m1[3 * s + q];
        const float a20 = m2[q] + m2[s + q] + m2[2 * s + q],
                    a21 = m2[s + q] - m2[2 * s + q] - m2[3 * s + q];
        const float a30 = m3[q] + m3[s + q] + m3[2 * s + q],
                    a31 = m3[s + q] - m3[2 * s + q] - m3[3 * s + q];
        e00[q] = a00 + a10 + a20 + bias;
        e01[q] = a01 + a11 + a21 + bias;
        e10[q] = a10 - a20 - a30 + bias;
        e11[q] = a11 - a21 - a31 + bias;
    }
    for (q = 0; q < TWp; ++q) {
        o0[2 * q] = e00[q];
        o0[2 * q + 1] = e01[q];
        o1[2 * q] = e10[q];
        o1[2 * q + 1] = e11[q];
    }
}

/* channel m's outputs of tile rows [ty0, ty0 + rb) from its 16 GEMM rows (mx + xi 8 Tp),
 * activation on the way into the plane */
static void wino_out(const float *mx, int Tp, float bias, int ty0, int rb, float *e, float *o0,
                     float *o1, float *ym, const es_conv_params *p) {
    const int TW = ES_F32_WINO_TW(p->OW), TWp = ES_F32_WINO_TWP(p->OW);
    int lr;
    for (lr = 0; lr < rb; ++lr) {
        const int oh = 2 * (ty0 + lr);
        wino_out_row(mx + (size_t)lr * TW, (size_t)8 * Tp, TWp, bias, e, o0, o1);
        act_row(ym + (size_t)oh * p->OW, o0, p->OW, p->act, p->a0, p->a1);
        if (oh + 1 < p->OH) act_row(ym + (size_t)(oh + 1) * p->OW, o1, p->OW, p->act, p->a0, p->a1);
    }
}

void es_conv2d_f32_wino(const float *x, const float *u, const float *b, float *scratch,
                        float *y, const es_conv_params *p) {
    const int C = p->C, M = p->M, TH = ES_F32_WINO_TH(p->OH), TW = ES_F32_WINO_TW(p->OW);
    const int RB = ES_F32_WINO_RB(p->OH, p->OW), Tp = ES_F32_WINO_TP(p->OH, p->OW);
    const int TWp = ES_F32_WINO_TWP(p->OW);
    int32_t *off = (int32_t *)scratch;
    float *v = scratch + ES_F32_K16(C);
    const size_t vs = ES_F32_WINO_VS(C, p->OH, p->OW);
    float *mx = v + 16 * vs, *ct = mx + (size_t)16 * 8 * Tp;
    float *prow = ct + (size_t)(2 * RB + 2) * 4 * TWp,
          *o0 = prow + (size_t)(2 * RB + 2) * ES_F32_WINO_PROW(p->OW),
          *o1 = o0 + 2 * TWp, *e = o1 + 2 * TWp;
    static const float zero8[ES_F32_MR] = {0};
    es_conv_params g = *p; /* the GEMMs: no bias, no activation (both after A^T M A) */
    int ty0, c, k, m0, xi, j, r;
    g.act = ES_ACT_NONE;
    for (k = 0; k < C; ++k) off[k] = (int32_t)((size_t)k * Tp);
    /* the lanes past a block's tiles are read, never stored: zero, not denormal garbage */
    for (xi = 0; xi < 16; ++xi)
        for (k = 0; k < C; ++k)
            memset(v + xi * vs + (size_t)k * Tp + RB * TW, 0, sizeof(float) * (size_t)(Tp - RB * TW));
    memset(mx, 0, sizeof(float) * (size_t)16 * 8 * Tp);
    for (ty0 = 0; ty0 < TH; ty0 += RB) {
        const int rb = TH - ty0 < RB ? TH - ty0 : RB, tb = rb * TW;
        for (c = 0; c < C; ++c)
            wino_in(x + (size_t)c * p->H * p->W, c, ty0, rb, ct, prow, v, C, Tp, p);
        for (m0 = 0; m0 < M; m0 += ES_F32_MR) {
            const int nr = M - m0 < ES_F32_MR ? M - m0 : ES_F32_MR;
            const float *ub = u + (size_t)(m0 / ES_F32_WB) * 16 * C * ES_F32_WB + m0 % ES_F32_WB;
            for (xi = 0; xi < 16; ++xi)
                for (j = 0; j < tb; j += ES_F32_TP)
                    mk_f32_block(v + xi * vs + j, off, C,
                                 ub + (size_t)xi * C * ES_F32_WB, zero8,
                                 mx + (size_t)xi * 8 * Tp + j, (size_t)Tp, nr,
                                 tb - j < ES_F32_TP ? tb - j : ES_F32_TP, &g);
            for (r = 0; r < nr; ++r)
                wino_out(mx + (size_t)r * Tp, Tp, b[m0 + r], ty0, rb, e, o0, o1,
                         y + (size_t)(m0 + r) * p->OH * p->OW, p);
        }
    }
}
