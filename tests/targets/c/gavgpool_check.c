/* es_global_avgpool_i8 against the plain per-channel sum and es_requant on random data;
 * exit 1 at the first byte that differs or when the kernel writes past y.
 * argv: C HW x_zp seed (the requantisation is drawn from the seed: fixed or fp32) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }
int main(int argc, char **argv) {
    es_gavgpool_params p;
    int8_t *x, *y;
    int c, i;
    if (argc < 5) return 2;
    memset(&p, 0, sizeof p);
    p.C = atoi(argv[1]); p.HW = atoi(argv[2]); p.x_zp = atoi(argv[3]);
    s = (uint32_t)atoi(argv[4]);
    p.y_zp = r(256) - 128;
    p.rq = r(2) ? ES_RQ_FP32 : ES_RQ_FIXED;
    /* x_scale / (y_scale * HW) around 1 / HW: a 24-bit significand (fp32's form) */
    p.mult = (int32_t)(((1u << 23) | (uint32_t)r(1 << 23)) << 7);
    p.shift = -r(8);
    { int hw = p.HW; while (hw > 1) { --p.shift; hw >>= 1; } }
    x = malloc((size_t)p.C * p.HW);
    y = malloc((size_t)p.C + 64);
    for (i = 0; i < p.C * p.HW; ++i) x[i] = (int8_t)(r(256) - 128);
    for (i = 0; i < 64; ++i) y[p.C + i] = (int8_t)(0x5a ^ i);
    es_global_avgpool_i8(x, y, &p);
    for (i = 0; i < 64; ++i)
        if (y[p.C + i] != (int8_t)(0x5a ^ i)) { printf("output overrun\n"); return 1; }
    for (c = 0; c < p.C; ++c) {
        int32_t sum = 0;
        int8_t want;
        for (i = 0; i < p.HW; ++i) sum += (int32_t)x[(size_t)c * p.HW + i] - p.x_zp;
        want = es_requant(sum, p.mult, p.shift, p.rq, p.y_zp, -128, 127);
        if (y[c] != want) { printf("channel %d: %d, want %d\n", c, y[c], want); return 1; }
    }
    printf("ok\n");
    free(x); free(y);
    return 0;
}
