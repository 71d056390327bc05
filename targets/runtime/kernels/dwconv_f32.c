/* Depthwise Conv2d, float32, fast path (group == C == M); es_conv2d_f32 (conv_f32.c)
 * stays the reference and the oracle in tests (results agree to float rounding, not bit
 * for bit: sums are reordered). Its own file since the GEMM (conv_f32_fast.c) and the
 * depthwise are two kernels with two owners; what they share is in headers: the vector
 * activations (es_act_simd.h) and the stride phases of a padded plane (es_phases_f32.h).
 *
 * Five paths, chosen by shape in es_dwconv2d_f32 (timed side by side on the depthwise
 * convs of MobileNetV2/V3 and EfficientNet-B0, AMD EPYC and Intel Xeon, AVX-512 and AVX2
 * builds):
 *   - AVX-512, stride 1, the input as wide as the output, 3 x 3 on planes of 9 to 256
 *     outputs and 5 x 5 on planes of 9 to 64 (dw_flat): the plane flattened, 16
 *     consecutive outputs a vector whatever the row width;
 *   - AVX-512, square 3 x 3 and 5 x 5, stride 1 or 2, undilated (dw_k): straight from the
 *     planes, 8 output rows at a time, on rows of 12+ outputs or planes too big for the
 *     lanes: every such conv of the MobileNets and EfficientNet but the 7 x 7 and smaller;
 *   - channels in the lanes (dw_lanes): planes of ES_F32_DW_LANES outputs (7 x 7 to 14 x 14);
 *   - AVX-512, stride 2, rows of 24+ outputs (dw_direct), the other kernel sizes and
 *     dilations: straight from the planes;
 *   - the stride phases (dwf_taps): everything else, every ISA. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <stddef.h>
#include <string.h>

#include "../edgesmith_rt.h"
#include "../es_act.h"
#include "../es_act_simd.h"
#include "../es_lanes.h"
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
        __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps(); /* odd taps */
        for (t = 0; t + 1 < nt; t += 2) {
            const __m512 wv = _mm512_set1_ps(w[t]), wu = _mm512_set1_ps(w[t + 1]);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + o), wv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + o + 16), wv, a1);
            b0 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t + 1] + o), wu, b0);
            b1 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t + 1] + o + 16), wu, b1);
        }
        if (t < nt) {
            const __m512 wv = _mm512_set1_ps(w[t]);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + o), wv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(src[t] + o + 16), wv, a1);
        }
        a0 = _mm512_add_ps(a0, b0);
        a1 = _mm512_add_ps(a1, b1);
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
        __m256 a[4], e[4]; /* e: the odd taps */
        for (i = 0; i < 4; ++i) {
            a[i] = more ? _mm256_loadu_ps(out + o + 8 * i) : _mm256_set1_ps(bias);
            e[i] = _mm256_setzero_ps();
        }
        for (t = 0; t < nt; t += 2) {
            const __m256 wv = _mm256_set1_ps(w[t]);
            const float *s = src[t] + o;
            a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(s), wv, a[0]);
            a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 8), wv, a[1]);
            a[2] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 16), wv, a[2]);
            a[3] = _mm256_fmadd_ps(_mm256_loadu_ps(s + 24), wv, a[3]);
            if (t + 1 < nt) {
                const __m256 wu = _mm256_set1_ps(w[t + 1]);
                const float *u = src[t + 1] + o;
                e[0] = _mm256_fmadd_ps(_mm256_loadu_ps(u), wu, e[0]);
                e[1] = _mm256_fmadd_ps(_mm256_loadu_ps(u + 8), wu, e[1]);
                e[2] = _mm256_fmadd_ps(_mm256_loadu_ps(u + 16), wu, e[2]);
                e[3] = _mm256_fmadd_ps(_mm256_loadu_ps(u + 24), wu, e[3]);
            }
        }
        for (i = 0; i < 4; ++i) a[i] = _mm256_add_ps(a[i], e[i]);
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

/* ---- channels in the lanes ---------------------------------------------------------------
 * Small planes (ES_F32_DW_LANES: at most 64 outputs, or 256 with 25 or more taps)
 * run 16 channels in the lanes, as XNNPACK's
 * f32-dwconv does on NHWC (src/f32-dwconv, e.g. 25p16c-minmax-avx512f: channels in the
 * vector, taps unrolled): per block of 16 channels the padded input is transposed to
 * [Hp][Wp][16] and the weights to [tap][16]; each output pixel is then one 16-lane sum over
 * the taps with no lane idle, whatever the plane's width (a 7 x 7 plane fills 7 of 16 lanes
 * in a row-vectorised kernel, and the phase kernel's fixed work per channel, its phase
 * copies and row copies, cost more than its multiplies on 7 x 7 to 14 x 14 planes).
 * ES_DWL_NP pixels of an output row go at once, so each tap's weight vector is loaded once
 * for all of them (AVX-512: 8 pixels x one zmm; AVX2: 4 x two ymm; NEON: 4 x four q), the
 * activation is applied in registers, and the finished pixels go back to the 16 channel
 * planes (AVX-512, AVX2 and NEON: by in-register transposes, below, which also bring the
 * planes and weights in; portable: a row of [OW][16] at a time, by scalar copies; the row
 * buffer in the scratch is its). The padding is zeroed once per call: a block
 * writes only the interior, and lanes past the last channel compute values nobody reads. */
#define ES_DWL 16

#if defined(__AVX512F__)
typedef __m512 dwl_v; /* 16 channels in one zmm */
#define ES_DWL_VL 16
#define ES_DWL_NP 8
#define DWL_LOAD(s) _mm512_loadu_ps(s)
#define DWL_STORE(d, v) _mm512_storeu_ps(d, v)
#define DWL_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define DWL_ACT(v, p) act512v(v, (p)->act, (p)->a0, (p)->a1)
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 dwl_v;
#define ES_DWL_VL 8
#define ES_DWL_NP 4
#define DWL_LOAD(s) _mm256_loadu_ps(s)
#define DWL_STORE(d, v) _mm256_storeu_ps(d, v)
#define DWL_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define DWL_ACT(v, p) act256v(v, (p)->act, (p)->a0, (p)->a1)
#elif defined(__ARM_NEON) && defined(__aarch64__)
typedef float32x4_t dwl_v;
#define ES_DWL_VL 4
#define ES_DWL_NP 4
#define DWL_LOAD(s) vld1q_f32(s)
#define DWL_STORE(d, v) vst1q_f32(d, v)
#define DWL_FMA(a, b, c) vfmaq_f32(c, a, b)
#define DWL_ACT(v, p) act_neonv(v, (p)->act, (p)->a0, (p)->a1)
#else
typedef float dwl_v; /* portable: one channel per "vector" */
#define ES_DWL_VL 1
#define ES_DWL_NP 2
#define DWL_LOAD(s) (*(s))
#define DWL_STORE(d, v) (*(d) = (v))
#define DWL_FMA(a, b, c) ((a) * (b) + (c))
#define DWL_ACT(v, p) es_act_f32(v, (p)->act, (p)->a0, (p)->a1)
#endif
#define ES_DWL_NV (ES_DWL / ES_DWL_VL)

#if defined(__GNUC__)
#define ES_DW_INLINE static inline __attribute__((always_inline))
#define ES_DW_NOINLINE static __attribute__((noinline))
#else
#define ES_DW_INLINE static inline
#define ES_DW_NOINLINE static
#endif

/* t[j][16] = act(bias + sum over taps of w[tap] s[tap]) for the NP pixels j of a row that
 * start at s (xp at the first pixel's top-left tap); pixel j's taps are s + j SW 16 */
