/* SIMD forms of the requantisation in edgesmith_rt.h, shared by the int8 kernels: the
 * fp32 ones (es_rqf*) are es_requant's ES_RQ_FP32 arithmetic; the fixed-point ones are
 * each bit-identical to their scalar oracle es_mul_q. The AVX2 and NEON forms
 * need shift <= 0 (no left shift) and mult >= 0; callers check those conditions and fall
 * back to the scalar path otherwise. The AVX-512 form takes any multiplier. */
#ifndef ES_SIMD_H
#define ES_SIMD_H
#include "edgesmith_rt.h"
#include "es_lanes.h"

/* a helper kept out of line where inlining it into a kernel's loop nest measured slower
 * (its vector state spills, or the hot loops lose their alignment) */
#if defined(__GNUC__)
#define ES_NOINLINE __attribute__((noinline))
#else
#define ES_NOINLINE
#endif

#if defined(__AVX512F__)
#include <immintrin.h>
/* es_mul_q on 16 lanes for any shift, bit-identical to the scalar: AVX-512 has the 64-bit
 * arithmetic shift and min/max AVX2 lacks, so the products are rounded, shifted and
 * saturated to int32 in 64 bits and the low words kept. */
static inline __m512i es_mulq16_any_avx512(__m512i x, int32_t mult, int32_t shift) {
    const __m128i total = _mm_cvtsi32_si128(31 - shift);
    const __m512i mu = _mm512_set1_epi32(mult);
    const __m512i half = _mm512_set1_epi64((int64_t)1 << (30 - shift));
    const __m512i lo = _mm512_set1_epi64(INT32_MIN), hi = _mm512_set1_epi64(INT32_MAX);
    __m512i even = _mm512_add_epi64(_mm512_mul_epi32(x, mu), half);
    __m512i odd = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), mu), half);
    even = _mm512_min_epi64(_mm512_max_epi64(_mm512_sra_epi64(even, total), lo), hi);
    odd = _mm512_min_epi64(_mm512_max_epi64(_mm512_sra_epi64(odd, total), lo), hi);
    return _mm512_mask_blend_epi32((__mmask16)0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

/* lane 2i: the high word of 64-bit lane i of even, lane 2i + 1: that of odd; one
 * two-source permute, where a shift and a blend cost 10% more per requantised vector */
static inline __m512i es_high_words(__m512i even, __m512i odd) {
    const __m512i idx =
        _mm512_set_epi32(31, 15, 29, 13, 27, 11, 25, 9, 23, 7, 21, 5, 19, 3, 17, 1);
    return _mm512_permutex2var_epi32(even, idx, odd);
}

/* es_mul_q of 16 lanes when the total shift is 32 + rest with rest >= 1 (shift <= -2) and
 * nothing saturates: the rounding half 2^(31 + rest) is 2^(rest - 1) added to the high word
 * of each product, and the low words can only add a fraction below 1 that the floor drops,
 * so the result is (high word + rnd) >> rest, rnd = 2^(rest - 1), with no 64-bit adds.
 * mult_o is mult with the odd lanes' multipliers moved to the low halves of the qwords. */
static inline __m512i es_mulq16_short(__m512i x, __m512i mult, __m512i mult_o, __m512i rnd,
                                      __m512i rest) {
    const __m512i even = _mm512_mul_epi32(x, mult);
    const __m512i odd = _mm512_mul_epi32(_mm512_srli_epi64(x, 32), mult_o);
    return _mm512_srav_epi32(_mm512_add_epi32(es_high_words(even, odd), rnd), rest);
}

/* es_mul_q on 16 lanes, bit-identical to the scalar. The common case, a multiplier below
 * 1/2 (shift < 0, mult >= 0), cannot saturate (|x * mult| < 2^62), and its total shift of
 * 32 or more is the high words of the rounded products (a floor, for either sign) shifted
 * right by the rest in 32-bit lanes: 7 instructions instead of 13 (es_mulq16_short's 5 were
 * measured 1-2% slower here, with its constants built per call). A multiplier of exactly
 * 1/2 (2^30, shift 0: the larger input's rescale in every int8 Add) is floor((x + 1) / 2),
 * computed as (x >> 1) + (x & 1) so that x = INT32_MAX cannot wrap: 3 instructions. */
static inline __m512i es_mulq16_avx512(__m512i x, int32_t mult, int32_t shift) {
    __m512i mu, half, even, odd;
    if (shift == 0 && mult == (1 << 30))
        return _mm512_add_epi32(_mm512_srai_epi32(x, 1),
                                _mm512_and_si512(x, _mm512_set1_epi32(1)));
    if (shift >= 0 || mult < 0) return es_mulq16_any_avx512(x, mult, shift);
    mu = _mm512_set1_epi32(mult);
    half = _mm512_set1_epi64((int64_t)1 << (30 - shift));
    even = _mm512_add_epi64(_mm512_mul_epi32(x, mu), half);
    odd = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), mu), half);
    return _mm512_sra_epi32(es_high_words(even, odd), _mm_cvtsi32_si128(-1 - shift));
}

