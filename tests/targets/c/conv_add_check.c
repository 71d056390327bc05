/* Runs a one-group int8 conv followed by a residual add both ways, the reference conv
 * (es_conv2d_i8) then es_add_i8_ref as two steps, and es_conv2d_i8_dot_add with the add
 * fused into the conv's epilogue; exit 1 if they differ. argv: C H W M KH KW SH SW PT PL
 * DH DW x_zp seed OH OW. The seed picks the requantisation of both (ES_RQ_FIXED or
 * ES_RQ_FP32), the zero points and scales, and a fused Relu-like clamp on either. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }
static float scale(void) { return (float)(0.005 + 0.0001 * r(1000)); }
int main(int argc, char **argv) {
    es_conv_params p;
    es_qadd_params q;
    int i, K, C4, T;
    int8_t *x, *w, *y0, *t0, *y1, *w8, *skip;
    int32_t *b, *bu, *mu, *sh, *sc, *ds;
    size_t nx, nw, ny;
    memset(&p, 0, sizeof p);
    memset(&q, 0, sizeof q);
    if (argc < 17) return 2;
    p.C = atoi(argv[1]); p.H = atoi(argv[2]); p.W = atoi(argv[3]); p.M = atoi(argv[4]);
    p.KH = atoi(argv[5]); p.KW = atoi(argv[6]); p.SH = atoi(argv[7]); p.SW = atoi(argv[8]);
    p.PT = atoi(argv[9]); p.PL = atoi(argv[10]); p.DH = atoi(argv[11]); p.DW = atoi(argv[12]);
    p.x_zp = atoi(argv[13]); s = (uint32_t)atoi(argv[14]);
    p.OH = atoi(argv[15]); p.OW = atoi(argv[16]); p.group = 1;
    p.qmin = -128; p.qmax = 127;
    T = p.KH * p.KW; K = p.C * T; C4 = (p.C + 3) / 4;
    nx = (size_t)p.C * p.H * p.W; nw = (size_t)p.M * K; ny = (size_t)p.M * p.OH * p.OW;
    x = malloc(nx); w = malloc(nw); y0 = malloc(ny); t0 = malloc(ny); y1 = malloc(ny);
    skip = malloc(ny);
    b = malloc(4 * p.M); bu = malloc(4 * p.M); mu = malloc(4 * p.M); sh = malloc(4 * p.M);
    sc = malloc(4 * (size_t)p.OH * p.OW);
    ds = malloc(es_i8_dot_scratch(&p));
    w8 = calloc((size_t)(p.M + 7) / 8 * 8 * T * C4 * 4, 1); /* [M8][T][C4][8][4] */
    for (i = 0; i < (int)nx; ++i) x[i] = (int8_t)(r(256) - 128);
    for (i = 0; i < (int)ny; ++i) skip[i] = (int8_t)(r(256) - 128);
    for (i = 0; i < (int)nw; ++i) w[i] = (int8_t)(r(255) - 127);
    for (i = 0; i < p.M; ++i) {
        b[i] = r(20001) - 10000; mu[i] = (1 << 30) + r(1 << 30); sh[i] = -(6 + r(6));
    }
    p.rq = r(2) ? ES_RQ_FP32 : ES_RQ_FIXED;
    p.y_zp = r(256) - 128;
    if (r(2)) { p.qmin = p.y_zp; p.qmax = p.y_zp + r(128 - p.y_zp); }
    for (i = 0; i < p.M && p.rq == ES_RQ_FP32; ++i) mu[i] &= ~0x7f;
    for (i = 0; i < p.M; ++i) bu[i] = b[i];
    for (i = 0; i < (int)nw; ++i) { /* w[m][c][t] */
        const int m = i / K, c = (i / T) % p.C, t = i % T;
        w8[((((size_t)(m / 8) * T + t) * C4 + c / 4) * 8 + m % 8) * 4 + c % 4] = w[i];
        bu[m] -= (p.x_zp + 128) * (int32_t)w[i];
    }
    /* the add: a = the conv's output (its scale and zero point), b = skip; the multipliers
     * of TFLite's scheme for these scales, computed here in double as the generator does */
    q.rq = p.rq; q.a_zp = p.y_zp; q.b_zp = r(256) - 128; q.y_zp = r(256) - 128;
    q.a_scale = scale(); q.b_scale = scale(); q.y_scale = scale();
    q.left_shift = 20; q.qmin = -128; q.qmax = 127;
    if (r(2)) q.qmin = q.y_zp; /* Add -> Relu */
    {
        const double tw = 2.0 * (q.a_scale > q.b_scale ? q.a_scale : q.b_scale);
        const double ra = q.a_scale / tw, rb = q.b_scale / tw,
                     ry = tw / ((double)(1 << 20) * q.y_scale);
        int e;
        double f;
        f = frexp(ra, &e); q.a_mult = (int32_t)(f * 2147483648.0); q.a_shift = e;
        f = frexp(rb, &e); q.b_mult = (int32_t)(f * 2147483648.0); q.b_shift = e;
        f = frexp(ry, &e); q.y_mult = (int32_t)(f * 2147483648.0); q.y_shift = e;
    }
    es_conv2d_i8(x, w, b, mu, sh, sc, t0, &p);
    es_add_i8_ref(t0, skip, y0, (int)ny, &q);
    memset(y1, 0x55, ny);
    es_conv2d_i8_dot_add(x, w8, bu, mu, sh, ds, y1, skip, &q, es_add_i8, &p);
    if (memcmp(y0, y1, ny)) {
        for (i = 0; i < (int)ny && y0[i] == y1[i]; ++i) {}
        printf("fused differs at %d: %d vs %d\n", i, y0[i], y1[i]);
        return 1;
    }
    printf("ok\n");
    free(x); free(w); free(y0); free(t0); free(y1); free(skip); free(b); free(bu); free(mu);
    free(sh); free(sc); free(ds); free(w8);
    return 0;
}
