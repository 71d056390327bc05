/* es_fc_i8 against es_fc_i8_ref on random int8 rows, weights, biases and per-output
 * rescales (ES_RQ_FP32 pairs as the generator writes them, or ES_RQ_FIXED Q31 ones); exit 1
 * at the first difference. argv: M N K x_zp rq seed [reps: time both, print us] */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }
static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}
int main(int argc, char **argv) {
    es_fc_params p;
    int8_t *x, *w, *y0, *y1;
    int32_t *bias, *mult, *shift;
    size_t i;
    int j;
    if (argc < 7) return 2;
    memset(&p, 0, sizeof p);
    p.M = atoi(argv[1]); p.N = atoi(argv[2]); p.K = atoi(argv[3]); p.x_zp = atoi(argv[4]);
    p.rq = atoi(argv[5]); s = (uint32_t)atoi(argv[6]);
    p.y_zp = r(256) - 128; p.qmin = -128; p.qmax = 127;
    if (r(2)) p.qmin = p.y_zp; /* a fused ReLU now and then */
    x = malloc((size_t)p.M * p.K + 1); w = malloc((size_t)p.N * p.K + 1);
    y0 = malloc((size_t)p.M * p.N + 1); y1 = malloc((size_t)p.M * p.N + 1);
    bias = malloc(4 * (size_t)p.N + 4); mult = malloc(4 * (size_t)p.N + 4);
    shift = malloc(4 * (size_t)p.N + 4);
    for (i = 0; i < (size_t)p.M * p.K; ++i) x[i] = (int8_t)(r(256) - 128);
    for (i = 0; i < (size_t)p.N * p.K; ++i) w[i] = (int8_t)(r(256) - 128);
    for (j = 0; j < p.N; ++j) {
        /* a rescale that maps the sums' spread onto about the int8 range */
        const float scale = (float)(0.5 + r(1000) / 1000.0) / (float)(40.0 * sqrt((double)p.K) * 128.0);
        int e;
        const float m = frexpf(scale, &e);
        bias[j] = r(20001) - 10000;
        if (p.rq == ES_RQ_FP32) {
            mult[j] = (int32_t)((int64_t)ldexpf(m, 24) << 7);
            shift[j] = e;
        } else {
            mult[j] = (int32_t)ldexp((double)m, 31);
            shift[j] = e;
        }
    }
    y1[(size_t)p.M * p.N] = 99;
    es_fc_i8_ref(x, w, bias, mult, shift, y0, &p);
    es_fc_i8(x, w, bias, mult, shift, y1, &p);
    for (i = 0; i < (size_t)p.M * p.N; ++i)
        if (y0[i] != y1[i]) { printf("differs at %zu: %d vs %d\n", i, y0[i], y1[i]); return 1; }
    if (y1[(size_t)p.M * p.N] != 99) { printf("wrote past the output\n"); return 1; }
    if (argc > 7) {
        const int reps = atoi(argv[7]);
        double t0 = now_us(), t1, t2;
        for (j = 0; j < reps; ++j) es_fc_i8_ref(x, w, bias, mult, shift, y0, &p);
        t1 = now_us();
        for (j = 0; j < reps; ++j) es_fc_i8(x, w, bias, mult, shift, y1, &p);
        t2 = now_us();
        printf("ref_us %.1f fast_us %.1f\n", (t1 - t0) / reps, (t2 - t1) / reps);
    }
    printf("ok\n");
    return 0;
}
