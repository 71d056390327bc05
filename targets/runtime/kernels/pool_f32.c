/* Pooling and reductions, float32, NCHW (N folded into C). */
#include <float.h>

#include "../edgesmith_rt.h"

/* The reference: every tap of every window checked against the plane's edges. */
static float max_window(const float *xc, int oh, int ow, const es_pool_params *p) {
    float m = -FLT_MAX;
    int kh, kw;
    for (kh = 0; kh < p->KH; ++kh) {
        const int ih = oh * p->SH - p->PT + kh * p->DH;
        if (ih < 0 || ih >= p->H) continue;
        for (kw = 0; kw < p->KW; ++kw) {
            const int iw = ow * p->SW - p->PL + kw * p->DW;
            if (iw < 0 || iw >= p->W) continue;
            if (xc[ih * p->W + iw] > m) m = xc[ih * p->W + iw];
        }
    }
    return m;
}

void es_maxpool2d_f32_ref(const float *x, float *y, const es_pool_params *p) {
    int c, oh, ow;
    for (c = 0; c < p->C; ++c) {
        const float *xc = x + (size_t)c * p->H * p->W;
        for (oh = 0; oh < p->OH; ++oh)
            for (ow = 0; ow < p->OW; ++ow) *y++ = max_window(xc, oh, ow, p);
    }
}

/* Max pooling, fast, separable: a window's max is the max over its columns of each
 * column's max over the window's rows. Per output row, the KH input rows the window spans
 * are reduced to one row first (KH contiguous passes that GCC turns into vmaxps), then the
 * output columns whose whole window lies inside the row (all but a border column or two)
 * take the max of KW taps of that row; border columns take the checked loop (max_taps)
 * over the reduced row. ResNet-18's 3 x 3 stride-2 pool on 64 x 112 x 112 read 9 strided
 * taps per output before (6 % of its C fp32 time with the checked loop everywhere, 1.5 %
 * with the taps unchecked); now 3 contiguous rows and 3 taps. Each max starts from
 * -FLT_MAX and takes v only when v > m, as the reference does, so a NaN never wins and the
 * result is the same value; only which of +0 and -0 a window of tied zeros returns can
 * differ, as the taps are visited column by column. Rows wider than ES_MAXPOOL_ROW (the
 * reduced row lives on the stack) take the per-tap loop below. */
#define ES_MAXPOOL_ROW 1024

/* the max of output column ow's taps in t, the input row already reduced over the window's
 * rows, checked against the row's edges */
static float max_taps(const float *t, int ow, const es_pool_params *p) {
    float m = -FLT_MAX;
    int kw;
    for (kw = 0; kw < p->KW; ++kw) {
        const int iw = ow * p->SW - p->PL + kw * p->DW;
        if (iw >= 0 && iw < p->W && t[iw] > m) m = t[iw];
    }
    return m;
}

void es_maxpool2d_f32(const float *x, float *y, const es_pool_params *p) {
    const int H = p->H, W = p->W, OH = p->OH, OW = p->OW, SW = p->SW, DW = p->DW, PL = p->PL;
    const int span = (p->KW - 1) * DW; /* window width - 1 */
    int w0 = (PL + SW - 1) / SW, w1 = W - 1 - span + PL >= 0 ? (W - 1 - span + PL) / SW + 1 : 0;
    int c, oh, ow, kh, kw, iw;
    float t[ES_MAXPOOL_ROW];
    w0 = w0 < OW ? w0 : OW;
    w1 = w1 < w0 ? w0 : (w1 > OW ? OW : w1);
    for (c = 0; c < p->C; ++c) {
        const float *xc = x + (size_t)c * H * W;
        for (oh = 0; oh < OH; ++oh, y += OW) {
            if (W <= ES_MAXPOOL_ROW) {
                for (iw = 0; iw < W; ++iw) t[iw] = -FLT_MAX;
                for (kh = 0; kh < p->KH; ++kh) {
                    const int ih = oh * p->SH - p->PT + kh * p->DH;
                    const float *xr = xc + (size_t)(ih < 0 ? 0 : ih) * W;
                    if (ih < 0 || ih >= H) continue;
                    for (iw = 0; iw < W; ++iw) t[iw] = xr[iw] > t[iw] ? xr[iw] : t[iw];
                }
                for (ow = 0; ow < w0; ++ow) y[ow] = max_taps(t, ow, p);
                for (ow = w1; ow < OW; ++ow) y[ow] = max_taps(t, ow, p);
                for (ow = w0; ow < w1; ++ow) y[ow] = -FLT_MAX;
                for (kw = 0; kw < p->KW; ++kw) {
                    const float *tr = t + kw * DW - PL; /* ow SW + kw DW - PL >= 0 */
                    for (ow = w0; ow < w1; ++ow)
                        y[ow] = tr[ow * SW] > y[ow] ? tr[ow * SW] : y[ow];
                }
                continue;
            }
            for (ow = 0; ow < w0; ++ow) y[ow] = max_window(xc, oh, ow, p);
            for (ow = w1; ow < OW; ++ow) y[ow] = max_window(xc, oh, ow, p);
            for (ow = w0; ow < w1; ++ow) y[ow] = -FLT_MAX;
            for (kh = 0; kh < p->KH; ++kh) {
                const int ih = oh * p->SH - p->PT + kh * p->DH;
                if (ih < 0 || ih >= H) continue;
                for (kw = 0; kw < p->KW; ++kw) {
                    const float *xr = xc + (size_t)ih * W;
                    const int d = kw * DW - PL; /* ow SW + d >= 0 for ow >= w0 */
                    for (ow = w0; ow < w1; ++ow) {
                        const float v = xr[ow * SW + d];
                        y[ow] = v > y[ow] ? v : y[ow];
                    }
                }
            }
        }
    }
}

