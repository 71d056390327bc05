/* Add / Sub, int8, same shapes (TFLite's reference add: inputs rescaled to a common
 * scale with 20 bits of headroom, summed, rescaled to the output).
 *
 * es_add_i8_ref is the plain per-element loop, kept as the oracle. es_add_i8 runs the
 * same arithmetic 16 elements at a time with AVX2 or NEON (sign-extend to int32, the
 * es_simd.h forms of es_mul_q, clamp, saturating narrow of values already in range), so
 * its output is bit-identical; it falls back to the reference loop for tails, for
 * portable builds, and for parameters outside what the SIMD helpers cover (a left shift
 * in a multiplier, a negative multiplier). y may be a or b (element-wise, loads first). */
#include "../edgesmith_rt.h"
#include "../es_simd.h"

static void add_i8_scalar(const int8_t *a, const int8_t *b, int8_t *y, int i0, int n,
                          const es_qadd_params *p) {
    int i;
    for (i = i0; i < n; ++i) {
        const int32_t av = ((int32_t)a[i] - p->a_zp) * (1 << p->left_shift);
        const int32_t bv = ((int32_t)b[i] - p->b_zp) * (1 << p->left_shift);
        const int32_t sa = es_mul_q(av, p->a_mult, p->a_shift);
        const int32_t sb = es_mul_q(bv, p->b_mult, p->b_shift);
        const int32_t s = p->sub ? sa - sb : sa + sb;
        y[i] = es_sat8(es_mul_q(s, p->y_mult, p->y_shift) + p->y_zp, p->qmin, p->qmax);
    }
}

void es_add_i8_ref(const int8_t *a, const int8_t *b, int8_t *y, int n,
                   const es_qadd_params *p) {
    add_i8_scalar(a, b, y, 0, n, p);
}

#if defined(__AVX2__) || defined(__ARM_NEON)
static int simd_ok(const es_qadd_params *p) {
    return p->a_shift <= 0 && p->b_shift <= 0 && p->y_shift <= 0 && p->a_mult >= 0 &&
           p->b_mult >= 0 && p->y_mult >= 0 && p->left_shift >= 0 && p->left_shift <= 23 &&
           p->qmin >= -128 && p->qmax <= 127;
}
#endif

void es_add_i8(const int8_t *a, const int8_t *b, int8_t *y, int n, const es_qadd_params *p) {
    int i = 0;
#if defined(__AVX2__)
    if (simd_ok(p)) {
        const __m256i azp = _mm256_set1_epi32(p->a_zp), bzp = _mm256_set1_epi32(p->b_zp);
        const __m256i am = _mm256_set1_epi32(p->a_mult), bm = _mm256_set1_epi32(p->b_mult);
        const __m256i ym = _mm256_set1_epi32(p->y_mult), yzp = _mm256_set1_epi32(p->y_zp);
        const __m256i lo = _mm256_set1_epi32(p->qmin), hi = _mm256_set1_epi32(p->qmax);
        const __m128i ls = _mm_cvtsi32_si128(p->left_shift);
        const int ra = p->a_shift, rb = p->b_shift, ry = p->y_shift, sub = p->sub;
        for (; i + 16 <= n; i += 16) {
            const __m128i a16 = _mm_loadu_si128((const __m128i *)(a + i));
            const __m128i b16 = _mm_loadu_si128((const __m128i *)(b + i));
            __m256i r[2], pk;
            int h;
            for (h = 0; h < 2; ++h) {
                __m256i av = _mm256_cvtepi8_epi32(h ? _mm_srli_si128(a16, 8) : a16);
                __m256i bv = _mm256_cvtepi8_epi32(h ? _mm_srli_si128(b16, 8) : b16);
                __m256i s;
                av = es_mulq8_avx2(_mm256_sll_epi32(_mm256_sub_epi32(av, azp), ls), am, ra);
                bv = es_mulq8_avx2(_mm256_sll_epi32(_mm256_sub_epi32(bv, bzp), ls), bm, rb);
                s = sub ? _mm256_sub_epi32(av, bv) : _mm256_add_epi32(av, bv);
                s = _mm256_add_epi32(es_mulq8_avx2(s, ym, ry), yzp);
                r[h] = _mm256_min_epi32(_mm256_max_epi32(s, lo), hi);
            }
            /* packs works per 128-bit lane: [r0 0-3, r1 0-3 | r0 4-7, r1 4-7] -> in order */
            pk = _mm256_permute4x64_epi64(_mm256_packs_epi32(r[0], r[1]), 0xD8);
            _mm_storeu_si128((__m128i *)(y + i),
                             _mm_packs_epi16(_mm256_castsi256_si128(pk),
                                             _mm256_extracti128_si256(pk, 1)));
        }
    }
#elif defined(__ARM_NEON)
    if (simd_ok(p)) {
        const int32x4_t azp = vdupq_n_s32(p->a_zp), bzp = vdupq_n_s32(p->b_zp);
        const int32x4_t yzp = vdupq_n_s32(p->y_zp), ls = vdupq_n_s32(p->left_shift);
        const int32x4_t lo = vdupq_n_s32(p->qmin), hi = vdupq_n_s32(p->qmax);
        const int ra = p->a_shift, rb = p->b_shift, ry = p->y_shift, sub = p->sub;
        for (; i + 16 <= n; i += 16) {
            const int8x16_t a16 = vld1q_s8(a + i), b16 = vld1q_s8(b + i);
            const int16x8_t ah[2] = {vmovl_s8(vget_low_s8(a16)), vmovl_s8(vget_high_s8(a16))};
            const int16x8_t bh[2] = {vmovl_s8(vget_low_s8(b16)), vmovl_s8(vget_high_s8(b16))};
            int16x4_t q[4];
            int h;
            for (h = 0; h < 4; ++h) {
                const int16x8_t a8 = ah[h >> 1], b8 = bh[h >> 1];
                int32x4_t av = vmovl_s16(h & 1 ? vget_high_s16(a8) : vget_low_s16(a8));
                int32x4_t bv = vmovl_s16(h & 1 ? vget_high_s16(b8) : vget_low_s16(b8));
                int32x4_t s;
                av = es_mulq4_neon(vshlq_s32(vsubq_s32(av, azp), ls), p->a_mult, ra);
                bv = es_mulq4_neon(vshlq_s32(vsubq_s32(bv, bzp), ls), p->b_mult, rb);
                s = sub ? vsubq_s32(av, bv) : vaddq_s32(av, bv);
                s = vaddq_s32(es_mulq4_neon(s, p->y_mult, ry), yzp);
                q[h] = vqmovn_s32(vminq_s32(vmaxq_s32(s, lo), hi));
            }
            vst1q_s8(y + i, vcombine_s8(vqmovn_s16(vcombine_s16(q[0], q[1])),
                                        vqmovn_s16(vcombine_s16(q[2], q[3]))));
        }
    }
#endif
    add_i8_scalar(a, b, y, i, n, p);
}
