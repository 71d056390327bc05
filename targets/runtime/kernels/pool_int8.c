/* Pooling, int8. Max pooling keeps the input's quantisation (es_maxpool2d_i8, with the
 * plain es_maxpool2d_i8_ref as its oracle); average pooling sums
 * (x - x_zp) and requantises sum / count with a fixed-point multiplier. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include "../edgesmith_rt.h"
#include "../es_simd.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define ES_MAXPOOL_I8_KW 8 /* widest window narrow_rows_vbmi takes */

/* the per-tap bounds-checked loop: the oracle of es_maxpool2d_i8 */
void es_maxpool2d_i8_ref(const int8_t *x, int8_t *y, const es_pool_params *p) {
    int c, oh, ow, kh, kw;
    for (c = 0; c < p->C; ++c) {
        const int8_t *xc = x + (size_t)c * p->H * p->W;
        for (oh = 0; oh < p->OH; ++oh) {
            for (ow = 0; ow < p->OW; ++ow) {
                int32_t m = -128;
                for (kh = 0; kh < p->KH; ++kh) {
                    const int ih = oh * p->SH - p->PT + kh * p->DH;
                    if (ih < 0 || ih >= p->H) continue;
                    for (kw = 0; kw < p->KW; ++kw) {
                        const int iw = ow * p->SW - p->PL + kw * p->DW;
                        if (iw < 0 || iw >= p->W) continue;
                        if (xc[ih * p->W + iw] > m) m = xc[ih * p->W + iw];
                    }
                }
                *y++ = (int8_t)m;
            }
        }
    }
}

/* y[i] = max(y[i], x[i * s]), i < n: one tap of a window over a row of outputs, with the
 * strides real networks use written out so the compiler vectorises each (stride 2 as
 * de-interleaving loads) */
static void max_into(int8_t *restrict y, const int8_t *restrict x, int n, int s) {
    int i;
    if (s == 1) {
        for (i = 0; i < n; ++i) y[i] = x[i] > y[i] ? x[i] : y[i];
    } else if (s == 2) {
        for (i = 0; i < n; ++i) y[i] = x[2 * i] > y[i] ? x[2 * i] : y[i];
    } else {
        for (i = 0; i < n; ++i) y[i] = x[i * s] > y[i] ? x[i * s] : y[i];
    }
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
/* The interior of one output row for stride 1 (64 outputs per vector) or 2 (32: the even
 * bytes of 64 are the low bytes of 32 words, kept by one truncating narrow), each vector
 * max-accumulated over every tap of the window in a register and stored once; the last
 * vector under a mask, whose loads read nothing past the last tap. x0: the first tap of
 * output 0, rows taps rows apart by row_step bytes. Returns 0 for other strides. */
static int interior_avx512(int8_t *y, const int8_t *x0, int n, int rows, size_t row_step,
                           int KW, int DW, int SW) {
    int i, r, kw;
    if (SW == 1) {
        for (i = 0; i < n; i += 64) {
            const __mmask64 m = n - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - i)) - 1;
            __m512i acc = _mm512_set1_epi8(-128);
            for (r = 0; r < rows; ++r)
                for (kw = 0; kw < KW; ++kw)
                    acc = _mm512_max_epi8(acc, _mm512_maskz_loadu_epi8(
                                                   m, x0 + r * row_step + kw * DW + i));
            _mm512_mask_storeu_epi8(y + i, m, acc);
        }
        return 1;
    }
    if (SW == 2) {
        for (i = 0; i < n; i += 32) {
            const int k = n - i >= 32 ? 32 : n - i;
            const __mmask64 m = ((__mmask64)1 << (2 * k - 1)) - 1; /* bytes 0, 2, .. 2k-2 */
            __m256i acc = _mm256_set1_epi8(-128);
            for (r = 0; r < rows; ++r)
                for (kw = 0; kw < KW; ++kw)
                    acc = _mm256_max_epi8(acc, _mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(
                                                   m, x0 + r * row_step + kw * DW + 2 * i)));
            _mm256_mask_storeu_epi8(y + i, (__mmask32)(k == 32 ? 0xffffffffu : (1u << k) - 1u),
                                    acc);
        }
        return 1;
    }
    return 0;
}
#endif

/* first index i >= 0 with i * s + off >= 0 (off <= 0 typically: minus a padding) */
static int first_inside(int off, int s) {
    return off >= 0 ? 0 : (-off + s - 1) / s;
}

/* one past the last index i with i * s + off <= last, at least lo, at most n */
static int end_inside(int off, int s, int last, int lo, int n) {
    int e = last < off ? 0 : (last - off) / s + 1;
    return e < lo ? lo : (e > n ? n : e);
}

/* output row oh's window: its first input row h0 (may lie in the padding) and the taps
 * [kh0, kh1) that lie inside the plane */
