/* Fully connected, int8 (TFLite scheme): y = requant(sum (x - x_zp) * w + bias), w [N][K].
 * es_fc_i8 computes four outputs at a time from one pass over the input row (AVX2 madd of
 * int16 pairs, NEON widening multiply-accumulates), es_fc_i8_ref is the plain loop it is
 * tested against; the sums are exact int32, so the two are bit-identical. With AVX-512
 * VNNI the generator runs a dense layer through es_conv2d_i8_cl instead (lower/int8.py). */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include "../edgesmith_rt.h"
#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

void es_fc_i8_ref(const int8_t *x, const int8_t *w, const int32_t *bias, const int32_t *mult,
                  const int32_t *shift, int8_t *y, const es_fc_params *p) {
    const int M = p->M, N = p->N, K = p->K, x_zp = p->x_zp;
    const int32_t y_zp = p->y_zp, qmin = p->qmin, qmax = p->qmax, rq = p->rq;
    int i, j, k;
    for (i = 0; i < M; ++i) {
        const int8_t *xr = x + (size_t)i * K;
        for (j = 0; j < N; ++j) {
            const int8_t *wr = w + (size_t)j * K;
            int32_t acc = bias[j];
            for (k = 0; k < K; ++k) acc += ((int32_t)xr[k] - x_zp) * (int32_t)wr[k];
            y[(size_t)i * N + j] = es_requant(acc, mult[j], shift[j], rq, y_zp, qmin, qmax);
        }
    }
}

/* acc[r] += sum over k < K of (x[k] - x_zp) * w[r * K + k], r < 4; returns how many k the
 * vector loop covered (the caller finishes the rest in plain C) */
static int dot4(const int8_t *x, const int8_t *w, int K, int x_zp, int32_t acc[4]) {
    int k = 0;
#if defined(__AVX2__)
    const __m256i zp = _mm256_set1_epi16((short)x_zp);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    __m128i s;
    for (; k + 16 <= K; k += 16) {
        const __m256i xv = _mm256_sub_epi16(
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x + k))), zp);
#define ES_FC_ROW(A, R)                                                                    \
    A = _mm256_add_epi32(A, _mm256_madd_epi16(xv, _mm256_cvtepi8_epi16(_mm_loadu_si128(     \
                                                  (const __m128i *)(w + (R) * (size_t)K + k)))))
        ES_FC_ROW(a0, 0);
        ES_FC_ROW(a1, 1);
        ES_FC_ROW(a2, 2);
        ES_FC_ROW(a3, 3);
#undef ES_FC_ROW
    }
    /* the four row sums: pairwise adds of the 8 lanes of each */
    a0 = _mm256_hadd_epi32(a0, a1);
    a2 = _mm256_hadd_epi32(a2, a3);
    a0 = _mm256_hadd_epi32(a0, a2);
    s = _mm_add_epi32(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1));
    acc[0] += _mm_extract_epi32(s, 0);
    acc[1] += _mm_extract_epi32(s, 1);
    acc[2] += _mm_extract_epi32(s, 2);
    acc[3] += _mm_extract_epi32(s, 3);
#elif defined(__ARM_NEON) && defined(__aarch64__)
    const int16x8_t zp = vdupq_n_s16((int16_t)x_zp);
    int32x4_t a[4];
    int r;
    for (r = 0; r < 4; ++r) a[r] = vdupq_n_s32(0);
    for (; k + 8 <= K; k += 8) {
        const int16x8_t xv = vsubq_s16(vmovl_s8(vld1_s8(x + k)), zp);
        for (r = 0; r < 4; ++r) {
            const int16x8_t wv = vmovl_s8(vld1_s8(w + (size_t)r * K + k));
            a[r] = vmlal_s16(a[r], vget_low_s16(xv), vget_low_s16(wv));
            a[r] = vmlal_high_s16(a[r], xv, wv);
        }
    }
    for (r = 0; r < 4; ++r) acc[r] += vaddvq_s32(a[r]);
#else
    (void)x; (void)w; (void)K; (void)x_zp; (void)acc;
#endif
    return k;
}

void es_fc_i8(const int8_t *x, const int8_t *w, const int32_t *bias, const int32_t *mult,
              const int32_t *shift, int8_t *y, const es_fc_params *p) {
    const int M = p->M, N = p->N, K = p->K, x_zp = p->x_zp;
    const int32_t y_zp = p->y_zp, qmin = p->qmin, qmax = p->qmax, rq = p->rq;
    int i, j, k, r;
    for (i = 0; i < M; ++i) {
        const int8_t *xr = x + (size_t)i * K;
        int8_t *yr = y + (size_t)i * N;
        for (j = 0; j + 4 <= N; j += 4) {
            const int8_t *wr = w + (size_t)j * K;
            int32_t acc[4];
            for (r = 0; r < 4; ++r) acc[r] = bias[j + r];
            k = dot4(xr, wr, K, x_zp, acc);
            for (; k < K; ++k)
                for (r = 0; r < 4; ++r) acc[r] += ((int32_t)xr[k] - x_zp) * wr[(size_t)r * K + k];
            for (r = 0; r < 4; ++r)
                yr[j + r] = es_requant(acc[r], mult[j + r], shift[j + r], rq, y_zp, qmin, qmax);
        }
        for (; j < N; ++j) {
            const int8_t *wr = w + (size_t)j * K;
            int32_t acc = bias[j];
            for (k = 0; k < K; ++k) acc += ((int32_t)xr[k] - x_zp) * (int32_t)wr[k];
            yr[j] = es_requant(acc, mult[j], shift[j], rq, y_zp, qmin, qmax);
        }
    }
}
