/* es_dwconv2d_f32 against the reference es_conv2d_f32 with exactly ES_F32_DW_SCRATCH bytes
 * of scratch (malloc'd to size, so AddressSanitizer sees one float past it); prints the
 * macro's bytes ("scratch N") for the generator's formula to be checked against, then
 * "ok" or "differs", exit 1 past 1e-5 of the output's magnitude.
 * argv: C H W KH KW SH SW PT PL PB PR DH DW act seed */
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
    es_conv_params p;
    int i, pb, pr;
    float *x, *w, *b, *y0, *y1, *sc, err = 0.0f, mag = 0.0f;
    size_t nx, nw, ny, nsc;
    memset(&p, 0, sizeof p);
    if (argc < 16) return 2;
    p.C = p.M = p.group = atoi(argv[1]);
    p.H = atoi(argv[2]); p.W = atoi(argv[3]); p.KH = atoi(argv[4]); p.KW = atoi(argv[5]);
    p.SH = atoi(argv[6]); p.SW = atoi(argv[7]); p.PT = atoi(argv[8]); p.PL = atoi(argv[9]);
    pb = atoi(argv[10]); pr = atoi(argv[11]); p.DH = atoi(argv[12]); p.DW = atoi(argv[13]);
    p.act = atoi(argv[14]); s = (uint32_t)atoi(argv[15]);
    p.a0 = p.act == ES_ACT_LEAKY ? 0.1f : -0.5f;
    p.a1 = 0.6f;
    p.OH = (p.H + p.PT + pb - p.DH * (p.KH - 1) - 1) / p.SH + 1;
    p.OW = (p.W + p.PL + pr - p.DW * (p.KW - 1) - 1) / p.SW + 1;
    nx = (size_t)p.C * p.H * p.W; nw = (size_t)p.C * p.KH * p.KW;
    ny = (size_t)p.C * p.OH * p.OW;
    nsc = ES_F32_DW_SCRATCH(p.OH, p.OW, p.KH, p.KW, p.SH, p.SW, p.DH, p.DW);
    printf("scratch %zu\n", nsc);
    x = malloc(4 * nx); w = malloc(4 * nw); b = malloc(4 * (size_t)p.C);
    y0 = malloc(4 * ny); y1 = malloc(4 * ny); sc = malloc(nsc);
    for (i = 0; i < (int)nx; ++i) x[i] = r();
    for (i = 0; i < (int)nw; ++i) w[i] = r();
    for (i = 0; i < p.C; ++i) b[i] = r();
    es_conv2d_f32(x, w, b, y0, &p);
    es_dwconv2d_f32(x, w, b, sc, y1, &p);
    for (i = 0; i < (int)ny; ++i) {
        const float d = fabsf(y0[i] - y1[i]);
        if (d > err || d != d) err = d != d ? INFINITY : d;
        if (fabsf(y0[i]) > mag) mag = fabsf(y0[i]);
    }
    free(x); free(w); free(b); free(y0); free(y1); free(sc);
    if (err > 1e-5f * (mag > 1.0f ? mag : 1.0f)) {
        printf("differs: %g (max %g)\n", err, mag);
        return 1;
    }
    printf("ok %g\n", err);
    return 0;
}
