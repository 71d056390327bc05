/* Pooling and reductions, float32, NCHW (N folded into C). */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <float.h>

#include "../edgesmith_rt.h"
#include "../es_lanes.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

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
 * reduced row lives on the stack) take the per-tap loop below. On AVX-512, windows up to 3
 * wide at stride 2 (ResNet's) skip the stored row and run max_s2_plane instead. */
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

/* y[ow] for the interior columns [w0, w1), each the max of its KW taps of the reduced row
 * t, no bounds checks (every tap of these columns lies inside the row). On AVX-512, 16
 * outputs at a time: at stride 1 a tap is one load, at stride 2 two loads whose even
 * lanes one permute gathers (GCC left the strided taps scalar). The last vector reads up to
 * 31 floats past the row's end, into t's slack, and stores under a mask. max(v, m) is
 * v > m ? v : m, the scalar loop's comparison, so the same value. The windows max_s2_plane
 * does not take come here: 3 x 3 stride 1 on 64 x 112 x 112 0.76x the time of the loop. */
#define ES_MAXPOOL_SLACK 32
static void max_cols(const float *t, float *y, int w0, int w1, const es_pool_params *p) {
    const int SW = p->SW, DW = p->DW, PL = p->PL, KW = p->KW;
    int ow, kw;
#if defined(__AVX512F__)
    if (SW == 1 || SW == 2) {
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                               26, 28, 30);
        for (ow = w0; ow < w1; ow += 16) {
            const int n = w1 - ow < 16 ? w1 - ow : 16;
            __m512 m = _mm512_set1_ps(-FLT_MAX);
            for (kw = 0; kw < KW; ++kw) {
                const float *tr = t + ow * SW + kw * DW - PL;
                const __m512 v = SW == 1 ? _mm512_loadu_ps(tr)
                                         : _mm512_permutex2var_ps(_mm512_loadu_ps(tr), even,
                                                                  _mm512_loadu_ps(tr + 16));
                m = _mm512_max_ps(v, m);
            }
            _mm512_mask_storeu_ps(y + ow, (__mmask16)((1u << n) - 1u), m);
        }
        return;
    }
#endif
    for (ow = w0; ow < w1; ++ow) y[ow] = -FLT_MAX;
    for (kw = 0; kw < KW; ++kw) {
        const float *tr = t + kw * DW - PL; /* ow SW + kw DW - PL >= 0 */
        for (ow = w0; ow < w1; ++ow) y[ow] = tr[ow * SW] > y[ow] ? tr[ow * SW] : y[ow];
    }
}

#if defined(__AVX512F__)
/* Windows up to 3 wide at stride 2, undilated along the row, left padding 0 or 1 (ResNet's
 * 3 x 3 stride-2 pool), on AVX-512: one whole output row, 16 outputs at a time, without
 * the reduced row t. Going through t cost more than the maxes: its taps are unaligned
 * 64-byte loads of what was just stored in 64-byte pieces, which the store buffer cannot
 * forward. Outputs ow .. ow + 15 read columns 2 ow - 1 .. 2 ow + 32; the 16-column vectors
 * from 2 ow - 16 (p), 2 ow (a), 2 ow + 16 (b) and 2 ow + 32 (n) are each reduced over the
 * window's rows (lanes outside the row at -FLT_MAX, padding rows skipped), and a tap at
 * column offset d = kw - PL is a permute of them: d = 0 the even lanes of a, b; d = 1 the
 * odd ones; d = -1 the odd ones moved up a lane under p's last; d = 2 the even ones moved
 * down a lane over n's first. Each vector is loaded once per row: a chunk's b is the next
 * one's p, its n the next one's a. Rows first, then the taps in order, each max(v, m) =
 * v > m ? v : m, as the separable loop compares, so the same value; a padding tap is a max
 * with -FLT_MAX, which never wins over m >= -FLT_MAX, as the reference skips it. */
#define ES_MAXPOOL_S2_KH 16 /* window rows the row pointers hold */
#define ES_MAXPOOL_S2(p)                                                                    \
    ((p)->SW == 2 && (p)->DW == 1 && (p)->KW <= 3 && (p)->PL <= 1 && (p)->KH <= ES_MAXPOOL_S2_KH)

/* the max over the nr rows r[] (the window's rows inside the plane) of columns c .. c + 15,
 * -FLT_MAX outside the row */
static inline __m512 rows_max16(const float *const *r, int nr, int c, int W) {
    const int lim = W - c;
    const __mmask16 k = (__mmask16)es_mask16(lim);
    const __m512 lo = _mm512_set1_ps(-FLT_MAX);
    __m512 m = lo;
    int i;
    if (!k) return m;
    if (k == 0xFFFFu) {
        for (i = 0; i < nr; ++i) m = _mm512_max_ps(_mm512_loadu_ps(r[i] + c), m);
        return m;
    }
    for (i = 0; i < nr; ++i) m = _mm512_max_ps(_mm512_mask_loadu_ps(lo, k, r[i] + c), m);
    return m;
}

