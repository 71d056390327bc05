/* Fully connected, int8 (TFLite scheme): y = requant(sum (x - x_zp) * w + bias). */
#include "../edgesmith_rt.h"

void es_fc_i8(const int8_t *x, const int8_t *w, const int32_t *bias, const int32_t *mult,
              const int32_t *shift, int8_t *y, const es_fc_params *p) {
    const int M = p->M, N = p->N, K = p->K, x_zp = p->x_zp;
    const int32_t y_zp = p->y_zp, qmin = p->qmin, qmax = p->qmax, rq = p->rq;
    int i, j, k;
    for (i = 0; i < M; ++i) {
        const int8_t *xr = x + (size_t)i * K;
        for (j = 0; j < N; ++j) {
            const int8_t *wr = w + (size_t)j * K;
            int32_t acc = bias[j];
            for (k = 0; k < K; ++k) acc += ((int32_t)xr[k] - x_zp) * (int32_t)wr[k];
            y[(size_t)i * N + j] = es_requant(acc, mult[j], shift[j], rq, y_zp, qmin, qmax);
        }
    }
}