/* es_mul_q on 16 lanes, each with its own multiplier and shift (a per-channel requantisation
 * of 16 channels), bit-identical to the scalar for any shift in [-31, 30] and any mult:
 * as es_mulq16_avx512, with per-lane rounding constants and per-lane 64-bit shifts. The even
 * lanes' multipliers and shifts sit in the low halves of the 64-bit lanes, the odd lanes'
 * are moved there; everything but x is loop-invariant for a block of channels. */
static inline __m512i es_mulq16v_avx512(__m512i x, __m512i mult, __m512i shift) {
    const __m512i low = _mm512_set1_epi64(0xffffffffLL), one = _mm512_set1_epi64(1);
    const __m512i total = _mm512_sub_epi32(_mm512_set1_epi32(31), shift);
    const __m512i te = _mm512_and_si512(total, low), to = _mm512_srli_epi64(total, 32);
    const __m512i lo = _mm512_set1_epi64(INT32_MIN), hi = _mm512_set1_epi64(INT32_MAX);
    __m512i even = _mm512_mul_epi32(x, mult);
    __m512i odd = _mm512_mul_epi32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(mult, 32));
    even = _mm512_add_epi64(even, _mm512_sllv_epi64(one, _mm512_sub_epi64(te, one)));
    odd = _mm512_add_epi64(odd, _mm512_sllv_epi64(one, _mm512_sub_epi64(to, one)));
    even = _mm512_min_epi64(_mm512_max_epi64(_mm512_srav_epi64(even, te), lo), hi);
    odd = _mm512_min_epi64(_mm512_max_epi64(_mm512_srav_epi64(odd, to), lo), hi);
    return _mm512_mask_blend_epi32((__mmask16)0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

/* Per-lane requantisation of a block of 16 channels with its constants computed once
 * (es_rq16_setup), for kernels that requantise many vectors of the same channels. wide:
 * some lane has shift > 0 or a negative multiplier, so the rescaled value may leave int32
 * and must saturate as es_mul_q does (es_mulq16v_avx512). Otherwise it fits, and when every
 * shift is < 0 (high) the total shift of 32 or more is the high words of the rounded
 * products (a floor for either sign) shifted right by the rest in 32-bit lanes: 7
 * instructions instead of 16; when every shift is <= -2 (short) es_mulq16_short needs 5,
 * with rest1 (the rest, at least 1) and rnd = 2^(rest1 - 1). The even lanes' constants are
 * in the low halves of the 64-bit lanes (_e), the odd lanes' moved there (_o). */
typedef struct {
    __m512i mult, shift, mult_o, half_e, half_o, tot_e, tot_o, rest, rest1, rnd;
    __m512 scale, lo, hi; /* ES_RQ_FP32 (fp32): es_rqf16_avx512's constants */
    int wide, high, short_, fp32;
} es_rq16;

/* ES_RQ_FP32 on 16 lanes: acc * scale clamped to [lo, hi] (qmin - y_zp, qmax - y_zp),
 * rounded half to even by vcvtps2dq in the default rounding mode; es_requant's arithmetic */
static inline __m512i es_rqf16_avx512(__m512i acc, __m512 scale, __m512 lo, __m512 hi) {
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale);
    return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
}

/* es_rqf16_avx512 with the upper clamp only, for callers that narrow with saturating packs
 * and clamp to qmin in bytes: cvtps2dq turns a too negative value into INT32_MIN, which
 * saturates to the lowest byte as any value below qmin - y_zp would */
static inline __m512i es_rqf16_hi_avx512(__m512i acc, __m512 scale, __m512 hi) {
    return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale), hi));
}

/* whether every lane of m holds a scale under 1 (es_rq_scale's positive floats: compared as
 * integers, below 1.0f's bits). Then |acc * scale| < 2^31 for any int32 acc, so vcvtps2dq
 * cannot overflow and a requantising kernel may leave the upper clamp to its byte clamps. */
static inline int es_rq_scales_below1(__m512 scale, __mmask16 m) {
    return _mm512_mask_cmplt_epu32_mask(m, _mm512_castps_si512(scale),
                                        _mm512_set1_epi32(0x3f800000)) == m;
}

