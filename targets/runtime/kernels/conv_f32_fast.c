/* Conv2d, float32, fast paths; es_conv2d_f32 (conv_f32.c) stays the reference and the
 * oracle in tests (results agree to float rounding, not bit for bit: sums are reordered).
 *
 * es_conv2d_f32_gemm: one group. Output pixels in tiles of ES_F32_TP; for each tile the
 * im2col block col[k][j] (k over C*KH*KW, zero where padded) is built in scratch, then a
 * 4x16 register-blocked micro-kernel (AVX2+FMA: 8 ymm accumulators, 2 loads and 4
 * broadcasts per k) computes 4 output channels x 16 pixels; bias and the fused activation
 * are applied on the way out. Scratch: ES_F32_GEMM_SCRATCH(C*KH*KW) bytes.
 *
 * es_dwconv2d_f32: depthwise (group == C == M), per channel over the stride phases of its
 * zero-padded plane, 32 outputs per pass with every tap in registers (see below). */
#include <string.h>

#include "../edgesmith_rt.h"

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
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

/* acc[r][j] = b[r] + sum_k w_r[k] col[k][j], r < 4, j < 16; col rows ldc floats apart */
static void mk_f32_4x16(const float *col, size_t ldc, int K, const float *const wr[4],
                        const float b[4], float acc[4][16]) {
    int k;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 s00 = _mm256_set1_ps(b[0]), s01 = s00, s10 = _mm256_set1_ps(b[1]), s11 = s10,
           s20 = _mm256_set1_ps(b[2]), s21 = s20, s30 = _mm256_set1_ps(b[3]), s31 = s30;
    for (k = 0; k < K; ++k) {
        const float *cp = col + (size_t)k * ldc;
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
        const float *cp = col + (size_t)k * ldc;
        for (r = 0; r < 4; ++r) {
            const float wv = wr[r][k];
            for (j = 0; j < 16; ++j) acc[r][j] += wv * cp[j];
        }
    }
#endif
}

/* y[j] = act(acc[j]), j < 16: clamped in vector registers for none, ReLU and Clip (the
 * scalar act1 per element cost as much as the multiplies when K is 16 to 32) */
static void store_row16(float *y, const float acc[16], int nj, const es_conv_params *p) {
    int j;
#if defined(__AVX2__) && defined(__FMA__)
    if (nj == 16 && p->act != ES_ACT_LEAKY) {
        __m256 v0 = _mm256_loadu_ps(acc), v1 = _mm256_loadu_ps(acc + 8);
        if (p->act != ES_ACT_NONE) {
            const __m256 lo = _mm256_set1_ps(p->act == ES_ACT_CLIP ? p->a0 : 0.0f);
            v0 = _mm256_max_ps(v0, lo);
            v1 = _mm256_max_ps(v1, lo);
            if (p->act == ES_ACT_CLIP) {
                const __m256 hi = _mm256_set1_ps(p->a1);
                v0 = _mm256_min_ps(v0, hi);
                v1 = _mm256_min_ps(v1, hi);
            }
        }
        _mm256_storeu_ps(y, v0);
        _mm256_storeu_ps(y + 8, v1);
        return;
    }
#endif
    for (j = 0; j < nj; ++j) y[j] = act1(acc[j], p->act, p->a0, p->a1);
}

void es_conv2d_f32_gemm(const float *x, const float *w, const float *b, float *scratch,
                        float *y, const es_conv_params *p) {
    const int K = p->C * p->KH * p->KW, P = p->OH * p->OW, M = p->M;
    /* a 1x1, stride-1, unpadded conv's input is already the [C][P] matrix: whole tiles read
     * it in place, no im2col copy */
    const int direct = p->KH == 1 && p->KW == 1 && p->SH == 1 && p->SW == 1 && p->PT == 0 &&
                       p->PL == 0 && p->OH == p->H && p->OW == p->W;
    float acc[4][16];
    int p0, m0, j0, r;
    for (p0 = 0; p0 < P; p0 += ES_F32_TP) {
        const int inplace = direct && P - p0 >= ES_F32_TP;
        const float *col = inplace ? x + p0 : scratch;
        const size_t ldc = inplace ? (size_t)P : ES_F32_TP;
        if (!inplace) im2col_f32(x, scratch, p0, K, p);
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
                mk_f32_4x16(col + j0, ldc, K, wr, bb, acc);
                for (r = 0; r < nr; ++r)
                    store_row16(y + (size_t)(m0 + r) * P + p0 + j0, acc[r], nj, p);
            }
        }
    }
}

