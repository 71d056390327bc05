/* Depthwise Conv2d, int8, for microcontrollers (Cortex-M): the weights stay int8 in flash,
 * in ONNX's own order w[C][KH][KW] (one byte a weight, no padding), and are widened at run
 * time. Bit-identical to es_conv2d_i8 (the reference), which the tests compare it with.
 *
 * After CMSIS-NN's arm_depthwise_conv_s8_opt, written anew for the CHW layout this runtime
 * keeps, so no transpose to HWC and back is needed (that would take two more planes of
 * RAM). Per channel:
 *   1. the channel's input plane is widened into the scratch as int16 (x - x_zp), with
 *      the layer's padding written as 0 (the reference skips padded taps, i.e. adds the
 *      real value 0): the tap loops need no bounds checks;
 *   2. each output pixel sums its KH x KW taps. With the DSP extension (Cortex-M4/M7/M33:
 *      __ARM_FEATURE_DSP) and DW = 1 two neighbouring taps of a kernel row are one int16
 *      pair in the scratch: one unaligned word read, and one SMLAD multiplies it with the
 *      pair of weights (widened once per channel, SXTB16's job done in C since it runs
 *      KH*KW/2 times a channel) and adds both products; an odd last tap is one multiply.
 *      With Helium (Cortex-M55: __ARM_FEATURE_MVE, -mcpu=cortex-m55) four neighbouring
 *      output pixels of a row are the four int32 lanes of one vector instead: each tap
 *      loads the four int16 inputs it meets, widened on load (contiguous for SW = 1, a
 *      gather at 0, SW, 2 SW, 3 SW otherwise), and one VMLA adds their products with the
 *      tap's weight; the row's last vector is tail-predicated (VCTP). CMSIS-NN puts
 *      channels in the lanes instead, which needs HWC activations. Elsewhere (and on the
 *      host, where the generated folder is checked) plain C adds the same products;
 *   3. each sum is requantised (es_requant) into the CHW output.
 *
 * scratch: one padded int16 plane, ES_I8_DW_MCU_SCRATCH bytes. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "../edgesmith_rt.h"

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#include <arm_mve.h>
#define ES_DW_MCU_MVE 1
#elif defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
#define ES_DW_MCU_DSP 1
#endif

/* the channel's input, padded and widened: hp rows of wp int16 (x - x_zp), 0 outside */
static void dw_mcu_widen(const int8_t *xc, const es_conv_params *p, int hp, int wp,
                         int16_t *pl) {
    int r, c;
    for (r = 0; r < hp; ++r) {
        const int ih = r - p->PT;
        int16_t *row = pl + (size_t)r * wp;
        for (c = 0; c < wp; ++c) {
            const int iw = c - p->PL;
            const int inside = ih >= 0 && ih < p->H && iw >= 0 && iw < p->W;
            row[c] = (int16_t)(inside ? xc[ih * p->W + iw] - p->x_zp : 0);
        }
    }
}

/* the plain sum of one output pixel: every tap of the channel's kernel */
static int32_t dw_mcu_pixel(const int8_t *wc, const int16_t *at, int wp,
                            const es_conv_params *p) {
    int32_t s = 0;
    int kh, kw;
    for (kh = 0; kh < p->KH; ++kh)
        for (kw = 0; kw < p->KW; ++kw)
            s += (int32_t)wc[kh * p->KW + kw] * at[(size_t)kh * p->DH * wp + kw * p->DW];
    return s;
}

#ifdef ES_DW_MCU_DSP
static inline int32_t dw_mcu_word(const int16_t *src) {
    int32_t v;
    memcpy(&v, src, 4); /* one LDR: Cortex-M3 and later read unaligned words */
    return v;
}

/* the same sum with DW = 1: tap pairs (kw, kw + 1) by SMLAD, pairs[] the widened weights
 * of the channel, kernel row by kernel row */
static int32_t dw_mcu_pixel_dsp(const int8_t *wc, const int32_t *pairs, const int16_t *at,
                                int wp, const es_conv_params *p) {
    const int np = p->KW / 2;
    int32_t s = 0;
    int kh, j;
    for (kh = 0; kh < p->KH; ++kh) {
        const int16_t *row = at + (size_t)kh * p->DH * wp;
        for (j = 0; j < np; ++j) s = __smlad(pairs[kh * np + j], dw_mcu_word(row + 2 * j), s);
        if (p->KW & 1) s += (int32_t)wc[kh * p->KW + p->KW - 1] * row[p->KW - 1];
    }
    return s;
}
#endif

