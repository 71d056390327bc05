/* SIMD forms of the gemmlowp fixed-point helpers in edgesmith_rt.h, shared by the int8
 * kernels. Each is bit-identical to its scalar oracle (es_mul_q with shift <= 0, i.e. no
 * left shift, and mult >= 0); callers check those conditions and fall back to the scalar
 * path otherwise. Only the block for the target's ISA is compiled. */
#ifndef ES_SIMD_H
#define ES_SIMD_H
#include "edgesmith_rt.h"

#if defined(__AVX2__)
#include <immintrin.h>
/* es_mul_q on 8 lanes for shift <= 0 (no left shift), bit-identical to the scalar:
 * 64-bit products of even and odd lanes, round-half-away nudge, truncating /2^31 (the
 * low 32 bits of a logical 64-bit shift equal the arithmetic one), then the rounding
 * right shift of es_rdivpot. */
static inline __m256i es_mulq8_avx2(__m256i x, __m256i mu, int right) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i np = _mm256_set1_epi64x((int64_t)1 << 30);
    const __m256i nn = _mm256_set1_epi64x(1 - ((int64_t)1 << 30));
    const __m256i lo31 = _mm256_set1_epi64x(((int64_t)1 << 31) - 1);
    __m256i ab[2], r, mask, rem, thr;
    int h;
    ab[0] = _mm256_mul_epi32(x, mu);
    ab[1] = _mm256_mul_epi32(_mm256_srli_epi64(x, 32), mu);
    for (h = 0; h < 2; ++h) {
        __m256i v = ab[h], neg = _mm256_cmpgt_epi64(zero, v);
        v = _mm256_add_epi64(v, _mm256_blendv_epi8(np, nn, neg));
        neg = _mm256_cmpgt_epi64(zero, v);
        v = _mm256_add_epi64(v, _mm256_and_si256(neg, lo31));
        ab[h] = _mm256_srli_epi64(v, 31);
    }
    r = _mm256_blend_epi32(ab[0], _mm256_slli_epi64(ab[1], 32), 0xAA);
    if (right <= 0) return r;
    mask = _mm256_set1_epi32((int32_t)(((int64_t)1 << right) - 1));
    rem = _mm256_and_si256(r, mask);
    thr = _mm256_sub_epi32(_mm256_srli_epi32(mask, 1), _mm256_cmpgt_epi32(zero, r));
    return _mm256_sub_epi32(_mm256_sra_epi32(r, _mm_cvtsi32_si128(right)),
                            _mm256_cmpgt_epi32(rem, thr));
}

#elif defined(__ARM_NEON)
#include <arm_neon.h>
/* es_mul_q on 4 lanes for shift <= 0: 64-bit products, the same nudge and truncating
 * /2^31 as es_srdhm, then es_rdivpot's rounding right shift. */
static inline int32x4_t es_mulq4_neon(int32x4_t x, int32_t mult, int right) {
    const int64x2_t np = vdupq_n_s64((int64_t)1 << 30), nn = vdupq_n_s64(1 - ((int64_t)1 << 30));
    const int64x2_t lo31 = vdupq_n_s64(((int64_t)1 << 31) - 1);
    const int32x2_t mu = vdup_n_s32(mult);
    int64x2_t ab[2];
    int32x4_t r, mask, rem, thr;
    int h;
    ab[0] = vmull_s32(vget_low_s32(x), mu);
    ab[1] = vmull_s32(vget_high_s32(x), mu);
    for (h = 0; h < 2; ++h) {
        int64x2_t v = ab[h];
        v = vaddq_s64(v, vbslq_s64(vcltzq_s64(v), nn, np));
        v = vaddq_s64(v, vandq_s64(vreinterpretq_s64_u64(vcltzq_s64(v)), lo31));
        ab[h] = vshrq_n_s64(v, 31);
    }
    r = vcombine_s32(vmovn_s64(ab[0]), vmovn_s64(ab[1]));
    if (right <= 0) return r;
    mask = vdupq_n_s32((int32_t)(((int64_t)1 << right) - 1));
    rem = vandq_s32(r, mask);
    thr = vsubq_s32(vshrq_n_s32(mask, 1), vreinterpretq_s32_u32(vcltzq_s32(r)));
    return vsubq_s32(vshlq_s32(r, vdupq_n_s32(-right)),
                     vreinterpretq_s32_u32(vcgtq_s32(rem, thr)));
}
#endif
#endif /* ES_SIMD_H */