/* ---- depthwise --------------------------------------------------------------------------
 * Each channel's padded plane is split into its SH x SW stride phases, phase (a, b) holding
 * padded rows a, a + SH, ... and columns b, b + SW, ... on a grid of HQ x WQ (HQ, WQ the
 * padded size divided by the stride, rounded up). Output (oh, ow)'s tap (kh, kw) then reads
 * phase ((kh DH) % SH, (kw DW) % SW) at flat index (oh + kh DH / SH) WQ + ow + kw DW / SW:
 * over the flat index o = oh WQ + ow, every tap is one unit-stride 1-D convolution of the
 * whole plane, whatever the stride, dilation or plane width. The plane is computed on that
 * OH x WQ grid 32 outputs at a time, all taps in registers (the old kernel reloaded each
 * output row once per tap and vectorised along rows of 7 to 14 outputs late in a MobileNet:
 * 0.4-3 GMAC/s), and the OW valid columns of each row are copied out; the WQ - OW others
 * read neighbouring rows and are dropped. Scratch: ES_F32_DW_SCRATCH bytes. */

#define ES_DWF_CHUNK 32

#if defined(__AVX512F__)
/* out[o] = clamp(bias + sum_t w[t] src[t][o]), o < n rounded up to 32; with more, out[o]
 * already holds the sum of earlier taps and takes the bias's place */
static void dwf_taps(float *out, const float *const *src, const float *w, int nt, float bias,
                     int more, int n, int clamp, float lo, float hi) {
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    int o, t;
    for (o = 0; o < n; o += ES_DWF_CHUNK) {
        __m512 a0 = more ? _mm512_loadu_ps(out + o) : _mm512_set1_ps(bias);
        __m512 a1 = more ? _mm512_loadu_ps(out + o + 16) : _mm512_set1_ps(bias);
        for (t = 0; t < nt; ++t) {
            const __m512 wv = _mm512_set1_ps(w[t]);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + o), wv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + o + 16), wv, a1);
        }
        if (clamp) {
            a0 = _mm512_min_ps(_mm512_max_ps(a0, vlo), vhi);
            a1 = _mm512_min_ps(_mm512_max_ps(a1, vlo), vhi);
        }
        _mm512_storeu_ps(out + o, a0);
        _mm512_storeu_ps(out + o + 16, a1);
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
static void dwf_taps(float *out, const float *const *src, const float *w, int nt, float bias,
                     int more, int n, int clamp, float lo, float hi) {
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    int o, t, i;
    for (o = 0; o < n; o += ES_DWF_CHUNK) {
        __m256 a[4];
        for (i = 0; i < 4; ++i)
            a[i] = more ? _mm256_loadu_ps(out + o + 8 * i) : _mm256_set1_ps(bias);
        for (t = 0; t < nt; ++t) {
            const __m256 wv = _mm256_set1_ps(w[t]);
            const float *s = src[t] + o;
            a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(s), wv, a[0]);
            a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 8), wv, a[1]);
            a[2] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 16), wv, a[2]);
            a[3] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 24), wv, a[3]);
        }
        for (i = 0; i < 4; ++i) {
            if (clamp) a[i] = _mm256_min_ps(_mm256_max_ps(a[i], vlo), vhi);
            _mm256_storeu_ps(out + o + 8 * i, a[i]);
        }
    }
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
static void dwf_taps(float *out, const float *const *src, const float *w, int nt, float bias,
                     int more, int n, int clamp, float lo, float hi) {
    const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
    int o, t, i;
    for (o = 0; o < n; o += ES_DWF_CHUNK) {
        float32x4_t a[8];
        for (i = 0; i < 8; ++i) a[i] = more ? vld1q_f32(out + o + 4 * i) : vdupq_n_f32(bias);
        for (t = 0; t < nt; ++t) {
            const float wv = w[t];
            const float *s = src[t] + o;
            for (i = 0; i < 8; ++i) a[i] = vfmaq_n_f32(a[i], vld1q_f32(s + 4 * i), wv);
        }
        for (i = 0; i < 8; ++i) {
            if (clamp) a[i] = vminq_f32(vmaxq_f32(a[i], vlo), vhi);
            vst1q_f32(out + o + 4 * i, a[i]);
        }
    }
}
#else
static void dwf_taps(float *out, const float *const *src, const float *w, int nt, float bias,
                     int more, int n, int clamp, float lo, float hi) {
    int o, t, i;
    for (o = 0; o < n; o += ES_DWF_CHUNK) {
        float a[ES_DWF_CHUNK];
        for (i = 0; i < ES_DWF_CHUNK; ++i) a[i] = more ? out[o + i] : bias;
        for (t = 0; t < nt; ++t) {
            const float wv = w[t], *s = src[t] + o;
            for (i = 0; i < ES_DWF_CHUNK; ++i) a[i] += wv * s[i];
        }
        for (i = 0; i < ES_DWF_CHUNK; ++i) {
            if (clamp) a[i] = a[i] < lo ? lo : (a[i] > hi ? hi : a[i]);
            out[o + i] = a[i];
        }
    }
}
#endif

/* Row-major phase planes of one channel: padded row r = q SH + a, column u SW + b goes to
 * ph[(a SW + b) * pq + q WQ + u]; padding and the slack after each plane are 0. row: one
 * padded row of WQ SW floats (the columns past Wp stay 0). */
