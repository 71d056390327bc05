/* Runs es_conv2d_i8 (reference) and es_conv2d_i8_stem on one random conv with few input
 * channels; exit 1 if they differ. argv: C H W M KH KW SH SW PT PL DH DW x_zp seed OH OW.
 * The seed also picks the requantisation (ES_RQ_FIXED or ES_RQ_FP32) and the output range.
 * The stem's scratch is malloc'd to exactly es_i8_stem_scratch bytes (AddressSanitizer sees
 * one byte past it), and its size is printed for lower/kernels.py's mirror. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }
int main(int argc, char **argv) {
    es_conv_params p;
    int i, K, K4;
    int8_t *x, *w, *y0, *y1, *w8;
    int32_t *b, *bu, *mu, *sh, *sc, *ss;
    size_t nx, nw, ny;
    memset(&p, 0, sizeof p);
    if (argc < 17) return 2;
    p.C = atoi(argv[1]); p.H = atoi(argv[2]); p.W = atoi(argv[3]); p.M = atoi(argv[4]);
    p.KH = atoi(argv[5]); p.KW = atoi(argv[6]); p.SH = atoi(argv[7]); p.SW = atoi(argv[8]);
    p.PT = atoi(argv[9]); p.PL = atoi(argv[10]); p.DH = atoi(argv[11]); p.DW = atoi(argv[12]);
    p.x_zp = atoi(argv[13]); s = (uint32_t)atoi(argv[14]);
    p.OH = atoi(argv[15]); p.OW = atoi(argv[16]); p.group = 1;
    p.qmin = -128; p.qmax = 127;
    K = p.C * p.KH * p.KW; K4 = (K + 3) / 4;
    nx = (size_t)p.C * p.H * p.W; nw = (size_t)p.M * K; ny = (size_t)p.M * p.OH * p.OW;
    x = malloc(nx); w = malloc(nw); y0 = malloc(ny); y1 = malloc(ny);
    b = malloc(4 * p.M); bu = malloc(4 * p.M); mu = malloc(4 * p.M); sh = malloc(4 * p.M);
    sc = malloc(4 * (size_t)p.OH * p.OW);
    ss = malloc(es_i8_stem_scratch(&p));
    w8 = calloc((size_t)(p.M + 7) / 8 * 8 * K4 * 4, 1); /* [M8][K4][8][4] */
    for (i = 0; i < (int)nx; ++i) x[i] = (int8_t)(r(256) - 128);
    for (i = 0; i < (int)nw; ++i) w[i] = (int8_t)(r(255) - 127);
    for (i = 0; i < p.M; ++i) {
        b[i] = r(20001) - 10000; mu[i] = (1 << 30) + r(1 << 30); sh[i] = -(5 + r(6));
    }
    p.rq = r(2) ? ES_RQ_FP32 : ES_RQ_FIXED;
    p.y_zp = r(256) - 128;
    if (r(2)) { p.qmin = p.y_zp; p.qmax = p.y_zp + r(128 - p.y_zp); }
    for (i = 0; i < p.M && p.rq == ES_RQ_FP32; ++i) mu[i] &= ~0x7f;
    for (i = 0; i < p.M; ++i) bu[i] = b[i];
    for (i = 0; i < (int)nw; ++i) { /* w[m][k], k = (c * KH + kh) * KW + kw: the patch order */
        const int m = i / K, k = i % K;
        w8[(((size_t)(m / 8) * K4 + k / 4) * 8 + m % 8) * 4 + k % 4] = w[i];
        bu[m] -= (p.x_zp + 128) * (int32_t)w[i];
    }
    es_conv2d_i8(x, w, b, mu, sh, sc, y0, &p);
    memset(y1, 0x55, ny);
    es_conv2d_i8_stem(x, w8, bu, mu, sh, ss, y1, &p);
    printf("stem_scratch %lu\n", (unsigned long)es_i8_stem_scratch(&p));
    if (memcmp(y0, y1, ny)) {
        for (i = 0; i < (int)ny && y0[i] == y1[i]; ++i) {}
        printf("stem differs at %d: %d vs %d\n", i, y0[i], y1[i]);
        return 1;
    }
    if (p.M % 16 == 0 && p.OW % 4 == 0) { /* y as pixel quads (y_pquads), for a depthwise conv */
        const int P = p.OH * p.OW;
        int m, j;
        memset(y1, 0x55, ny);
        p.y_pquads = 1;
        es_conv2d_i8_stem(x, w8, bu, mu, sh, ss, y1, &p);
        p.y_pquads = 0;
        for (m = 0; m < p.M; ++m)
            for (j = 0; j < P; ++j)
                if (y1[((size_t)(m / 16) * P + (size_t)(j - j % 4)) * 16 + (size_t)(m % 16) * 4 +
                       (size_t)(j % 4)] != (int8_t)(y0[(size_t)m * P + j] ^ 0x80)) {
                    printf("stem into pixel quads differs at channel %d pixel %d\n", m, j);
                    return 1;
                }
        printf("stem_pquads\n");
    }
    printf("ok\n");
    free(x); free(w); free(y0); free(y1); free(b); free(bu); free(mu); free(sh); free(sc);
    free(ss); free(w8);
    return 0;
}
