/* Dense layers, float32. es_gemm_f32: y[M][N] = x[M][K] . w[N][K]^T + b, weights packed
 * row-per-output so both operands stream contiguously. es_matmul_f32: run-time operands. */
#include "../edgesmith_rt.h"

void es_gemm_f32(const float *x, const float *w, const float *b, float *y,
                 const es_gemm_params *p) {
    const int M = p->M, N = p->N, K = p->K, act = p->act;
    const float a0 = p->a0, a1 = p->a1;
    int i, j, k;
    for (i = 0; i < M; ++i) {
        const float *xr = x + (size_t)i * K;
        for (j = 0; j < N; ++j) {
            const float *wr = w + (size_t)j * K;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, v;
            for (k = 0; k + 3 < K; k += 4) {
                s0 += xr[k] * wr[k];
                s1 += xr[k + 1] * wr[k + 1];
                s2 += xr[k + 2] * wr[k + 2];
                s3 += xr[k + 3] * wr[k + 3];
            }
            for (; k < K; ++k) s0 += xr[k] * wr[k];
            v = b[j] + ((s0 + s1) + (s2 + s3));
            if (act == ES_ACT_RELU) v = v > 0.0f ? v : 0.0f;
            else if (act == ES_ACT_CLIP) v = v < a0 ? a0 : (v > a1 ? a1 : v);
            else if (act == ES_ACT_LEAKY) v = v >= 0.0f ? v : v * a0;
            y[(size_t)i * N + j] = v;
        }
    }
}

void es_matmul_f32(const float *a, const float *b, float *y, const es_matmul_params *p) {
    const int batch = p->batch, M = p->M, K = p->K, N = p->N;
    const int a_stride = p->a_stride, b_stride = p->b_stride;
    int t, i, j, k;
    for (t = 0; t < batch; ++t) {
        const float *at = a + (size_t)t * a_stride, *bt = b + (size_t)t * b_stride;
        float *yt = y + (size_t)t * M * N;
        for (i = 0; i < M; ++i) {
            float *yr = yt + (size_t)i * N;
            for (j = 0; j < N; ++j) yr[j] = 0.0f;
            for (k = 0; k < K; ++k) {
                const float av = at[(size_t)i * K + k];
                const float *br = bt + (size_t)k * N;
                for (j = 0; j < N; ++j) yr[j] += av * br[j];
            }
        }
    }
}
