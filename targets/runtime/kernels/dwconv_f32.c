/* Depthwise Conv2d, float32, fast path (group == C == M); es_conv2d_f32 (conv_f32.c)
 * stays the reference and the oracle in tests (results agree to float rounding, not bit
 * for bit: sums are reordered). Its own file since the GEMM (conv_f32_fast.c) and the
 * depthwise are two kernels with two owners; what they share is in headers: the vector
 * activations (es_act_simd.h) and the stride phases of a padded plane (es_phases_f32.h). */
#include <string.h>

#include "../edgesmith_rt.h"
#include "../es_act.h"
#include "../es_act_simd.h"
#include "../es_phases_f32.h"

/* ---- depthwise --------------------------------------------------------------------------
 * Each channel's padded plane is split into its SH x SW stride phases, phase (a, b) holding
 * padded rows a, a + SH, ... and columns b, b + SW, ... on a grid of HQ x WQ (HQ, WQ the
 * padded size divided by the stride, rounded up). Output (oh, ow)'s tap (kh, kw) then reads
 * phase ((kh DH) % SH, (kw DW) % SW) at flat index (oh + kh DH / SH) WQ + ow + kw DW / SW:
 * over the flat index o = oh WQ + ow, every tap is one unit-stride 1-D convolution of the
 * whole plane, whatever the stride, dilation or plane width. The plane is computed on that
 * OH x WQ grid 32 outputs at a time, all taps in registers (the old kernel reloaded each
 * output row once per tap and vectorised along rows of 7 to 14 outputs late in a MobileNet:
 * 0.4-3 GMAC/s), and the OW valid columns of each row are copied out; the WQ - OW others
 * read neighbouring rows and are dropped. Scratch: ES_F32_DW_SCRATCH bytes. */

#define ES_DWF_CHUNK 32

#if defined(__AVX512F__)
/* out[o] = clamp(bias + sum_t w[t] src[t][o]), o < n rounded up to 32; with more, out[o]
 * already holds the sum of earlier taps and takes the bias's place */
static void dwf_taps(float *out, const float *const *src, const float *w, int nt, float bias,
                     int more, int n, int clamp, float lo, float hi) {
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    int o, t;
    for (o = 0; o < n; o += ES_DWF_CHUNK) {
        __m512 a0 = more ? _mm512_loadu_ps(out + o) : _mm512_set1_ps(bias);
        __m512 a1 = more ? _mm512_loadu_ps(out + o + 16) : _mm512_set1_ps(bias);
        for (t = 0; t < nt; ++t) {
            const __m512 wv = _mm512_set1_ps(w[t]);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + o), wv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + o + 16), wv, a1);
        }
        if (clamp) {
            a0 = _mm512_min_ps(_mm512_max_ps(a0, vlo), vhi);
            a1 = _mm512_min_ps(_mm512_max_ps(a1, vlo), vhi);
        }
        _mm512_storeu_ps(out + o, a0);
        _mm512_storeu_ps(out + o + 16, a1);
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
static void dwf_taps(float *out, const float *const *src, const float *w, int nt, float bias,
                     int more, int n, int clamp, float lo, float hi) {
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    int o, t, i;
    for (o = 0; o < n; o += ES_DWF_CHUNK) {
        __m256 a[4];
        for (i = 0; i < 4; ++i)
            a[i] = more ? _mm256_loadu_ps(out + o + 8 * i) : _mm256_set1_ps(bias);
        for (t = 0; t < nt; ++t) {
            const __m256 wv = _mm256_set1_ps(w[t]);
            const float *s = src[t] + o;
            a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(s), wv, a[0]);
            a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 8), wv, a[1]);
            a[2] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 16), wv, a[2]);
            a[3] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 24), wv, a[3]);
        }
        for (i = 0; i < 4; ++i) {
            if (clamp) a[i] = _mm256_min_ps(_mm256_max_ps(a[i], vlo), vhi);
            _mm256_storeu_ps(out + o + 8 * i, a[i]);
        }
    }
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
static void dwf_taps(float *out, const float *const *src, const float *w, int nt, float bias,
                     int more, int n, int clamp, float lo, float hi) {
    const float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
    int o, t, i;
    for (o = 0; o < n; o += ES_DWF_CHUNK) {
        float32x4_t a[8];
        for (i = 0; i < 8; ++i) a[i] = more ? vld1q_f32(out + o + 4 * i) : vdupq_n_f32(bias);
        for (t = 0; t < nt; ++t) {
            const float wv = w[t];
            const float *s = src[t] + o;
            for (i = 0; i < 8; ++i) a[i] = vfmaq_n_f32(a[i], vld1q_f32(s + 4 * i), wv);
        }
        for (i = 0; i < 8; ++i) {
            if (clamp) a[i] = vminq_f32(vmaxq_f32(a[i], vlo), vhi);
            vst1q_f32(out + o + 4 * i, a[i]);
        }
    }
}
#else
static void dwf_taps(float *out, const float *const *src, const float *w, int nt, float bias,
                     int more, int n, int clamp, float lo, float hi) {
    int o, t, i;
    for (o = 0; o < n; o += ES_DWF_CHUNK) {
        float a[ES_DWF_CHUNK];
        for (i = 0; i < ES_DWF_CHUNK; ++i) a[i] = more ? out[o + i] : bias;
        for (t = 0; t < nt; ++t) {
            const float wv = w[t], *s = src[t] + o;
            for (i = 0; i < ES_DWF_CHUNK; ++i) a[i] += wv * s[i];
        }
        for (i = 0; i < ES_DWF_CHUNK; ++i) {
            if (clamp) a[i] = a[i] < lo ? lo : (a[i] > hi ? hi : a[i]);
            out[o + i] = a[i];
        }
    }
}
#endif

