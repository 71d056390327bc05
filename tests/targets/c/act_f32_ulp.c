/* The fused vector sigmoid and SiLU (es_act_simd.h's act_row, in whichever ISA this file is
 * built for) against double precision: over every STEP-th float of [-87, 87], both signs,
 * the largest error in units in the last place of the exact value ("maxulp E at X"); past
 * the clamp, the largest absolute error of the saturated values, x in +-[87, 1e30] and
 * +-inf ("tail E"; SiLU's relative to |x|, and not at -inf, where x sigmoid(x) is
 * -inf x 0). argv: act (5 sigmoid, 6 silu) step */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "es_act_simd.h"

#define N 4096

static double ulp_of(double v) { /* the spacing of floats at |v| */
    int e;
    frexp(fabs(v), &e);
    return ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

static double exact(double x, int act) {
    const double s = 1.0 / (1.0 + exp(-x));
    return act == ES_ACT_SILU ? x * s : s;
}

int main(int argc, char **argv) {
    static const float tails[] = {87.5f, 88.0f, 100.0f, 1e4f, 1e30f, INFINITY};
    static float x[N], y[N];
    const int act = argc > 1 ? atoi(argv[1]) : ES_ACT_SIGMOID;
    const unsigned step = argc > 2 ? (unsigned)atoi(argv[2]) : 16u;
    const float top = 87.0f;
    double worst = 0.0, at = 0.0, tail = 0.0;
    unsigned u, lim, sign;
    int n = 0, i;
    memcpy(&lim, &top, 4);
    for (sign = 0; sign < 2; ++sign)
        for (u = 0; u <= lim; u += step) {
            const unsigned bits = u | sign << 31;
            memcpy(&x[n], &bits, 4);
            if (++n < N && u + step <= lim) continue;
            act_row(y, x, n, act, 0.0f, 0.0f);
            for (i = 0; i < n; ++i) {
                const double e = fabs((double)y[i] - exact(x[i], act)) / ulp_of(exact(x[i], act));
                if (!(e <= worst)) worst = e == e ? e : INFINITY, at = x[i];
            }
            n = 0;
        }
    for (i = 0; i < 12; ++i) x[i] = i < 6 ? tails[i] : -tails[i - 6];
    act_row(y, x, 12, act, 0.0f, 0.0f);
    for (i = 0; i < 12; ++i) { /* SiLU: x times a sigmoid that has saturated to 0 or 1 */
        if (act == ES_ACT_SILU && x[i] == -INFINITY) continue; /* -inf x 0: no value */
        const double want = x[i] > 0 ? (act == ES_ACT_SILU ? x[i] : 1.0) : 0.0;
        const double e = isinf(want) ? (y[i] == want ? 0.0 : INFINITY)
                                     : fabs((double)y[i] - want) /
                                           (act == ES_ACT_SILU && x[i] < 0 ? -x[i] : 1.0);
        if (!(e <= tail)) tail = e == e ? e : INFINITY;
    }
    printf("maxulp %.3f at %.9g\ntail %.3g\n", worst, at, tail);
    return 0;
}
