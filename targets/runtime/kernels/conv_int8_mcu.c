/* Conv2d, int8, one group, for microcontrollers (Cortex-M): the weights stay int8 in flash
 * and are widened to int16 at run time, four at a time, as CMSIS-NN does. Bit-identical to
 * es_conv2d_i8 (the reference), which the tests compare it with.
 *
 * The shape is CMSIS-NN's arm_convolve_s8 + arm_nn_mat_mult_kernel_s8_s16, written anew:
 *   1. two output pixels at a time are gathered into two int16 im2col columns of the
 *      scratch: (x - x_zp) for every tap (c, kh, kw), 0 for a padded tap (the reference
 *      skips those, i.e. they add the real value 0);
 *   2. two output channels at a time multiply both columns: each weight read serves two
 *      pixels and each column read two channels, a 2x2 block of int32 sums;
 *   3. each sum is requantised (es_requant) into the CHW output.
 *
 * Weights (lower/packing.py mcu_quads): w[M][K4], K = C*KH*KW in the reference's (c, kh,
 * kw) order, zero-padded to K4 = K rounded up to 4, and each quad stored as (w0, w2, w1,
 * w3). With the DSP extension (Cortex-M4/M7/M33: __ARM_FEATURE_DSP) SXTB16 of a word is
 * then the int16 pair (w0, w1) and SXTB16 of the word rotated by 8 is (w2, w3): two
 * instructions widen four weights, and SMLAD multiplies each pair with the column's pair
 * (x0, x1) / (x2, x3) and adds both products to a sum. Elsewhere (and on the host, where
 * the generated folder is checked) plain C computes the same sums.
 *
 * With Helium (Cortex-M55: __ARM_FEATURE_MVE, -mcpu=cortex-m55) the shape is CMSIS-NN's
 * arm_nn_mat_mult_nt_t_s8 instead: four output pixels at a time are gathered as int8
 * columns of the raw input (x_zp at a padded tap), written in the weights' quad order so
 * that both are read straight; one weight row is loaded 16 taps at a time and VMLADAVA
 * multiplies it with each of the four columns (16 products summed into an int32 per
 * instruction), VADDVA sums the weights. The zero point comes off once per sum:
 * sum w*(x - x_zp) = sum w*x - x_zp * sum w, exact in int32. The last load of a row is
 * tail-predicated (VCTP), so K4 need not be a multiple of 16.
 *
 * scratch: two int16 columns of K4 taps (or four int8 ones), ES_I8_MCU_SCRATCH(K) bytes. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "../edgesmith_rt.h"

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#include <arm_mve.h>
#define ES_MCU_MVE 1
#elif defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
#define ES_MCU_DSP 1
#endif

/* where tap k goes in the weights' quad order, in which positions 0..3 of a quad hold
 * taps 0, 2, 1, 3 (the order is its own inverse) */
#define ES_MCU_QUAD(k) (((k) & ~3) | (((k) & 1) << 1) | (((k) >> 1) & 1))

#ifndef ES_MCU_MVE
/* the im2col column of output pixel pix: K taps of (x - x_zp), then zeros up to k4 */
static void mcu_im2col(const int8_t *x, const es_conv_params *p, int pix, int k4,
                       int16_t *col) {
    const int oh = pix / p->OW, ow = pix % p->OW;
    int c, kh, kw, k = 0;
    for (c = 0; c < p->C; ++c) {
        const int8_t *xc = x + (size_t)c * p->H * p->W;
        for (kh = 0; kh < p->KH; ++kh) {
            const int ih = oh * p->SH - p->PT + kh * p->DH;
            for (kw = 0; kw < p->KW; ++kw, ++k) {
                const int iw = ow * p->SW - p->PL + kw * p->DW;
                const int inside = ih >= 0 && ih < p->H && iw >= 0 && iw < p->W;
                col[k] = (int16_t)(inside ? xc[ih * p->W + iw] - p->x_zp : 0);
            }
        }
    }
    for (; k < k4; ++k) col[k] = 0;
}