/* Small planes (ES_F32_DW_LANES: at most 64 outputs, late in a MobileNet), 16 channels in
 * the lanes, as XNNPACK's f32-dwconv does on NHWC: per block of 16 channels the padded
 * input is transposed to [Hp][Wp][16] and the weights to [tap][16], each output pixel is
 * one 16-lane sum over the taps, and the [OH OW][16] results go back to the channel planes.
 * Per channel, the phase kernel's fixed work (phase copies, a 32-wide pass for 9 outputs)
 * cost more than its multiplies on 3 x 3 and 6 x 6 planes. The 16-lane loops are plain C,
 * vectorised by the compiler (one zmm, two ymm or four q registers). */
#define ES_DWL 16
static void dw_lanes(const float *x, const float *w, const float *b, float *scratch, float *y,
                     const es_conv_params *p) {
    const int OH = p->OH, OW = p->OW, KH = p->KH, KW = p->KW, ksz = KH * KW, P = OH * OW;
    const int Hp = (OH - 1) * p->SH + (KH - 1) * p->DH + 1;
    const int Wp = (OW - 1) * p->SW + (KW - 1) * p->DW + 1;
    float *xp = scratch, *out = xp + (size_t)Hp * Wp * ES_DWL, *wl = out + (size_t)P * ES_DWL;
    float *bl = wl + (size_t)ksz * ES_DWL;
    int c0, l, t, ih, iw, oh, ow, kh, kw, o;
    for (c0 = 0; c0 < p->C; c0 += ES_DWL) {
        const int nc = p->C - c0 < ES_DWL ? p->C - c0 : ES_DWL;
        memset(xp, 0, sizeof(float) * (size_t)Hp * Wp * ES_DWL);
        memset(wl, 0, sizeof(float) * (size_t)(ksz + 1) * ES_DWL);
        for (l = 0; l < nc; ++l) {
            const float *xc = x + (size_t)(c0 + l) * p->H * p->W;
            for (t = 0; t < ksz; ++t) wl[t * ES_DWL + l] = w[(size_t)(c0 + l) * ksz + t];
            bl[l] = b[c0 + l];
            for (ih = 0; ih < p->H; ++ih) {
                const int r = ih + p->PT;
                if (r >= Hp) break;
                for (iw = 0; iw < p->W && iw + p->PL < Wp; ++iw)
                    xp[((size_t)r * Wp + iw + p->PL) * ES_DWL + l] = xc[(size_t)ih * p->W + iw];
            }
        }
        for (oh = 0; oh < OH; ++oh)
            for (ow = 0; ow < OW; ++ow) {
                float acc[ES_DWL], *d = out + ((size_t)oh * OW + ow) * ES_DWL;
                for (l = 0; l < ES_DWL; ++l) acc[l] = bl[l];
                for (kh = 0; kh < KH; ++kh)
                    for (kw = 0; kw < KW; ++kw) {
                        const float *s = xp + ((size_t)(oh * p->SH + kh * p->DH) * Wp +
                                               (size_t)(ow * p->SW + kw * p->DW)) * ES_DWL;
                        const float *wt = wl + (size_t)(kh * KW + kw) * ES_DWL;
                        for (l = 0; l < ES_DWL; ++l) acc[l] += wt[l] * s[l];
                    }
                for (l = 0; l < ES_DWL; ++l) d[l] = acc[l];
            }
        if (p->act != ES_ACT_NONE) act_row(out, out, P * ES_DWL, p->act, p->a0, p->a1);
        for (l = 0; l < nc; ++l) {
            float *yc = y + (size_t)(c0 + l) * P;
            for (o = 0; o < P; ++o) yc[o] = out[(size_t)o * ES_DWL + l];
        }
    }
}

