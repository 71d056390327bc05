/* A stand-in for the generated C target in device tests: the digits CNN (BN folded),
 * hand-written, with the edgesmith_bench command line and JSON line of the real one.
 * weights.bin = float32 tensors in the order of LAYERS below, nothing else. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { int cin, cout, k, stride, groups, relu; } Conv;
static const Conv LAYERS[] = {
    {1, 32, 3, 1, 1, 1},   /* stem */
    {32, 32, 3, 1, 1, 1},  /* block1 */
    {32, 32, 3, 1, 32, 1}, /* dw */
    {32, 32, 1, 1, 1, 0},  /* pw (then residual add + relu) */
    {32, 64, 3, 2, 1, 1},  /* down */
    {64, 64, 3, 1, 1, 1},  /* block2 */
};
#define NL 6
static float W[70000];
static const float *wp[NL], *bp[NL], *fcw, *fcb;

static void conv(const Conv *c, const float *w, const float *b, const float *in, int h,
                 float *out, int *oh) {
    int pad = c->k / 2, o = (h + 2 * pad - c->k) / c->stride + 1, cpg = c->cin / c->groups;
    for (int co = 0; co < c->cout; co++) {
        int g = co / (c->cout / c->groups);
        for (int y = 0; y < o; y++)
            for (int x = 0; x < o; x++) {
                float s = b[co];
                for (int ci = 0; ci < cpg; ci++)
                    for (int ky = 0; ky < c->k; ky++)
                        for (int kx = 0; kx < c->k; kx++) {
                            int iy = y * c->stride + ky - pad, ix = x * c->stride + kx - pad;
                            if (iy < 0 || ix < 0 || iy >= h || ix >= h) continue;
                            s += w[((co * cpg + ci) * c->k + ky) * c->k + kx] *
                                 in[((g * cpg + ci) * h + iy) * h + ix];
                        }
                out[(co * o + y) * o + x] = c->relu && s < 0 ? 0 : s;
            }
    }
    *oh = o;
}

static void forward(const float *x, float *logits) {
    static float a[32 * 64], b[32 * 64], c[32 * 64], d[64 * 16], e[64 * 16];
    int h;
    conv(&LAYERS[0], wp[0], bp[0], x, 8, a, &h);
    conv(&LAYERS[1], wp[1], bp[1], a, 8, b, &h);
    conv(&LAYERS[2], wp[2], bp[2], b, 8, c, &h);
    conv(&LAYERS[3], wp[3], bp[3], c, 8, b, &h);
    for (int i = 0; i < 32 * 64; i++) a[i] = fmaxf(a[i] + b[i], 0);
    conv(&LAYERS[4], wp[4], bp[4], a, 8, d, &h);
    conv(&LAYERS[5], wp[5], bp[5], d, 4, e, &h);
    float pooled[64];
    for (int ch = 0; ch < 64; ch++) {
        float s = 0;
        for (int i = 0; i < 16; i++) s += e[ch * 16 + i];
        pooled[ch] = s / 16;
    }
    for (int k = 0; k < 10; k++) {
        float s = fcb[k];
        for (int ch = 0; ch < 64; ch++) s += fcw[k * 64 + ch] * pooled[ch];
        logits[k] = s;
    }
}

static int cmp(const void *p, const void *q) {
    double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

static double pct(const double *v, int n, double q) {
    double pos = (n - 1) * q / 100.0;
    int lo = (int)pos, hi = lo + 1 < n ? lo + 1 : n - 1;
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

int main(int argc, char **argv) {
    const char *wf = "weights.bin", *inf = NULL, *outf = NULL;
    int runs = 100, warmup = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--weights")) wf = argv[i + 1];
        else if (!strcmp(argv[i], "--input")) inf = argv[i + 1];
        else if (!strcmp(argv[i], "--output")) outf = argv[i + 1];
        else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
    }
    FILE *f = fopen(wf, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", wf); return 2; }
    size_t nw = fread(W, sizeof(float), sizeof W / sizeof W[0], f);
    fclose(f);
    const float *p = W;
    for (int l = 0; l < NL; l++) {
        const Conv *c = &LAYERS[l];
        wp[l] = p; p += c->cout * (c->cin / c->groups) * c->k * c->k;
        bp[l] = p; p += c->cout;
    }
    fcw = p; p += 640; fcb = p; p += 10;
    if ((size_t)(p - W) != nw) { fprintf(stderr, "weights: %zu floats, want %td\n", nw, p - W); return 2; }
    float x[64], y[10];
    f = inf ? fopen(inf, "rb") : NULL;
    if (!f || fread(x, sizeof(float), 64, f) != 64) { fprintf(stderr, "bad input\n"); return 2; }
    fclose(f);
    for (int i = 0; i < warmup; i++) forward(x, y);
    double *t = malloc(sizeof(double) * (runs > 0 ? runs : 1));
    for (int i = 0; i < runs; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        forward(x, y);
        clock_gettime(CLOCK_MONOTONIC, &b);
        t[i] = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    }
    if (outf) { f = fopen(outf, "wb"); fwrite(y, sizeof(float), 10, f); fclose(f); }
    qsort(t, runs, sizeof(double), cmp);
    printf("{\"latency_ms\": {\"p50\": %.6f, \"p90\": %.6f, \"p99\": %.6f, \"min\": %.6f}, "
           "\"arena_bytes\": %zu, \"weights_bytes\": %zu, \"runs\": %d, "
           "\"energy_j_per_inference\": null}\n",
           pct(t, runs, 50), pct(t, runs, 90), pct(t, runs, 99), t[0],
           sizeof(float) * (3 * 32 * 64 + 2 * 64 * 16), nw * sizeof(float), runs);
    free(t);
    return 0;
}
