/* Conv2d, int8, one group, as im2col + a u8 x s8 dot-product GEMM: the layout of
 * AVX-512 VNNI's vpdpbusd, which multiplies 4 unsigned bytes by 4 signed bytes and adds
 * the four products into one int32 lane, 64 multiply-adds per instruction.
 *
 * vpdpbusd wants one operand unsigned, so activations are moved to uint8 by adding 128
 * (u = x + 128). Then
 *     sum_k (x_k - x_zp) w_k = sum_k u_k w_k - (x_zp + 128) sum_k w_k
 * and the second term is constant per output channel: the generator folds it into the
 * bias it passes here (bias_u8[m] = bias[m] - (x_zp + 128) * sum_k w[m][k]). Padding taps
 * read u = x_zp + 128, i.e. x = x_zp, exactly what the reference treats padding as. Every
 * sum is exact in int32 and requantisation is es_mul_q, so results are bit-identical to
 * es_conv2d_i8 (conv_int8.c), the oracle in tests.
 *
 w4: [M][KH][KW][C4 * 4] int8: the weights tap-major with channels innermost, zero-padded
 * to a multiple of 4 channels, so 4 channels of one tap share a 32-bit lane. The input is
 * first rewritten once as padded HWC uint8 (to_hwc_u8), which makes every im2col entry a
 * 32-bit copy with no bounds checks. Output pixels go in tiles of 16; the tile's block is
 * col[k4][pixel] 32-bit words, so one 64-byte load holds 16 pixels x 4 channels. The micro-kernel keeps 8 output channels x 16 pixels in registers and
 * broadcasts 4 weight bytes per channel. Without VNNI the same tile loops run in plain C.
 * Scratch: ES_I8_DOT_SCRATCH(...) bytes: one tile, then the HWC input. */
#include <string.h>

#include "../edgesmith_rt.h"
#include "../es_simd.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ES_DOT_VNNI 1
#include <immintrin.h>
#endif

#define TP 16 /* pixels per tile */
#define TM 8  /* output channels per micro-kernel call */

/* The input as padded HWC uint8: xt[r][q][c] = x[c][r - PT][q - PL] + 128 for in-bounds
 * rows r < Hp and columns q < Wp, x_zp + 128 elsewhere (padding reads as x = x_zp);
 * channels padded to C4 * 4 (their weights are zero). Each (pixel, tap) then owns C4
 * consecutive 32-bit words, 4 channels each. */
static void to_hwc_u8(const int8_t *x, uint8_t *xt, int Hp, int Wp, int C4,
                      const es_conv_params *p) {
    const int H = p->H, W = p->W, C = p->C, row = Wp * C4 * 4;
    int c, h, w;
    memset(xt, p->x_zp + 128, (size_t)Hp * row);
    for (c = 0; c < C; ++c)
        for (h = 0; h < H; ++h) {
            const int r = h + p->PT;
            const int8_t *src = x + ((size_t)c * H + h) * W;
            uint8_t *dst;
            if (r >= Hp) break;
            dst = xt + (size_t)r * row + (size_t)p->PL * C4 * 4 + c;
            for (w = 0; w < W && w + p->PL < Wp; ++w)
                dst[(size_t)w * C4 * 4] = (uint8_t)((int32_t)src[w] + 128);
        }
}

/* the tile at output pixel p0: col[k4][j] (32-bit words), k4 = (kh * KW + kw) * C4 + c4 */
static void im2col_u8(const uint32_t *xt, uint32_t *col, int p0, int Wp, int C4,
                      const es_conv_params *p) {
    const int P = p->OH * p->OW, n = (P - p0) < TP ? (P - p0) : TP;
    int j, kh, kw, c4;
    for (j = 0; j < TP; ++j) {
        const int q = p0 + (j < n ? j : 0); /* tail lanes repeat pixel p0; never stored */
        const int oh = q / p->OW, ow = q % p->OW;
        for (kh = 0; kh < p->KH; ++kh)
            for (kw = 0; kw < p->KW; ++kw) {
                const uint32_t *src =
                    xt + ((size_t)(oh * p->SH + kh * p->DH) * Wp + ow * p->SW + kw * p->DW) * C4;
                uint32_t *dst = col + (size_t)(kh * p->KW + kw) * C4 * TP + j;
                for (c4 = 0; c4 < C4; ++c4) dst[(size_t)c4 * TP] = src[c4];
            }
    }
}

#if defined(ES_DOT_VNNI)
/* 4 weight bytes as one int32 (memcpy: the weights are int8 storage) */
static int32_t quad(const int8_t *w) {
    int32_t v;
    memcpy(&v, w, 4);
    return v;
}

