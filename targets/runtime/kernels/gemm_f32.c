/* Dense layers, float32. es_gemm_f32: y[M][N] = x[M][K] . w[N][K]^T + b, weights packed
 * row-per-output so both operands stream contiguously; four outputs per pass over the input
 * row, each a vector of partial sums (AVX-512, AVX2 + FMA, NEON), reduced at the end: a
 * classifier head (1280 -> 1000) is a matrix-vector product bound by reading the weights,
 * which the plain loop did at under 1 GMAC/s. es_gemm_f32_ref is that plain loop, the
 * oracle (kernels=reference); sums are reordered, so the two agree to float rounding.
 * es_matmul_f32: run-time operands. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>

#include "../edgesmith_rt.h"
#include "../es_act.h"

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif


/* the fused activation, one value (es_act.h): a dense layer has few outputs per input
 * row, so the scalar form costs nothing next to its weights */
static float act_f32(float v, const es_gemm_params *p) { return es_act_f32(v, p->act, p->a0, p->a1); }

/* s[r] = x . w_r over K, r < 4 */
static void dot4(const float *x, const float *const w[4], int K, float s[4]) {
    int k = 0, r;
#if defined(__AVX512F__)
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; k + 16 <= K; k += 16) {
        const __m512 xv = _mm512_loadu_ps(x + k);
        a0 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w[0] + k), a0);
        a1 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w[1] + k), a1);
        a2 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w[2] + k), a2);
        a3 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w[3] + k), a3);
    }
    s[0] = _mm512_reduce_add_ps(a0);
    s[1] = _mm512_reduce_add_ps(a1);
    s[2] = _mm512_reduce_add_ps(a2);
    s[3] = _mm512_reduce_add_ps(a3);
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 a[4];
    for (r = 0; r < 4; ++r) a[r] = _mm256_setzero_ps();
    for (; k + 8 <= K; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
        for (r = 0; r < 4; ++r) a[r] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w[r] + k), a[r]);
    }
    for (r = 0; r < 4; ++r) {
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(a[r]), _mm256_extractf128_ps(a[r], 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        s[r] = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
    }
#elif defined(__ARM_NEON) && defined(__aarch64__)
    float32x4_t a[4];
    for (r = 0; r < 4; ++r) a[r] = vdupq_n_f32(0.0f);
    for (; k + 4 <= K; k += 4) {
        const float32x4_t xv = vld1q_f32(x + k);
        for (r = 0; r < 4; ++r) a[r] = vfmaq_f32(a[r], xv, vld1q_f32(w[r] + k));
    }
    for (r = 0; r < 4; ++r) s[r] = vaddvq_f32(a[r]);
#else
    for (r = 0; r < 4; ++r) s[r] = 0.0f;
#endif
    for (; k < K; ++k) /* the tail, and the whole row without vectors */
        for (r = 0; r < 4; ++r) s[r] += x[k] * w[r][k];
}

#if defined(__AVX512F__)
/* s[r] = x . w_r over K for the 8 rows w, w + K, ..., K a multiple of 16: each 16 inputs
 * loaded once for 8 rows instead of 4, and 8 weight streams in flight. A classifier's
 * matrix-vector product waits on its weights (MobileNetV3-small's 576 -> 1024: 2.4 MB, L3
 * at best), and this read them 0.88-0.91x the time of dot4 (K 512, 576, 960, 1280). Rows
 * 4 KB apart (K a multiple of 1024) keep dot4: 8 streams at the same page offset were
 * 1.13x slower, hot in L3. Each row's sums are added in the same order as dot4's, so the
 * same bits. */
#define ES_GEMM_DOT8(K) ((K) % 16 == 0 && (K) % 1024 != 0)
static void dot8(const float *x, const float *w, int K, float s[8]) {
    __m512 a[8];
    int k, r;
    for (r = 0; r < 8; ++r) a[r] = _mm512_setzero_ps();
    for (k = 0; k < K; k += 16) {
        const __m512 xv = _mm512_loadu_ps(x + k);
        for (r = 0; r < 8; ++r)
            a[r] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w + (size_t)r * K + k), a[r]);
    }
    for (r = 0; r < 8; ++r) s[r] = _mm512_reduce_add_ps(a[r]);
}
#endif

void es_gemm_f32(const float *x, const float *w, const float *b, float *y,
                 const es_gemm_params *p) {
    const int M = p->M, N = p->N, K = p->K;
    int i, j, r;
    for (i = 0; i < M; ++i) {
        const float *xr = x + (size_t)i * K;
        j = 0;
#if defined(__AVX512F__)
        if (ES_GEMM_DOT8(K))
            for (; j + 8 <= N; j += 8) {
                float s[8];
                dot8(xr, w + (size_t)j * K, K, s);
                for (r = 0; r < 8; ++r) y[(size_t)i * N + j + r] = act_f32(b[j + r] + s[r], p);
            }
#endif
        for (; j < N; j += 4) {
            const int n = N - j < 4 ? N - j : 4;
            const float *wr[4];
            float s[4];
            for (r = 0; r < 4; ++r) wr[r] = w + (size_t)(j + (r < n ? r : 0)) * K;
            dot4(xr, wr, K, s);
            for (r = 0; r < n; ++r) y[(size_t)i * N + j + r] = act_f32(b[j + r] + s[r], p);
        }
    }
}

void es_gemm_f32_ref(const float *x, const float *w, const float *b, float *y,
                     const es_gemm_params *p) {
    const int M = p->M, N = p->N, K = p->K, act = p->act;
    const float a0 = p->a0, a1 = p->a1;
    int i, j, k;
    for (i = 0; i < M; ++i) {
        const float *xr = x + (size_t)i * K;
        for (j = 0; j < N; ++j) {
            const float *wr = w + (size_t)j * K;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, v;
            for (k = 0; k + 3 < K; k += 4) {
                s0 += xr[k] * wr[k];
                s1 += xr[k + 1] * wr[k + 1];
                s2 += xr[k + 2] * wr[k + 2];
                s3 += xr[k + 3] * wr[k + 3];
            }
            for (; k < K; ++k) s0 += xr[k] * wr[k];
            v = b[j] + ((s0 + s1) + (s2 + s3));
            y[(size_t)i * N + j] = es_act_f32(v, act, a0, a1);
        }
    }
}

void es_matmul_f32(const float *a, const float *b, float *y, const es_matmul_params *p) {
    const int batch = p->batch, M = p->M, K = p->K, N = p->N;
    const int a_stride = p->a_stride, b_stride = p->b_stride;
    int t, i, j, k;
    for (t = 0; t < batch; ++t) {
        const float *at = a + (size_t)t * a_stride, *bt = b + (size_t)t * b_stride;
        float *yt = y + (size_t)t * M * N;
        for (i = 0; i < M; ++i) {
            float *yr = yt + (size_t)i * N;
            for (j = 0; j < N; ++j) yr[j] = 0.0f;
            for (k = 0; k < K; ++k) {
                const float av = at[(size_t)i * K + k];
                const float *br = bt + (size_t)k * N;
                for (j = 0; j < N; ++j) yr[j] += av * br[j];
            }
        }
    }
}
