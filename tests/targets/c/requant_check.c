/* Reads lines "x mult shift" from stdin and prints es_mul_q(x, mult, shift), the AVX2 or
 * NEON form built for this target (for shift <= 0), the AVX-512 form (any shift) and the
 * per-lane forms (es_mulq16v_avx512 and es_rq16_apply, or es_mulq8v_avx2 for shift <= 0), the
 * scalar value again where a form is not built, so the test can hold all of them against
 * exactly rounded rational arithmetic. */
#include <stdio.h>
#include "edgesmith_rt.h"
#include "es_simd.h"

static int32_t simd(int32_t x, int32_t mult, int32_t shift) {
#if defined(__AVX2__)
    int32_t out[8];
    _mm256_storeu_si256((__m256i *)out, es_mulq8_avx2(_mm256_set1_epi32(x),
                                                      _mm256_set1_epi32(mult), shift));
    return out[5]; /* an odd lane: the even ones take the other branch of the blend */
#elif defined(__ARM_NEON)
    return vgetq_lane_s32(es_mulq4_neon(vdupq_n_s32(x), mult, shift), 3);
#else
    return es_mul_q(x, mult, shift);
#endif
}

static int32_t wide(int32_t x, int32_t mult, int32_t shift) {
#if defined(__AVX512F__)
    int32_t out[16];
    _mm512_storeu_si512(out, es_mulq16_avx512(_mm512_set1_epi32(x), mult, shift));
    return out[5] == out[10] ? out[5] : INT32_MIN + 1; /* an odd and an even lane */
#else
    return es_mul_q(x, mult, shift);
#endif
}

/* the per-lane forms (a multiplier and shift per channel), on lanes that all differ in x
 * but share mult and shift with one lane under test; the AVX2 one needs shift <= 0 and
 * mult >= 0 like es_mulq8_avx2 */
static int32_t lanes(int32_t x, int32_t mult, int32_t shift) {
#if defined(__AVX512F__)
    int32_t out[16], pre[16], mm[16], ss[16], i;
    es_rq16 rq; /* the precomputed-constants form (es_rq16_setup / es_rq16_apply) too */
    for (i = 0; i < 16; ++i) {
        mm[i] = mult;
        ss[i] = shift;
    }
    rq = es_rq16_setup(mm, ss, 16, ES_RQ_FIXED, 0, -128, 127);
    _mm512_storeu_si512(out, es_mulq16v_avx512(_mm512_set1_epi32(x), _mm512_set1_epi32(mult),
                                               _mm512_set1_epi32(shift)));
    _mm512_storeu_si512(pre, es_rq16_apply(_mm512_set1_epi32(x), &rq));
    return out[7] == out[12] && pre[7] == out[7] && pre[12] == out[7] ? out[7] : INT32_MIN + 1;
#elif defined(__AVX2__)
    int32_t out[8];
    if (shift > 0 || mult < 0) return es_mul_q(x, mult, shift);
    _mm256_storeu_si256((__m256i *)out, es_mulq8v_avx2(_mm256_set1_epi32(x),
                                                       _mm256_set1_epi32(mult),
                                                       _mm256_set1_epi32(shift)));
    return out[3] == out[6] ? out[3] : INT32_MIN + 1;
#else
    return es_mul_q(x, mult, shift);
#endif
}

int main(void) {
    long x, mult, shift;
    while (scanf("%ld %ld %ld", &x, &mult, &shift) == 3) {
        const int32_t s = es_mul_q((int32_t)x, (int32_t)mult, (int32_t)shift);
        printf("%ld %ld %ld %ld\n", (long)s,
               (long)(shift <= 0 ? simd((int32_t)x, (int32_t)mult, (int32_t)shift) : s),
               (long)wide((int32_t)x, (int32_t)mult, (int32_t)shift),
               (long)lanes((int32_t)x, (int32_t)mult, (int32_t)shift));
    }
    return 0;
}