static inline void window_rows(int oh, const es_pool_params *p, int *h0, int *kh0, int *kh1) {
    *h0 = oh * p->SH - p->PT;
    *kh0 = first_inside(*h0, p->DH) < p->KH ? first_inside(*h0, p->DH) : p->KH;
    *kh1 = end_inside(*h0, p->DH, p->H - 1, *kh0, p->KH);
}

/* the max over output column ow's window, clipped to the row once (a border column) */
static int8_t clipped_max(const int8_t *xc, const es_pool_params *p, int ow, int h0, int kh0,
                          int kh1) {
    const int w0 = ow * p->SW - p->PL, DW = p->DW;
    const int kw0 = first_inside(w0, DW) < p->KW ? first_inside(w0, DW) : p->KW;
    const int kw1 = end_inside(w0, DW, p->W - 1, kw0, p->KW);
    int32_t m = -128;
    int kh, kw;
    for (kh = kh0; kh < kh1; ++kh) {
        const int8_t *xr = xc + (size_t)(h0 + kh * p->DH) * p->W + w0;
        for (kw = kw0; kw < kw1; ++kw) m = xr[kw * DW] > m ? xr[kw * DW] : m;
    }
    return (int8_t)m;
}

/* t[i] = the max of x[i] over `rows` rows `step` bytes apart, i < W: the vertical half of
 * a separable max (unit stride, so it vectorises at full width whatever the pool's stride) */
static void rows_max(int8_t *restrict t, const int8_t *restrict x, int W, int rows,
                     size_t step) {
    int i, r;
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    for (i = 0; i < W; i += 64) {
        const __mmask64 m = W - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (W - i)) - 1;
        __m512i acc = _mm512_maskz_loadu_epi8(m, x + i);
        for (r = 1; r < rows; ++r)
            acc = _mm512_max_epi8(acc, _mm512_maskz_loadu_epi8(m, x + (size_t)r * step + i));
        _mm512_mask_storeu_epi8(t + i, m, acc);
    }
#else
    for (i = 0; i < W; ++i) t[i] = x[i];
    for (r = 1; r < rows; ++r) {
        const int8_t *xr = x + (size_t)r * step;
        for (i = 0; i < W; ++i) t[i] = xr[i] > t[i] ? xr[i] : t[i];
    }
#endif
}

#if defined(__AVX512VBMI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
/* Rows of at most 128 bytes and 64 outputs (ResNet's stem pool: 112 -> 56; every pool of a
 * small net) in two vectors each: per output row, the window's rows are max-reduced into
 * the input row's two halves (a, b), and each column tap kw is one two-source byte permute
 * of (a, b) that picks column j * SW - PL + kw * DW for output j, max-accumulated under the
 * mask of the outputs whose tap lies inside the row (the others keep -128, as the
 * reference's clipped window does). No border columns, no narrowing per stride: 3 loads,
 * 3 permutes and one store per output row of ResNet's pool, 4.6x the per-tap sweep below
 * on it (85.7 vs 18.7 us alone). Returns 0, doing nothing, for other shapes. */
static int narrow_rows_vbmi(const int8_t *x, int8_t *y, const es_pool_params *p) {
    const int C = p->C, H = p->H, W = p->W, OH = p->OH, OW = p->OW, KW = p->KW;
    const int DH = p->DH;
    const __m512i low = _mm512_set1_epi8(-128);
    __m512i idx[ES_MAXPOOL_I8_KW];
    __mmask64 inside[ES_MAXPOOL_I8_KW], m0, m1, mo;
    int c, oh, kh, kw, j;
    if (W > 128 || OW > 64 || KW > ES_MAXPOOL_I8_KW) return 0;
    m0 = W >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << W) - 1; /* the row's two halves */
    m1 = W == 128 ? ~(__mmask64)0 : W > 64 ? ((__mmask64)1 << (W - 64)) - 1 : 0;
    mo = OW == 64 ? ~(__mmask64)0 : ((__mmask64)1 << OW) - 1;
    for (kw = 0; kw < KW; ++kw) { /* tap kw's column for every output, and which lie inside */
        int8_t col[64];
        inside[kw] = 0;
        for (j = 0; j < 64; ++j) {
            const int at = j * p->SW - p->PL + kw * p->DW;
            const int in = j < OW && at >= 0 && at < W;
            col[j] = (int8_t)(in ? at : 0);
            if (in) inside[kw] |= (__mmask64)1 << j;
        }
        idx[kw] = _mm512_loadu_si512(col);
    }
    for (c = 0; c < C; ++c) {
        const int8_t *xc = x + (size_t)c * H * W;
        for (oh = 0; oh < OH; ++oh) {
            int h0, kh0, kh1;
            __m512i a = low, b = low, acc = low;
            window_rows(oh, p, &h0, &kh0, &kh1);
            for (kh = kh0; kh < kh1; ++kh) {
                const int8_t *xr = xc + (size_t)(h0 + kh * DH) * W;
                a = _mm512_max_epi8(a, _mm512_maskz_loadu_epi8(m0, xr));
                if (m1) b = _mm512_max_epi8(b, _mm512_maskz_loadu_epi8(m1, xr + 64));
            }
            for (kw = 0; kw < KW; ++kw)
                acc = _mm512_mask_max_epi8(acc, inside[kw], acc,
                                           _mm512_permutex2var_epi8(a, idx[kw], b));
            _mm512_mask_storeu_epi8(y + ((size_t)c * OH + oh) * OW, mo, acc);
        }
    }
    return 1;
}
#endif

