/* Conv2d, float32, fast paths; es_conv2d_f32 (conv_f32.c) stays the reference and the
 * oracle in tests (results agree to float rounding, not bit for bit: sums are reordered).
 *
 * es_conv2d_f32_gemm: one group. Output pixels in tiles of ES_F32_TP; for each tile the
 * im2col block col[k][j] (k over C*KH*KW, zero where padded) is built in scratch, then a
 * 4x16 register-blocked micro-kernel (AVX2+FMA: 8 ymm accumulators, 2 loads and 4
 * broadcasts per k) computes 4 output channels x 16 pixels; bias and the fused activation
 * are applied on the way out. Scratch: ES_F32_GEMM_SCRATCH(C*KH*KW) bytes.
 *
 * es_dwconv2d_f32: depthwise (group == C == M), per channel over a zero-padded plane
 * copy, unit-stride tap loops. Scratch: ES_F32_DW_SCRATCH bytes. */
#include "../edgesmith_rt.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#define ES_F32_TP 32

static float act1(float v, int act, float a0, float a1) {
    if (act == ES_ACT_RELU) return v > 0.0f ? v : 0.0f;
    if (act == ES_ACT_CLIP) return v < a0 ? a0 : (v > a1 ? a1 : v);
    if (act == ES_ACT_LEAKY) return v >= 0.0f ? v : v * a0;
    return v;
}

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

/* acc[r][j] = b[r] + sum_k w_r[k] col[k][j], r < 4, j < 16 */
static void mk_f32_4x16(const float *col, int K, const float *const wr[4], const float b[4],
                        float acc[4][16]) {
    int k;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 s00 = _mm256_set1_ps(b[0]), s01 = s00, s10 = _mm256_set1_ps(b[1]), s11 = s10,
           s20 = _mm256_set1_ps(b[2]), s21 = s20, s30 = _mm256_set1_ps(b[3]), s31 = s30;
    for (k = 0; k < K; ++k) {
        const float *cp = col + (size_t)k * ES_F32_TP;
        const __m256 c0 = _mm256_loadu_ps(cp), c1 = _mm256_loadu_ps(cp + 8);
        __m256 w = _mm256_broadcast_ss(wr[0] + k);
        s00 = _mm256_fmadd_ps(c0, w, s00);
        s01 = _mm256_fmadd_ps(c1, w, s01);
        w = _mm256_broadcast_ss(wr[1] + k);
        s10 = _mm256_fmadd_ps(c0, w, s10);
        s11 = _mm256_fmadd_ps(c1, w, s11);
        w = _mm256_broadcast_ss(wr[2] + k);
        s20 = _mm256_fmadd_ps(c0, w, s20);
        s21 = _mm256_fmadd_ps(c1, w, s21);
        w = _mm256_broadcast_ss(wr[3] + k);
        s30 = _mm256_fmadd_ps(c0, w, s30);
        s31 = _mm256_fmadd_ps(c1, w, s31);
    }
    _mm256_storeu_ps(acc[0], s00);
    _mm256_storeu_ps(acc[0] + 8, s01);
    _mm256_storeu_ps(acc[1], s10);
    _mm256_storeu_ps(acc[1] + 8, s11);
    _mm256_storeu_ps(acc[2], s20);
    _mm256_storeu_ps(acc[2] + 8, s21);
    _mm256_storeu_ps(acc[3], s30);
    _mm256_storeu_ps(acc[3] + 8, s31);
#else
    int r, j;
    for (r = 0; r < 4; ++r)
        for (j = 0; j < 16; ++j) acc[r][j] = b[r];
    for (k = 0; k < K; ++k) {
        const float *cp = col + (size_t)k * ES_F32_TP;
        for (r = 0; r < 4; ++r) {
            const float wv = wr[r][k];
            for (j = 0; j < 16; ++j) acc[r][j] += wv * cp[j];
        }
    }
#endif
}