ES_DW_INLINE void dwl_pixels(const float *s, const float *wl, const float *bl, float *t,
                             int Wp, const es_conv_params *p, const int NP, const int KH,
                             const int KW) {
    dwl_v acc[ES_DWL_NP][ES_DWL_NV];
    const size_t sx = (size_t)p->SW * ES_DWL;
    int j, v, kh, kw;
    for (j = 0; j < NP; ++j)
        for (v = 0; v < ES_DWL_NV; ++v) acc[j][v] = DWL_LOAD(bl + v * ES_DWL_VL);
    for (kh = 0; kh < KH; ++kh)
        for (kw = 0; kw < KW; ++kw) {
            const float *sk = s + ((size_t)kh * p->DH * Wp + (size_t)kw * p->DW) * ES_DWL;
            const float *wt = wl + (size_t)(kh * KW + kw) * ES_DWL;
            dwl_v wv[ES_DWL_NV];
            for (v = 0; v < ES_DWL_NV; ++v) wv[v] = DWL_LOAD(wt + v * ES_DWL_VL);
            for (j = 0; j < NP; ++j)
                for (v = 0; v < ES_DWL_NV; ++v)
                    acc[j][v] = DWL_FMA(DWL_LOAD(sk + j * sx + v * ES_DWL_VL), wv[v], acc[j][v]);
        }
    for (j = 0; j < NP; ++j)
        for (v = 0; v < ES_DWL_NV; ++v)
            DWL_STORE(t + j * ES_DWL + v * ES_DWL_VL, DWL_ACT(acc[j][v], p));
}

/* np <= ES_DWL_NP pixels, np a constant in each case so the accumulators are registers
 * (a row of 7 run one pixel at a time waited on one FMA chain per tap) */
ES_DW_INLINE void dwl_run_k(const float *s, const float *wl, const float *bl, float *t, int Wp,
                    const es_conv_params *p, int np, const int KH, const int KW) {
    switch (np) {
#if ES_DWL_NP > 4
    case 8: dwl_pixels(s, wl, bl, t, Wp, p, 8, KH, KW); break;
    case 7: dwl_pixels(s, wl, bl, t, Wp, p, 7, KH, KW); break;
    case 6: dwl_pixels(s, wl, bl, t, Wp, p, 6, KH, KW); break;
    case 5: dwl_pixels(s, wl, bl, t, Wp, p, 5, KH, KW); break;
#endif
#if ES_DWL_NP > 2
    case 4: dwl_pixels(s, wl, bl, t, Wp, p, 4, KH, KW); break;
    case 3: dwl_pixels(s, wl, bl, t, Wp, p, 3, KH, KW); break;
#endif
    case 2: dwl_pixels(s, wl, bl, t, Wp, p, 2, KH, KW); break;
    default: dwl_pixels(s, wl, bl, t, Wp, p, 1, KH, KW); break;
    }
}

/* 3 x 3 (the MobileNets' and most of EfficientNet's) with its taps fixed at compile time:
 * the tap loops unroll and the source offsets fold into the loads */
static void dwl_run(const float *s, const float *wl, const float *bl, float *t, int Wp,
                    const es_conv_params *p, int np) {
    if (p->KH == 3 && p->KW == 3)
        dwl_run_k(s, wl, bl, t, Wp, p, np, 3, 3);
    else
        dwl_run_k(s, wl, bl, t, Wp, p, np, p->KH, p->KW);
}

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__)) && \
    !(defined(__ARM_NEON) && defined(__aarch64__))
/* the 16 channels of block c0 (nc of them real) into the interior of xp, and their
 * weights and biases into wl [tap][16] and bl [16] */
static void dwl_block_in(const float *x, const float *w, const float *b, int c0, int nc,
                         float *xp, float *wl, float *bl, int Hp, int Wp,
                         const es_conv_params *p) {
    const int ksz = p->KH * p->KW, rows = p->H < Hp - p->PT ? p->H : Hp - p->PT;
    const int cols = p->W < Wp - p->PL ? p->W : Wp - p->PL;
    int l, t, ih, iw;
    for (l = 0; l < nc; ++l) {
        const float *xc = x + (size_t)(c0 + l) * p->H * p->W;
        for (t = 0; t < ksz; ++t) wl[t * ES_DWL + l] = w[(size_t)(c0 + l) * ksz + t];
        bl[l] = b[c0 + l];
        for (ih = 0; ih < rows; ++ih) {
            float *d = xp + ((size_t)(ih + p->PT) * Wp + (size_t)p->PL) * ES_DWL + l;
            const float *s = xc + (size_t)ih * p->W;
            for (iw = 0; iw < cols; ++iw) d[(size_t)iw * ES_DWL] = s[iw];
        }
    }
}
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)) || \
    (defined(__ARM_NEON) && defined(__aarch64__))
#define ES_DWL_TRANSPOSED 1
/* ---- in and out of the lanes by in-register transposes (AVX-512 16 x 16, AVX2 8 x 8,
 * NEON 4 x 4) -------------------------------------------------------------------------------
 * A channel's plane is contiguous, so 16 pixels of 16 channels are 16 loads, and one
 * transpose in registers (as XNNPACK's x32-transposec kernels do) turns them into 16 pixel
 * vectors of 16 channels; the scalar strided copies this replaces moved one float per load
 * and store, and cost more than the multiplies on 7 x 7 and smaller planes. AVX2 does the
 * same 8 pixels at a time, each half of the 16 channels by an 8 x 8 transpose, and NEON 4
 * pixels, each quarter by a 4 x 4 one (its tails through a stack quad: no masked loads). */