/* Max pooling without a bounds check per tap: the rows of a window that lie inside the
 * plane are found once per output row, and the output columns whose whole window lies
 * inside the row (the interior) once per call. The interior is then max-accumulated tap
 * by tap over the whole output row, a vector sweep per tap; only the few border columns
 * clip their window, once per column. Bit-identical to es_maxpool2d_i8_ref: a window with
 * no element inside the plane gives -128, as there.
 *
 * Max is separable: for a window of several rows, the rows are first reduced to one
 * (rows_max, into t on the stack) and the columns' taps then read that row only. ResNet's
 * 3x3 stride-2 pool then does 3 + 3 vector passes per output row instead of 9, and only the
 * 3 column passes pay for the stride (a narrowing per vector). Rows wider than
 * ES_MAXPOOL_I8_ROW keep the taps over all rows. */
#define ES_MAXPOOL_I8_ROW 1024
void es_maxpool2d_i8(const int8_t *x, int8_t *y, const es_pool_params *p) {
    const int C = p->C, H = p->H, W = p->W, OH = p->OH, OW = p->OW, KW = p->KW;
    const int SW = p->SW, PL = p->PL, DH = p->DH, DW = p->DW;
    /* interior columns [ow0, ow1): the first tap at or right of column 0, the last at or
     * left of column W - 1 */
    const int ow0 = first_inside(-PL, SW) < OW ? first_inside(-PL, SW) : OW;
    const int ow1 = end_inside(-PL + (KW - 1) * DW, SW, W - 1, ow0, OW);
    int8_t t[ES_MAXPOOL_I8_ROW];
    int c, oh, ow, kh, kw;
#if defined(__AVX512VBMI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if (narrow_rows_vbmi(x, y, p)) return;
#endif
    for (c = 0; c < C; ++c) {
        const int8_t *xc = x + (size_t)c * H * W;
        for (oh = 0; oh < OH; ++oh) {
            int h0, kh0, kh1;
            int8_t *yr = y + ((size_t)c * OH + oh) * OW;
            const int8_t *rows = xc; /* the window's rows: the plane's, or t's one row */
            int r0, a, b, done = 0;
            window_rows(oh, p, &h0, &kh0, &kh1);
            r0 = h0, a = kh0, b = kh1;
            if (kh1 - kh0 > 1 && W <= ES_MAXPOOL_I8_ROW) {
                rows_max(t, xc + (size_t)(h0 + kh0 * DH) * W, W, kh1 - kh0, (size_t)DH * W);
                rows = t, r0 = 0, a = 0, b = 1;
            }
#if defined(__AVX512BW__) && defined(__AVX512VL__)
            done = ow1 > ow0 && b > a &&
                   interior_avx512(yr + ow0, rows + (size_t)(r0 + a * DH) * W + ow0 * SW - PL,
                                   ow1 - ow0, b - a, (size_t)DH * W, KW, DW, SW);
#endif
            if (!done) {
                for (ow = ow0; ow < ow1; ++ow) yr[ow] = -128;
                for (kh = a; kh < b; ++kh) {
                    const int8_t *xr = rows + (size_t)(r0 + kh * DH) * W;
                    for (kw = 0; kw < KW; ++kw)
                        max_into(yr + ow0, xr + ow0 * SW - PL + kw * DW, ow1 - ow0, SW);
                }
            }
            for (ow = 0; ow < ow0; ++ow) yr[ow] = clipped_max(rows, p, ow, r0, a, b);
            for (ow = ow1; ow < OW; ++ow) yr[ow] = clipped_max(rows, p, ow, r0, a, b);
        }
    }
}

/* sum * real / count, rounded once (half away from zero) like es_mul_q: mult/shift encode
 * x_scale / y_scale. Dividing es_mul_q's already rounded result by count would round twice
 * and miss the exact value by 1 LSB on a few percent of outputs. The 64-bit denominator
 * count * 2^(31 - shift) must stay below 2^62; when it would not (tiny multipliers, huge
 * windows) low bits of the numerator are dropped first, moving the result by far less
 * than one LSB. */
