/* es_maxpool2d_i8 against es_maxpool2d_i8_ref on random int8 planes; exit 1 at the first
 * difference. argv: C H W KH KW SH SW PT PL DH DW OH OW seed [reps: time both, print us] */
#define _POSIX_C_SOURCE 199309L
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
    es_pool_params p;
    size_t nx, ny, i;
    int8_t *x, *y0, *y1;
    if (argc < 15) return 2;
    memset(&p, 0, sizeof p);
    p.C = atoi(argv[1]); p.H = atoi(argv[2]); p.W = atoi(argv[3]); p.KH = atoi(argv[4]);
    p.KW = atoi(argv[5]); p.SH = atoi(argv[6]); p.SW = atoi(argv[7]); p.PT = atoi(argv[8]);
    p.PL = atoi(argv[9]); p.DH = atoi(argv[10]); p.DW = atoi(argv[11]); p.OH = atoi(argv[12]);
    p.OW = atoi(argv[13]); s = (uint32_t)atoi(argv[14]);
    nx = (size_t)p.C * p.H * p.W;
    ny = (size_t)p.C * p.OH * p.OW;
    x = malloc(nx); y0 = malloc(ny + 1); y1 = malloc(ny + 1);
    for (i = 0; i < nx; ++i) x[i] = (int8_t)(r(256) - 128);
    y1[ny] = 55;
    es_maxpool2d_i8_ref(x, y0, &p);
    es_maxpool2d_i8(x, y1, &p);
    for (i = 0; i < ny; ++i)
        if (y0[i] != y1[i]) { printf("differs at %zu: %d vs %d\n", i, y0[i], y1[i]); return 1; }
    if (y1[ny] != 55) { printf("wrote past the output\n"); return 1; }
    if (argc > 15) {
        const int reps = atoi(argv[15]);
        double t0 = now_us(), t1, t2;
        for (i = 0; i < (size_t)reps; ++i) es_maxpool2d_i8_ref(x, y0, &p);
        t1 = now_us();
        for (i = 0; i < (size_t)reps; ++i) es_maxpool2d_i8(x, y1, &p);
        t2 = now_us();
        printf("ref_us %.1f fast_us %.1f\n", (t1 - t0) / reps, (t2 - t1) / reps);
    }
    free(x); free(y0); free(y1);
    printf("ok\n");
    return 0;
}
