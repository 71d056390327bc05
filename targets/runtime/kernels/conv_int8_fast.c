/* Conv2d, int8, fast paths. Same arithmetic as the reference es_conv2d_i8 (conv_int8.c),
 * which stays built and is the oracle in tests: results are bit-identical.
 *
 * es_conv2d_i8_fast: any conv (groups, depthwise, strides, pads, dilations). The input is
 * first widened to int16 with the zero point subtracted (|x - zp| <= 255, so every
 * product with an int8 weight fits int16 and the sum int32), then four output channels
 * share each input row load; the inner loops are unit-stride and vectorise at -O3.
 *
 * es_pointwise_i8: 1x1, stride 1, no padding, one group: a GEMM Y[M][P] = W[M][C] X[C][P]
 * without im2col. Weights are pre-packed at generation time as int16 pairs
 * (w[m][c], w[m][c+1]) in one int32, so AVX2 multiplies two channels per instruction with
 * _mm256_madd_epi16; NEON uses widening multiply-accumulate; the portable loop is the
 * fallback. Scratch (from the arena): int16 input copy, then int32 accumulators. */
#include "../edgesmith_rt.h"

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

static void widen(const int8_t *x, int16_t *xs, int n, int32_t zp) {
    int i;
    for (i = 0; i < n; ++i) xs[i] = (int16_t)((int32_t)x[i] - zp);
}

static void requant_plane(const int32_t *acc, int8_t *y, int n, int32_t mult, int32_t shift,
                          const es_conv_params *p) {
    int i;
    for (i = 0; i < n; ++i) y[i] = es_sat8(es_mul_q(acc[i], mult, shift) + p->y_zp, p->qmin,
                                           p->qmax);
}

void es_conv2d_i8_fast(const int8_t *x, const int8_t *w, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                       const es_conv_params *p) {
    const int cpg = p->C / p->group, mpg = p->M / p->group, plane = p->OH * p->OW;
    const int ksz = p->KH * p->KW;
    int32_t *acc = scratch; /* 4 planes */
    int16_t *xs = (int16_t *)(scratch + 4 * (size_t)plane);
    int m0, nb;
    widen(x, xs, p->C * p->H * p->W, p->x_zp);
    for (m0 = 0; m0 < p->M; m0 += nb) {
        const int g = m0 / mpg;
        const int gend = (g + 1) * mpg;
        int j, i, c;
        nb = (gend - m0) < 4 ? (gend - m0) : 4;
        for (j = 0; j < nb; ++j)
            for (i = 0; i < plane; ++i) acc[(size_t)j * plane + i] = bias[m0 + j];
        for (c = 0; c < cpg; ++c) {
            const int16_t *xc = xs + (size_t)(g * cpg + c) * p->H * p->W;
            int kh, kw;
            for (kh = 0; kh < p->KH; ++kh) {
                for (kw = 0; kw < p->KW; ++kw) {
                    int32_t wv[4] = {0, 0, 0, 0};
                    const int off = kw * p->DW - p->PL;
                    int lo = 0, hi = p->OW, oh;
                    for (j = 0; j < nb; ++j)
                        wv[j] = w[((size_t)(m0 + j) * cpg + c) * ksz + kh * p->KW + kw];
                    if (off < 0) lo = (-off + p->SW - 1) / p->SW;
                    if (off + (hi - 1) * p->SW >= p->W)
                        hi = (p->W - 1 - off) >= 0 ? (p->W - 1 - off) / p->SW + 1 : 0;
                    if (hi < lo) hi = lo;
                    for (oh = 0; oh < p->OH; ++oh) {
                        const int ih = oh * p->SH - p->PT + kh * p->DH;
                        const int16_t *xr;
                        int32_t *a0 = acc + (size_t)oh * p->OW;
                        int ow;
                        if (ih < 0 || ih >= p->H) continue;
                        xr = xc + (size_t)ih * p->W + off;
                        if (nb == 4 && p->SW == 1) {
                            int32_t *a1 = a0 + plane, *a2 = a1 + plane, *a3 = a2 + plane;
                            const int32_t w0 = wv[0], w1 = wv[1], w2 = wv[2], w3 = wv[3];
                            for (ow = lo; ow < hi; ++ow) {
                                const int32_t v = xr[ow];
                                a0[ow] += w0 * v;
                                a1[ow] += w1 * v;
                                a2[ow] += w2 * v;
                                a3[ow] += w3 * v;
                            }
                        } else if (p->SW == 1) {
                            for (j = 0; j < nb; ++j) {
                                int32_t *aj = a0 + (size_t)j * plane;
                                const int32_t wj = wv[j];
                                for (ow = lo; ow < hi; ++ow) aj[ow] += wj * (int32_t)xr[ow];
                            }
                        } else {
                            for (j = 0; j < nb; ++j) {
                                int32_t *aj = a0 + (size_t)j * plane;
                                const int32_t wj = wv[j];
                                for (ow = lo; ow < hi; ++ow)
                                    aj[ow] += wj * (int32_t)xr[ow * p->SW];
                            }
                        }
                    }
                }
            }
        }
        for (j = 0; j < nb; ++j)
            requant_plane(acc + (size_t)j * plane, y + (size_t)(m0 + j) * plane, plane,
                          mult[m0 + j], shift[m0 + j], p);
    }
}

