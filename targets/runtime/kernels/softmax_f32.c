/* Softmax / LogSoftmax over the middle axis of [outer][n][inner], max-subtracted. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>

#include "../edgesmith_rt.h"

void es_softmax_f32(const float *x, float *y, const es_softmax_params *p) {
    const int outer = p->outer, n = p->n, inner = p->inner, is_log = p->is_log;
    int o, i, k;
    for (o = 0; o < outer; ++o) {
        for (i = 0; i < inner; ++i) {
            const float *xp = x + (size_t)o * n * inner + i;
            float *yp = y + (size_t)o * n * inner + i;
            float mx = xp[0], sum = 0.0f;
            for (k = 1; k < n; ++k) mx = xp[(size_t)k * inner] > mx ? xp[(size_t)k * inner] : mx;
            for (k = 0; k < n; ++k) {
                const float e = expf(xp[(size_t)k * inner] - mx);
                if (!is_log) yp[(size_t)k * inner] = e;
                sum += e;
            }
            for (k = 0; k < n; ++k) {
                if (is_log) yp[(size_t)k * inner] = xp[(size_t)k * inner] - mx - logf(sum);
                else yp[(size_t)k * inner] /= sum;
            }
        }
    }
}
