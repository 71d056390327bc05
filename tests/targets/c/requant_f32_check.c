/* Reads lines "acc mult shift y_zp qmin qmax" from stdin and prints, for ES_RQ_FP32,
 * es_requant's int8 and the same value from each SIMD form built for this target (the
 * AVX-512 store es_requant16_avx512, the per-lane es_rq16 constants, AVX2's es_rqf8_avx2),
 * or the scalar value again where a form is not built, for the test to hold all of them
 * against float32 arithmetic in numpy. */
#include <stdio.h>
#include "edgesmith_rt.h"
#include "es_simd.h"

static int store16(int32_t acc, int32_t mult, int32_t shift, int32_t zp, int32_t lo, int32_t hi) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    int8_t y[16];
    es_requant16_avx512(_mm512_set1_epi32(acc), y, 16, mult, shift, ES_RQ_FP32, zp, lo, hi);
    return y[3] == y[12] ? y[3] : 1000;
#else
    return es_requant(acc, mult, shift, ES_RQ_FP32, zp, lo, hi);
#endif
}

static int lanes(int32_t acc, int32_t mult, int32_t shift, int32_t zp, int32_t lo, int32_t hi) {
#if defined(__AVX512F__)
    int32_t mm[16], ss[16], out[16], i;
    es_rq16 q;
    for (i = 0; i < 16; ++i) {
        mm[i] = mult;
        ss[i] = shift;
    }
    q = es_rq16_setup(mm, ss, 16, ES_RQ_FP32, zp, lo, hi);
    _mm512_storeu_si512(out, es_rq16_apply(_mm512_set1_epi32(acc), &q));
    return out[5] == out[10] ? out[5] + zp : 1000;
#elif defined(__AVX2__)
    int32_t out[8];
    _mm256_storeu_si256((__m256i *)out,
                        es_rqf8_avx2(_mm256_set1_epi32(acc), _mm256_set1_ps(es_rq_scale(mult, shift)),
                                     _mm256_set1_ps((float)(lo - zp)), _mm256_set1_ps((float)(hi - zp))));
    return out[2] == out[7] ? out[2] + zp : 1000;
#else
    return es_requant(acc, mult, shift, ES_RQ_FP32, zp, lo, hi);
#endif
}

int main(void) {
    long acc, mult, shift, zp, lo, hi;
    while (scanf("%ld %ld %ld %ld %ld %ld", &acc, &mult, &shift, &zp, &lo, &hi) == 6) {
        const int32_t a = (int32_t)acc, m = (int32_t)mult, s = (int32_t)shift;
        const int32_t z = (int32_t)zp, l = (int32_t)lo, h = (int32_t)hi;
        printf("%d %d %d\n", es_requant(a, m, s, ES_RQ_FP32, z, l, h), store16(a, m, s, z, l, h),
               lanes(a, m, s, z, l, h));
    }
    return 0;
}