/* wp: [M][(C+1)/2] int32, each the int16 pair (w[m][2k], w[m][2k+1]) (low half first). */
void es_pointwise_i8(const int8_t *x, const int32_t *wp, const int32_t *bias,
                     const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                     const es_conv_params *p) {
    const int C = p->C, M = p->M, P = p->OH * p->OW, C2 = (C + 1) / 2;
    int16_t *xs = (int16_t *)scratch; /* [C2*2][P], a zero row when C is odd */
    int32_t *acc = scratch + (size_t)C2 * P; /* [P] */
    int m, c, i;
    widen(x, xs, C * P, p->x_zp);
    if (C & 1)
        for (i = 0; i < P; ++i) xs[(size_t)C * P + i] = 0;
    for (m = 0; m < M; ++m) {
        const int32_t *wm = wp + (size_t)m * C2;
        i = 0;
#if defined(__AVX2__)
        for (; i + 16 <= P; i += 16) {
            __m256i s0 = _mm256_set1_epi32(bias[m]), s1 = s0;
            for (c = 0; c < C2; ++c) {
                const __m256i a =
                    _mm256_loadu_si256((const __m256i *)(xs + (size_t)2 * c * P + i));
                const __m256i b = _mm256_loadu_si256(
                    (const __m256i *)(xs + (size_t)(2 * c + 1) * P + i));
                const __m256i wv = _mm256_set1_epi32(wm[c]);
                s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wv));
                s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wv));
            }
            /* unpack works per 128-bit lane: s0 = [0..3, 8..11], s1 = [4..7, 12..15] */
            _mm256_storeu_si256((__m256i *)(acc + i), _mm256_permute2x128_si256(s0, s1, 0x20));
            _mm256_storeu_si256((__m256i *)(acc + i + 8),
                                _mm256_permute2x128_si256(s0, s1, 0x31));
        }
#elif defined(__ARM_NEON)
        for (; i + 8 <= P; i += 8) {
            int32x4_t s0 = vdupq_n_s32(bias[m]), s1 = s0;
            for (c = 0; c < C2; ++c) {
                const int16x8_t a = vld1q_s16(xs + (size_t)2 * c * P + i);
                const int16x8_t b = vld1q_s16(xs + (size_t)(2 * c + 1) * P + i);
                const int16_t w0 = (int16_t)(wm[c] & 0xffff);
                const int16_t w1 = (int16_t)((uint32_t)wm[c] >> 16);
                s0 = vmlal_n_s16(s0, vget_low_s16(a), w0);
                s1 = vmlal_n_s16(s1, vget_high_s16(a), w0);
                s0 = vmlal_n_s16(s0, vget_low_s16(b), w1);
                s1 = vmlal_n_s16(s1, vget_high_s16(b), w1);
            }
            vst1q_s32(acc + i, s0);
            vst1q_s32(acc + i + 4, s1);
        }
#endif
        {
            const int rest = i;
            int k;
            for (k = rest; k < P; ++k) acc[k] = bias[m];
            for (c = 0; c < C2; ++c) {
                const int16_t *a = xs + (size_t)2 * c * P, *b = a + P;
                const int32_t w0 = (int16_t)(wm[c] & 0xffff);
                const int32_t w1 = (int16_t)((uint32_t)wm[c] >> 16);
                for (k = rest; k < P; ++k) acc[k] += w0 * a[k] + w1 * b[k];
            }
        }
        requant_plane(acc, y + (size_t)m * P, P, mult[m], shift[m], p);
    }
}
