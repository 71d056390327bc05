/* The int8 input as padded planes of uint8 channel quads, the layout both the pixel-lane
 * conv (kernels/conv_int8_dot.c: 16 consecutive words of a plane are one vector) and the
 * channel-lane conv's row tiles (kernels/conv_int8_cl.c: one word of a plane broadcast per
 * pixel) read: word (c4, r, q) holds the 4 channels of quad c4 at padded pixel (r, q), + 128.
 * Stride 2 splits each plane into its (row parity, column parity) phases, so every tap of a
 * stride-1 or stride-2 conv reads consecutive words for consecutive output pixels. */
#ifndef ES_QUADS_I8_H
#define ES_QUADS_I8_H

#include <stddef.h>
#include <stdint.h>

#include "edgesmith_rt.h"
#include "es_simd.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ES_QUADS_VNNI 1
#include <immintrin.h>
#endif

/* dst[q] for q < n: the bytes s0[q], s1[q], s2[q], s3[q] + 128 where keep has them, pad
 * bytes elsewhere (x + 128 as a byte is x ^ 0x80). Separate restrict pointers and no
 * branches, so compilers vectorise it into byte interleaves. */
static void quads_row(uint32_t *restrict dst, size_t n, const int8_t *restrict s0,
                      const int8_t *restrict s1, const int8_t *restrict s2,
                      const int8_t *restrict s3, uint32_t keep, uint32_t pad4) {
    size_t q;
    for (q = 0; q < n; ++q) {
        const uint32_t v = ((uint32_t)(uint8_t)s0[q] | (uint32_t)(uint8_t)s1[q] << 8 |
                            (uint32_t)(uint8_t)s2[q] << 16 | (uint32_t)(uint8_t)s3[q] << 24) ^
                           0x80808080u;
        dst[q] = (v & keep) | (pad4 & ~keep);
    }
}

#if defined(ES_QUADS_VNNI)
/* quads_row_vnni for short rows (the stem's 48 or 112 words, a 6x6 plane's 36) and for its
 * tail: every step vectorised, the last one under byte masks for loads and word masks for
 * stores, nothing written past n */
static void quads_row_masked(uint32_t *restrict dst, size_t n, const int8_t *restrict s0,
                             const int8_t *restrict s1, const int8_t *restrict s2,
                             const int8_t *restrict s3) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i lo = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    size_t q;
    for (q = 0; q < n; q += 64) {
        const size_t rem = n - q < 64 ? n - q : 64;
        const __mmask64 k = rem == 64 ? ~(__mmask64)0 : (((__mmask64)1 << rem) - 1);
        const __m512i a = _mm512_maskz_loadu_epi8(k, s0 + q), b = _mm512_maskz_loadu_epi8(k, s1 + q);
        const __m512i c = _mm512_maskz_loadu_epi8(k, s2 + q), d = _mm512_maskz_loadu_epi8(k, s3 + q);
        const __m512i ab0 = _mm512_unpacklo_epi8(a, b), ab1 = _mm512_unpackhi_epi8(a, b);
        const __m512i cd0 = _mm512_unpacklo_epi8(c, d), cd1 = _mm512_unpackhi_epi8(c, d);
        const __m512i w0 = _mm512_unpacklo_epi16(ab0, cd0), w1 = _mm512_unpackhi_epi16(ab0, cd0);
        const __m512i w2 = _mm512_unpacklo_epi16(ab1, cd1), w3 = _mm512_unpackhi_epi16(ab1, cd1);
        const __m512i x01l = _mm512_permutex2var_epi64(w0, lo, w1);
        const __m512i x01h = _mm512_permutex2var_epi64(w0, hi, w1);
        const __m512i x23l = _mm512_permutex2var_epi64(w2, lo, w3);
        const __m512i x23h = _mm512_permutex2var_epi64(w2, hi, w3);
        const __m512i out[4] = {_mm512_shuffle_i64x2(x01l, x23l, 0x44),
                                _mm512_shuffle_i64x2(x01l, x23l, 0xee),
                                _mm512_shuffle_i64x2(x01h, x23h, 0x44),
                                _mm512_shuffle_i64x2(x01h, x23h, 0xee)};
        int i;
        for (i = 0; i < 4 && (size_t)(16 * i) < rem; ++i) {
            const size_t left = rem - 16 * (size_t)i;
            const __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
            _mm512_mask_storeu_epi32(dst + q + 16 * i, m, _mm512_xor_si512(out[i], flip));
        }
    }
}

