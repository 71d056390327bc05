/* Runs es_conv2d_i8 (reference) and es_dwconv2d_i8_hwc on one random depthwise conv; exit 1
 * if they differ or if the kernel writes past ES_I8_DW_HWC_SCRATCH bytes of scratch or past
 * the output. Per-channel multipliers and shifts are drawn wide (shift > 0 and tiny or
 * negative multipliers included), and the output clamp is sometimes a Relu6-like range;
 * with 4k channels the output is sometimes the dot kernel's quad planes (y_quads), and
 * with 16k channels, rows of whole quads, DW = 1 and an odd seed the input is pixel quads
 * (x_pquads; "pq" after the scratch size says so).
 * argv: C H W M KH KW SH SW PT PL DH DW group x_zp seed OH OW (M == group == C) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }
#define CANARY 64
int main(int argc, char **argv) {
    es_conv_params p;
    int i, run, Cp, Wp, wide;
    int8_t *x, *xin, *w, *wp, *y0, *y1;
    int32_t *b, *mu, *sh, *acc;
    unsigned char *sc;
    size_t nx, nw, ny, ns;
    memset(&p, 0, sizeof p);
    if (argc < 18) return 2;
    p.C = atoi(argv[1]); p.H = atoi(argv[2]); p.W = atoi(argv[3]); p.M = atoi(argv[4]);
    p.KH = atoi(argv[5]); p.KW = atoi(argv[6]); p.SH = atoi(argv[7]); p.SW = atoi(argv[8]);
    p.PT = atoi(argv[9]); p.PL = atoi(argv[10]); p.DH = atoi(argv[11]); p.DW = atoi(argv[12]);
    p.group = atoi(argv[13]); p.x_zp = atoi(argv[14]); s = (uint32_t)atoi(argv[15]);
    p.OH = atoi(argv[16]); p.OW = atoi(argv[17]);
    if (p.group != p.C || p.M != p.C) return 2;
    p.y_zp = r(4) ? r(256) - 128 : 0;
    if (r(2)) { p.qmin = -128; p.qmax = 127; }
    else { p.qmin = p.y_zp; p.qmax = p.y_zp + r(128 - p.y_zp); } /* Relu / Relu6-like */
    Cp = (p.C + 15) / 16 * 16;
    Wp = (p.OW - 1) * p.SW + (p.KW - 1) * p.DW + 1;
    nx = (size_t)p.C * p.H * p.W; nw = (size_t)p.C * p.KH * p.KW;
    ny = (size_t)p.C * p.OH * p.OW;
    ns = ES_I8_DW_HWC_SCRATCH(p.KH, p.KW, p.DH, p.DW, p.W, p.OW, Wp);
    x = malloc(nx); w = malloc(nw); wp = calloc((size_t)p.KH * p.KW * Cp, 1);
    y0 = malloc(ny); y1 = malloc(ny + CANARY);
    b = malloc(4 * (size_t)p.C); mu = malloc(4 * (size_t)p.C); sh = malloc(4 * (size_t)p.C);
    acc = malloc(4 * (size_t)p.OH * p.OW + 4);
    sc = malloc(ns + CANARY);
    for (i = 0; i < (int)nx; ++i) x[i] = (int8_t)(r(256) - 128);
    for (i = 0; i < (int)nw; ++i) w[i] = (int8_t)(r(256) - 128);
    wide = r(3) == 0; /* else every shift <= 0 and multiplier >= 0: the kernels' fast path */
    for (i = 0; i < p.C; ++i) {
        const int kind = r(8);
        b[i] = r(200001) - 100000;
        mu[i] = (1 << 30) + r(1 << 30);
        sh[i] = -(6 + r(6));
        if (kind == 1) sh[i] = -r(32);                /* down to -31 */
        if (kind == 2) mu[i] = r(1 << 16);            /* tiny (and 0) */
        if (wide && kind == 0) sh[i] = r(4);          /* real multiplier >= 0.5 */
        /* the whole range es_mul_q allows; a product that saturates int32 only with y_zp 0,
         * or es_mul_q(..) + y_zp would overflow int (in the reference too) */
        if (wide && kind == 3) sh[i] = p.y_zp ? r(41) - 31 : r(62) - 31;
        if (wide && kind == 4) mu[i] = -(1 << 30) - r(1 << 30); /* negative */
    }
    p.rq = r(2) ? ES_RQ_FP32 : ES_RQ_FIXED;
    for (i = 0; i < p.C && p.rq == ES_RQ_FP32; ++i) { /* float32 scales: any exponent, some 0 */
        mu[i] = r(8) ? (int32_t)(((1u << 23) | (uint32_t)r(1 << 23)) << 7) : 0;
        if (!mu[i]) sh[i] = -126;
    }
    for (i = 0; i < (int)nw; ++i) { /* w[c][kh][kw] -> wp[kh][kw][c] */
        const int c = i / (p.KH * p.KW), t = i % (p.KH * p.KW);
        wp[(size_t)t * Cp + c] = w[i];
    }
    es_conv2d_i8(x, w, b, mu, sh, acc, y0, &p);
    if (p.C % 4 == 0 && r(2)) { /* the dot kernel's quad planes instead of CHW */
        const int plane = p.OH * p.OW;
        int8_t *t = malloc(ny);
        p.y_quads = 1;
        for (i = 0; i < (int)ny; ++i) { /* y0[c][j] -> byte 4*j + c % 4 of plane c / 4 */
            const int c = i / plane, j = i % plane;
            t[(size_t)(c / 4) * 4 * plane + 4 * j + c % 4] = (int8_t)(y0[i] ^ 0x80);
        }
        memcpy(y0, t, ny);
        free(t);
    }
    xin = x;
    if (p.C % 16 == 0 && p.W % 4 == 0 && p.DW == 1 && atoi(argv[15]) % 2) {
        const int P = p.H * p.W; /* x[c][j] -> byte (j % 4) of channel c's dword, + 128 */
        xin = malloc(nx);
        for (i = 0; i < (int)nx; ++i) {
            const int c = i / P, j = i % P;
            xin[((size_t)(c / 16) * P + (size_t)(j - j % 4)) * 16 + (size_t)(c % 16) * 4 +
                (size_t)(j % 4)] = (int8_t)(x[i] ^ 0x80);
        }
        p.x_pquads = 1;
    }
    for (run = 0; run < 2; ++run) { /* twice: the second run starts from dirty scratch */
        for (i = 0; i < (int)(ns + CANARY); ++i) sc[i] = (unsigned char)(run ? sc[i] : r(256));
        for (i = 0; i < CANARY; ++i) sc[ns + i] = (unsigned char)(0xa5 ^ i);
        for (i = 0; i < (int)ny; ++i) y1[i] = (int8_t)r(256);
        for (i = 0; i < CANARY; ++i) y1[ny + i] = (int8_t)(0x5a ^ i);
        es_dwconv2d_i8_hwc(xin, wp, b, mu, sh, (int32_t *)(void *)sc, y1, &p);
        for (i = 0; i < CANARY; ++i)
            if (sc[ns + i] != (unsigned char)(0xa5 ^ i)) {
                printf("scratch overrun at %lu + %d\n", (unsigned long)ns, i);
                return 1;
            }
        for (i = 0; i < CANARY; ++i)
            if (y1[ny + i] != (int8_t)(0x5a ^ i)) { printf("output overrun\n"); return 1; }
        for (i = 0; i < (int)ny; ++i)
            if (y0[i] != y1[i]) {
                const int plane = p.OH * p.OW;
                printf("differs (run %d) at c=%d oh=%d ow=%d: ref %d hwc %d\n", run, i / plane,
                       i % plane / p.OW, i % p.OW, y0[i], y1[i]);
                return 1;
            }
    }
    printf("ok scratch %lu%s\n", (unsigned long)ns, p.x_pquads ? " pq" : "");
    if (xin != x) free(xin);
    free(x); free(w); free(wp); free(y0); free(y1); free(b); free(mu); free(sh); free(acc);
    free(sc);
    return 0;
}
