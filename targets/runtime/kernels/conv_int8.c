/* Conv2d, int8 (TFLite scheme): per-channel symmetric weights, asymmetric activations,
 * int32 bias, per-channel fixed-point requantisation, saturation to [qmin, qmax] (which
 * also carries a fused ReLU/ReLU6).
 *
 * Same loop structure as conv_f32.c, accumulating (x - x_zp) * w into an int32 scratch
 * plane from the arena; padded taps are skipped, i.e. they contribute the real value 0. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include "../edgesmith_rt.h"

void es_conv2d_i8(const int8_t *x, const int8_t *w, const int32_t *bias, const int32_t *mult,
                  const int32_t *shift, int32_t *acc, int8_t *y, const es_conv_params *p) {
    const int cpg = p->C / p->group, mpg = p->M / p->group, plane = p->OH * p->OW;
    const int32_t xzp = p->x_zp;
    int m;
    for (m = 0; m < p->M; ++m) {
        const int g = m / mpg;
        int8_t *ym = y + (size_t)m * plane;
        int i, c;
        for (i = 0; i < plane; ++i) acc[i] = bias[m];
        for (c = 0; c < cpg; ++c) {
            const int8_t *xc = x + (size_t)(g * cpg + c) * p->H * p->W;
            const int8_t *wk = w + ((size_t)m * cpg + c) * p->KH * p->KW;
            int kh, kw;
            for (kh = 0; kh < p->KH; ++kh) {
                for (kw = 0; kw < p->KW; ++kw) {
                    const int32_t wv = wk[kh * p->KW + kw];
                    const int off = kw * p->DW - p->PL;
                    int lo = 0, hi = p->OW, oh;
                    if (wv == 0) continue;
                    if (off < 0) lo = (-off + p->SW - 1) / p->SW;
                    if (off + (hi - 1) * p->SW >= p->W)
                        hi = (p->W - 1 - off) >= 0 ? (p->W - 1 - off) / p->SW + 1 : 0;
                    if (hi < lo) hi = lo;
                    for (oh = 0; oh < p->OH; ++oh) {
                        const int ih = oh * p->SH - p->PT + kh * p->DH;
                        const int8_t *xr;
                        int32_t *ar;
                        int ow;
                        if (ih < 0 || ih >= p->H) continue;
                        xr = xc + (size_t)ih * p->W + off;
                        ar = acc + (size_t)oh * p->OW;
                        if (p->SW == 1) {
                            for (ow = lo; ow < hi; ++ow) ar[ow] += wv * ((int32_t)xr[ow] - xzp);
                        } else {
                            for (ow = lo; ow < hi; ++ow)
                                ar[ow] += wv * ((int32_t)xr[ow * p->SW] - xzp);
                        }
                    }
                }
            }
        }
        for (i = 0; i < plane; ++i)
            ym[i] = es_requant(acc[i], mult[m], shift[m], p->rq, p->y_zp, p->qmin, p->qmax);
    }
}