void es_conv2d_f32_gemm(const float *x, const float *w, const float *b, float *scratch,
                        float *y, const es_conv_params *p) {
    const int K = p->C * p->KH * p->KW, P = p->OH * p->OW, M = p->M;
    float acc[4][16];
    int p0, m0, j0, r, j;
    for (p0 = 0; p0 < P; p0 += ES_F32_TP) {
        im2col_f32(x, scratch, p0, K, p);
        for (m0 = 0; m0 < M; m0 += 4) {
            const int nr = (M - m0) < 4 ? (M - m0) : 4;
            const float *wr[4];
            float bb[4];
            for (r = 0; r < 4; ++r) {
                const int m = m0 + (r < nr ? r : nr - 1);
                wr[r] = w + (size_t)m * K;
                bb[r] = b[m];
            }
            for (j0 = 0; j0 < ES_F32_TP && p0 + j0 < P; j0 += 16) {
                const int nj = (P - p0 - j0) < 16 ? (P - p0 - j0) : 16;
                mk_f32_4x16(scratch + j0, K, wr, bb, acc);
                for (r = 0; r < nr; ++r) {
                    float *yr = y + (size_t)(m0 + r) * P + p0 + j0;
                    for (j = 0; j < nj; ++j) yr[j] = act1(acc[r][j], p->act, p->a0, p->a1);
                }
            }
        }
    }
}

void es_dwconv2d_f32(const float *x, const float *w, const float *b, float *scratch,
                     float *y, const es_conv_params *p) {
    const int H = p->H, W = p->W, OH = p->OH, OW = p->OW, KH = p->KH, KW = p->KW;
    const int SH = p->SH, SW = p->SW, DH = p->DH, DW = p->DW, PT = p->PT, PL = p->PL;
    const int act = p->act;
    const float a0 = p->a0, a1 = p->a1;
    const int Hp = (OH - 1) * SH + (KH - 1) * DH + 1, Wp = (OW - 1) * SW + (KW - 1) * DW + 1;
    const int plane = OH * OW, ksz = KH * KW;
    float *xp = scratch;
    int c, r, i, oh, ow, kh, kw;
    for (c = 0; c < p->C; ++c) {
        const float *xc = x + (size_t)c * H * W;
        const float *wc = w + (size_t)c * ksz;
        float *yc = y + (size_t)c * plane;
        const float bc = b[c];
        for (r = 0; r < Hp; ++r) {
            const int ih = r - PT;
            float *dst = xp + (size_t)r * Wp;
            const int lo = PL < Wp ? PL : Wp, hi = (PL + W) < Wp ? (PL + W) : Wp;
            const float *src;
            if (ih < 0 || ih >= H) {
                for (i = 0; i < Wp; ++i) dst[i] = 0.0f;
                continue;
            }
            src = xc + (size_t)ih * W;
            for (i = 0; i < lo; ++i) dst[i] = 0.0f;
            for (i = lo; i < hi; ++i) dst[i] = src[i - PL];
            for (i = hi > lo ? hi : lo; i < Wp; ++i) dst[i] = 0.0f;
        }
        for (oh = 0; oh < OH; ++oh) {
            float *a = yc + (size_t)oh * OW;
            for (ow = 0; ow < OW; ++ow) a[ow] = bc;
            for (kh = 0; kh < KH; ++kh) {
                const float *xr = xp + (size_t)(oh * SH + kh * DH) * Wp;
                for (kw = 0; kw < KW; ++kw) {
                    const float wv = wc[kh * KW + kw];
                    const float *xk = xr + kw * DW;
                    if (SW == 1)
                        for (ow = 0; ow < OW; ++ow) a[ow] += wv * xk[ow];
                    else
                        for (ow = 0; ow < OW; ++ow) a[ow] += wv * xk[ow * SW];
                }
            }
            if (act != ES_ACT_NONE)
                for (ow = 0; ow < OW; ++ow) a[ow] = act1(a[ow], act, a0, a1);
        }
    }
}