/* quads_row for four whole channels (keep all ones), 64 words per step in byte unpacks,
 * the tail in quads_row_masked: GCC's vectorisation of the plain loop takes twice the time.
 * Out of line: inlined, it slows the stride-2 stem conv by 5%. */
ES_NOINLINE static void quads_row_vnni(uint32_t *restrict dst, size_t n, const int8_t *restrict s0,
                           const int8_t *restrict s1, const int8_t *restrict s2,
                           const int8_t *restrict s3) {
    size_t q = 0;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i lo = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (; q + 64 <= n; q += 64) {
        const __m512i a = _mm512_loadu_si512(s0 + q), b = _mm512_loadu_si512(s1 + q);
        const __m512i c = _mm512_loadu_si512(s2 + q), d = _mm512_loadu_si512(s3 + q);
        const __m512i ab0 = _mm512_unpacklo_epi8(a, b), ab1 = _mm512_unpackhi_epi8(a, b);
        const __m512i cd0 = _mm512_unpacklo_epi8(c, d), cd1 = _mm512_unpackhi_epi8(c, d);
        /* per 128-bit lane L: w0 = words 16L..16L+3, w1 = +4..7, w2 = +8..11, w3 = +12..15 */
        const __m512i w0 = _mm512_unpacklo_epi16(ab0, cd0), w1 = _mm512_unpackhi_epi16(ab0, cd0);
        const __m512i w2 = _mm512_unpacklo_epi16(ab1, cd1), w3 = _mm512_unpackhi_epi16(ab1, cd1);
        /* lanes back in order: words 0..15 are lane 0 of w0, w1, w2, w3, and so on */
        const __m512i x01l = _mm512_permutex2var_epi64(w0, lo, w1); /* w0.L0 w1.L0 w0.L1 w1.L1 */
        const __m512i x01h = _mm512_permutex2var_epi64(w0, hi, w1); /* .L2, .L3 */
        const __m512i x23l = _mm512_permutex2var_epi64(w2, lo, w3);
        const __m512i x23h = _mm512_permutex2var_epi64(w2, hi, w3);
        _mm512_storeu_si512(dst + q, _mm512_xor_si512(
            _mm512_shuffle_i64x2(x01l, x23l, 0x44), flip));
        _mm512_storeu_si512(dst + q + 16, _mm512_xor_si512(
            _mm512_shuffle_i64x2(x01l, x23l, 0xee), flip));
        _mm512_storeu_si512(dst + q + 32, _mm512_xor_si512(
            _mm512_shuffle_i64x2(x01h, x23h, 0x44), flip));
        _mm512_storeu_si512(dst + q + 48, _mm512_xor_si512(
            _mm512_shuffle_i64x2(x01h, x23h, 0xee), flip));
    }
    if (q < n) quads_row_masked(dst + q, n - q, s0 + q, s1 + q, s2 + q, s3 + q);
}
#endif

/* even[q] = row[2q], odd[q] = row[2q + 1] for q < ceil(Wp / 2), the odd column past an odd
 * Wp the pad word: whole pairs in a branch-free loop over restrict pointers, which
 * compilers vectorise into two-source permutes, then the last lone column */
static void deal_row(uint32_t *restrict even, uint32_t *restrict odd,
                     const uint32_t *restrict row, int Wp, uint32_t pad4) {
    const int half = Wp / 2;
    int q;
    for (q = 0; q < half; ++q) {
        even[q] = row[2 * q];
        odd[q] = row[2 * q + 1];
    }
    if (Wp & 1) {
        even[half] = row[Wp - 1];
        odd[half] = pad4;
    }
}

/* even[q] = row[2q] for q < ceil(Wp / 2): deal_row where no tap reads the odd columns */
static void even_row(uint32_t *restrict even, const uint32_t *restrict row, int Wp) {
    int q;
    for (q = 0; q < (Wp + 1) / 2; ++q) even[q] = row[2 * q];
}

