/* Pooling, int8. Max pooling keeps the input's quantisation; average pooling sums
 * (x - x_zp) and requantises sum / count with a fixed-point multiplier. */
#include "../edgesmith_rt.h"
#include "../es_simd.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void es_maxpool2d_i8(const int8_t *x, int8_t *y, const es_pool_params *p) {
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
 * each 8 bytes into a 64-bit lane in one instruction; the rest in plain C */
static int32_t sum_i8(const int8_t *x, int n) {
    int32_t s = 0;
    int i = 0;
#if defined(__SSE2__)
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