#ifdef ES_MCU_DSP
static inline int32_t mcu_word(const void *src) {
    int32_t v;
    memcpy(&v, src, 4); /* one LDR: Cortex-M3 and later read unaligned words */
    return v;
}
#endif

/* s[i][j] += row i . column j over k4 taps, rows w0, w1 (quad-ordered), columns c0, c1 */
static void mcu_dot2x2(const int8_t *w0, const int8_t *w1, const int16_t *c0,
                       const int16_t *c1, int k4, int32_t s[2][2]) {
    int k = 0;
#if defined(ES_MCU_DSP)
    for (; k < k4; k += 4) {
        const uint32_t a0 = (uint32_t)mcu_word(w0 + k), a1 = (uint32_t)mcu_word(w1 + k);
        const int16x2_t a0lo = __sxtb16((int8x4_t)a0);                      /* w0, w1 */
        const int16x2_t a0hi = __sxtb16((int8x4_t)((a0 >> 8) | (a0 << 24))); /* w2, w3 */
        const int16x2_t a1lo = __sxtb16((int8x4_t)a1);
        const int16x2_t a1hi = __sxtb16((int8x4_t)((a1 >> 8) | (a1 << 24)));
        const int16x2_t b0lo = mcu_word(c0 + k), b0hi = mcu_word(c0 + k + 2);
        const int16x2_t b1lo = mcu_word(c1 + k), b1hi = mcu_word(c1 + k + 2);
        s[0][0] = __smlad(a0hi, b0hi, __smlad(a0lo, b0lo, s[0][0]));
        s[0][1] = __smlad(a0hi, b1hi, __smlad(a0lo, b1lo, s[0][1]));
        s[1][0] = __smlad(a1hi, b0hi, __smlad(a1lo, b0lo, s[1][0]));
        s[1][1] = __smlad(a1hi, b1hi, __smlad(a1lo, b1lo, s[1][1]));
    }
#endif
    /* plain C: quad position k of the weights meets tap ES_MCU_QUAD(k) of the column */
    for (; k < k4; ++k) {
        const int t = ES_MCU_QUAD(k);
        s[0][0] += (int32_t)w0[k] * c0[t];
        s[0][1] += (int32_t)w0[k] * c1[t];
        s[1][0] += (int32_t)w1[k] * c0[t];
        s[1][1] += (int32_t)w1[k] * c1[t];
    }
}
#endif

#ifdef ES_MCU_MVE
/* the int8 column of output pixel pix in quad order: x at each tap, x_zp at a padded one
 * (x_zp - x_zp = 0, the real value 0 the reference adds there), 0 from K up to k4 */
static void mcu_im2col_s8(const int8_t *x, const es_conv_params *p, int pix, int k4,
                          int8_t *col) {
    const int oh = pix / p->OW, ow = pix % p->OW;
    int c, kh, kw, k = 0;
    for (c = 0; c < p->C; ++c) {
        const int8_t *xc = x + (size_t)c * p->H * p->W;
        for (kh = 0; kh < p->KH; ++kh) {
            const int ih = oh * p->SH - p->PT + kh * p->DH;
            for (kw = 0; kw < p->KW; ++kw, ++k) {
                const int iw = ow * p->SW - p->PL + kw * p->DW;
                const int inside = ih >= 0 && ih < p->H && iw >= 0 && iw < p->W;
                col[ES_MCU_QUAD(k)] = inside ? xc[ih * p->W + iw] : (int8_t)p->x_zp;
            }
        }
    }
    for (; k < k4; ++k) col[ES_MCU_QUAD(k)] = 0;
}

