/* Runs es_conv2d_i8 (reference) and the fast paths on one random conv; exit 1 if they differ.
 * argv: C H W M KH KW SH SW PT PL DH DW group x_zp seed OH OW. The seed also picks the
 * requantisation, ES_RQ_FIXED or ES_RQ_FP32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }
int main(int argc, char **argv) {
    es_conv_params p; int i, pw;
    int32_t *sc; int8_t *x, *w, *y0, *y1; int32_t *b, *mu, *sh;
    size_t nx, nw, ny;
    memset(&p, 0, sizeof p);
    if (argc < 16) return 2;
    p.C = atoi(argv[1]); p.H = atoi(argv[2]); p.W = atoi(argv[3]); p.M = atoi(argv[4]);
    p.KH = atoi(argv[5]); p.KW = atoi(argv[6]); p.SH = atoi(argv[7]); p.SW = atoi(argv[8]);
    p.PT = atoi(argv[9]); p.PL = atoi(argv[10]); p.DH = atoi(argv[11]); p.DW = atoi(argv[12]);
    p.group = atoi(argv[13]); p.x_zp = atoi(argv[14]); s = (uint32_t)atoi(argv[15]);
    p.OH = atoi(argv[16]); p.OW = atoi(argv[17]); p.y_zp = -3; p.qmin = -128; p.qmax = 127;
    pw = p.KH == 1 && p.KW == 1 && p.SH == 1 && p.SW == 1 && p.PT == 0 && p.PL == 0 && p.group == 1
         && p.OH == p.H && p.OW == p.W;
    nx = (size_t)p.C * p.H * p.W; nw = (size_t)p.M * (p.C / p.group) * p.KH * p.KW;
    ny = (size_t)p.M * p.OH * p.OW;
    x = malloc(nx); w = malloc(nw); y0 = malloc(ny); y1 = malloc(ny);
    b = malloc(4 * p.M); mu = malloc(4 * p.M); sh = malloc(4 * p.M);
    sc = malloc(16 * (size_t)p.OH * p.OW + 4 * nx + 4 * (size_t)p.OH * p.OW + 64);
    for (i = 0; i < (int)nx; ++i) x[i] = (int8_t)(r(256) - 128);
    for (i = 0; i < (int)nw; ++i) w[i] = (int8_t)(r(255) - 127);
    for (i = 0; i < p.M; ++i) { b[i] = r(20001) - 10000; mu[i] = (1 << 30) + r(1 << 30); sh[i] = -(6 + r(6)); }
    p.rq = r(2) ? ES_RQ_FP32 : ES_RQ_FIXED; /* fp32: float32 scales, a 24-bit significand */
    p.y_zp = r(256) - 128; /* and the output range whole or Relu / Relu6-like */
    if (r(2)) { p.qmin = p.y_zp; p.qmax = p.y_zp + r(128 - p.y_zp); }
    for (i = 0; i < p.M && p.rq == ES_RQ_FP32; ++i) mu[i] &= ~0x7f;
    /* a quarter of the fp32 convs get scales of 1 and more on every third channel (drawn
     * last, so the rest of the stream is unchanged): the dot kernel clamps them in floats,
     * the all-under-1 blocks in bytes */
    if (p.rq == ES_RQ_FP32 && r(4) == 0)
        for (i = 0; i < p.M; i += 3) sh[i] = 1 + r(2);
    /* a quarter of the convs get a bias of +-2^22 on every fifth channel (drawn last too):
     * requantised sums far past int16, which kernels that narrow through int16 saturate */
    if (r(4) == 0)
        for (i = 1; i < p.M; i += 5) b[i] = r(2) ? (1 << 22) : -(1 << 22);
    es_conv2d_i8(x, w, b, mu, sh, sc, y0, &p);
    es_conv2d_i8_fast(x, w, b, mu, sh, sc, y1, &p);
    if (memcmp(y0, y1, ny)) { printf("fast differs\n"); return 1; }
    if (p.group == 1) { /* im2col + blocked GEMM, weights as int16 pairs over C*KH*KW */
        const int K = p.C * p.KH * p.KW, K2 = (K + 1) / 2;
        int32_t *wg = calloc((size_t)p.M * K2, 4);
        int32_t *gs = malloc(ES_I8_GEMM_SCRATCH(K, p.M));
        for (i = 0; i < (int)nw; ++i) {
            int m = i / K, k = i % K;
            uint32_t v = (uint16_t)(int16_t)w[i];
            wg[m * K2 + k / 2] |= (int32_t)(k & 1 ? v << 16 : v);
        }
        memset(y1, 0, ny);
        es_conv2d_i8_gemm(x, wg, b, mu, sh, gs, y1, &p);
        free(wg);
        free(gs);
        if (memcmp(y0, y1, ny)) { printf("gemm differs\n"); return 1; }
    }
    if (p.group == 1) { /* the VNNI kernels: u8 x s8 dot products, one bias_u8 for both */
        const int C4 = (p.C + 3) / 4, ksz = p.KH * p.KW, M16 = (p.M + 15) / 16;
        int8_t *w8 = calloc((size_t)(p.M + 7) / 8 * 8 * ksz * C4 * 4, 1); /* [M8][T][C4][8][4] */
        int8_t *wc = calloc((size_t)M16 * ksz * C4 * 64, 1);              /* [M16][T][C4][16][4] */
        int32_t *bu = malloc(4 * (size_t)p.M);
        int32_t *ds = malloc(es_i8_dot_scratch(&p)), *cs = malloc(es_i8_cl_scratch(&p));
        for (i = 0; i < p.M; ++i) bu[i] = b[i];
        for (i = 0; i < (int)nw; ++i) { /* w[m][c][t], t = kh * KW + kw */
            const int m = i / (p.C * ksz), c = (i / ksz) % p.C, t = i % ksz;
            w8[((((size_t)(m / 8) * ksz + t) * C4 + c / 4) * 8 + m % 8) * 4 + c % 4] = w[i];
            wc[((((size_t)(m / 16) * ksz + t) * C4 + c / 4) * 16 + m % 16) * 4 + c % 4] = w[i];
            bu[m] -= (p.x_zp + 128) * (int32_t)w[i];
        }
        memset(y1, 0, ny);
        es_conv2d_i8_dot(x, w8, bu, mu, sh, ds, y1, &p);
        if (memcmp(y0, y1, ny)) { printf("dot differs\n"); return 1; }
        memset(y1, 0, ny);
        es_conv2d_i8_cl(x, wc, bu, mu, sh, cs, y1, &p);
        if (memcmp(y0, y1, ny)) { printf("cl differs\n"); return 1; }
        if (pw && p.C % 4 == 0) { /* x as the quad planes a depthwise conv hands over */
            const size_t P = (size_t)p.H * p.W;
            uint8_t *xq = malloc(nx + 64); /* the 64 readable bytes after the planes */
            int32_t *qs;
            for (i = 0; i < (int)nx; ++i)
                xq[(size_t)(i / P / 4) * 4 * P + 4 * (i % P) + (size_t)(i / P) % 4] =
                    (uint8_t)(x[i] ^ 0x80);
            memset(xq + nx, 0x5a, 64);
            p.x_quads = 1;
            qs = malloc(es_i8_dot_scratch(&p) + 1);
            memset(y1, 0, ny);
            es_conv2d_i8_dot((const int8_t *)xq, w8, bu, mu, sh, qs, y1, &p);
            printf("dotq_scratch %lu\n", (unsigned long)es_i8_dot_scratch(&p));
            p.x_quads = 0;
            free(xq);
            free(qs);
            if (memcmp(y0, y1, ny)) { printf("dot on quads differs\n"); return 1; }
        }
        if (pw && p.M % 16 == 0 && (p.H * p.W) % 4 == 0) {
            /* y as the pixel quads a depthwise conv reads: every byte where pquad_at puts
             * it, + 128 */
            const int P = p.H * p.W;
            uint8_t *yq = malloc(ny);
            int m, j, bad = 0;
            memset(yq, 0xa5, ny);
            p.y_pquads = 1;
            es_conv2d_i8_dot(x, w8, bu, mu, sh, ds, (int8_t *)yq, &p);
            p.y_pquads = 0;
            for (m = 0; m < p.M && !bad; ++m)
                for (j = 0; j < P && !bad; ++j)
                    bad = yq[((size_t)(m / 16) * P + (size_t)(j - j % 4)) * 16 + (size_t)(m % 16) * 4 +
                             (size_t)(j % 4)] != (uint8_t)(y0[(size_t)m * P + j] ^ 0x80);
            free(yq);
            if (bad) { printf("dot into pixel quads differs\n"); return 1; }
            printf("dot_pquads\n");
        }
        /* for lower/int8.py's mirrors */
        printf("dot_scratch %lu\n", (unsigned long)es_i8_dot_scratch(&p));
        printf("cl_scratch %lu\n", (unsigned long)es_i8_cl_scratch(&p));
        free(w8);
        free(wc);
        free(bu);
        free(ds);
        free(cs);
    }
    printf("ok %s\n", pw ? "pw" : "");
    return 0;
}
