/* Quantize / dequantize / requantize between float32 and int8 (ONNX QuantizeLinear
 * rounding: half to even, then saturate). */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>

#include "../edgesmith_rt.h"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

void es_quantize_f32_i8(const float *x, int8_t *y, int n, float scale, int zp) {
    int i = 0;
#if defined(__AVX512F__)
    /* the same arithmetic 16 lanes at a time: a true division (a reciprocal multiply can
     * differ by an ulp and move a value across a rounding boundary), round half to even,
     * + zp, clamp, then a truncating narrow of values already in range */
    const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps((float)zp);
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), s),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, z), lo), hi);
        _mm_storeu_si128((__m128i *)(y + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
    }
#endif
    for (; i < n; ++i) {
        float v = rintf(x[i] / scale) + (float)zp;
        y[i] = (int8_t)(v > 127.0f ? 127.0f : (v >= -128.0f ? v : -128.0f)); /* NaN: -128, as
                                                                                the vectors */
    }
}

void es_dequantize_i8_f32(const int8_t *x, float *y, int n, float scale, int zp) {
    int i;
    for (i = 0; i < n; ++i) y[i] = (float)((int32_t)x[i] - zp) * scale;
}

void es_requant_i8(const int8_t *x, int8_t *y, const es_requant_params *p) {
    const int n = p->n, x_zp = p->x_zp, y_zp = p->y_zp;
    const int32_t mult = p->mult, shift = p->shift, qmin = p->qmin, qmax = p->qmax;
    int i;
    for (i = 0; i < n; ++i)
        y[i] = es_sat8(es_mul_q((int32_t)x[i] - x_zp, mult, shift) + y_zp, qmin, qmax);
}
