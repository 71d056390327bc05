/* The stride phases of one channel's zero-padded fp32 plane, shared by the depthwise
 * kernel (kernels/dwconv_f32.c) and the GEMM's phase path (kernels/conv_f32_fast.c):
 * both read every tap of a strided, padded conv as one unit-stride row of a phase. */
#ifndef ES_PHASES_F32_H
#define ES_PHASES_F32_H

#include <stddef.h>
#include <string.h>

#include "edgesmith_rt.h"
#if defined(__AVX512F__)
#include <immintrin.h>

/* the lanes i of 16 with lo <= i < hi */
static inline __mmask16 es_f32_lanes(int lo, int hi) {
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    return hi <= lo ? (__mmask16)0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
#endif

/* Row-major phase planes of one channel: padded row r = q SH + a, column u SW + b goes to
 * ph[(a SW + b) * pq + q WQ + u]. Only what depends on the input is written: the padding
 * rows and columns, the slack after each plane and the padding of row (one padded row of
 * WQ SW floats, for SW > 1) are the same for every channel, zeroed once per call by the
 * caller. Per input row that leaves one copy, and for SW > 1 one de-interleave of the padded
 * row (GCC vectorises SW = 2's pair); the memsets of every padded row cost 45 % of a
 * stride-1 depthwise conv's time here. */
/* Whether es_f32_phases writes every column (padding included) of each phase row that an
 * input row lands in, so a caller need zero only the padding rows and the slack: the AVX-512
 * SW = 2 path below, when some input column is read at all. */
static inline int es_f32_phases_whole_rows(const es_conv_params *p) {
#if defined(__AVX512F__)
    return p->SW == 2 && p->PL < (p->OW - 1) * p->SW + (p->KW - 1) * p->DW + 1;
#else
    (void)p;
    return 0;
#endif
}

#if defined(__AVX512F__)
/* The even and odd columns of a row, n of each: d0[u] = xr[2 u], d1[u] = xr[2 u + 1], zero
 * where the column lies outside [lo, hi) (only columns inside it are read): 32 columns per
 * step, loaded under masks, split by two two-source permutes. The stride-2 phases below and
 * the fp32 GEMM's stem ring (conv_f32_fast.c) both split their rows here. */
static inline void es_f32_split2(float *d0, float *d1, const float *xr, int lo, int hi, int n) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                         28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    int u;
    for (u = 0; u < n; u += 16) {
        const int i0 = 2 * u;
        const __m512 v0 = _mm512_maskz_loadu_ps(es_f32_lanes(lo - i0, hi - i0), xr + i0);
        const __m512 v1 =
            _mm512_maskz_loadu_ps(es_f32_lanes(lo - i0 - 16, hi - i0 - 16), xr + i0 + 16);
        const __m512 e = _mm512_permutex2var_ps(v0, ev, v1);
        const __m512 o = _mm512_permutex2var_ps(v0, od, v1);
        if (n - u >= 16) { /* whole vectors stored plainly: masked, the stem ran 1.5 % slower */
            _mm512_storeu_ps(d0 + u, e);
            _mm512_storeu_ps(d1 + u, o);
        } else {
            const __mmask16 k = es_f32_lanes(0, n - u);
            _mm512_mask_storeu_ps(d0 + u, k, e);
            _mm512_mask_storeu_ps(d1 + u, k, o);
        }
    }
}
#endif

static inline void es_f32_phases(float *ph, float *row, const float *xc,
                                 const es_conv_params *p, int HQ, int WQ, size_t pq) {
    const int H = p->H, W = p->W, SH = p->SH, SW = p->SW, PL = p->PL;
    const int Wp = (p->OW - 1) * SW + (p->KW - 1) * p->DW + 1;
    const int lo = PL < Wp ? PL : Wp, hi = (PL + W) < Wp ? (PL + W) : Wp;
    int q, a, b, u;
    if (hi <= lo) return; /* no input column is read: all padding */
    for (a = 0; a < SH; ++a)
        for (q = 0; q < HQ; ++q) {
            const int ih = q * SH + a - p->PT;
            float *d0 = ph + (size_t)a * SW * pq + (size_t)q * WQ;
            if (ih < 0 || ih >= H) continue;
            if (SW == 1) {
                memcpy(d0 + lo, xc + (size_t)ih * W, sizeof(float) * (size_t)(hi - lo));
                continue;
            }
#if defined(__AVX512F__)
            if (SW == 2) {
                /* Straight from the input row, no copy into row: padded column i is
                 * xr[i] = x[i - PL], loaded under a mask of [lo, hi) (zeros outside), and the
                 * even and odd columns of each 32 are two two-source permutes. ResNet-18's 1x1
                 * s2 64 -> 128 downsample at 56 x 56, kernel old/new alternating, per-round
                 * min, load 1.8: 184.5 -> 158.3 us; 3x3 s2 3 -> 16 stem at 224: 0.97. Every
                 * column of both phase rows is stored (es_f32_phases_whole_rows). */
                es_f32_split2(d0, d0 + pq, xc + (size_t)ih * W - PL, lo, hi, WQ);
                continue;
            }
#endif
            memcpy(row + lo, xc + (size_t)ih * W, sizeof(float) * (size_t)(hi - lo));
            if (SW == 2) { /* one pass, two outputs: GCC vectorises the pair */
                float *d1 = d0 + pq;
                for (u = 0; u < WQ; ++u) {
                    d0[u] = row[2 * u];
                    d1[u] = row[2 * u + 1];
                }
            } else {
                for (b = 0; b < SW; ++b)
                    for (u = 0; u < WQ; ++u) d0[(size_t)b * pq + u] = row[u * SW + b];
            }
        }
}

#endif
