/* es_gemm_f32 against the plain es_gemm_f32_ref on one random dense layer; exit 1 if the
 * max abs difference exceeds 1e-5 of the output's max magnitude (sums are reordered).
 * argv: M N K act seed */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static float r(void) {
    s = s * 1664525u + 1013904223u;
    return (float)((s >> 8) % 20001u) / 10000.0f - 1.0f;
}
int main(int argc, char **argv) {
    es_gemm_params p;
    int i;
    float *x, *w, *b, *y0, *y1, err = 0.0f, mag = 0.0f;
    size_t ny;
    memset(&p, 0, sizeof p);
    if (argc < 6) return 2;
    p.M = atoi(argv[1]); p.N = atoi(argv[2]); p.K = atoi(argv[3]); p.act = atoi(argv[4]);
    s = (uint32_t)atoi(argv[5]);
    p.a0 = p.act == ES_ACT_LEAKY ? 0.1f : -0.5f;
    p.a1 = 0.6f;
    ny = (size_t)p.M * p.N;
    x = malloc(4 * (size_t)p.M * p.K); w = malloc(4 * (size_t)p.N * p.K);
    b = malloc(4 * (size_t)p.N); y0 = malloc(4 * ny); y1 = malloc(4 * ny);
    for (i = 0; i < p.M * p.K; ++i) x[i] = r();
    for (i = 0; i < p.N * p.K; ++i) w[i] = r();
    for (i = 0; i < p.N; ++i) b[i] = r();
    es_gemm_f32_ref(x, w, b, y0, &p);
    es_gemm_f32(x, w, b, y1, &p);
    for (i = 0; i < (int)ny; ++i) {
        const float d = fabsf(y0[i] - y1[i]);
        if (d > err || d != d) err = d != d ? INFINITY : d;
        if (fabsf(y0[i]) > mag) mag = fabsf(y0[i]);
    }
    free(x); free(w); free(b); free(y0); free(y1);
    if (err > 1e-5f * (mag > 1.0f ? mag : 1.0f)) {
        printf("differs: %g (max %g)\n", err, mag);
        return 1;
    }
    printf("ok %g\n", err);
    return 0;
}
