/* Conv2d, int8, fast paths. Same arithmetic as the reference es_conv2d_i8 (conv_int8.c),
 * which stays built and is the oracle in tests: results are bit-identical.
 *
 * es_conv2d_i8_fast: any conv (groups, depthwise, strides, pads, dilations). The input is
 * first widened to int16 with the zero point subtracted (|x - zp| <= 255, so every
 * product with an int8 weight fits int16 and the sum int32), then four output channels
 * share each input row load; the inner loops are unit-stride and vectorise at -O3.
 *
 * Scratch (from the arena, ES_I8_FAST_SCRATCH): four int32 accumulator planes, then the
 * int16 input copy.
 *
 * es_conv2d_i8_gemm (below): one-group convs as im2col + a register-blocked GEMM. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "../edgesmith_rt.h"
#include "../es_simd.h"

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

static void widen(const int8_t *x, int16_t *xs, int n, int32_t zp) {
    int i;
    for (i = 0; i < n; ++i) xs[i] = (int16_t)((int32_t)x[i] - zp);
}

static void requant16(int32_t *acc, int8_t *y, int n, int32_t mult, int32_t shift,
                      const es_conv_params *p);

/* requantises in place chunks of 16 (acc is clobbered) */
static void requant_plane(int32_t *acc, int8_t *y, int n, int32_t mult, int32_t shift,
                          const es_conv_params *p) {
    int i;
    for (i = 0; i + 16 <= n; i += 16) requant16(acc + i, y + i, 16, mult, shift, p);
    for (; i < n; ++i) y[i] = es_requant(acc[i], mult, shift, p->rq, p->y_zp, p->qmin, p->qmax);
}

void es_conv2d_i8_fast(const int8_t *x, const int8_t *w, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                       const es_conv_params *p) {
    const int cpg = p->C / p->group, mpg = p->M / p->group, plane = p->OH * p->OW;
    const int ksz = p->KH * p->KW;
    int32_t *acc = scratch; /* 4 planes */
    int16_t *xs = (int16_t *)(scratch + 4 * (size_t)plane);
    int m0, nb;
    widen(x, xs, p->C * p->H * p->W, p->x_zp);
    for (m0 = 0; m0 < p->M; m0 += nb) {
        const int g = m0 / mpg;
        const int gend = (g + 1) * mpg;
        int j, i, c;
        nb = (gend - m0) < 4 ? (gend - m0) : 4;
        for (j = 0; j < nb; ++j)
            for (i = 0; i < plane; ++i) acc[(size_t)j * plane + i] = bias[m0 + j];
        for (c = 0; c < cpg; ++c) {
            const int16_t *xc = xs + (size_t)(g * cpg + c) * p->H * p->W;
            int kh, kw;
            for (kh = 0; kh < p->KH; ++kh) {
                for (kw = 0; kw < p->KW; ++kw) {
                    int32_t wv[4] = {0, 0, 0, 0};
                    const int off = kw * p->DW - p->PL;
                    int lo = 0, hi = p->OW, oh;
                    for (j = 0; j < nb; ++j)
                        wv[j] = w[((size_t)(m0 + j) * cpg + c) * ksz + kh * p->KW + kw];
                    if (off < 0) lo = (-off + p->SW - 1) / p->SW;
                    if (off + (hi - 1) * p->SW >= p->W)
                        hi = (p->W - 1 - off) >= 0 ? (p->W - 1 - off) / p->SW + 1 : 0;
                    if (hi < lo) hi = lo;
                    for (oh = 0; oh < p->OH; ++oh) {
                        const int ih = oh * p->SH - p->PT + kh * p->DH;
                        const int16_t *xr;
                        int32_t *a0 = acc + (size_t)oh * p->OW;
                        int ow;
                        if (ih < 0 || ih >= p->H) continue;
                        xr = xc + (size_t)ih * p->W + off;
                        if (nb == 4 && p->SW == 1) {
                            int32_t *a1 = a0 + plane, *a2 = a1 + plane, *a3 = a2 + plane;
                            const int32_t w0 = wv[0], w1 = wv[1], w2 = wv[2], w3 = wv[3];
                            for (ow = lo; ow < hi; ++ow) {
                                const int32_t v = xr[ow];
                                a0[ow] += w0 * v;
                                a1[ow] += w1 * v;
                                a2[ow] += w2 * v;
                                a3[ow] += w3 * v;
                            }
                        } else if (p->SW == 1) {
                            for (j = 0; j < nb; ++j) {
                                int32_t *aj = a0 + (size_t)j * plane;
                                const int32_t wj = wv[j];
                                for (ow = lo; ow < hi; ++ow) aj[ow] += wj * (int32_t)xr[ow];
                            }
                        } else {
                            for (j = 0; j < nb; ++j) {
                                int32_t *aj = a0 + (size_t)j * plane;
                                const int32_t wj = wv[j];
                                for (ow = lo; ow < hi; ++ow)
                                    aj[ow] += wj * (int32_t)xr[ow * p->SW];
                            }
                        }
                    }
                }
            }
        }
        for (j = 0; j < nb; ++j)
            requant_plane(acc + (size_t)j * plane, y + (size_t)(m0 + j) * plane, plane,
                          mult[m0 + j], shift[m0 + j], p);
    }
}