/* s[j] = weight row w . (column j - x_zp), j < 4, the columns k4 bytes apart */
static void mcu_dot1x4_mve(const int8_t *w, const int8_t *cols, int k4, int x_zp,
                           int32_t s[4]) {
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, wsum = 0;
    int k, j;
    for (k = 0; k < k4; k += 16) {
        const mve_pred16_t lanes = vctp8q((uint32_t)(k4 - k)); /* all 16 but at the end */
        const int8x16_t wv = vldrbq_z_s8(w + k, lanes);        /* lanes off read as 0 */
        wsum = vaddvaq_s8(wsum, wv);
        a0 = vmladavaq_s8(a0, wv, vldrbq_z_s8(cols + k, lanes));
        a1 = vmladavaq_s8(a1, wv, vldrbq_z_s8(cols + k4 + k, lanes));
        a2 = vmladavaq_s8(a2, wv, vldrbq_z_s8(cols + 2 * k4 + k, lanes));
        a3 = vmladavaq_s8(a3, wv, vldrbq_z_s8(cols + 3 * k4 + k, lanes));
    }
    s[0] = a0, s[1] = a1, s[2] = a2, s[3] = a3;
    for (j = 0; j < 4; ++j) s[j] -= x_zp * wsum;
}

static void conv_i8_mcu_mve(const int8_t *x, const int8_t *w, const int32_t *bias,
                            const int32_t *mult, const int32_t *shift, int8_t *cols, int8_t *y,
                            const es_conv_params *p) {
    const int k4 = (p->C * p->KH * p->KW + 3) & ~3, plane = p->OH * p->OW;
    int pix, m, j;
    for (pix = 0; pix < plane; pix += 4) {
        const int n = plane - pix < 4 ? plane - pix : 4;
        /* a short last group repeats its last pixel; those sums are thrown away */
        for (j = 0; j < 4; ++j)
            mcu_im2col_s8(x, p, pix + (j < n ? j : n - 1), k4, cols + (size_t)j * k4);
        for (m = 0; m < p->M; ++m) {
            int32_t s[4];
            mcu_dot1x4_mve(w + (size_t)m * k4, cols, k4, p->x_zp, s);
            for (j = 0; j < n; ++j)
                y[(size_t)m * plane + pix + j] = es_requant(s[j] + bias[m], mult[m], shift[m],
                                                            p->rq, p->y_zp, p->qmin, p->qmax);
        }
    }
}
#endif

void es_conv2d_i8_mcu(const int8_t *x, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int16_t *scratch, int8_t *y,
                      const es_conv_params *p) {
#ifdef ES_MCU_MVE
    conv_i8_mcu_mve(x, w, bias, mult, shift, (int8_t *)scratch, y, p);
#else
    const int k4 = (p->C * p->KH * p->KW + 3) & ~3, plane = p->OH * p->OW;
    int16_t *col0 = scratch, *col1 = scratch + k4;
    int pix, m;
    for (pix = 0; pix < plane; pix += 2) {
        const int two_pix = pix + 1 < plane;
        mcu_im2col(x, p, pix, k4, col0);
        if (two_pix) mcu_im2col(x, p, pix + 1, k4, col1);
        for (m = 0; m < p->M; m += 2) {
            const int two_ch = m + 1 < p->M, m1 = two_ch ? m + 1 : m;
            int32_t s[2][2];
            int i, j;
            s[0][0] = s[0][1] = bias[m];
            s[1][0] = s[1][1] = bias[m1];
            /* a lone last pixel or channel is computed twice, once thrown away */
            mcu_dot2x2(w + (size_t)m * k4, w + (size_t)m1 * k4, col0, two_pix ? col1 : col0,
                       k4, s);
            for (i = 0; i <= two_ch; ++i)
                for (j = 0; j <= two_pix; ++j)
                    y[(size_t)(m + i) * plane + pix + j] =
                        es_requant(s[i][j], mult[m + i], shift[m + i], p->rq, p->y_zp,
                                   p->qmin, p->qmax);
        }
    }
#endif
}