#if defined(__AVX512F__)
#define ES_DWL_TP 16 /* pixels per transpose */
ES_DW_INLINE void dwl_t16(__m512 r[16]) {
    __m512 t[16];
    int k, m;
    for (k = 0; k < 16; k += 2) { /* lane j of 128-bit quarter q: pairs of rows */
        t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
    }
    for (k = 0; k < 16; k += 4) { /* r[k + m], quarter q: column 4q + m of rows k..k+3 */
        r[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
        r[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
        r[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
        r[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
    }
    for (m = 0; m < 4; ++m) { /* gather the quarters: column m, 4 + m, 8 + m, 12 + m */
        const __m512 a = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
        const __m512 bq = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xdd);
        const __m512 c = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
        const __m512 d = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xdd);
        t[m] = _mm512_shuffle_f32x4(a, c, 0x88);
        t[8 + m] = _mm512_shuffle_f32x4(a, c, 0xdd);
        t[4 + m] = _mm512_shuffle_f32x4(bq, d, 0x88);
        t[12 + m] = _mm512_shuffle_f32x4(bq, d, 0xdd);
    }
    for (k = 0; k < 16; ++k) r[k] = t[k];
}

/* nc channels of H x W floats each (channel l at x + l H W) into [Hd][Wd][16] from row PT,
 * column PL, 16 pixels at a time (lanes past nc get zeros); pixels past rows, cols (the
 * padded plane's end) are not stored. The input planes and the [tap][16] weights. */
static void dwl_in(const float *x, int nc, int H, int W, float *xp, int rows, int cols,
                     int Wd, int PT, int PL) {
    const int n = H * W;
    __m512 r[16];
    int i0, j, l, ih = 0, iw = 0;
    for (i0 = 0; i0 < n; i0 += 16) {
        const int m = n - i0 < 16 ? n - i0 : 16;
        const __mmask16 k = (__mmask16)((1u << m) - 1u);
        for (l = 0; l < 16; ++l)
            r[l] = l < nc ? _mm512_maskz_loadu_ps(k, x + (size_t)l * n + i0)
                          : _mm512_setzero_ps();
        dwl_t16(r);
        for (j = 0; j < m; ++j) {
            if (ih < rows && iw < cols)
                _mm512_storeu_ps(xp + ((size_t)(ih + PT) * Wd + (size_t)(iw + PL)) * ES_DWL, r[j]);
            if (++iw == W) iw = 0, ++ih;
        }
    }
}

/* the nc biases of a block into bl[16], zeros past nc */
static inline void dwl_bias(float *bl, const float *b, int nc) {
    _mm512_storeu_ps(bl, _mm512_maskz_loadu_ps((__mmask16)((1u << nc) - 1u), b));
}

/* m <= 16 finished pixels [m][16] at flat output index o0 back to the nc channel planes */
static void dwl_out(const float *t, float *y, int c0, int nc, int P, int o0, int m) {
    const __mmask16 k = (__mmask16)((1u << m) - 1u);
    __m512 r[16];
    int j, l;
    for (j = 0; j < 16; ++j) r[j] = j < m ? _mm512_loadu_ps(t + j * ES_DWL) : _mm512_setzero_ps();
    dwl_t16(r);
    for (l = 0; l < nc; ++l) _mm512_mask_storeu_ps(y + (size_t)(c0 + l) * P + o0, k, r[l]);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define ES_DWL_TP 8 /* pixels per transpose */
ES_DW_INLINE void dwl_t8(__m256 r[8]) {
    __m256 t[8];
    int k;
    for (k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (k = 0; k < 8; k += 4) { /* r[k + m], half h: column 4h + m of rows k..k+3 */
        r[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
        r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xee);
        r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xee);
    }
    for (k = 0; k < 4; ++k) {
        t[k] = _mm256_permute2f128_ps(r[k], r[k + 4], 0x20);
        t[k + 4] = _mm256_permute2f128_ps(r[k], r[k + 4], 0x31);
    }
    for (k = 0; k < 8; ++k) r[k] = t[k];
}

static inline __m256i dwl_mask8(int m) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static void dwl_in(const float *x, int nc, int H, int W, float *xp, int rows, int cols,
                   int Wd, int PT, int PL) {
    const int n = H * W;
    __m256 r[2][8];
    int i0, j, l, v, ih = 0, iw = 0;
    for (i0 = 0; i0 < n; i0 += 8) {
        const int m = n - i0 < 8 ? n - i0 : 8;
        const __m256i k = dwl_mask8(m);
        for (v = 0; v < 2; ++v) {
            for (l = 0; l < 8; ++l)
                r[v][l] = v * 8 + l < nc ? _mm256_maskload_ps(x + (size_t)(v * 8 + l) * n + i0, k)
                                         : _mm256_setzero_ps();
            dwl_t8(r[v]);
        }
        for (j = 0; j < m; ++j) {
            if (ih < rows && iw < cols) {
                float *d = xp + ((size_t)(ih + PT) * Wd + (size_t)(iw + PL)) * ES_DWL;
                _mm256_storeu_ps(d, r[0][j]);
                _mm256_storeu_ps(d + 8, r[1][j]);
            }
            if (++iw == W) iw = 0, ++ih;
        }
    }
}

static inline void dwl_bias(float *bl, const float *b, int nc) {
    _mm256_storeu_ps(bl, _mm256_maskload_ps(b, dwl_mask8(nc)));
    _mm256_storeu_ps(bl + 8, _mm256_maskload_ps(b + 8, dwl_mask8(nc - 8)));
}

static void dwl_out(const float *t, float *y, int c0, int nc, int P, int o0, int m) {
    const __m256i k = dwl_mask8(m);
    __m256 r[8];
    int j, l, v;
    for (v = 0; v < 2; ++v) {
        for (j = 0; j < 8; ++j)
            r[j] = j < m ? _mm256_loadu_ps(t + j * ES_DWL + v * 8) : _mm256_setzero_ps();
        dwl_t8(r);
        for (l = 0; l < 8 && v * 8 + l < nc; ++l)
            _mm256_maskstore_ps(y + (size_t)(c0 + v * 8 + l) * P + o0, k, r[l]);
    }
}
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define ES_DWL_TP 4 /* pixels per transpose */
static inline void dwl_t4(float32x4_t r[4]) {
    const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
    const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
    r[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    r[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

/* m <= 4 floats from s, zeros past m (NEON has no masked load) */
static inline float32x4_t dwl_load4(const float *s, int m) {
    float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int i;
    if (m == 4) return vld1q_f32(s);
    for (i = 0; i < m; ++i) q[i] = s[i];
    return vld1q_f32(q);
}

static void dwl_in(const float *x, int nc, int H, int W, float *xp, int rows, int cols,
                   int Wd, int PT, int PL) {
    const int n = H * W;
    float32x4_t r[4][4];
    int i0, j, l, v, ih = 0, iw = 0;
    for (i0 = 0; i0 < n; i0 += 4) {
        const int m = n - i0 < 4 ? n - i0 : 4;
        for (v = 0; v < 4; ++v) {
            for (l = 0; l < 4; ++l)
                r[v][l] = v * 4 + l < nc ? dwl_load4(x + (size_t)(v * 4 + l) * n + i0, m)
                                         : vdupq_n_f32(0.0f);
            dwl_t4(r[v]);
        }
        for (j = 0; j < m; ++j) {
            if (ih < rows && iw < cols) {
                float *d = xp + ((size_t)(ih + PT) * Wd + (size_t)(iw + PL)) * ES_DWL;
                for (v = 0; v < 4; ++v) vst1q_f32(d + v * 4, r[v][j]);
            }
            if (++iw == W) iw = 0, ++ih;
        }
    }
}

static inline void dwl_bias(float *bl, const float *b, int nc) {
    int l;
    for (l = 0; l < ES_DWL; ++l) bl[l] = l < nc ? b[l] : 0.0f;
}

static void dwl_out(const float *t, float *y, int c0, int nc, int P, int o0, int m) {
    float32x4_t r[4];
    float q[4];
    int j, l, v, i;
    for (v = 0; v < 4; ++v) {
        for (j = 0; j < 4; ++j)
            r[j] = j < m ? vld1q_f32(t + j * ES_DWL + v * 4) : vdupq_n_f32(0.0f);
        dwl_t4(r);
        for (l = 0; l < 4 && v * 4 + l < nc; ++l) {
            float *d = y + (size_t)(c0 + v * 4 + l) * P + o0;
            if (m == 4) {
                vst1q_f32(d, r[l]);
                continue;
            }
            vst1q_f32(q, r[l]);
            for (i = 0; i < m; ++i) d[i] = q[i];
        }
    }
}
#endif
#endif

static void dw_lanes(const float *x, const float *w, const float *b, float *scratch, float *y,
                     const es_conv_params *p) {
    const int OH = p->OH, OW = p->OW, KH = p->KH, KW = p->KW, ksz = KH * KW, P = OH * OW;
    const int Hp = (OH - 1) * p->SH + (KH - 1) * p->DH + 1;
    const int Wp = (OW - 1) * p->SW + (KW - 1) * p->DW + 1;
    float *xp = scratch, *row = xp + (size_t)Hp * Wp * ES_DWL, *wl = row + (size_t)OW * ES_DWL;
    float *bl = wl + (size_t)ksz * ES_DWL;
    int c0, oh, ow;
    memset(xp, 0, sizeof(float) * (size_t)Hp * Wp * ES_DWL);
    memset(wl, 0, sizeof(float) * (size_t)(ksz + 1) * ES_DWL);
    for (c0 = 0; c0 < p->C; c0 += ES_DWL) {
        const int nc = p->C - c0 < ES_DWL ? p->C - c0 : ES_DWL;
#if defined(ES_DWL_TRANSPOSED)
        /* finished pixels collect in tb (ES_DWL_TP for a transpose, plus a run of ES_DWL_NP that
         * crossed the last) and go out ES_DWL_TP at a time over the flat output index */
        float tb[(ES_DWL_TP + ES_DWL_NP) * ES_DWL];
        int fill = 0, o0 = 0;
        dwl_in(w + (size_t)c0 * ksz, nc, 1, ksz, wl, 1, ksz, ksz, 0, 0);
        dwl_bias(bl, b + c0, nc);
        dwl_in(x + (size_t)c0 * p->H * p->W, nc, p->H, p->W, xp,
                 p->H < Hp - p->PT ? p->H : Hp - p->PT, p->W < Wp - p->PL ? p->W : Wp - p->PL,
                 Wp, p->PT, p->PL);
        for (oh = 0; oh < OH; ++oh) {
            const float *s = xp + (size_t)oh * p->SH * Wp * ES_DWL;
            for (ow = 0; ow < OW; ow += ES_DWL_NP) {
                const int np = OW - ow < ES_DWL_NP ? OW - ow : ES_DWL_NP;
                dwl_run(s + (size_t)ow * p->SW * ES_DWL, wl, bl, tb + fill * ES_DWL, Wp, p, np);
                fill += np;
                if (fill >= ES_DWL_TP) {
                    dwl_out(tb, y, c0, nc, P, o0, ES_DWL_TP);
                    fill -= ES_DWL_TP, o0 += ES_DWL_TP;
                    memcpy(tb, tb + ES_DWL_TP * ES_DWL, sizeof(float) * (size_t)fill * ES_DWL);
                }
            }
        }
        if (fill) dwl_out(tb, y, c0, nc, P, o0, fill);
        (void)row;
#else
        int l;
        dwl_block_in(x, w, b, c0, nc, xp, wl, bl, Hp, Wp, p);
        for (oh = 0; oh < OH; ++oh) {
            const float *s = xp + (size_t)oh * p->SH * Wp * ES_DWL;
            for (ow = 0; ow < OW; ow += ES_DWL_NP)
                dwl_run(s + (size_t)ow * p->SW * ES_DWL, wl, bl, row + ow * ES_DWL, Wp, p,
                        OW - ow < ES_DWL_NP ? OW - ow : ES_DWL_NP);
            for (l = 0; l < nc; ++l) {
                float *yr = y + (size_t)(c0 + l) * P + (size_t)oh * OW;
                for (ow = 0; ow < OW; ++ow) yr[ow] = row[ow * ES_DWL + l];
            }
        }
#endif
    }
}

/* ---- AVX-512: straight from the channel planes -------------------------------------------
 * On a wide plane the phase kernel's copies (each input row into its phase, each output row
 * out of the OH x WQ grid) moved the plane's bytes twice more: a third of a 112 x 112
 * stride-1 conv's time went to memcpy. With AVX-512 masks a tap reads its input row where it
 * lies: lanes whose column falls in the padding are masked off (zero), stride 2 takes the
 * even lanes of 32 loaded columns with one permute, and each output row is stored in place
 * under a mask with the activation applied in registers. Two output rows of 32 columns go at
 * once, as XNNPACK's f32-dwconv2d-chw kernels do (src/f32-dwconv2d-chw, 2x4 tiles): an
 * input row both of them read is loaded once and multiplied into both, and the four
 * accumulators keep four FMA chains in flight. Rows narrower than 24 outputs stay on the
 * phase kernel, whose flat grid fills the lanes. */
#if defined(__AVX512F__)
#define ES_DWD_MAXOW 512 /* the column masks of a row live on the stack: 16 chunks of 32 */
#define ES_DW_DIRECT(p)                                                                    \
    ((p)->SW == 2 && (p)->DH == 1 && (p)->OW >= 24 && (p)->OW <= ES_DWD_MAXOW &&           \
     (p)->KW <= ES_DWD_MAXKW)

/* the lanes of 16 SW columns from c that lie in [0, W) */
static inline unsigned long long dwd_mask(int c, int W, int SW) {
    const int n = 16 * SW, lo = c < 0 ? -c : 0, hi = W - c < n ? W - c : n;
    return hi <= lo ? 0ull : ((1ull << hi) - 1ull) & ~((1ull << lo) - 1ull);
}

/* 16 outputs' input columns c, c + SW, ... (SW 1 or 2) of row xr, lanes outside m zero */
static inline __m512 dwd_load(const float *xr, int c, unsigned long long m, int SW) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    if (SW == 1)
        return m == 0xFFFFu ? _mm512_loadu_ps(xr + c) : _mm512_maskz_loadu_ps((__mmask16)m, xr + c);
    return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps((__mmask16)m, xr + c), even,
                                  _mm512_maskz_loadu_ps((__mmask16)(m >> 16), xr + c + 16));
}

#define ES_DWD_MAXKW 16
/* output rows oh and oh + 1 (when two), columns [ow, ow + n), n <= 32, of channel c; m the
 * column masks of each kw (two halves of 32 outputs) */
static inline void dwd_rows(const float *xc, const float *wc, float bias, float *yc, int oh,
                            int two, int ow, int n, int SW, const unsigned long long *m,
                            const es_conv_params *p) {
    const int W = p->W, KH = p->KH, KW = p->KW, SH = p->SH, ih0 = oh * SH - p->PT;
    const int c0 = ow * SW - p->PL;
    __m512 a0 = _mm512_set1_ps(bias), a1 = a0, b0 = a0, b1 = a0;
    int i, kw;
    for (i = 0; i < KH + (two ? SH : 0); ++i) { /* input rows ih0 + i */
        const int ih = ih0 + i, ka = i, kb = i - SH; /* the tap rows of oh and oh + 1 */
        const float *xr;
        if (ih < 0 || ih >= p->H) continue; /* a padding row: adds zero */
        xr = xc + (size_t)ih * W;
        for (kw = 0; kw < KW; ++kw) {
            const int c = c0 + kw * p->DW;
            const __m512 v0 = dwd_load(xr, c, m[2 * kw], SW);
            const __m512 v1 = dwd_load(xr, c + 16 * SW, m[2 * kw + 1], SW);
            if (ka < KH) {
                const __m512 wa = _mm512_set1_ps(wc[ka * KW + kw]);
                a0 = _mm512_fmadd_ps(v0, wa, a0);
                a1 = _mm512_fmadd_ps(v1, wa, a1);
            }
            if (two && kb >= 0) {
                const __m512 wb = _mm512_set1_ps(wc[kb * KW + kw]);
                b0 = _mm512_fmadd_ps(v0, wb, b0);
                b1 = _mm512_fmadd_ps(v1, wb, b1);
            }
        }
    }
    yc += (size_t)oh * p->OW + ow;
    _mm512_mask_storeu_ps(yc, (__mmask16)es_mask16(n), act512v(a0, p->act, p->a0, p->a1));
    _mm512_mask_storeu_ps(yc + 16, (__mmask16)es_mask16(n - 16),
                          act512v(a1, p->act, p->a0, p->a1));
    if (two) {
        yc += p->OW;
        _mm512_mask_storeu_ps(yc, (__mmask16)es_mask16(n), act512v(b0, p->act, p->a0, p->a1));
        _mm512_mask_storeu_ps(yc + 16, (__mmask16)es_mask16(n - 16),
                              act512v(b1, p->act, p->a0, p->a1));
    }
}

static void dw_direct(const float *x, const float *w, const float *b, float *y,
                      const es_conv_params *p) {
    const int OH = p->OH, OW = p->OW, ksz = p->KH * p->KW, SW = p->SW;
    unsigned long long m[ES_DWD_MAXOW / 32][2 * ES_DWD_MAXKW];
    int c, oh, ow, kw;
    for (ow = 0; ow < OW; ow += 32) /* columns past the row's end are masked off too */
        for (kw = 0; kw < p->KW; ++kw) {
            const int c0 = ow * SW - p->PL + kw * p->DW, n = OW - ow < 32 ? OW - ow : 32;
            const int lim = c0 + (n - 1) * SW + 1 < p->W ? c0 + (n - 1) * SW + 1 : p->W;
            m[ow / 32][2 * kw] = dwd_mask(c0, lim, SW);
            m[ow / 32][2 * kw + 1] = dwd_mask(c0 + 16 * SW, lim, SW);
        }
    for (c = 0; c < p->C; ++c) {
        const float *xc = x + (size_t)c * p->H * p->W, *wc = w + (size_t)c * ksz;
        float *yc = y + (size_t)c * OH * OW;
        for (oh = 0; oh < OH; oh += 2)
            for (ow = 0; ow < OW; ow += 32) {
                const int n = OW - ow < 32 ? OW - ow : 32;
                if (SW == 1)
                    dwd_rows(xc, wc, b[c], yc, oh, oh + 1 < OH, ow, n, 1, m[ow / 32], p);
                else
                    dwd_rows(xc, wc, b[c], yc, oh, oh + 1 < OH, ow, n, 2, m[ow / 32], p);
            }
    }
}

/* ---- AVX-512: a 16-float window shifted across two vectors (dw_flat, dw_k) ----------- */
/* columns j .. j + 15 of the 32 in a (first 16) and b (next 16), j < 5; valignd takes its
 * shift as an immediate, which -O0/-O1 builds do not fold through the inline call */
#define ES_DWK_ALIGN(a, b, j)                                                              \
    _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(b), _mm512_castps_si512(a), j))
ES_DW_INLINE __m512 dwk_shift(__m512 a, __m512 b, const int j) {
    return j == 1   ? ES_DWK_ALIGN(a, b, 1)
           : j == 2 ? ES_DWK_ALIGN(a, b, 2)
           : j == 3 ? ES_DWK_ALIGN(a, b, 3)
           : j == 4 ? ES_DWK_ALIGN(a, b, 4)
                    : a;
}

/* ---- AVX-512, stride 1, small planes: the plane as one flat row -------------------------
 * Late in a MobileNet the planes are 7 x 7 to 14 x 14. The row kernel below (dw_k) fills 7
 * or 14 of a vector's 16 lanes and pays its per-band set-up on a handful of outputs; the
 * channel-lane kernel (dw_lanes) fills all 16 but transposes every block in and out, and on
 * 7 x 7 its transposes took more time than its FMAs. With stride 1 and the input as wide as
 * the output (OW == W: "same" padding), output o = oh OW + ow reads input
 * o + (kh - PT) W + (kw - PL) for tap (kh, kw): one offset per tap for the whole plane. So
 * 16 consecutive outputs of the flattened plane are one vector whatever the row width. A
 * lane whose tap falls in the padding (a row above or below the plane, or a column that
 * wrapped into the next or the previous row) must add nothing, and lanes past the plane
 * are not stored; the masks that say so depend on the lane's position only, so they are
 * made once per call (dwf_masks) and every channel reuses them. A plane of up to ES_DWF_NV
 * vectors goes whole, its accumulators in registers. Most channels load each tap row once
 * per vector and shift it per tap column (dwf_channel_rows, the masks on the FMAs); the
 * first and last, whose whole-vector loads would leave the tensor, load each tap under its
 * mask (dwf_channels, two channels at a time on planes of 4 vectors or fewer, so that 8
 * FMA chains are in flight). Each layer alone against the old paths, alternating, Intel
 * Xeon: 3 x 3 on 14 x 14 0.79-0.88x, 12 x 12 0.67x, 7 x 7 0.74-0.82x, 3 x 3 0.80x; 5 x 5
 * on 7 x 7 0.95x; 5 x 5 on 14 x 14 1.31x (25 loads per vector beside dw_k's shared rows)
 * and planes under 9 outputs 1.03-1.36x keep their paths. Bit-identical to them: the same
 * products summed in the same order, a masked lane keeping its sum where they add 0 * w. */
#define ES_DWF_NV 16  /* vectors of a plane, at most: 256 outputs */
#define ES_DWF_MAXT 25 /* taps: 3 x 3 and 5 x 5 */
#define ES_DW_FLAT(p)                                                                      \
    ((p)->SH == 1 && (p)->SW == 1 && (p)->DH == 1 && (p)->DW == 1 && (p)->OW == (p)->W &&   \
     (p)->OH * (p)->OW >= 9 &&                                                             \
     (((p)->KH == 3 && (p)->KW == 3 && (p)->OH * (p)->OW <= 16 * ES_DWF_NV) ||             \
      ((p)->KH == 5 && (p)->KW == 5 && (p)->OH * (p)->OW <= 64)))

/* m[t ES_DWF_NV + v]: the lanes of output vector v (outputs 16 v ..) whose tap t lies in the
 * plane */
static void dwf_masks(__mmask16 *m, int nv, const es_conv_params *p) {
    const int K = p->KH, P = p->OH * p->OW;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 inv = _mm512_set1_ps(1.0f / (float)p->OW);
    int v, k, kh, kw;
    for (v = 0; v < nv; ++v) {
        const __m512i o = _mm512_add_epi32(iota, _mm512_set1_epi32(16 * v));
        /* o / OW: (o + 1/2) / OW is at least 1/(2 OW) from an integer, far more than the
         * float product's error for o < 256 */
        const __m512i oh = _mm512_cvttps_epi32(
            _mm512_mul_ps(_mm512_add_ps(_mm512_cvtepi32_ps(o), _mm512_set1_ps(0.5f)), inv));
        const __m512i ow = _mm512_sub_epi32(o, _mm512_mullo_epi32(oh, _mm512_set1_epi32(p->OW)));
        const __mmask16 in = _mm512_cmplt_epi32_mask(o, _mm512_set1_epi32(P));
        __mmask16 row[5], col[5];
        for (k = 0; k < K; ++k) { /* input row oh + k - PT, column ow + k - PL */
            const __m512i ih = _mm512_add_epi32(oh, _mm512_set1_epi32(k - p->PT));
            const __m512i iw = _mm512_add_epi32(ow, _mm512_set1_epi32(k - p->PL));
            row[k] = in & _mm512_cmpge_epi32_mask(ih, _mm512_setzero_si512()) &
                     _mm512_cmplt_epi32_mask(ih, _mm512_set1_epi32(p->H));
            col[k] = _mm512_cmpge_epi32_mask(iw, _mm512_setzero_si512()) &
                     _mm512_cmplt_epi32_mask(iw, _mm512_set1_epi32(p->W));
        }
        for (kh = 0; kh < K; ++kh)
            for (kw = 0; kw < K; ++kw) m[(kh * K + kw) * ES_DWF_NV + v] = row[kh] & col[kw];
    }
}

/* the NV output vectors of one channel (act applied) to its plane yc of P outputs; the
 * last vector's lanes past P are not stored */
ES_DW_INLINE void dwf_store(float *yc, const __m512 *acc, int P, const es_conv_params *p,
                            const int NV) {
    const __mmask16 last = (__mmask16)es_mask16(P - 16 * (NV - 1));
    int v;
#pragma GCC unroll 16
    for (v = 0; v < NV; ++v)
        _mm512_mask_storeu_ps(yc + 16 * v, v == NV - 1 ? last : (__mmask16)0xFFFFu,
                              act512v(acc[v], p->act, p->a0, p->a1));
}

/* channels [c0, c0 + NC) of the plane, NV vectors each (NV, NC constants in each instance:
 * the accumulators are registers) */
ES_DW_INLINE void dwf_channels(const float *x, const float *w, const float *b, float *y,
                               int c0, const __mmask16 *m, const ptrdiff_t *off, int T,
                               const es_conv_params *p, const int NV, const int NC) {
    const int P = p->OH * p->OW, HW = p->H * p->W;
    __m512 acc[2][ES_DWF_NV];
    int t, v, q;
#pragma GCC unroll 2
    for (q = 0; q < NC; ++q)
#pragma GCC unroll 16
        for (v = 0; v < NV; ++v) acc[q][v] = _mm512_set1_ps(b[c0 + q]);
    for (t = 0; t < T; ++t) {
        const __mmask16 *mt = m + t * ES_DWF_NV;
#pragma GCC unroll 2
        for (q = 0; q < NC; ++q) {
            const float *xt = x + (size_t)(c0 + q) * HW + off[t];
            const __m512 wv = _mm512_set1_ps(w[(size_t)(c0 + q) * T + t]);
#pragma GCC unroll 16
            for (v = 0; v < NV; ++v)
                acc[q][v] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mt[v], xt + 16 * v), wv,
                                            acc[q][v]);
        }
    }
#pragma GCC unroll 2
    for (q = 0; q < NC; ++q) dwf_store(y + (size_t)(c0 + q) * P, acc[q], P, p, NV);
}