/* ---- es_conv2d_i8_gemm: any one-group conv as im2col + register-blocked GEMM ----------
 * Output pixels go in tiles of ES_I8_TP; for each tile the int16 zero-point-shifted
 * im2col block is built in scratch as channel pairs interleaved per pixel
 * (col[k2][j] = (x_k=2k2, x_k=2k2+1) at pixel j), so one 256-bit load feeds
 * _mm256_madd_epi16 for 8 pixels x 2 taps. The micro-kernel keeps 4 output channels x 16
 * pixels of int32 accumulators in registers. wp: pack_pairs(w.reshape(M, C*KH*KW)).
 * When K2 = ceil(K/2) pairs is long, the reduction is blocked: the tile holds only
 * ES_I8_GEMM_KB2(K2, M) pairs at a time and the partial sums of all M channels x 16 pixels
 * are carried between blocks in an int32 buffer after the tile (int32 addition is exact,
 * so the result is the same). Scratch: ES_I8_GEMM_SCRATCH(K, M) bytes. Bit-identical to
 * es_conv2d_i8 (integer sums are exact; requantisation is the same es_mul_q). */
#define ES_I8_TP 16

/* output columns [lo, hi) of [o0, o1) whose input column o*SW + dw lies in [0, W) */
static void valid_cols(int o0, int o1, int SW, int dw, int W, int *lo, int *hi) {
    int a = dw < 0 ? (-dw + SW - 1) / SW : 0, b = (W - 1 - dw) >= 0 ? (W - 1 - dw) / SW + 1 : 0;
    a = a < o0 ? o0 : (a > o1 ? o1 : a); /* a segment may lie wholly in the padding */
    b = b > o1 ? o1 : (b < a ? a : b);
    *lo = a;
    *hi = b;
}

/* rows k of [2 * k2b, 2 * k2e) of the tile at output pixel p0 (rows k >= K are zero) */
static void im2col_i8(const int8_t *x, int16_t *col, int p0, int K, int k2b, int k2e,
                      const es_conv_params *p) {
    const int P = p->OH * p->OW, ksz = p->KH * p->KW;
    const int H = p->H, W = p->W, OW = p->OW, SH = p->SH, SW = p->SW;
    const int32_t xzp = p->x_zp;
    const int n = (P - p0) < ES_I8_TP ? (P - p0) : ES_I8_TP;
    int k, j;
    for (k = 2 * k2b; k < 2 * k2e; ++k) {
        int16_t *dst = col + (k & 1) + (size_t)((k >> 1) - k2b) * ES_I8_TP * 2;
        if (k >= K) {
            for (j = 0; j < ES_I8_TP; ++j) dst[2 * j] = 0;
            continue;
        }
        {
            const int c = k / ksz, r = k % ksz, kh = r / p->KW, kw = r % p->KW;
            const int8_t *xc = x + (size_t)c * H * W;
            const int dh = kh * p->DH - p->PT, dw = kw * p->DW - p->PL;
            int oh = p0 / OW, ow = p0 % OW;
            j = 0;
            while (j < n) {
                const int seg = (OW - ow) < (n - j) ? (OW - ow) : (n - j);
                const int ih = oh * SH + dh;
                int16_t *d = dst + 2 * j; /* d[2 * (o - ow)]: output column o */
                int o, lo, hi;
                if (ih < 0 || ih >= H) {
                    for (o = ow; o < ow + seg; ++o) d[2 * (o - ow)] = 0;
                } else {
                    const int8_t *xr = xc + (size_t)ih * W;
                    valid_cols(ow, ow + seg, SW, dw, W, &lo, &hi);
                    for (o = ow; o < lo; ++o) d[2 * (o - ow)] = 0;
                    for (o = lo; o < hi; ++o)
                        d[2 * (o - ow)] = (int16_t)((int32_t)xr[o * SW + dw] - xzp);
                    for (o = hi; o < ow + seg; ++o) d[2 * (o - ow)] = 0;
                }
                j += seg;
                ow = 0;
                ++oh;
            }
            for (; j < ES_I8_TP; ++j) dst[2 * j] = 0;
        }
    }
}

