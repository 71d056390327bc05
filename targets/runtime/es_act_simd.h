/* The fused activations (ES_ACT_*) in vector registers, for the fp32 fast kernels'
 * epilogues (conv_f32_fast.c's GEMM, dwconv_f32.c's depthwise): one copy of the
 * polynomial sigmoid and of act_row, whichever ISA the compiler targets. es_act.h's
 * es_act_f32 is the scalar form and the oracle; the vector forms are static inline so a
 * kernel file that uses only some of them compiles clean under -Wall -Werror. */
#ifndef ES_ACT_SIMD_H
#define ES_ACT_SIMD_H

#include "edgesmith_rt.h"
#include "es_act.h"
#include "es_lanes.h"

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

/* ---- fused activations -------------------------------------------------------------------
 * Every kernel here applies its ES_ACT_* in registers on the way out, so a HardSwish,
 * Sigmoid, SiLU (Mul(x, Sigmoid(x))) or HardSigmoid after a conv costs no pass over memory
 * (MobileNetV3, EfficientNet). es_act_f32 (es_act.h) is the scalar form (expf); the
 * vector forms take sigmoid(v) = 1 / (1 + e^-x), x = v clamped to [-87, 87] (past that
 * sigmoid has saturated: e^-87 ~ 1.6e-38, and 1 + e^87 still fits a float), with
 * e^-x = 2^n e^r, n = round(-x log2 e), r = -x - n ln 2 (ln 2 in two parts, so r is exact)
 * and e^r a degree-5 polynomial on |r| <= ln 2 / 2 fitted for the least largest relative
 * error (9.5e-8 with its float coefficients), then one division. AVX-512 scales by 2^n
 * with vscalefps, AVX2 and NEON build 2^n in the exponent bits. Against double precision
 * over [-87, 87]: sigmoid within 3.4 ulp, SiLU 3.9 (test_act_f32_ulp.py). On AVX-512
 * this takes 0.74-0.76x the time per value of the form it replaced (Cephes' degree-7
 * e^-|v|, a division, a select by sign): SiLU was a third of a 3 x 3 depthwise conv's
 * time on EfficientNet's planes. rcp14 and a Newton step in place of the division was
 * slower here (two more operations; the divider is not what limits this loop). */

#define ES_EXP_LO (-87.0f)
#define ES_LOG2E 1.44269504088896341f
#define ES_LN2_HI 0.693359375f
#define ES_LN2_LO (-2.12194440e-4f)
#define ES_EXPM_C1 0.9999997019767761f /* e^r ~ 1 + C1 r + ... + C5 r^5 */
#define ES_EXPM_C2 0.4999915063381195f
#define ES_EXPM_C3 0.1666763573884964f
#define ES_EXPM_C4 0.04189793020486832f
#define ES_EXPM_C5 0.008290314115583897f

#if defined(__AVX512F__)
/* sigmoid of 16 lanes; silu: times v */
static inline __m512 sigmoid512(__m512 v, int silu) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 x = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(ES_EXP_LO)),
                                   _mm512_set1_ps(-ES_EXP_LO));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(-ES_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ES_LN2_LO),
                                      _mm512_fnmsub_ps(n, _mm512_set1_ps(ES_LN2_HI), x));
    __m512 p = _mm512_set1_ps(ES_EXPM_C5);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ES_EXPM_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ES_EXPM_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ES_EXPM_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ES_EXPM_C1));
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_div_ps(one, _mm512_add_ps(_mm512_scalef_ps(p, n), one)); /* 1 / (1 + e^-x) */
    return silu ? _mm512_mul_ps(p, v) : p;
}

static inline __m512 act512v(__m512 v, int act, float a0, float a1) {
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    switch (act) {
    case ES_ACT_RELU: return _mm512_max_ps(v, zero);
    case ES_ACT_CLIP: return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(a0)), _mm512_set1_ps(a1));
    case ES_ACT_LEAKY:
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, _mm512_set1_ps(a0));
    case ES_ACT_HARDSWISH:
        return _mm512_mul_ps(v, _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(
            v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f)), zero), one));
    case ES_ACT_SIGMOID: return sigmoid512(v, 0);
    case ES_ACT_SILU: return sigmoid512(v, 1);
    case ES_ACT_HARDSIGMOID:
        return _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(v, _mm512_set1_ps(a0),
                                                           _mm512_set1_ps(a1)), zero), one);
    default: return v;
    }
}