/* channel c with the taps of one input row shared: for each tap row, output vector v's 16
 * inputs are one load (cur) and its neighbours' (prev, next: the loads of vectors v - 1 and
 * v + 1, kept in registers), and tap column kw is cur shifted by kw - K / 2 lanes (valignd);
 * the masks then apply to the FMAs (merge-masking: a masked lane keeps its sum). Loads
 * reach up to PT W + 16 floats before the plane and past it by the last vector's window:
 * dw_flat runs only channels whose reads stay inside the tensor this way. */
/* columns s .. s + 15 of the 48 in prev, cur, next (-2 <= s <= 2) from cur's first. Each s
 * has its own literal: with s >= 0 handed to dwk_shift, GCC 12 compiled the 5 x 5 instance
 * 1.57x slower (576 x 7 x 7 alone, 30 -> 47 us) */
ES_DW_INLINE __m512 dwf_shift(__m512 prev, __m512 cur, __m512 next, const int s) {
    return s == -2  ? ES_DWK_ALIGN(prev, cur, 14)
           : s == -1 ? ES_DWK_ALIGN(prev, cur, 15)
           : s == 1  ? ES_DWK_ALIGN(cur, next, 1)
           : s == 2  ? ES_DWK_ALIGN(cur, next, 2)
                     : cur;
}