/* acc[r][j] += sum_k2 pair-dot(w_r[k2], col[k2][j]), r < 4, j < 16 (rows distinct) */
static void mk_i8_4x16(const int16_t *col, int K2, const int32_t *const wr[4],
                       int32_t *const acc[4]) {
    int k2;
#if defined(__AVX2__)
#define LD(r, o) _mm256_loadu_si256((const __m256i *)(acc[r] + (o)))
    __m256i s00 = LD(0, 0), s01 = LD(0, 8), s10 = LD(1, 0), s11 = LD(1, 8), s20 = LD(2, 0),
            s21 = LD(2, 8), s30 = LD(3, 0), s31 = LD(3, 8);
#undef LD
    for (k2 = 0; k2 < K2; ++k2) {
        const int16_t *cp = col + (size_t)k2 * ES_I8_TP * 2;
        const __m256i c0 = _mm256_loadu_si256((const __m256i *)cp);
        const __m256i c1 = _mm256_loadu_si256((const __m256i *)(cp + 16));
        __m256i w = _mm256_set1_epi32(wr[0][k2]);
        s00 = _mm256_add_epi32(s00, _mm256_madd_epi16(c0, w));
        s01 = _mm256_add_epi32(s01, _mm256_madd_epi16(c1, w));
        w = _mm256_set1_epi32(wr[1][k2]);
        s10 = _mm256_add_epi32(s10, _mm256_madd_epi16(c0, w));
        s11 = _mm256_add_epi32(s11, _mm256_madd_epi16(c1, w));
        w = _mm256_set1_epi32(wr[2][k2]);
        s20 = _mm256_add_epi32(s20, _mm256_madd_epi16(c0, w));
        s21 = _mm256_add_epi32(s21, _mm256_madd_epi16(c1, w));
        w = _mm256_set1_epi32(wr[3][k2]);
        s30 = _mm256_add_epi32(s30, _mm256_madd_epi16(c0, w));
        s31 = _mm256_add_epi32(s31, _mm256_madd_epi16(c1, w));
    }
    _mm256_storeu_si256((__m256i *)acc[0], s00);
    _mm256_storeu_si256((__m256i *)(acc[0] + 8), s01);
    _mm256_storeu_si256((__m256i *)acc[1], s10);
    _mm256_storeu_si256((__m256i *)(acc[1] + 8), s11);
    _mm256_storeu_si256((__m256i *)acc[2], s20);
    _mm256_storeu_si256((__m256i *)(acc[2] + 8), s21);
    _mm256_storeu_si256((__m256i *)acc[3], s30);
    _mm256_storeu_si256((__m256i *)(acc[3] + 8), s31);
#elif defined(__ARM_NEON)
    int r;
    for (r = 0; r < 4; ++r) {
        int32x4_t s0 = vld1q_s32(acc[r]), s1 = vld1q_s32(acc[r] + 4),
                  s2 = vld1q_s32(acc[r] + 8), s3 = vld1q_s32(acc[r] + 12);
        for (k2 = 0; k2 < K2; ++k2) {
            const int16_t *cp = col + (size_t)k2 * ES_I8_TP * 2;
            const int16x8x2_t u = vld2q_s16(cp), v = vld2q_s16(cp + 16);
            const int16_t w0 = (int16_t)(wr[r][k2] & 0xffff);
            const int16_t w1 = (int16_t)((uint32_t)wr[r][k2] >> 16);
            s0 = vmlal_n_s16(s0, vget_low_s16(u.val[0]), w0);
            s1 = vmlal_n_s16(s1, vget_high_s16(u.val[0]), w0);
            s2 = vmlal_n_s16(s2, vget_low_s16(v.val[0]), w0);
            s3 = vmlal_n_s16(s3, vget_high_s16(v.val[0]), w0);
            s0 = vmlal_n_s16(s0, vget_low_s16(u.val[1]), w1);
            s1 = vmlal_n_s16(s1, vget_high_s16(u.val[1]), w1);
            s2 = vmlal_n_s16(s2, vget_low_s16(v.val[1]), w1);
            s3 = vmlal_n_s16(s3, vget_high_s16(v.val[1]), w1);
        }
        vst1q_s32(acc[r], s0);
        vst1q_s32(acc[r] + 4, s1);
        vst1q_s32(acc[r] + 8, s2);
        vst1q_s32(acc[r] + 12, s3);
    }
#else
    int r, j;
    int32_t t[4][16];
    for (r = 0; r < 4; ++r)
        for (j = 0; j < 16; ++j) t[r][j] = acc[r][j];
    for (k2 = 0; k2 < K2; ++k2) {
        const int16_t *cp = col + (size_t)k2 * ES_I8_TP * 2;
        for (r = 0; r < 4; ++r) {
            const int32_t w0 = (int16_t)(wr[r][k2] & 0xffff);
            const int32_t w1 = (int16_t)((uint32_t)wr[r][k2] >> 16);
            for (j = 0; j < 16; ++j) t[r][j] += w0 * cp[2 * j] + w1 * cp[2 * j + 1];
        }
    }
    for (r = 0; r < 4; ++r)
        for (j = 0; j < 16; ++j) acc[r][j] = t[r][j];
#endif
}


