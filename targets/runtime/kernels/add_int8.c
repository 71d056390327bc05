/* Add / Sub, int8, same shapes (TFLite's reference add: inputs rescaled to a common
 * scale with 20 bits of headroom, summed, rescaled to the output). */
#include "../edgesmith_rt.h"

void es_add_i8(const int8_t *a, const int8_t *b, int8_t *y, int n, const es_qadd_params *p) {
    int i;
    for (i = 0; i < n; ++i) {
        const int32_t av = ((int32_t)a[i] - p->a_zp) * (1 << p->left_shift);
        const int32_t bv = ((int32_t)b[i] - p->b_zp) * (1 << p->left_shift);
        const int32_t sa = es_mul_q(av, p->a_mult, p->a_shift);
        const int32_t sb = es_mul_q(bv, p->b_mult, p->b_shift);
        const int32_t s = p->sub ? sa - sb : sa + sb;
        y[i] = es_sat8(es_mul_q(s, p->y_mult, p->y_shift) + p->y_zp, p->qmin, p->qmax);
    }
}