ES_DW_INLINE void dwf_channel_rows(const float *x, const float *w, const float *b, float *y,
                                   int c, const __mmask16 *m, const es_conv_params *p,
                                   const int K, const int NV) {
    const int P = p->OH * p->OW, HW = p->H * p->W, T = K * K;
    const float *xc = x + (size_t)c * HW, *wc = w + (size_t)c * T;
    __m512 acc[ES_DWF_NV];
    int kh, kw, v;
#pragma GCC unroll 16
    for (v = 0; v < NV; ++v) acc[v] = _mm512_set1_ps(b[c]);
#pragma GCC unroll 5
    for (kh = 0; kh < K; ++kh) {
        const float *r = xc + (ptrdiff_t)(kh - p->PT) * p->W;
        __m512 wv[5], prev = _mm512_loadu_ps(r - 16), cur = _mm512_loadu_ps(r);
#pragma GCC unroll 5
        for (kw = 0; kw < K; ++kw) wv[kw] = _mm512_set1_ps(wc[kh * K + kw]);
#pragma GCC unroll 16
        for (v = 0; v < NV; ++v) {
            const __m512 next = _mm512_loadu_ps(r + 16 * (v + 1));
#pragma GCC unroll 5
            for (kw = 0; kw < K; ++kw)
                acc[v] = _mm512_mask3_fmadd_ps(dwf_shift(prev, cur, next, kw - K / 2), wv[kw],
                                               acc[v], m[(kh * K + kw) * ES_DWF_NV + v]);
            prev = cur;
            cur = next;
        }
    }
    dwf_store(y + (size_t)c * P, acc, P, p, NV);
}