/* y[j] = es_requant(acc[j], ...), j < n <= 16 */
static void requant16(int32_t *acc, int8_t *y, int n, int32_t mult, int32_t shift,
                      const es_conv_params *p) {
    int j;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if (mult >= 0 || p->rq == ES_RQ_FP32) {
        es_requant16_avx512(_mm512_loadu_si512(acc), y, n, mult, shift, p->rq, p->y_zp,
                            p->qmin, p->qmax);
        return;
    }
#endif
#if defined(__AVX2__)
    if (p->rq == ES_RQ_FP32) {
        const __m256 sc = _mm256_set1_ps(es_rq_scale(mult, shift));
        const __m256 lo = _mm256_set1_ps((float)(p->qmin - p->y_zp));
        const __m256 hi = _mm256_set1_ps((float)(p->qmax - p->y_zp));
        const __m256i zp = _mm256_set1_epi32(p->y_zp);
        for (j = 0; j < 16; j += 8) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(acc + j));
            _mm256_storeu_si256((__m256i *)(acc + j),
                                _mm256_add_epi32(es_rqf8_avx2(a, sc, lo, hi), zp));
        }
        for (j = 0; j < n; ++j) y[j] = (int8_t)acc[j];
        return;
    }
    if (shift <= 0 && mult >= 0) {
        const __m256i mu = _mm256_set1_epi32(mult), zp = _mm256_set1_epi32(p->y_zp);
        const __m256i lo = _mm256_set1_epi32(p->qmin), hi = _mm256_set1_epi32(p->qmax);
        for (j = 0; j < 16; j += 8) {
            __m256i v = es_mulq8_avx2(_mm256_loadu_si256((const __m256i *)(acc + j)), mu, shift);
            v = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(v, zp), lo), hi);
            _mm256_storeu_si256((__m256i *)(acc + j), v);
        }
        for (j = 0; j < n; ++j) y[j] = (int8_t)acc[j];
        return;
    }
#endif
    for (j = 0; j < n; ++j) y[j] = es_requant(acc[j], mult, shift, p->rq, p->y_zp, p->qmin,
                                              p->qmax);
}

void es_conv2d_i8_gemm(const int8_t *x, const int32_t *wp, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                       const es_conv_params *p) {
    const int K = p->C * p->KH * p->KW, K2 = (K + 1) / 2, P = p->OH * p->OW, M = p->M;
    const int KB2 = ES_I8_GEMM_KB2(K2, M), blocked = KB2 < K2;
    int16_t *col = (int16_t *)scratch;
    int32_t *part = scratch + (size_t)KB2 * ES_I8_TP; /* [M][16], blocked only */
    int32_t loc[4][16];
    int p0, m0, k2b, r, j;
    for (p0 = 0; p0 < P; p0 += ES_I8_TP) {
        const int nj = (P - p0) < ES_I8_TP ? (P - p0) : ES_I8_TP;
        for (k2b = 0; k2b < K2; k2b += KB2) {
            const int k2e = (K2 - k2b) < KB2 ? K2 : k2b + KB2;
            const int last = k2e == K2;
            im2col_i8(x, col, p0, K, k2b, k2e, p);
            for (m0 = 0; m0 < M; m0 += 4) {
                const int nr = (M - m0) < 4 ? (M - m0) : 4;
                const int32_t *wr[4];
                int32_t *acc[4];
                for (r = 0; r < 4; ++r) {
                    const int m = m0 + (r < nr ? r : nr - 1);
                    wr[r] = wp + (size_t)m * K2 + k2b;
                    /* rows past nr are padding: their own local rows, results unused */
                    acc[r] = blocked && r < nr ? part + (size_t)m * ES_I8_TP : loc[r];
                    if (k2b == 0 || acc[r] == loc[r])
                        for (j = 0; j < ES_I8_TP; ++j) acc[r][j] = bias[m];
                }
                mk_i8_4x16(col, k2e - k2b, wr, acc);
                if (last)
                    for (r = 0; r < nr; ++r)
                        requant16(acc[r], y + (size_t)(m0 + r) * P + p0, nj, mult[m0 + r],
                                  shift[m0 + r], p);
            }
        }
    }
}
