/* Conv2d, float32, NCHW, weights OIHW (BN folded at generation time).
 *
 * Reference structure: for each output channel, start from the bias, then for each
 * input channel and kernel tap add w * (shifted input row) over the valid output range.
 * The inner loop runs along the output row, which compilers vectorise for stride 1.
 * 1-D convs arrive as H = 1. Activation is applied once per output plane. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>

#include "../edgesmith_rt.h"
#include "../es_act.h"


static void act_plane(float *y, int n, int act, float a0, float a1) {
    int i;
    if (act == ES_ACT_NONE) return;
    for (i = 0; i < n; ++i) y[i] = es_act_f32(y[i], act, a0, a1);
}

/* output columns [lo, hi) for which input column ow*SW - PL + kw*DW is inside [0, W) */
static void col_range(int OW, int W, int SW, int off, int *lo, int *hi) {
    int a = 0, b = OW;
    if (off < 0) a = (-off + SW - 1) / SW;
    if (off + (b - 1) * SW >= W) b = (W - 1 - off) >= 0 ? (W - 1 - off) / SW + 1 : 0;
    if (b < a) b = a;
    *lo = a;
    *hi = b;
}

void es_conv2d_f32(const float *x, const float *w, const float *b, float *y,
                   const es_conv_params *p) {
    const int cpg = p->C / p->group, mpg = p->M / p->group, plane = p->OH * p->OW;
    int m;
    for (m = 0; m < p->M; ++m) {
        const int g = m / mpg;
        float *ym = y + (size_t)m * plane;
        int i, c;
        for (i = 0; i < plane; ++i) ym[i] = b[m];
        for (c = 0; c < cpg; ++c) {
            const float *xc = x + (size_t)(g * cpg + c) * p->H * p->W;
            const float *wk = w + ((size_t)m * cpg + c) * p->KH * p->KW;
            int kh, kw;
            for (kh = 0; kh < p->KH; ++kh) {
                for (kw = 0; kw < p->KW; ++kw) {
                    const float wv = wk[kh * p->KW + kw];
                    const int off = kw * p->DW - p->PL;
                    int lo, hi, oh;
                    if (wv == 0.0f) continue;
                    col_range(p->OW, p->W, p->SW, off, &lo, &hi);
                    for (oh = 0; oh < p->OH; ++oh) {
                        const int ih = oh * p->SH - p->PT + kh * p->DH;
                        const float *xr;
                        float *yr;
                        int ow;
                        if (ih < 0 || ih >= p->H) continue;
                        xr = xc + (size_t)ih * p->W + off;
                        yr = ym + (size_t)oh * p->OW;
                        if (p->SW == 1) {
                            for (ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow];
                        } else {
                            for (ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * p->SW];
                        }
                    }
                }
            }
        }
        act_plane(ym, plane, p->act, p->a0, p->a1);
    }
}