/* every channel, NV vectors a plane: pairs of channels where NV <= 4, then the odd one */
ES_DW_INLINE void dwf_nv(const float *x, const float *w, const float *b, float *y,
                         const __mmask16 *m, const ptrdiff_t *off, int T,
                         const es_conv_params *p, const int NV) {
    const int HW = p->H * p->W, K = p->KH;
    /* channels [lo, hi) read within the tensor with whole-vector loads (dwf_channel_rows) */
    const int below = p->PT * p->W + 16, above = 16 * (NV + 1) + (K - 1 - p->PT) * p->W - HW;
    const int lo = (below + HW - 1) / HW, hi = p->C - (above > 0 ? (above + HW - 1) / HW : 0);
    int c = 0;
    if (p->PL == K / 2 && lo < hi) {
        for (; c < lo; ++c) dwf_channels(x, w, b, y, c, m, off, T, p, NV, 1);
        if (K == 3)
            for (; c < hi; ++c) dwf_channel_rows(x, w, b, y, c, m, p, 3, NV);
        else
            for (; c < hi; ++c) dwf_channel_rows(x, w, b, y, c, m, p, 5, NV);
    }
    if (NV <= 4)
        for (; c + 1 < p->C; c += 2) dwf_channels(x, w, b, y, c, m, off, T, p, NV, 2);
    for (; c < p->C; ++c) dwf_channels(x, w, b, y, c, m, off, T, p, NV, 1);
}

static void dw_flat(const float *x, const float *w, const float *b, float *y,
                    const es_conv_params *p) {
    const int K = p->KH, T = K * K, nv = (p->OH * p->OW + 15) / 16;
    __mmask16 m[ES_DWF_MAXT * ES_DWF_NV];
    ptrdiff_t off[ES_DWF_MAXT];
    int t;
    dwf_masks(m, nv, p);
    for (t = 0; t < T; ++t) off[t] = (ptrdiff_t)(t / K - p->PT) * p->W + (t % K - p->PL);
    switch (nv) {
#define ES_DWF_CASE(N)                                                                     \
    case N: dwf_nv(x, w, b, y, m, off, T, p, N); break;
    ES_DWF_CASE(1) ES_DWF_CASE(2) ES_DWF_CASE(3) ES_DWF_CASE(4) ES_DWF_CASE(5) ES_DWF_CASE(6)
    ES_DWF_CASE(7) ES_DWF_CASE(8) ES_DWF_CASE(9) ES_DWF_CASE(10) ES_DWF_CASE(11)
    ES_DWF_CASE(12) ES_DWF_CASE(13) ES_DWF_CASE(14) ES_DWF_CASE(15)
    default: dwf_nv(x, w, b, y, m, off, T, p, 16); break;
#undef ES_DWF_CASE
    }
}