void es_dwconv2d_f32(const float *x, const float *w, const float *b, float *scratch,
                     float *y, const es_conv_params *p) {
    const int OH = p->OH, OW = p->OW, KH = p->KH, KW = p->KW, SH = p->SH, SW = p->SW;
    const int HQ = ES_F32_DW_HQ(p->OH, p->KH, p->SH, p->DH);
    const int WQ = ES_F32_DW_HQ(p->OW, p->KW, p->SW, p->DW);
    const size_t pq = (size_t)HQ * WQ + (size_t)WQ + ES_DWF_CHUNK; /* a phase and its slack */
    const int n = OH * WQ, ksz = KH * KW, act = p->act;
    const int clamp = act == ES_ACT_RELU || act == ES_ACT_CLIP;
    const float lo = act == ES_ACT_CLIP ? p->a0 : 0.0f, hi = act == ES_ACT_CLIP ? p->a1 : 3.4e38f;
    float *ph = scratch, *ext = ph + (size_t)SH * SW * pq, *row = ext + n + ES_DWF_CHUNK;
    const float *src[ES_F32_DW_MAXTAPS];
    int c, t, t0, oh;
    if (ES_F32_DW_LANES(OH, OW)) {
        dw_lanes(x, w, b, scratch, y, p);
        return;
    }
    memset(ph, 0, sizeof(float) * (size_t)SH * SW * pq); /* padding and slack, see es_f32_phases */
    memset(row, 0, sizeof(float) * (size_t)WQ * SW);
    for (c = 0; c < p->C; ++c) {
        const float *wc = w + (size_t)c * ksz;
        float *yc = y + (size_t)c * OH * OW;
        es_f32_phases(ph, row, x + (size_t)c * p->H * p->W, p, HQ, WQ, pq);
        for (t0 = 0; t0 < ksz; t0 += ES_F32_DW_MAXTAPS) { /* taps in groups of at most 64 */
            const int nt = ksz - t0 < ES_F32_DW_MAXTAPS ? ksz - t0 : ES_F32_DW_MAXTAPS;
            for (t = 0; t < nt; ++t) {
                const int dh = (t0 + t) / KW * p->DH, dw = (t0 + t) % KW * p->DW;
                src[t] = ph + (size_t)((dh % SH) * SW + dw % SW) * pq +
                         (size_t)(dh / SH) * WQ + (size_t)(dw / SW);
            }
            dwf_taps(ext, src, wc + t0, nt, b[c], t0 > 0, n, clamp && t0 + nt == ksz, lo, hi);
        }
        for (oh = 0; oh < OH; ++oh) {
            const float *e = ext + (size_t)oh * WQ;
            float *d = yc + (size_t)oh * OW;
            if (act == ES_ACT_NONE || clamp)
                memcpy(d, e, sizeof(float) * (size_t)OW);
            else /* leaky, hard-swish, sigmoid...: in vectors on the way out */
                act_row(d, e, OW, act, p->a0, p->a1);
        }
    }
}
