/* Runs es_conv2d_f32 (reference) and the fp32 fast path on one random conv; exit 1 if the
 * max abs difference exceeds 1e-5 of the output's max magnitude. The fast path gets exactly
 * its scratch macro's bytes, printed ("scratch N") for the generator's formula.
 * argv: C H W M KH KW SH SW PT PL DH DW group act seed OH OW [wino]; with "wino" the fast
 * path is es_conv2d_f32_wino (3 x 3 stride 1, one group) on weights transformed here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
/* w in the order es_conv2d_f32_gemm reads: blocks of 16 output channels, k-major, zero rows
 * past M (lower/conv.py pack_f32_gemm) */
static float *pack16(const float *w, int M, int K) {
    const int nb = (M + 15) / 16;
    float *wp = calloc((size_t)nb * 16 * K, sizeof(float));
    int m, k;
    for (m = 0; m < M; ++m)
        for (k = 0; k < K; ++k)
            wp[((size_t)(m / 16) * K + k) * 16 + m % 16] = w[(size_t)m * K + k];
    return wp;
}
/* U = G g G^T for each (m, c), in double, packed as lower/conv.py pack_f32_wino:
 * u[mb][xi][c][r] = U[16 mb + r][c][xi] */
static float *pack_wino(const float *w, int M, int C) {
    static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    const int nb = (M + 15) / 16;
    float *u = calloc((size_t)nb * 16 * 16 * C, sizeof(float));
    int m, c, i, j, k, l;
    for (m = 0; m < M; ++m)
        for (c = 0; c < C; ++c)
            for (i = 0; i < 4; ++i)
                for (j = 0; j < 4; ++j) {
                    double v = 0.0;
                    for (k = 0; k < 3; ++k)
                        for (l = 0; l < 3; ++l)
                            v += G[i][k] * (double)w[((size_t)m * C + c) * 9 + k * 3 + l] * G[j][l];
                    u[(((size_t)(m / 16) * 16 + i * 4 + j) * C + c) * 16 + m % 16] = (float)v;
                }
    return u;
}
static float r(void) { s = s * 1664525u + 1013904223u; return (float)((s >> 8) % 20001u) / 10000.0f - 1.0f; }
int main(int argc, char **argv) {
    es_conv_params p; int i, wino;
    float *x, *w, *b, *y0, *y1, *sc, err = 0.0f, mag = 0.0f;
    size_t nx, nw, ny, nsc;
    memset(&p, 0, sizeof p);
    if (argc < 18) return 2;
    p.C = atoi(argv[1]); p.H = atoi(argv[2]); p.W = atoi(argv[3]); p.M = atoi(argv[4]);
    p.KH = atoi(argv[5]); p.KW = atoi(argv[6]); p.SH = atoi(argv[7]); p.SW = atoi(argv[8]);
    p.PT = atoi(argv[9]); p.PL = atoi(argv[10]); p.DH = atoi(argv[11]); p.DW = atoi(argv[12]);
    p.group = atoi(argv[13]); p.act = atoi(argv[14]); s = (uint32_t)atoi(argv[15]);
    p.OH = atoi(argv[16]); p.OW = atoi(argv[17]); p.a0 = p.act == ES_ACT_LEAKY ? 0.1f : -0.5f;
    p.a1 = 0.6f;
    nx = (size_t)p.C * p.H * p.W; nw = (size_t)p.M * (p.C / p.group) * p.KH * p.KW;
    ny = (size_t)p.M * p.OH * p.OW;
    x = malloc(4 * nx); w = malloc(4 * nw); b = malloc(4 * (size_t)p.M);
    y0 = malloc(4 * ny); y1 = malloc(4 * ny);
    /* exactly the macro's bytes, so AddressSanitizer sees one byte past them */
    wino = argc > 18 && strcmp(argv[18], "wino") == 0;
    nsc = wino ? ES_F32_WINO_SCRATCH(p.C, p.OH, p.OW) : p.group == 1 ? ES_F32_GEMM_SCRATCH(p.C, p.OH, p.OW, p.KH, p.KW, p.SH, p.SW, p.DH, p.DW,
                                             ES_F32_GEMM_DIRECT(p.C, p.H, p.W, p.OH, p.OW, p.KH, p.KW,
                                                                p.SH, p.SW, p.PT, p.PL))
                       : ES_F32_DW_SCRATCH(p.OH, p.OW, p.KH, p.KW, p.SH, p.SW, p.DH, p.DW);
    printf("scratch %zu\n", nsc);
    sc = malloc(nsc);
    if (nsc) memset(sc, 0xA5, nsc); /* "scratch_used": the bytes the fast path wrote */
    for (i = 0; i < (int)nx; ++i) x[i] = r();
    for (i = 0; i < (int)nw; ++i) w[i] = r();
    for (i = 0; i < p.M; ++i) b[i] = r();
    es_conv2d_f32(x, w, b, y0, &p);
    if (wino) {
        float *u = pack_wino(w, p.M, p.C);
        es_conv2d_f32_wino(x, u, b, sc, y1, &p);
        free(u);
    }
    else if (p.group == 1) {
        float *wp = pack16(w, p.M, p.C * p.KH * p.KW);
        es_conv2d_f32_gemm(x, wp, b, sc, y1, &p);
        free(wp);
    }
    else if (p.group == p.C && p.M == p.C) es_dwconv2d_f32(x, w, b, sc, y1, &p);
    else memcpy(y1, y0, 4 * ny);
    {
        size_t used = 0, k;
        for (k = 0; k < nsc; ++k) used += ((const unsigned char *)sc)[k] != 0xA5;
        printf("scratch_used %zu\n", used);
    }
    for (i = 0; i < (int)ny; ++i) {
        const float d = fabsf(y0[i] - y1[i]);
        if (d > err || d != d) err = d != d ? INFINITY : d;
        if (fabsf(y0[i]) > mag) mag = fabsf(y0[i]);
    }
    free(x); free(w); free(b); free(y0); free(y1); free(sc);
    if (err > 1e-5f * (mag > 1.0f ? mag : 1.0f)) { printf("differs: %g (max %g)\n", err, mag); return 1; }
    printf("ok %g\n", err);
    return 0;
}