/* es_rq_scale of 16 lanes */
static inline __m512 es_rq_scale16(__m512i mult, __m512i shift) {
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(shift, _mm512_set1_epi32(126)), 23);
    const __m512i f = _mm512_and_si512(_mm512_srli_epi32(mult, 7), _mm512_set1_epi32(0x7fffff));
    return _mm512_castsi512_ps(_mm512_or_si512(e, f));
}

/* constants for channels [0, n) of mult / shift (n <= 16; lanes past n: mult 0, shift -1),
 * requantised as rq says into [qmin, qmax] around y_zp */
static inline es_rq16 es_rq16_setup(const int32_t *mult, const int32_t *shift, int n,
                                    int32_t rq, int32_t y_zp, int32_t qmin, int32_t qmax) {
    const __mmask16 cm = (__mmask16)es_mask16(n);
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi64(1);
    __m512i total;
    es_rq16 q;
    q.mult = _mm512_maskz_loadu_epi32(cm, mult);
    q.shift = _mm512_mask_loadu_epi32(_mm512_set1_epi32(-1), cm, shift);
    q.fp32 = rq == ES_RQ_FP32;
    q.scale = es_rq_scale16(q.mult, q.shift);
    q.lo = _mm512_set1_ps((float)(qmin - y_zp));
    q.hi = _mm512_set1_ps((float)(qmax - y_zp));
    total = _mm512_sub_epi32(_mm512_set1_epi32(31), q.shift);
    q.mult_o = _mm512_srli_epi64(q.mult, 32);
    q.tot_e = _mm512_and_si512(total, _mm512_set1_epi64(0xffffffffLL));
    q.tot_o = _mm512_srli_epi64(total, 32);
    q.half_e = _mm512_sllv_epi64(one, _mm512_sub_epi64(q.tot_e, one));
    q.half_o = _mm512_sllv_epi64(one, _mm512_sub_epi64(q.tot_o, one));
    q.rest = _mm512_sub_epi32(total, _mm512_set1_epi32(32));
    q.wide = _mm512_cmpgt_epi32_mask(q.shift, zero) != 0 ||
             _mm512_cmplt_epi32_mask(q.mult, zero) != 0;
    q.high = _mm512_cmpge_epi32_mask(q.shift, zero) == 0;
    /* lanes past n (multiplier 0: 0 whatever the shift) take a rest of 1 */
    q.rest1 = _mm512_max_epi32(q.rest, _mm512_set1_epi32(1));
    q.rnd = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_sub_epi32(q.rest1, _mm512_set1_epi32(1)));
    q.short_ = !q.fp32 && q.high && !q.wide &&
               _mm512_mask_cmplt_epi32_mask(cm, q.rest, _mm512_set1_epi32(1)) == 0;
    return q;
}

/* es_mul_q of 16 lanes, lane j with channel j's multiplier and shift */
static inline __m512i es_rq16_apply(__m512i acc, const es_rq16 *q) {
    __m512i even, odd;
    if (q->fp32) return es_rqf16_avx512(acc, q->scale, q->lo, q->hi);
    if (q->wide) return es_mulq16v_avx512(acc, q->mult, q->shift);
    if (q->short_) return es_mulq16_short(acc, q->mult, q->mult_o, q->rnd, q->rest1);
    even = _mm512_add_epi64(_mm512_mul_epi32(acc, q->mult), q->half_e);
    odd = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(acc, 32), q->mult_o), q->half_o);
    if (q->high) return _mm512_srav_epi32(es_high_words(even, odd), q->rest);
    return _mm512_mask_blend_epi32((__mmask16)0xAAAA, _mm512_srav_epi64(even, q->tot_e),
                                   _mm512_slli_epi64(_mm512_srav_epi64(odd, q->tot_o), 32));
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
/* y[j] = es_requant(acc[j], mult, shift, rq, y_zp, qmin, qmax), j < n <= 16: the store of
 * 16 int32 accumulators as int8, shared by the int8 conv kernels */