static int32_t avg_q(int32_t sum, int count, int32_t mult, int32_t shift) {
    int64_t num = (int64_t)sum * mult, den;
    int total = 31 - shift, bits = 0;
    while ((count >> bits) > 0) ++bits; /* count < 2^bits */
    while (total + bits > 62) {
        num /= 2;
        --total;
    }
    den = (int64_t)count << total;
    num += num >= 0 ? den / 2 : -(den / 2);
    num /= den; /* truncates toward zero: with the half added away from zero, rounds */
    return num > INT32_MAX ? INT32_MAX : (num < INT32_MIN ? INT32_MIN : (int32_t)num);
}

void es_avgpool2d_i8(const int8_t *x, int8_t *y, const es_pool_params *p) {
    int c, oh, ow, ih, iw;
    for (c = 0; c < p->C; ++c) {
        const int8_t *xc = x + (size_t)c * p->H * p->W;
        for (oh = 0; oh < p->OH; ++oh) {
            int h0 = oh * p->SH - p->PT, h1 = h0 + p->KH;
            int a0 = h0 < 0 ? 0 : h0, a1 = h1 < p->H ? h1 : p->H;
            for (ow = 0; ow < p->OW; ++ow) {
                int w0 = ow * p->SW - p->PL, w1 = w0 + p->KW;
                int b0 = w0 < 0 ? 0 : w0, b1 = w1 < p->W ? w1 : p->W;
                int count = p->count_pad ? p->KH * p->KW : (a1 - a0) * (b1 - b0);
                int32_t s = 0, q;
                for (ih = a0; ih < a1; ++ih)
                    for (iw = b0; iw < b1; ++iw) s += (int32_t)xc[ih * p->W + iw] - p->x_zp;
                q = count > 0 ? avg_q(s, count, p->mult, p->shift) : 0;
                *y++ = es_sat8(q + p->y_zp, -128, 127);
            }
        }
    }
}

/* sum of x[0 .. n): 16 bytes at a time as uint8 (x + 128) with SAD against zero, which adds
 * each 8 bytes into a 64-bit lane in one instruction; the rest in plain C. With AVX-512 BW,
 * 64 bytes at a time and the last 1..63 as one masked load (the bytes past n read as 0x80,
 * 0 once flipped): a global pool over 3x3 or 7x7 planes (MobileNetV2-96's last, EfficientNet's
 * SE blocks) was a scalar loop over 9 bytes, or three SSE steps and a scalar one per channel */
static int32_t sum_i8(const int8_t *x, int n) {
    int32_t s = 0;
    int i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    const __m512i flip = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512i acc = zero;
    for (; i + 64 <= n; i += 64)
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(x + i),
                                                                     flip), zero));
    if (i < n) {
        const __mmask64 m = ((__mmask64)1 << (n - i)) - 1;
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_xor_si512(
                                        _mm512_mask_loadu_epi8(flip, m, x + i), flip), zero));
    }
    return (int32_t)(_mm512_reduce_add_epi64(acc) - 128 * (long long)n);
#elif defined(__SSE2__)
    const __m128i flip = _mm_set1_epi8((char)0x80), zero = _mm_setzero_si128();
    __m128i acc = zero;
    for (; i + 16 <= n; i += 16)
        acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_xor_si128(
                                     _mm_loadu_si128((const __m128i *)(x + i)), flip), zero));
    s = _mm_cvtsi128_si32(acc) + _mm_cvtsi128_si32(_mm_unpackhi_epi64(acc, acc)) - 128 * i;
#endif
    for (; i < n; ++i) s += x[i];
    return s;
}

void es_global_avgpool_i8(const int8_t *x, int8_t *y, const es_gavgpool_params *p) {
    /* mult/shift encode x_scale / (y_scale * HW) */
    const int C = p->C, HW = p->HW, x_zp = p->x_zp;
    const int32_t y_zp = p->y_zp, mult = p->mult, shift = p->shift, rq = p->rq;
    int c = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    for (; c + 16 <= C; c += 16) { /* 16 channel sums requantised as one vector */
        int32_t s[16];
        int i;
        for (i = 0; i < 16; ++i) s[i] = sum_i8(x + (size_t)(c + i) * HW, HW) - x_zp * HW;
        es_requant16_avx512(_mm512_loadu_si512(s), y + c, 16, mult, shift, rq, y_zp, -128, 127);
    }
#endif
    for (; c < C; ++c)
        y[c] = es_requant(sum_i8(x + (size_t)c * HW, HW) - x_zp * HW, mult, shift, rq, y_zp,
                          -128, 127);
}