/* d[i] = act(e[i]) for i < n (d may be e) */
static inline void act_row(float *d, const float *e, int n, int act, float a0, float a1) {
    int i;
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = (__mmask16)es_mask16(n - i);
        _mm512_mask_storeu_ps(d + i, k, act512v(_mm512_maskz_loadu_ps(k, e + i), act, a0, a1));
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
static inline __m256 sigmoid256(__m256 v, int silu) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 x = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ES_EXP_LO)),
                                   _mm256_set1_ps(-ES_EXP_LO));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(-ES_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ES_LN2_LO),
                                      _mm256_fnmsub_ps(n, _mm256_set1_ps(ES_LN2_HI), x));
    const __m256 two_n = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    __m256 p = _mm256_set1_ps(ES_EXPM_C5);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ES_EXPM_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ES_EXPM_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ES_EXPM_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ES_EXPM_C1));
    p = _mm256_fmadd_ps(p, r, one);
    p = _mm256_div_ps(one, _mm256_fmadd_ps(p, two_n, one)); /* 1 / (1 + e^-x) */
    return silu ? _mm256_mul_ps(p, v) : p;
}

static inline __m256 act256v(__m256 v, int act, float a0, float a1) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    switch (act) {
    case ES_ACT_RELU: return _mm256_max_ps(v, zero);
    case ES_ACT_CLIP: return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(a0)), _mm256_set1_ps(a1));
    case ES_ACT_LEAKY:
        return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(a0)),
                                _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    case ES_ACT_HARDSWISH:
        return _mm256_mul_ps(v, _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(
            v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f)), zero), one));
    case ES_ACT_SIGMOID: return sigmoid256(v, 0);
    case ES_ACT_SILU: return sigmoid256(v, 1);
    case ES_ACT_HARDSIGMOID:
        return _mm256_min_ps(_mm256_max_ps(_mm256_fmadd_ps(v, _mm256_set1_ps(a0),
                                                           _mm256_set1_ps(a1)), zero), one);
    default: return v;
    }
}

static inline void act_row(float *d, const float *e, int n, int act, float a0, float a1) {
    int i;
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, act256v(_mm256_loadu_ps(e + i), act, a0, a1));
    for (; i < n; ++i) d[i] = es_act_f32(e[i], act, a0, a1);
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
static inline float32x4_t sigmoid_neon(float32x4_t v, int silu) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    const float32x4_t x = vminq_f32(vmaxq_f32(v, vdupq_n_f32(ES_EXP_LO)),
                                    vdupq_n_f32(-ES_EXP_LO));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, -ES_LOG2E));
    const float32x4_t r = vfmsq_f32(vfmsq_f32(vnegq_f32(x), n, vdupq_n_f32(ES_LN2_HI)), n,
                                    vdupq_n_f32(ES_LN2_LO));
    const float32x4_t two_n = vreinterpretq_f32_s32(
        vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23));
    float32x4_t p = vdupq_n_f32(ES_EXPM_C5);
    p = vfmaq_f32(vdupq_n_f32(ES_EXPM_C4), p, r);
    p = vfmaq_f32(vdupq_n_f32(ES_EXPM_C3), p, r);
    p = vfmaq_f32(vdupq_n_f32(ES_EXPM_C2), p, r);
    p = vfmaq_f32(vdupq_n_f32(ES_EXPM_C1), p, r);
    p = vfmaq_f32(one, p, r);
    p = vdivq_f32(one, vfmaq_f32(one, p, two_n)); /* 1 / (1 + e^-x) */
    return silu ? vmulq_f32(p, v) : p;
}

static inline float32x4_t act_neonv(float32x4_t v, int act, float a0, float a1) {
    const float32x4_t zero = vdupq_n_f32(0.0f), one = vdupq_n_f32(1.0f);
    switch (act) {
    case ES_ACT_RELU: return vmaxq_f32(v, zero);
    case ES_ACT_CLIP: return vminq_f32(vmaxq_f32(v, vdupq_n_f32(a0)), vdupq_n_f32(a1));
    case ES_ACT_LEAKY: return vbslq_f32(vcltq_f32(v, zero), vmulq_n_f32(v, a0), v);
    case ES_ACT_HARDSWISH:
        return vmulq_f32(v, vminq_f32(vmaxq_f32(vfmaq_n_f32(vdupq_n_f32(0.5f), v, 1.0f / 6.0f),
                                                zero), one));
    case ES_ACT_SIGMOID: return sigmoid_neon(v, 0);
    case ES_ACT_SILU: return sigmoid_neon(v, 1);
    case ES_ACT_HARDSIGMOID:
        return vminq_f32(vmaxq_f32(vfmaq_n_f32(vdupq_n_f32(a1), v, a0), zero), one);
    default: return v;
    }
}

static inline void act_row(float *d, const float *e, int n, int act, float a0, float a1) {
    int i;
    for (i = 0; i + 4 <= n; i += 4) vst1q_f32(d + i, act_neonv(vld1q_f32(e + i), act, a0, a1));
    for (; i < n; ++i) d[i] = es_act_f32(e[i], act, a0, a1);
}
#else
static inline void act_row(float *d, const float *e, int n, int act, float a0, float a1) {
    int i;
    for (i = 0; i < n; ++i) d[i] = es_act_f32(e[i], act, a0, a1);
}
#endif

#endif