static inline void es_requant16_avx512(__m512i acc, int8_t *y, int n, int32_t mult,
                                       int32_t shift, int32_t rq, int32_t y_zp, int32_t qmin,
                                       int32_t qmax) {
    __m128i b;
    if (rq == ES_RQ_FP32) { /* already inside [qmin, qmax] once y_zp is back */
        const __m512i v = es_rqf16_avx512(acc, _mm512_set1_ps(es_rq_scale(mult, shift)),
                                          _mm512_set1_ps((float)(qmin - y_zp)),
                                          _mm512_set1_ps((float)(qmax - y_zp)));
        b = _mm512_cvtepi32_epi8(_mm512_add_epi32(v, _mm512_set1_epi32(y_zp)));
    } else {
        /* a saturating narrow to int8 first: [qmin, qmax] lies inside [-128, 127], so
         * clamping the bytes afterwards is the same as clamping the int32s, in a quarter of
         * the width */
        const __m512i v = _mm512_add_epi32(es_mulq16_avx512(acc, mult, shift),
                                           _mm512_set1_epi32(y_zp));
        b = _mm512_cvtsepi32_epi8(v);
        b = _mm_min_epi8(_mm_max_epi8(b, _mm_set1_epi8((char)qmin)),
                         _mm_set1_epi8((char)qmax));
    }
    if (n == 16)
        _mm_storeu_si128((__m128i *)y, b);
    else
        _mm_mask_storeu_epi8(y, (__mmask16)((1u << n) - 1u), b);
}
#endif
#endif

#if defined(__AVX2__)
#include <immintrin.h>
/* ES_RQ_FP32 on 8 lanes, as es_rqf16_avx512 */
static inline __m256i es_rqf8_avx2(__m256i acc, __m256 scale, __m256 lo, __m256 hi) {
    const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale);
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
}

/* es_mul_q on 8 lanes for shift <= 0, bit-identical to the scalar: 64-bit products of the
 * even and odd lanes plus the rounding half, then the whole shift (31 - shift >= 31). For a
 * shift of 32 or more the high word of each product already holds the result shifted by
 * 32, so one 32-bit arithmetic shift finishes it; a shift of exactly 31 takes the low word
 * of a logical 64-bit shift, which equals the arithmetic one because |x * real| < 2^31. */
static inline __m256i es_mulq8_avx2(__m256i x, __m256i mu, int shift) {
    const int total = 31 - shift;
    const __m256i half = _mm256_set1_epi64x((int64_t)1 << (total - 1));
    __m256i even = _mm256_add_epi64(_mm256_mul_epi32(x, mu), half);
    __m256i odd = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(x, 32), mu), half);
    if (total >= 32) {
        __m256i hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
        return _mm256_sra_epi32(hi, _mm_cvtsi32_si128(total - 32));
    }
    return _mm256_blend_epi32(_mm256_srli_epi64(even, 31),
                              _mm256_slli_epi64(_mm256_srli_epi64(odd, 31), 32), 0xAA);
}

/* es_mul_q on 8 lanes, each with its own multiplier and shift, all shifts <= 0 and all
 * multipliers >= 0 (then the result fits int32 and needs no saturation): as es_mulq8_avx2,
 * with per-lane rounding constants and a per-lane 64-bit arithmetic right shift, which
 * AVX2 lacks and which is done here as a logical one on the value xor its sign. */
static inline __m256i es_mulq8v_avx2(__m256i x, __m256i mult, __m256i shift) {
    const __m256i one = _mm256_set1_epi64x(1), zero = _mm256_setzero_si256();
    const __m256i total = _mm256_sub_epi32(_mm256_set1_epi32(31), shift);
    const __m256i te = _mm256_blend_epi32(total, zero, 0xAA), to = _mm256_srli_epi64(total, 32);
    __m256i even = _mm256_mul_epi32(x, mult), se;
    __m256i odd = _mm256_mul_epi32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(mult, 32)), so;
    even = _mm256_add_epi64(even, _mm256_sllv_epi64(one, _mm256_sub_epi64(te, one)));
    odd = _mm256_add_epi64(odd, _mm256_sllv_epi64(one, _mm256_sub_epi64(to, one)));
    se = _mm256_cmpgt_epi64(zero, even);
    so = _mm256_cmpgt_epi64(zero, odd);
    even = _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(even, se), te), se);
    odd = _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(odd, so), to), so);
    return _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

#elif defined(__ARM_NEON)
#include <arm_neon.h>
/* es_mul_q on 4 lanes for shift <= 0: 64-bit products, then one rounding shift right by
 * 31 - shift (vrshlq rounds half up, exactly the scalar's single rounding). */
static inline int32x4_t es_mulq4_neon(int32x4_t x, int32_t mult, int shift) {
    const int32x2_t mu = vdup_n_s32(mult);
    const int64x2_t right = vdupq_n_s64(-(int64_t)(31 - shift));
    int64x2_t lo = vrshlq_s64(vmull_s32(vget_low_s32(x), mu), right);
    int64x2_t hi = vrshlq_s64(vmull_s32(vget_high_s32(x), mu), right);
    return vcombine_s32(vmovn_s64(lo), vmovn_s64(hi));
}
#endif
#endif /* ES_SIMD_H */