/* 8 channels (rows m0..m0+7 of w4, rows past nr repeat the last) x 16 pixels */
static void tile_8x16(const uint8_t *col, int K4, const int8_t *w4, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int m0, int nr, int8_t *y,
                      int P, int p0, int nj, const es_conv_params *p) {
    const int8_t *wr[TM];
    __m512i s0, s1, s2, s3, s4, s5, s6, s7;
    int r, k4;
    for (r = 0; r < TM; ++r)
        wr[r] = w4 + (size_t)(m0 + (r < nr ? r : nr - 1)) * K4 * 4;
    s0 = _mm512_set1_epi32(bias[m0]);
    s1 = _mm512_set1_epi32(bias[m0 + (nr > 1 ? 1 : 0)]);
    s2 = _mm512_set1_epi32(bias[m0 + (nr > 2 ? 2 : 0)]);
    s3 = _mm512_set1_epi32(bias[m0 + (nr > 3 ? 3 : 0)]);
    s4 = _mm512_set1_epi32(bias[m0 + (nr > 4 ? 4 : 0)]);
    s5 = _mm512_set1_epi32(bias[m0 + (nr > 5 ? 5 : 0)]);
    s6 = _mm512_set1_epi32(bias[m0 + (nr > 6 ? 6 : 0)]);
    s7 = _mm512_set1_epi32(bias[m0 + (nr > 7 ? 7 : 0)]);
    for (k4 = 0; k4 < K4; ++k4) {
        const __m512i c = _mm512_loadu_si512(col + (size_t)k4 * TP * 4);
        s0 = _mm512_dpbusd_epi32(s0, c, _mm512_set1_epi32(quad(wr[0] + 4 * k4)));
        s1 = _mm512_dpbusd_epi32(s1, c, _mm512_set1_epi32(quad(wr[1] + 4 * k4)));
        s2 = _mm512_dpbusd_epi32(s2, c, _mm512_set1_epi32(quad(wr[2] + 4 * k4)));
        s3 = _mm512_dpbusd_epi32(s3, c, _mm512_set1_epi32(quad(wr[3] + 4 * k4)));
        s4 = _mm512_dpbusd_epi32(s4, c, _mm512_set1_epi32(quad(wr[4] + 4 * k4)));
        s5 = _mm512_dpbusd_epi32(s5, c, _mm512_set1_epi32(quad(wr[5] + 4 * k4)));
        s6 = _mm512_dpbusd_epi32(s6, c, _mm512_set1_epi32(quad(wr[6] + 4 * k4)));
        s7 = _mm512_dpbusd_epi32(s7, c, _mm512_set1_epi32(quad(wr[7] + 4 * k4)));
    }
    {
        const __m512i s[TM] = {s0, s1, s2, s3, s4, s5, s6, s7};
        for (r = 0; r < nr; ++r)
            es_requant16_avx512(s[r], y + (size_t)(m0 + r) * P + p0, nj, mult[m0 + r],
                                shift[m0 + r], p->y_zp, p->qmin, p->qmax);
    }
}
#else
/* y[m][p0 + j] = sat8(es_mul_q(acc[j], mult[m], shift[m]) + y_zp), j < n */
static void requant_row(const int32_t *acc, int8_t *y, int n, int32_t mult, int32_t shift,
                        const es_conv_params *p) {
    int j;
    for (j = 0; j < n; ++j)
        y[j] = es_sat8(es_mul_q(acc[j], mult, shift) + p->y_zp, p->qmin, p->qmax);
}

/* the same tile in plain C: acc[j] = bias + sum over taps of u * w, per channel */
static void tile_8x16(const uint8_t *col, int K4, const int8_t *w4, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int m0, int nr, int8_t *y,
                      int P, int p0, int nj, const es_conv_params *p) {
    int r, j, k;
    for (r = 0; r < nr; ++r) {
        const int8_t *wm = w4 + (size_t)(m0 + r) * K4 * 4;
        int32_t acc[TP];
        for (j = 0; j < TP; ++j) acc[j] = bias[m0 + r];
        for (k = 0; k < K4 * 4; ++k) {
            const uint8_t *ck = col + (size_t)(k >> 2) * TP * 4 + (k & 3);
            const int32_t wk = wm[k];
            for (j = 0; j < TP; ++j) acc[j] += wk * (int32_t)ck[4 * j];
        }
        requant_row(acc, y + (size_t)(m0 + r) * P + p0, nj, mult[m0 + r], shift[m0 + r], p);
    }
}
#endif

void es_conv2d_i8_dot(const int8_t *x, const int8_t *w4, const int32_t *bias_u8,
                      const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                      const es_conv_params *p) {
    const int C4 = (p->C + 3) / 4, K4 = p->KH * p->KW * C4, P = p->OH * p->OW, M = p->M;
    const int Hp = (p->OH - 1) * p->SH + (p->KH - 1) * p->DH + 1;
    const int Wp = (p->OW - 1) * p->SW + (p->KW - 1) * p->DW + 1;
    uint32_t *col = (uint32_t *)scratch, *xt = col + (size_t)K4 * TP;
    int p0, m0;
    to_hwc_u8(x, (uint8_t *)xt, Hp, Wp, C4, p);
    for (p0 = 0; p0 < P; p0 += TP) {
        const int nj = (P - p0) < TP ? (P - p0) : TP;
        im2col_u8(xt, col, p0, Wp, C4, p);
        for (m0 = 0; m0 < M; m0 += TM) {
            const int nr = (M - m0) < TM ? (M - m0) : TM;
            tile_8x16((const uint8_t *)col, K4, w4, bias_u8, mult, shift, m0, nr, y, P, p0, nj,
                      p);
        }
    }
}
