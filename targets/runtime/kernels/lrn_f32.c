/* Local response normalisation across channels (AlexNet, GoogLeNet), ONNX semantics. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>

#include "../edgesmith_rt.h"

void es_lrn_f32(const float *x, float *y, const es_lrn_params *p) {
    const int C = p->C, inner = p->inner, size = p->size;
    const float alpha = p->alpha, beta = p->beta, bias = p->bias;
    const int lo = (size - 1) / 2, hi = size - 1 - lo;
    int c, i, j;
    for (c = 0; c < C; ++c) {
        const int c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= C ? C - 1 : c + hi;
        for (i = 0; i < inner; ++i) {
            float s = 0.0f;
            for (j = c0; j <= c1; ++j) s += x[(size_t)j * inner + i] * x[(size_t)j * inner + i];
            y[(size_t)c * inner + i] =
                x[(size_t)c * inner + i] / powf(bias + alpha / (float)size * s, beta);
        }
    }
}