void es_avgpool2d_f32(const float *x, float *y, const es_pool_params *p) {
    int c, oh, ow, ih, iw;
    for (c = 0; c < p->C; ++c) {
        const float *xc = x + (size_t)c * p->H * p->W;
        for (oh = 0; oh < p->OH; ++oh) {
            int h0 = oh * p->SH - p->PT, h1 = h0 + p->KH;
            int ph1 = h1 < p->H + p->PB ? h1 : p->H + p->PB;
            for (ow = 0; ow < p->OW; ++ow) {
                int w0 = ow * p->SW - p->PL, w1 = w0 + p->KW;
                int pw1 = w1 < p->W + p->PR ? w1 : p->W + p->PR;
                int count = (ph1 - h0) * (pw1 - w0);
                int a0 = h0 < 0 ? 0 : h0, a1 = h1 < p->H ? h1 : p->H;
                int b0 = w0 < 0 ? 0 : w0, b1 = w1 < p->W ? w1 : p->W;
                float s = 0.0f;
                for (ih = a0; ih < a1; ++ih)
                    for (iw = b0; iw < b1; ++iw) s += xc[ih * p->W + iw];
                if (!p->count_pad) count = (a1 - a0) * (b1 - b0);
                *y++ = count > 0 ? s / (float)count : 0.0f;
            }
        }
    }
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
/* x[0] + ... + x[n - 1] in vector registers. The portable sum (below) keeps its 16 partial
 * sums in a stack array and adds its tail and its pairwise tree in scalars, and GCC leaves
 * the tree's loads waiting on the vector stores: about 85 cycles a row whatever its length,
 * 13 us for MobileNetV3-small's squeeze-excite pools over 576 x 7 x 7. Here two vector
 * sums take the row, the tail is one masked load and the horizontal sum a few shuffles;
 * rows are independent, so one row's reduction overlaps the next row's loads. */
#if defined(__AVX512F__)
static float sum_row(const float *x, int n) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    int k = 0;
    for (; k + 32 <= n; k += 32) {
        a = _mm512_add_ps(a, _mm512_loadu_ps(x + k));
        b = _mm512_add_ps(b, _mm512_loadu_ps(x + k + 16));
    }
    if (k + 16 <= n) a = _mm512_add_ps(a, _mm512_loadu_ps(x + k)), k += 16;
    if (k < n) b = _mm512_add_ps(b, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - k)) - 1u), x + k));
    return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}
#else
static float sum_row(const float *x, int n) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    __m128 h;
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        a = _mm256_add_ps(a, _mm256_loadu_ps(x + k));
        b = _mm256_add_ps(b, _mm256_loadu_ps(x + k + 8));
    }
    if (k + 8 <= n) a = _mm256_add_ps(a, _mm256_loadu_ps(x + k)), k += 8;
    if (k < n) {
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - k),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        b = _mm256_add_ps(b, _mm256_maskload_ps(x + k, m));
    }
    a = _mm256_add_ps(a, b);
    h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}
#endif
#else
/* x[0] + ... + x[n - 1] in 16 partial sums, added pairwise at the end: one running sum
 * waits for each add (4 cycles a value), which made EfficientNet-B0's squeeze-excite
 * GlobalAveragePools (2.3 M values at 224 x 224) cost ms; the 16 independent sums are one
 * vector add per 16 values once the compiler vectorises the j loop. Sums are reordered,
 * so this agrees with one running sum to float rounding. */
static float sum_row(const float *x, int n) {
    float s[16];
    int j, k;
    for (j = 0; j < 16; ++j) s[j] = 0.0f;
    for (k = 0; k + 16 <= n; k += 16)
        for (j = 0; j < 16; ++j) s[j] += x[k + j];
    for (j = 0; k < n; ++k, ++j) s[j] += x[k];
    for (k = 8; k > 0; k >>= 1)
        for (j = 0; j < k; ++j) s[j] += s[j + k];
    return s[0];
}
#endif

void es_reduce_f32(const float *x, float *y, const es_reduce_params *p) {
    const int outer = p->outer, n = p->n, inner = p->inner, op = p->op;
    int o, i, k;
    if (inner == 1 && op != ES_R_MAX) { /* global average pooling, a mean over the last axes */
        for (o = 0; o < outer; ++o) {
            const float s = sum_row(x + (size_t)o * n, n);
            y[o] = op == ES_R_MEAN ? s / (float)n : s;
        }
        return;
    }
    for (o = 0; o < outer; ++o) {
        for (i = 0; i < inner; ++i) {
            const float *xp = x + (size_t)o * n * inner + i;
            float acc = op == ES_R_MAX ? -FLT_MAX : 0.0f;
            for (k = 0; k < n; ++k) {
                const float v = xp[(size_t)k * inner];
                if (op == ES_R_MAX) acc = v > acc ? v : acc;
                else acc += v;
            }
            y[(size_t)o * inner + i] = op == ES_R_MEAN ? acc / (float)n : acc;
        }
    }
}