#if defined(__GNUC__)
#define ES_POOL_INLINE static inline __attribute__((always_inline))
#else
#define ES_POOL_INLINE static inline
#endif

/* one output row from its window's nr rows r[]; KW and PL constants in each instance */
ES_POOL_INLINE void max_s2_row(const float *const *r, int nr, float *y, int W, int OW,
                               const int KW, const int PL) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27,
                                          29, 31);
    const __m512i up = _mm512_setr_epi32(31, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
    const __m512i down = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                           16);
    const __m512 lo = _mm512_set1_ps(-FLT_MAX);
    __m512 pv = lo, a = rows_max16(r, nr, 0, W);
    int ow, kw;
    for (ow = 0; ow < OW; ow += 16) {
        const int n = OW - ow < 16 ? OW - ow : 16;
        const __m512 b = rows_max16(r, nr, 2 * ow + 16, W);
        const __m512 nv = rows_max16(r, nr, 2 * ow + 32, W);
        const __m512 e = _mm512_permutex2var_ps(a, even, b), o = _mm512_permutex2var_ps(a, odd, b);
        __m512 m = lo;
        for (kw = 0; kw < KW; ++kw) {
            const int d = kw - PL;
            const __m512 v = d == 0   ? e
                             : d == 1 ? o
                             : d < 0  ? _mm512_permutex2var_ps(o, up, pv)
                                      : _mm512_permutex2var_ps(e, down, nv);
            m = _mm512_max_ps(v, m);
        }
        _mm512_mask_storeu_ps(y + ow, (__mmask16)((1u << n) - 1u), m);
        pv = b;
        a = nv;
    }
}

static void max_s2_plane(const float *xc, float *y, const es_pool_params *p) {
    const float *r[ES_MAXPOOL_S2_KH];
    int oh, kh, nr;
    for (oh = 0; oh < p->OH; ++oh, y += p->OW) {
        for (kh = nr = 0; kh < p->KH; ++kh) {
            const int ih = oh * p->SH - p->PT + kh * p->DH;
            if (ih >= 0 && ih < p->H) r[nr++] = xc + (size_t)ih * p->W;
        }
        if (p->KW == 3 && p->PL == 1) max_s2_row(r, nr, y, p->W, p->OW, 3, 1);
        else if (p->KW == 3) max_s2_row(r, nr, y, p->W, p->OW, 3, 0);
        else if (p->KW == 2) max_s2_row(r, nr, y, p->W, p->OW, 2, p->PL);
        else max_s2_row(r, nr, y, p->W, p->OW, 1, p->PL);
    }
}
#endif

void es_maxpool2d_f32(const float *x, float *y, const es_pool_params *p) {
    const int H = p->H, W = p->W, OH = p->OH, OW = p->OW, SW = p->SW, DW = p->DW, PL = p->PL;
    const int span = (p->KW - 1) * DW; /* window width - 1 */
    int w0 = (PL + SW - 1) / SW, w1 = W - 1 - span + PL >= 0 ? (W - 1 - span + PL) / SW + 1 : 0;
    int c, oh, ow, kh, kw, iw;
    float t[ES_MAXPOOL_ROW + ES_MAXPOOL_SLACK];
    for (iw = W; iw < W + ES_MAXPOOL_SLACK && iw < ES_MAXPOOL_ROW + ES_MAXPOOL_SLACK; ++iw)
        t[iw] = -FLT_MAX; /* read by the last vector of taps, never taken */
    w0 = w0 < OW ? w0 : OW;
    w1 = w1 < w0 ? w0 : (w1 > OW ? OW : w1);
    for (c = 0; c < p->C; ++c) {
        const float *xc = x + (size_t)c * H * W;
#if defined(__AVX512F__)
        if (ES_MAXPOOL_S2(p)) {
            max_s2_plane(xc, y, p);
            y += (size_t)OH * OW;
            continue;
        }
#endif
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
                max_cols(t, y, w0, w1, p);
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
    if (k < n)
        b = _mm512_add_ps(b, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - k)) - 1u), x + k));
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
#elif defined(__ARM_NEON) && defined(__aarch64__)
/* NEON: four quad sums over 16 values at a time, the rest a quad and scalars at a time, and
 * the quads added across (vaddvq) once. GCC compiles the portable loop for aarch64 as it
 * does for x86: each quad of partial sums loaded from the stack array, added and stored
 * back per 16 values, the tail and the tree in scalars through memory; nothing here goes
 * through memory. Not timed: no aarch64 hardware here (qemu checks correctness only). */
static float sum_row(const float *x, int n) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    float s;
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        a0 = vaddq_f32(a0, vld1q_f32(x + k));
        a1 = vaddq_f32(a1, vld1q_f32(x + k + 4));
        a2 = vaddq_f32(a2, vld1q_f32(x + k + 8));
        a3 = vaddq_f32(a3, vld1q_f32(x + k + 12));
    }
    for (; k + 4 <= n; k += 4) a0 = vaddq_f32(a0, vld1q_f32(x + k));
    s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; k < n; ++k) s += x[k];
    return s;
}
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