/* The padded input as planes of uint8 channel quads: word (c4, r, q) holds the bytes
 * x[4*c4 + i][r - PT][q - PL] + 128 for in-bounds pixels, x_zp + 128 elsewhere (padding
 * reads as x = x_zp) and for the channels past C of the last quad (their weights are zero;
 * those lanes read channel 4*c4 and are masked to pad). With S == 1 the plane of quad c4
 * is xt[c4][r][q]; with S == 2 it is split into phases, xt[c4][r % 2][q % 2][r / 2][q / 2],
 * each row built whole in rowbuf first and dealt out by column parity. Tap (kh, kw) reads
 * row phase kh*DH % 2 and column phase kw*DW % 2, so the odd row phase is made only when
 * some kh*DH is odd (DH odd and KH > 1), the odd column phase likewise: a 1x1 stride-2
 * conv (ResNet's downsampling shortcut) reads phase (0, 0) alone, and the other three,
 * three quarters of the conversion, are never written (a last tile's unused lanes may read
 * them; what they compute is not stored). */
static void to_quads_u8(const int8_t *x, uint32_t *xt, uint32_t *rowbuf, const es_dot_plan *d,
                        const es_conv_params *p) {
    const int H = p->H, W = p->W, Wp = d->Wp, PL = p->PL, S = d->S;
    const size_t phase = (size_t)d->Hq * d->Wq, plane = phase * S * S;
    const uint32_t pad4 = (uint8_t)(p->x_zp + 128) * 0x01010101u;
    const int lo = PL < Wp ? PL : Wp, hi = PL + W < Wp ? PL + W : Wp;
    const int odd_rows = S == 2 && (p->DH & 1) && p->KH > 1;
    const int odd_cols = S == 2 && (p->DW & 1) && p->KW > 1;
    int c4, r, q, i;
    for (c4 = 0; c4 < d->C4; ++c4) {
        const uint32_t keep =
            4 * c4 + 3 < p->C ? 0xffffffffu : 0xffffffffu >> (8 * (4 * c4 + 4 - p->C));
        uint32_t *xc = xt + (size_t)c4 * plane;
        const int8_t *src[4];
        for (i = 0; i < 4; ++i) {
            const int c = 4 * c4 + i < p->C ? 4 * c4 + i : 4 * c4;
            src[i] = x + (size_t)c * H * W;
        }
        if (S == 1 && PL == 0 && Wp == W && p->PT == 0 && d->Hp <= H) {
            /* no padding and no extra columns (a 1x1 conv): the rows are contiguous on
             * both sides, so the plane is one long row, whatever the row length */
#if defined(ES_QUADS_VNNI)
            if (keep == 0xffffffffu) {
                quads_row_vnni(xc, (size_t)d->Hp * Wp, src[0], src[1], src[2], src[3]);
                continue;
            }
#endif
            quads_row(xc, (size_t)d->Hp * Wp, src[0], src[1], src[2], src[3], keep, pad4);
            continue;
        }
        if (odd_rows && (d->Hp & 1)) /* phase rows 1 hold one row fewer: pad the last */
            for (q = 0; q < 2 * d->Wq; ++q)
                xc[2 * phase + (size_t)(q / d->Wq) * phase + (size_t)(d->Hq - 1) * d->Wq +
                   q % d->Wq] = pad4;
        for (r = 0; r < d->Hp; r += S == 2 && !odd_rows ? 2 : 1) {
            const int ih = r - p->PT;
            uint32_t *dst = S == 1 ? xc + (size_t)r * Wp : rowbuf;
            const size_t row = (size_t)ih * W;
            if (ih < 0 || ih >= H) {
                for (q = 0; q < Wp; ++q) dst[q] = pad4;
            } else {
                for (q = 0; q < lo; ++q) dst[q] = pad4;
                for (q = hi > lo ? hi : lo; q < Wp; ++q) dst[q] = pad4;
                if (hi > lo) { /* lo == PL here: the row's first input column */
#if defined(ES_QUADS_VNNI)
                    if (keep == 0xffffffffu) /* byte unpacks, as for one long row */
                        quads_row_vnni(dst + lo, (size_t)(hi - lo), src[0] + row,
                                       src[1] + row, src[2] + row, src[3] + row);
                    else
#endif
                        quads_row(dst + lo, (size_t)(hi - lo), src[0] + row, src[1] + row,
                                  src[2] + row, src[3] + row, keep, pad4);
                }
            }
            if (S == 2) { /* deal the row out to its two column phases */
                uint32_t *even = xc + (size_t)(r & 1) * 2 * phase + (size_t)(r >> 1) * d->Wq;
                if (odd_cols)
                    deal_row(even, even + phase, rowbuf, Wp, pad4);
                else
                    even_row(even, rowbuf, Wp);
            }
        }
    }
}

#endif /* ES_QUADS_I8_H */
