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
 * (x0, x1) / (x2, x3) and adds both products to a sum. With Helium (Cortex-M55:
 * __ARM_FEATURE_MVE) one VMLADAVA multiplies 8 taps, widened on load; the column is then
 * written in the weights' quad order so that both are read straight. Elsewhere (and on
 * the host, where the generated folder is checked) plain C computes the same sums.
 *
 * scratch: two int16 columns of K4 taps, ES_I8_MCU_SCRATCH(K) bytes. */
#include <string.h>

#include "../edgesmith_rt.h"

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#include <arm_mve.h>
#define ES_MCU_MVE 1
#elif defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
#define ES_MCU_DSP 1
#endif

/* where tap k of a column goes: its own place, or (MVE) the weights' quad order, in which
 * positions 0..3 of a quad hold taps 0, 2, 1, 3 */
#ifdef ES_MCU_MVE
#define ES_MCU_COL(k) (((k) & ~3) | (((k) & 1) << 1) | (((k) >> 1) & 1))
#else
#define ES_MCU_COL(k) (k)
#endif

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
                col[ES_MCU_COL(k)] = (int16_t)(inside ? xc[ih * p->W + iw] - p->x_zp : 0);
            }
        }
    }
    for (; k < k4; ++k) col[ES_MCU_COL(k)] = 0;
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
#elif defined(ES_MCU_MVE)
    for (; k + 8 <= k4; k += 8) {
        const int16x8_t a0 = vldrbq_s16(w0 + k), a1 = vldrbq_s16(w1 + k);
        const int16x8_t b0 = vld1q_s16(c0 + k), b1 = vld1q_s16(c1 + k);
        s[0][0] = vmladavaq_s16(s[0][0], a0, b0);
        s[0][1] = vmladavaq_s16(s[0][1], a0, b1);
        s[1][0] = vmladavaq_s16(s[1][0], a1, b0);
        s[1][1] = vmladavaq_s16(s[1][1], a1, b1);
    }
#endif
    /* plain C (and MVE's last quad): the column is in the weights' order for MVE, natural
     * otherwise, so quad position q of the weights meets tap ES_MCU_COL-ordered column q */
    for (; k < k4; ++k) {
#ifdef ES_MCU_MVE
        const int t = k;
#else
        const int t = (k & ~3) | (((k) & 1) << 1) | (((k) >> 1) & 1); /* 0,2,1,3 */
#endif
        s[0][0] += (int32_t)w0[k] * c0[t];
        s[0][1] += (int32_t)w0[k] * c1[t];
        s[1][0] += (int32_t)w1[k] * c0[t];
        s[1][1] += (int32_t)w1[k] * c1[t];
    }
}

void es_conv2d_i8_mcu(const int8_t *x, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int16_t *scratch, int8_t *y,
                      const es_conv_params *p) {
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
}
