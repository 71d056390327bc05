/* ConvTranspose2d, float32, NCHW; weights as ONNX gives them: [C][M/group][KH][KW].
 * Scatter form: every input pixel adds w * x into the output window it maps to. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include "../edgesmith_rt.h"

void es_conv_transpose2d_f32(const float *x, const float *w, const float *b, float *y,
                             const es_conv_params *p) {
    const int cpg = p->C / p->group, mpg = p->M / p->group, plane = p->OH * p->OW;
    int m, c;
    for (m = 0; m < p->M; ++m) {
        int i;
        for (i = 0; i < plane; ++i) y[(size_t)m * plane + i] = b[m];
    }
    for (c = 0; c < p->C; ++c) {
        const int g = c / cpg;
        const float *xc = x + (size_t)c * p->H * p->W;
        int mm;
        for (mm = 0; mm < mpg; ++mm) {
            const int m2 = g * mpg + mm;
            const float *wk = w + ((size_t)c * mpg + mm) * p->KH * p->KW;
            float *ym = y + (size_t)m2 * plane;
            int ih, iw, kh, kw;
            for (ih = 0; ih < p->H; ++ih) {
                for (iw = 0; iw < p->W; ++iw) {
                    const float xv = xc[ih * p->W + iw];
                    for (kh = 0; kh < p->KH; ++kh) {
                        const int oh = ih * p->SH - p->PT + kh * p->DH;
                        if (oh < 0 || oh >= p->OH) continue;
                        for (kw = 0; kw < p->KW; ++kw) {
                            const int ow = iw * p->SW - p->PL + kw * p->DW;
                            if (ow < 0 || ow >= p->OW) continue;
                            ym[oh * p->OW + ow] += xv * wk[kh * p->KW + kw];
                        }
                    }
                }
            }
        }
    }
}
