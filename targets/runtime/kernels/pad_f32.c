/* Pad (constant / reflect / edge), any rank up to ES_MAX_DIMS. Walks the output once. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include "../edgesmith_rt.h"

void es_pad_f32(const float *x, float *y, const es_pad_params *p) {
    int idx[ES_MAX_DIMS] = {0};
    long total = 1, o;
    int d;
    for (d = 0; d < p->ndim; ++d) total *= p->out[d];
    for (o = 0; o < total; ++o) {
        long src = 0;
        int inside = 1;
        for (d = 0; d < p->ndim; ++d) {
            int i = idx[d] - p->before[d];
            const int n = p->in[d];
            if (i < 0 || i >= n) {
                if (p->mode == 0) {
                    inside = 0;
                    break;
                } else if (p->mode == 1) { /* reflect */
                    if (n == 1) i = 0;
                    else {
                        const int period = 2 * (n - 1);
                        i = i % period;
                        if (i < 0) i += period;
                        if (i >= n) i = period - i;
                    }
                } else { /* edge */
                    i = i < 0 ? 0 : n - 1;
                }
            }
            src = src * n + i;
        }
        y[o] = inside ? x[src] : p->value;
        for (d = p->ndim - 1; d >= 0; --d) {
            if (++idx[d] < p->out[d]) break;
            idx[d] = 0;
        }
    }
}
