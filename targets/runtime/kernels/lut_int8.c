/* Element-wise int8 functions as a 256-entry table (HardSwish, Sigmoid, Tanh, GELU, ...):
 * y[i] = table[(uint8_t)x[i]]. The generator evaluates the function once per int8 code at
 * generation time, from the input's and output's quantisation (lower/int8.py lut_i8), so a
 * quantized activation costs one byte lookup instead of dequantize -> float -> quantize
 * (XNNPACK's and TFLite's int8 way). Entry u holds the result for the code (int8_t)u.
 * y may be x (each block is loaded before it is stored). */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include "../edgesmith_rt.h"
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

/* the plain loop: the oracle of the vector paths */
void es_lut_i8_ref(const int8_t *x, int8_t *y, const int8_t *table, int n) {
    int i;
    for (i = 0; i < n; ++i) y[i] = table[(uint8_t)x[i]];
}

#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
/* 64 lookups: two 128-entry byte permutes (codes 0..127 and -128..-1, each picking from
 * two 64-byte registers by index bit 6), the sign bit choosing between them */
static inline __m512i lut64(__m512i v, __m512i t0, __m512i t1, __m512i t2, __m512i t3) {
    const __m512i pos = _mm512_permutex2var_epi8(t0, v, t1);
    const __m512i neg = _mm512_permutex2var_epi8(t2, v, t3);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), pos, neg);
}
#endif

void es_lut_i8(const int8_t *x, int8_t *y, const int8_t *table, int n) {
    int i = 0;
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
    const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    for (; i + 64 <= n; i += 64)
        _mm512_storeu_si512(y + i, lut64(_mm512_loadu_si512(x + i), t0, t1, t2, t3));
    if (i < n) { /* the tail under a mask: masked loads read nothing past n */
        const __mmask64 m = ((__mmask64)1 << (n - i)) - 1;
        _mm512_mask_storeu_epi8(y + i, m, lut64(_mm512_maskz_loadu_epi8(m, x + i), t0, t1, t2,
                                                t3));
        return;
    }
#elif defined(__ARM_NEON) && defined(__aarch64__)
    /* four 64-entry table lookups: tbl gives 0 for indices past 63, tbx keeps the lanes
     * its (rebased) index does not reach */
    uint8x16x4_t t[4];
    int k;
    for (k = 0; k < 4; ++k) {
        t[k].val[0] = vld1q_u8((const uint8_t *)table + 64 * k);
        t[k].val[1] = vld1q_u8((const uint8_t *)table + 64 * k + 16);
        t[k].val[2] = vld1q_u8((const uint8_t *)table + 64 * k + 32);
        t[k].val[3] = vld1q_u8((const uint8_t *)table + 64 * k + 48);
    }
    for (; i + 16 <= n; i += 16) {
        const uint8x16_t v = vld1q_u8((const uint8_t *)x + i), step = vdupq_n_u8(64);
        uint8x16_t r = vqtbl4q_u8(t[0], v);
        r = vqtbx4q_u8(r, t[1], vsubq_u8(v, step));
        r = vqtbx4q_u8(r, t[2], vsubq_u8(v, vaddq_u8(step, step)));
        r = vqtbx4q_u8(r, t[3], vsubq_u8(v, vdupq_n_u8(192)));
        vst1q_u8((uint8_t *)y + i, r);
    }
#endif
    for (; i < n; ++i) y[i] = table[(uint8_t)x[i]];
}