#ifdef ES_DW_MCU_MVE
/* one output row of the channel, four pixels a vector: out[ow] = sum over taps of
 * wc[tap] * plane[(oh*SH + kh*DH)][ow*SW + kw*DW], sums requantised as they are done */
static void dw_mcu_row_mve(const int8_t *wc, const int16_t *row0, int wp, int8_t *yr,
                           int32_t bias, int32_t mult, int32_t shift, const es_conv_params *p) {
    const uint32x4_t offs = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)p->SW);
    int ow, kh, kw, j;
    for (ow = 0; ow < p->OW; ow += 4) {
        const mve_pred16_t lanes = vctp32q((uint32_t)(p->OW - ow));
        int32x4_t acc = vdupq_n_s32(0);
        int32_t s[4];
        for (kh = 0; kh < p->KH; ++kh) {
            const int16_t *at = row0 + (size_t)kh * p->DH * wp + (size_t)ow * p->SW;
            for (kw = 0; kw < p->KW; ++kw) {
                const int16_t *tap = at + kw * p->DW;
                const int32x4_t xv = p->SW == 1 ? vldrhq_z_s32(tap, lanes)
                                                : vldrhq_gather_shifted_offset_z_s32(
                                                      tap, offs, lanes);
                acc = vmlaq_n_s32(acc, xv, wc[kh * p->KW + kw]);
            }
        }
        vst1q_s32(s, acc);
        for (j = 0; j < 4 && ow + j < p->OW; ++j)
            yr[ow + j] = es_requant(s[j] + bias, mult, shift, p->rq, p->y_zp, p->qmin, p->qmax);
    }
}
#endif

void es_dwconv2d_i8_mcu(const int8_t *x, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int16_t *scratch, int8_t *y,
                        const es_conv_params *p) {
    const int hp = (p->OH - 1) * p->SH + (p->KH - 1) * p->DH + 1;
    const int wp = (p->OW - 1) * p->SW + (p->KW - 1) * p->DW + 1;
    const int k = p->KH * p->KW;
    int ch, oh, ow;
#ifdef ES_DW_MCU_DSP
    int32_t pairs[ES_I8_DW_MCU_MAX_PAIRS];
    const int dsp = p->DW == 1 && p->KH * (p->KW / 2) <= ES_I8_DW_MCU_MAX_PAIRS;
#endif
    for (ch = 0; ch < p->C; ++ch) {
        const int8_t *wc = w + (size_t)ch * k;
        int8_t *yc = y + (size_t)ch * p->OH * p->OW;
        dw_mcu_widen(x + (size_t)ch * p->H * p->W, p, hp, wp, scratch);
#ifdef ES_DW_MCU_DSP
        if (dsp) {
            int kh, j;
            for (kh = 0; kh < p->KH; ++kh)
                for (j = 0; j < p->KW / 2; ++j) /* (w[2j], w[2j+1]) as one int16 pair */
                    pairs[kh * (p->KW / 2) + j] = (int32_t)(
                        (uint32_t)(uint16_t)(int16_t)wc[kh * p->KW + 2 * j]
                        | ((uint32_t)(uint16_t)(int16_t)wc[kh * p->KW + 2 * j + 1] << 16));
        }
#endif
#ifdef ES_DW_MCU_MVE
        for (oh = 0; oh < p->OH; ++oh)
            dw_mcu_row_mve(wc, scratch + (size_t)oh * p->SH * wp, wp, yc + oh * p->OW, bias[ch],
                           mult[ch], shift[ch], p);
        continue;
#endif
        for (oh = 0; oh < p->OH; ++oh)
            for (ow = 0; ow < p->OW; ++ow) {
                const int16_t *at = scratch + (size_t)oh * p->SH * wp + ow * p->SW;
                int32_t s;
#ifdef ES_DW_MCU_DSP
                s = dsp ? dw_mcu_pixel_dsp(wc, pairs, at, wp, p) : dw_mcu_pixel(wc, at, wp, p);
#else
                s = dw_mcu_pixel(wc, at, wp, p);
#endif
                yc[oh * p->OW + ow] = es_requant(s + bias[ch], mult[ch], shift[ch], p->rq,
                                                 p->y_zp, p->qmin, p->qmax);
            }
    }
}
