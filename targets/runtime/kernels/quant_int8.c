/* Quantize / dequantize / requantize between float32 and int8 (ONNX QuantizeLinear
 * rounding: half to even, then saturate). */
#include <math.h>

#include "../edgesmith_rt.h"

void es_quantize_f32_i8(const float *x, int8_t *y, int n, float scale, int zp) {
    int i;
    for (i = 0; i < n; ++i) {
        float v = rintf(x[i] / scale) + (float)zp;
        y[i] = (int8_t)(v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v));
    }
}

void es_dequantize_i8_f32(const int8_t *x, float *y, int n, float scale, int zp) {
    int i;
    for (i = 0; i < n; ++i) y[i] = (float)((int32_t)x[i] - zp) * scale;
}

void es_requant_i8(const int8_t *x, int8_t *y, int n, int x_zp, int y_zp, int32_t mult,
                   int32_t shift, int qmin, int qmax) {
    int i;
    for (i = 0; i < n; ++i)
        y[i] = es_sat8(es_mul_q((int32_t)x[i] - x_zp, mult, shift) + y_zp, qmin, qmax);
}
