/* LayerNormalization (ONNX, opset 17) over the last n elements of x[rows][n]:
 *
 *     y = (x - mean) / sqrt(var + eps) * scale + bias,   var = mean((x - mean)^2)
 *
 * Two passes over each row (mean, then the centred sum of squares) rather than one pass
 * of sum and sum of squares: the one-pass form loses digits when |mean| >> stddev, which
 * is what a transformer's residual stream looks like after a few blocks. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>

#include "../edgesmith_rt.h"

void es_layernorm_f32(const float *x, const float *scale, const float *bias, float *y,
                      const es_layernorm_params *p) {
    const int rows = p->rows, n = p->n;
    const float eps = p->eps;
    int r, i;
    for (r = 0; r < rows; ++r) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        float sum = 0.0f, sq = 0.0f, mean, inv;
        for (i = 0; i < n; ++i) sum += xr[i];
        mean = sum / (float)n;
        for (i = 0; i < n; ++i) {
            const float d = xr[i] - mean;
            sq += d * d;
        }
        inv = 1.0f / sqrtf(sq / (float)n + eps);
        for (i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * inv * scale[i] + bias[i];
    }
}