/* ---- AVX-512: 3 x 3 and 5 x 5, rows of the plane, taps fixed at compile time -----------
 * The direct rows above take KH, KW and the stride at run time, so every tap pays a loop
 * test, a branch per output row and a mask lookup; run on a stride-1 plane it was 1.2-1.5x
 * slower than the phases. Here the square K x K, stride-S (1 or 2) convs of the MobileNets and
 * EfficientNet get their own instances (dwk_block for each K, S): 3 x 3's 9 weights are in
 * registers, R output rows of 16 columns accumulate at once (R FMA chains, and an input row
 * read by several of them is loaded once: K + (R - 1) S rows for R K^2 multiplies), and the
 * row and tap loops unroll, so each tap is an FMA on a loaded or shifted row. R is 8
 * (ES_DWK_ROWS): against 4 rows, 0.78-0.92x the time on 3 x 3 and 0.79-0.83x on 5 x 5 at stride
 * 1 (5 x 5's 25 weights do not fit beside the accumulators: they are broadcast operands, see
 * dwk_block; 6 rows gained only 0.92x), about the same at stride 2. At stride 2 one input
 * row's taps come from three loads and permutes (dwk_s2_taps), not two loads and a permute
 * per tap (as dwd_load does): 0.80-0.84x the time on 5 x 5, 0.90-0.97x on 3 x 3. Lanes whose
 * input column falls in the padding or past the row are masked to zero as in dwd_load, and
 * input rows outside the plane are skipped. Any width, so it also takes the 14 x 14 and 28 x 28
 * planes the phases ran at a third of this speed. */
#define ES_DWK_ROWS 8
#define ES_DWK(p)                                                                          \
    ((p)->KH == (p)->KW && ((p)->KH == 3 || (p)->KH == 5) && (p)->SH == (p)->SW &&         \
     ((p)->SH == 1 || (p)->SH == 2) && (p)->DH == 1 && (p)->DW == 1)

/* output rows [oh, oh + nr), nr <= R, columns [ow, ow + 16 NB) of one channel. 3 x 3 takes
 * two 16-column blocks at once (NB = 2, by dwk_plane): one block's FMAs go to the at most
 * three output rows an input row feeds, so they formed three dependent chains of 4-cycle
 * FMAs and the core ran ~28 GMAC/s, half its FMA rate, with the data in L2 as out of it;
 * two blocks keep six chains in flight (16 accumulators, 9 weights and 6 taps: 31 of the 32
 * registers; 5 x 5's 25 weights leave no room). Same products in the same order: the
 * outputs are bit-identical to NB = 1. Kernel old (NB = 1) / new alternating in one process,
 * input rewritten before each run as its producer would, p50 of 5 rounds x 30, load
 * 1.5-1.8: MobileNetV2's 32 x 112 x 112 s1 167 -> 153 us, 96 x 112 x 112 s2 217 -> 181,
 * 144 x 56 x 56 s1 194 -> 184, s2 75 -> 65, 192 x 28 x 28 0.96; planes of 16 or fewer
 * columns keep NB = 1 (14 x 14: 1.01-1.02, within the noise).
 * 3 x 3 keeps its 9 weights as vectors (wk); 5 x 5 takes each weight as a broadcast operand
 * of its FMA (wc, vfmadd231ps m32{1to16}): as 25 vectors on the stack the compiler read most
 * of them back as 64-byte operands, two load ops each beside the taps' own loads. Kernel
 * old/new alternating, p50 of 5 rounds x 30, load 1.6, EfficientNet-B0's 5 x 5: 672 x 14 x 14
 * s1 175.6 -> 141.8 us, 480 x 14 x 14 125 -> 101, 240 x 28 x 28 s1 0.89, s2 0.85,
 * 144 x 56 x 56 s2 0.91; 3 x 3 0.98-1.00; bit-identical.
 * At stride 1 the taps kw of a 16-column block are one shift (valignd) of two 16-column loads,
 * the next block's loads shared, instead of a load per tap: 3 loads per input row for two
 * 3 x 3 blocks, not 6. Kernel old/new alternating, p50 of 3 rounds x 30, load 1.9, two runs:
 * 32 x 112 x 112 151 -> 142 us (0.93-0.94), 144 x 56 x 56 0.94-0.965, 192 x 28 x 28
 * 0.95-0.96, 384 x 14 x 14 0.95-0.96, 5 x 5 240 x 28 x 28 0.905-0.94, 480 x 14 x 14
 * 0.89-0.93; planes in L2 alike (8 x 112 x 112 0.94-0.96). The 3 x 3 gain hangs on register
 * allocation: dwk_shift written as a switch spilled more and gave it back (0.99-1.05).
 * A band of R output rows whose input rows all lie inside the plane (every band of a large
 * plane but the first and the last) runs an instance without the padding-row test (IN):
 * with the test in each unrolled row GCC kept the accumulators on the stack, so every FMA
 * read its sum from memory and wrote it back, chaining the FMAs through store forwarding.
 * The bands and the edges are two instances of the whole loop (dw_k_bands, dw_k_edges):
 * built into one function, the edge code of planes with no clear band (14 x 14, 28 x 28
 * stride 2) came out 1.06x slower. Kernel old/new alternating, min of 7 rounds x 40, input
 * rewritten before each run, load ~0.3: MobileNetV2's 32 x 112 x 112 s1 133 -> 114 us,
 * 96 x 112 x 112 s2 173 -> 152, 144 x 56 x 56 s1 0.89, s2 0.91, 192 x 28 x 28 s1 0.93;
 * EfficientNet-B0's 5 x 5 240 x 28 x 28 s1 0.88, 144 x 56 x 56 s2 0.84; planes without a
 * clear band 1.00-1.01. Same products in the same order: the outputs are unchanged. */
/* stride 2: the 16 outputs' taps kw < K of one input row, columns c + kw, c + kw + 2, ...,
 * from three loads of 16 columns (c, c + 16, c + 32; m their masks) instead of two per
 * tap: the even and the odd columns of the first 32 are one permute each, and tap 2 j + q
 * is those shifted down j lanes with the last j filled from the third load */
ES_DW_INLINE void dwk_s2_taps(__m512 *v, const float *xr, int c, const unsigned long long *m,
                              const int K) {
    const __m512 a = _mm512_maskz_loadu_ps((__mmask16)m[0], xr + c);
    const __m512 b = _mm512_maskz_loadu_ps((__mmask16)m[1], xr + c + 16);
    const __m512 e = _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
                                                                 20, 22, 24, 26, 28, 30), b);
    const __m512 o = _mm512_permutex2var_ps(a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19,
                                                                 21, 23, 25, 27, 29, 31), b);
    __m512 t;
    v[0] = e;
    v[1] = o;
    if (K < 3) return;
    t = _mm512_maskz_loadu_ps((__mmask16)m[2], xr + c + 32); /* columns c + 32 .. c + 47 */
    v[2] = _mm512_permutex2var_ps(e, _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14, 15, 16), t);
    if (K < 5) return;
    v[3] = _mm512_permutex2var_ps(o, _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14, 15, 17), t);
    v[4] = _mm512_permutex2var_ps(e, _mm512_setr_epi32(2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                       14, 15, 16, 18), t);
}