static void dwf_phases(float *ph, float *row, const float *xc, const es_conv_params *p, int HQ,
                       int WQ, size_t pq) {
    const int H = p->H, W = p->W, SH = p->SH, SW = p->SW, PL = p->PL;
    const int Wp = (p->OW - 1) * SW + (p->KW - 1) * p->DW + 1;
    const int lo = PL < Wp ? PL : Wp, hi = (PL + W) < Wp ? (PL + W) : Wp;
    int q, a, b, u;
    for (a = 0; a < SH; ++a)
        for (q = 0; q < HQ; ++q) {
            const int ih = q * SH + a - p->PT;
            float *d0 = ph + (size_t)a * SW * pq + (size_t)q * WQ;
            if (ih < 0 || ih >= H) {
                for (b = 0; b < SW; ++b) memset(d0 + (size_t)b * pq, 0, sizeof(float) * WQ);
                continue;
            }
            if (SW == 1) {
                memset(d0, 0, sizeof(float) * (size_t)lo);
                if (hi > lo) memcpy(d0 + lo, xc + (size_t)ih * W, sizeof(float) * (hi - lo));
                memset(d0 + (hi > lo ? hi : lo), 0, sizeof(float) * (WQ - (hi > lo ? hi : lo)));
                continue;
            }
            memset(row, 0, sizeof(float) * (size_t)lo);
            if (hi > lo) memcpy(row + lo, xc + (size_t)ih * W, sizeof(float) * (hi - lo));
            memset(row + (hi > lo ? hi : lo), 0,
                   sizeof(float) * ((size_t)WQ * SW - (hi > lo ? hi : lo)));
            if (SW == 2) { /* one pass, two outputs: GCC vectorises the pair */
                float *d1 = d0 + pq;
                for (u = 0; u < WQ; ++u) {
                    d0[u] = row[2 * u];
                    d1[u] = row[2 * u + 1];
                }
            } else {
                for (b = 0; b < SW; ++b)
                    for (u = 0; u < WQ; ++u) d0[(size_t)b * pq + u] = row[u * SW + b];
            }
        }
}

void es_dwconv2d_f32(const float *x, const float *w, const float *b, float *scratch,
                     float *y, const es_conv_params *p) {
    const int OH = p->OH, OW = p->OW, KH = p->KH, KW = p->KW, SH = p->SH, SW = p->SW;
    const int HQ = ES_F32_DW_HQ(p->OH, p->KH, p->SH, p->DH);
    const int WQ = ES_F32_DW_HQ(p->OW, p->KW, p->SW, p->DW);
    const size_t pq = (size_t)HQ * WQ + (size_t)WQ + ES_DWF_CHUNK; /* a phase and its slack */
    const int n = OH * WQ, ksz = KH * KW, act = p->act;
    const int clamp = act == ES_ACT_RELU || act == ES_ACT_CLIP;
    const float lo = act == ES_ACT_CLIP ? p->a0 : 0.0f, hi = act == ES_ACT_CLIP ? p->a1 : 3.4e38f;
    float *ph = scratch, *ext = ph + (size_t)SH * SW * pq, *row = ext + n + ES_DWF_CHUNK;
    const float *src[ES_F32_DW_MAXTAPS];
    int c, t, t0, oh, ow;
    for (t = 0; t < SH * SW; ++t) /* the slack after each phase: read, never used */
        memset(ph + (size_t)t * pq + (size_t)HQ * WQ, 0, sizeof(float) * (pq - (size_t)HQ * WQ));
    for (c = 0; c < p->C; ++c) {
        const float *wc = w + (size_t)c * ksz;
        float *yc = y + (size_t)c * OH * OW;
        dwf_phases(ph, row, x + (size_t)c * p->H * p->W, p, HQ, WQ, pq);
        for (t0 = 0; t0 < ksz; t0 += ES_F32_DW_MAXTAPS) { /* taps in groups of at most 64 */
            const int nt = ksz - t0 < ES_F32_DW_MAXTAPS ? ksz - t0 : ES_F32_DW_MAXTAPS;
            for (t = 0; t < nt; ++t) {
                const int dh = (t0 + t) / KW * p->DH, dw = (t0 + t) % KW * p->DW;
                src[t] = ph + (size_t)((dh % SH) * SW + dw % SW) * pq +
                         (size_t)(dh / SH) * WQ + (size_t)(dw / SW);
            }
            dwf_taps(ext, src, wc + t0, nt, b[c], t0 > 0, n, clamp && t0 + nt == ksz, lo, hi);
        }
        for (oh = 0; oh < OH; ++oh) {
            const float *e = ext + (size_t)oh * WQ;
            float *d = yc + (size_t)oh * OW;
            if (act == ES_ACT_LEAKY)
                for (ow = 0; ow < OW; ++ow) d[ow] = act1(e[ow], act, p->a0, p->a1);
            else
                memcpy(d, e, sizeof(float) * (size_t)OW);
        }
    }
}