ES_DW_INLINE void dwk_block(const float *xc, const __m512 *wk, const float *wc, __m512 bias,
                            float *yc, int oh, int nr, int ow, const es_conv_params *p,
                            const int K, const int S, const int R, const int NB,
                            const int IN) {
    const int ih0 = oh * S - p->PT, c0 = ow * S - p->PL, n = p->OW - ow;
    __m512 acc[2][ES_DWK_ROWS], v[2][5];
    unsigned long long m[2][5];
    int i, kw, r, q;
    for (q = 0; q < NB; ++q)
        for (r = 0; r < R; ++r) acc[q][r] = bias;
    for (q = 0; q < NB; ++q) /* 16-column loads from c0 + 16 q (stride 2: 32 q) on */
        for (kw = 0; kw < (S == 1 ? K : 3); ++kw)
            m[q][kw] = dwd_mask(c0 + (S == 1 ? 16 * (q + kw) : 32 * q + 16 * kw), p->W, 1);
#pragma GCC unroll 24
    for (i = 0; i < (R - 1) * S + K; ++i) { /* input row ih0 + i */
        const float *xr;
        if (!IN && (ih0 + i < 0 || ih0 + i >= p->H)) continue; /* padding: adds zero */
        xr = xc + (size_t)(ih0 + i) * p->W;
        if (S == 2)
#pragma GCC unroll 2
            for (q = 0; q < NB; ++q) dwk_s2_taps(v[q], xr, c0 + 32 * q, m[q], K);
        if (S == 1) { /* taps of block q from columns c0 + 16 q, one load per 16 columns */
            const __m512 x0 = _mm512_maskz_loadu_ps((__mmask16)m[0][0], xr + c0);
            const __m512 x1 = _mm512_maskz_loadu_ps((__mmask16)m[0][1], xr + c0 + 16);
#pragma GCC unroll 8
            for (kw = 0; kw < K; ++kw) v[0][kw] = dwk_shift(x0, x1, kw);
            if (NB == 2) {
                const __m512 x2 = _mm512_maskz_loadu_ps((__mmask16)m[0][2], xr + c0 + 32);
#pragma GCC unroll 8
                for (kw = 0; kw < K; ++kw) v[1][kw] = dwk_shift(x1, x2, kw);
            }
        }
#pragma GCC unroll 8
        for (kw = 0; kw < K; ++kw)
#pragma GCC unroll 8
            for (r = 0; r < R; ++r) /* the tap row of output row oh + r */
                if (i - r * S >= 0 && i - r * S < K)
#pragma GCC unroll 2
                    for (q = 0; q < NB; ++q)
                        acc[q][r] = _mm512_fmadd_ps(
                            v[q][kw],
                            K == 3 ? wk[(i - r * S) * K + kw]
                                   : _mm512_set1_ps(wc[(i - r * S) * K + kw]),
                            acc[q][r]);
    }
    for (q = 0; q < NB; ++q)
        for (r = 0; r < nr; ++r)
            _mm512_mask_storeu_ps(yc + (size_t)(oh + r) * p->OW + ow + 16 * q,
                                  (__mmask16)es_mask16(n - 16 * q),
                                  act512v(acc[q][r], p->act, p->a0, p->a1));
}

/* whether the R output rows from oh read only input rows inside the plane */
static inline int dwk_inner(int oh, const es_conv_params *p, int K, int S) {
    const int ih0 = oh * S - p->PT;
    return ih0 >= 0 && ih0 + (ES_DWK_ROWS - 1) * S + K <= p->H;
}

/* the nr <= R output rows from oh of one channel, every column: 3 x 3 two 16-column blocks
 * at a time, then one */
ES_DW_INLINE void dwk_band(const float *xc, const __m512 *wk, const float *wc, __m512 bias,
                           float *yc, int oh, int nr, const es_conv_params *p, const int K,
                           const int S, const int IN) {
    int ow = 0;
    if (K == 3)
        for (; ow + 16 < p->OW; ow += 32)
            dwk_block(xc, wk, wc, bias, yc, oh, nr, ow, p, K, S, ES_DWK_ROWS, 2, IN);
    for (; ow < p->OW; ow += 16)
        dwk_block(xc, wk, wc, bias, yc, oh, nr, ow, p, K, S, ES_DWK_ROWS, 1, IN);
}

ES_DW_INLINE void dwk_plane(const float *xc, const float *wc, float b, float *yc,
                            const es_conv_params *p, const int K, const int S,
                            const int BANDS) {
    const int R = ES_DWK_ROWS;
    __m512 wk[9];
    const __m512 bias = _mm512_set1_ps(b);
    int t, oh;
    for (t = 0; t < (K == 3 ? 9 : 0); ++t) wk[t] = _mm512_set1_ps(wc[t]);
    for (oh = 0; oh < p->OH; oh += R) {
        const int nr = p->OH - oh < R ? p->OH - oh : R;
        if (BANDS && dwk_inner(oh, p, K, S)) /* no padding row: the test-free rows */
            dwk_band(xc, wk, wc, bias, yc, oh, nr, p, K, S, 1);
        else
            dwk_band(xc, wk, wc, bias, yc, oh, nr, p, K, S, 0);
    }
}

ES_DW_INLINE void dwk_planes(const float *x, const float *w, const float *b, float *y,
                             const es_conv_params *p, const int BANDS) {
    const int K = p->KH, ksz = K * K, P = p->OH * p->OW;
    int c;
    for (c = 0; c < p->C; ++c) {
        const float *xc = x + (size_t)c * p->H * p->W, *wc = w + (size_t)c * ksz;
        float *yc = y + (size_t)c * P;
        if (K == 3 && p->SH == 1) dwk_plane(xc, wc, b[c], yc, p, 3, 1, BANDS);
        else if (K == 3) dwk_plane(xc, wc, b[c], yc, p, 3, 2, BANDS);
        else if (p->SH == 1) dwk_plane(xc, wc, b[c], yc, p, 5, 1, BANDS);
        else dwk_plane(xc, wc, b[c], yc, p, 5, 2, BANDS);
    }
}

/* the two instances (see dwk_block's IN): planes with a band clear of the padding, and the
 * others, whose code stays what it was before the bands had their own instance */
ES_DW_NOINLINE void dw_k_bands(const float *x, const float *w, const float *b, float *y,
                               const es_conv_params *p) {
    dwk_planes(x, w, b, y, p, 1);
}

ES_DW_NOINLINE void dw_k_edges(const float *x, const float *w, const float *b, float *y,
                               const es_conv_params *p) {
    dwk_planes(x, w, b, y, p, 0);
}

static void dw_k(const float *x, const float *w, const float *b, float *y,
                 const es_conv_params *p) {
    int oh;
    for (oh = 0; oh < p->OH; oh += ES_DWK_ROWS)
        if (dwk_inner(oh, p, p->KH, p->SH)) {
            dw_k_bands(x, w, b, y, p);
            return;
        }
    dw_k_edges(x, w, b, y, p);
}
#endif

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
#if defined(__AVX512F__)
    if (ES_DW_FLAT(p)) {
        dw_flat(x, w, b, y, p);
        return;
    }
    /* rows of 12+ outputs beat the lanes too (5 x 5 on 14 x 14: 0.7x); 7 x 7 and narrower
     * fill too few of a row's 16 lanes, and stay there */
    if (ES_DWK(p) && (OW >= 12 || !ES_F32_DW_LANES(OH, OW, KH, KW))) {
        dw_k(x, w, b, y, p);
        return;
    }
#endif
    if (ES_F32_DW_LANES(OH, OW, KH, KW)) {
        dw_lanes(x, w, b, scratch, y, p);
        return;
    }
#if defined(__AVX512F__)
    if (ES_DW_DIRECT(p)) {
        dw_direct(x, w, b, y, p);
        return;
    }
#endif
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
