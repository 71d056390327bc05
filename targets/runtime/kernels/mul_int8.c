/* Mul, int8 (TFLite's reference mul: (a - a_zp) * (b - b_zp) in int32, times the real
 * multiplier s_a * s_b / s_y as es_mul_q, + y_zp, clamped), with NumPy broadcasting.
 *
 * The broadcast is walked as in add_int8.c: p->bc has adjacent dims that broadcast alike
 * merged, so each innermost run is n contiguous elements of both inputs or of one input
 * against a single repeated element of the other (the product commutes, so that element
 * is just the other factor). AVX2 / NEON do 16 elements at a time with the es_simd.h
 * forms of es_mul_q; a multiplier above 1 (shift > 0) is applied as a left shift of the
 * product first, exact because |product| <= 255 * 255 < 2^16 leaves 14 bits to shift
 * into. es_mul_i8_ref is the per-element oracle over the same stride table. y may be a
 * full-shape input (element-wise, loads first).
 *
 * A long run against one element (an SE block's gate: each channel's plane times its
 * scale) is a function of the run's byte alone. With AVX-512 VBMI, runs of LUT_MIN or more
 * tabulate it first, the same arithmetic on the 256 codes, and then look each byte up
 * (two 128-entry byte permutes per 64 bytes, as lut_int8.c): the bytes are unchanged and
 * a 28x28 plane costs the table's 256 products plus the lookups instead of 784 products. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include "../edgesmith_rt.h"
#include "../es_simd.h"

static inline int8_t mul1(int8_t a, int8_t b, const es_qmul_params *p) {
    const int32_t product = ((int32_t)a - p->a_zp) * ((int32_t)b - p->b_zp);
    return es_sat8(es_mul_q(product, p->mult, p->shift) + p->y_zp, p->qmin, p->qmax);
}

#if defined(__AVX2__) || defined(__ARM_NEON)
static int simd_ok(const es_qmul_params *p) {
    return p->mult >= 0 && p->shift <= 14 && p->qmin >= -128 && p->qmax <= 127;
}
#endif

#if defined(__AVX2__)
/* the low 8 bytes of x8 minus zp, as int32 */
static inline __m256i centred8(__m128i x8, int32_t zp) {
    return _mm256_sub_epi32(_mm256_cvtepi8_epi32(x8), _mm256_set1_epi32(zp));
}

/* 16 products (p0: elements 0-7, p1: 8-15) -> rescaled, offset, clamped, stored as int8 */
static inline void store16(int8_t *y, __m256i p0, __m256i p1, const es_qmul_params *p) {
    const __m128i left = _mm_cvtsi32_si128(p->shift > 0 ? p->shift : 0);
    const int right = p->shift > 0 ? 0 : p->shift;
    const __m256i mult = _mm256_set1_epi32(p->mult), yzp = _mm256_set1_epi32(p->y_zp);
    const __m256i lo = _mm256_set1_epi32(p->qmin), hi = _mm256_set1_epi32(p->qmax);
    __m256i r0 = es_mulq8_avx2(_mm256_sll_epi32(p0, left), mult, right);
    __m256i r1 = es_mulq8_avx2(_mm256_sll_epi32(p1, left), mult, right);
    __m256i pk;
    r0 = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(r0, yzp), lo), hi);
    r1 = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(r1, yzp), lo), hi);
    /* packs works per 128-bit lane: [r0 0-3, r1 0-3 | r0 4-7, r1 4-7] -> in order */
    pk = _mm256_permute4x64_epi64(_mm256_packs_epi32(r0, r1), 0xD8);
    _mm_storeu_si128((__m128i *)y, _mm_packs_epi16(_mm256_castsi256_si128(pk),
                                                   _mm256_extracti128_si256(pk, 1)));
}

/* elements [0, n - n % 16) of a contiguous run; returns how many it did */
static int mul_simd(const int8_t *a, const int8_t *b, int8_t *y, int n,
                    const es_qmul_params *p) {
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        const __m128i a16 = _mm_loadu_si128((const __m128i *)(a + i));
        const __m128i b16 = _mm_loadu_si128((const __m128i *)(b + i));
        const __m256i p0 = _mm256_mullo_epi32(centred8(a16, p->a_zp), centred8(b16, p->b_zp));
        const __m256i p1 = _mm256_mullo_epi32(centred8(_mm_srli_si128(a16, 8), p->a_zp),
                                              centred8(_mm_srli_si128(b16, 8), p->b_zp));
        store16(y + i, p0, p1, p);
    }
    return i;
}

#if !(defined(__AVX512F__) && defined(__AVX512BW__)) /* there: mul_vs_one_512 */
/* the same for a run x against one factor k (already minus its zero point) */
static int mul_vs_one_simd(const int8_t *x, int32_t x_zp, int32_t k, int8_t *y, int n,
                           const es_qmul_params *p) {
    const __m256i kv = _mm256_set1_epi32(k);
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        const __m128i x16 = _mm_loadu_si128((const __m128i *)(x + i));
        store16(y + i, _mm256_mullo_epi32(centred8(x16, x_zp), kv),
                _mm256_mullo_epi32(centred8(_mm_srli_si128(x16, 8), x_zp), kv), p);
    }
    return i;
}
#endif

#elif defined(__ARM_NEON)
/* 16 int8 minus zp -> four int32x4 quarters, in order */
static inline void centred16(int8x16_t x, int32_t zp, int32x4_t q[4]) {
    const int16x8_t z = vdupq_n_s16((int16_t)zp);
    const int16x8_t lo = vsubq_s16(vmovl_s8(vget_low_s8(x)), z);
    const int16x8_t hi = vsubq_s16(vmovl_s8(vget_high_s8(x)), z);
    q[0] = vmovl_s16(vget_low_s16(lo));
    q[1] = vmovl_s16(vget_high_s16(lo));
    q[2] = vmovl_s16(vget_low_s16(hi));
    q[3] = vmovl_s16(vget_high_s16(hi));
}

/* 16 products in four quarters -> rescaled, offset, clamped, stored as int8 */
static inline void store16(int8_t *y, const int32x4_t product[4], const es_qmul_params *p) {
    const int32x4_t left = vdupq_n_s32(p->shift > 0 ? p->shift : 0);
    const int right = p->shift > 0 ? 0 : p->shift;
    const int32x4_t yzp = vdupq_n_s32(p->y_zp);
    const int32x4_t lo = vdupq_n_s32(p->qmin), hi = vdupq_n_s32(p->qmax);
    int16x4_t q[4];
    int h;
    for (h = 0; h < 4; ++h) {
        int32x4_t s = es_mulq4_neon(vshlq_s32(product[h], left), p->mult, right);
        s = vaddq_s32(s, yzp);
        q[h] = vqmovn_s32(vminq_s32(vmaxq_s32(s, lo), hi));
    }
    vst1q_s8(y, vcombine_s8(vqmovn_s16(vcombine_s16(q[0], q[1])),
                            vqmovn_s16(vcombine_s16(q[2], q[3]))));
}

static int mul_simd(const int8_t *a, const int8_t *b, int8_t *y, int n,
                    const es_qmul_params *p) {
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        int32x4_t av[4], bv[4];
        int h;
        centred16(vld1q_s8(a + i), p->a_zp, av);
        centred16(vld1q_s8(b + i), p->b_zp, bv);
        for (h = 0; h < 4; ++h) av[h] = vmulq_s32(av[h], bv[h]);
        store16(y + i, av, p);
    }
    return i;
}

static int mul_vs_one_simd(const int8_t *x, int32_t x_zp, int32_t k, int8_t *y, int n,
                           const es_qmul_params *p) {
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        int32x4_t xv[4];
        int h;
        centred16(vld1q_s8(x + i), x_zp, xv);
        for (h = 0; h < 4; ++h) xv[h] = vmulq_n_s32(xv[h], k);
        store16(y + i, xv, p);
    }
    return i;
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* es_mul_q on 16 lanes for one multiplier and a shift <= 0 (total = 31 - shift), as
 * es_mulq8_avx2 (es_simd.h) on twice the lanes: 64-bit products plus the rounding half,
 * then the high words shifted by total - 32, or for total 31 the low words of a shift by 31 */
static inline __m512i mulq16(__m512i x, __m512i mu, int total, __m512i half) {
    const __m512i even = _mm512_add_epi64(_mm512_mul_epi32(x, mu), half);
    const __m512i odd = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), mu), half);
    if (total >= 32)
        return _mm512_sra_epi32(_mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd),
                                _mm_cvtsi32_si128(total - 32));
    return _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 31),
                                   _mm512_slli_epi64(_mm512_srli_epi64(odd, 31), 32));
}

/* mul_vs_one_simd on 64 bytes at a time, the run's last 1..63 under masks (masked loads
 * read nothing past n). An SE gate on 14x14 or 7x7 planes (runs of 196 or 49, below the
 * table's LUT_MIN) went 16 elements at a time through AVX2 plus a scalar tail of up to 15.
 * The four rescaled quarters are packed with saturation (int16, + y_zp saturating, int8)
 * and then clamped, which gives es_sat8's bytes for qmin >= -128, qmax <= 127 (simd_ok): a
 * value outside int16 is outside [qmin - y_zp, qmax - y_zp] either way, as dwconv_int8_hwc.c's
 * store4. Returns n. */
static int mul_vs_one_512(const int8_t *x, int32_t x_zp, int32_t k, int8_t *y, int n,
                          const es_qmul_params *p) {
    const __m512i d4 = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    const __m128i left = _mm_cvtsi32_si128(p->shift > 0 ? p->shift : 0);
    const int total = 31 - (p->shift > 0 ? 0 : p->shift);
    const __m512i half = _mm512_set1_epi64((int64_t)1 << (total - 1));
    const __m512i mu = _mm512_set1_epi32(p->mult), kv = _mm512_set1_epi32(k);
    const __m512i zp = _mm512_set1_epi32(x_zp), yzp16 = _mm512_set1_epi16((short)p->y_zp);
    const __m512i lo = _mm512_set1_epi8((char)p->qmin), hi = _mm512_set1_epi8((char)p->qmax);
    int i, j;
    for (i = 0; i < n; i += 64) {
        const __mmask64 m = n - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - i)) - 1;
        const __m512i v = _mm512_maskz_loadu_epi8(m, x + i);
        __m512i r[4], b;
        for (j = 0; j < 4; ++j) { /* elements 16j .. 16j+15 */
            const __m128i q = j == 0 ? _mm512_castsi512_si128(v)
                              : j == 1 ? _mm512_extracti32x4_epi32(v, 1)
                              : j == 2 ? _mm512_extracti32x4_epi32(v, 2)
                                       : _mm512_extracti32x4_epi32(v, 3);
            const __m512i c = _mm512_sub_epi32(_mm512_cvtepi8_epi32(q), zp);
            r[j] = mulq16(_mm512_sll_epi32(_mm512_mullo_epi32(c, kv), left), mu, total, half);
        }
        b = _mm512_packs_epi16(_mm512_adds_epi16(_mm512_packs_epi32(r[0], r[1]), yzp16),
                               _mm512_adds_epi16(_mm512_packs_epi32(r[2], r[3]), yzp16));
        b = _mm512_min_epi8(_mm512_max_epi8(b, lo), hi);
        /* the packs interleave the quarters by 128-bit lane: dword 4l + j is quarter j's
         * elements 4l .. 4l+3, which belong at dword 4j + l */
        _mm512_mask_storeu_epi8(y + i, m, _mm512_permutexvar_epi32(d4, b));
    }
    return n;
}
#endif

/* a run of n contiguous elements of both inputs */
static void mul_run(const int8_t *a, const int8_t *b, int8_t *y, int n,
                    const es_qmul_params *p) {
    const es_qmul_params q = *p; /* a local copy: stores to y (int8) cannot alias it */
    int i = 0;
#if defined(__AVX2__) || defined(__ARM_NEON)
    if (simd_ok(&q)) i = mul_simd(a, b, y, n, &q);
#endif
    for (; i < n; ++i) y[i] = mul1(a[i], b[i], &q);
}

/* a run x (zero point x_zp) against one element k of the other input (zero point k_zp) */
static void mul_run_vs_one(const int8_t *x, int32_t x_zp, int8_t k, int32_t k_zp, int8_t *y,
                           int n, const es_qmul_params *p) {
    const es_qmul_params q = *p;
    const int32_t kv = (int32_t)k - k_zp;
    int i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    if (simd_ok(&q)) i = mul_vs_one_512(x, x_zp, kv, y, n, &q);
#elif defined(__AVX2__) || defined(__ARM_NEON)
    if (simd_ok(&q)) i = mul_vs_one_simd(x, x_zp, kv, y, n, &q);
#endif
    for (; i < n; ++i) {
        const int32_t product = ((int32_t)x[i] - x_zp) * kv;
        y[i] = es_sat8(es_mul_q(product, q.mult, q.shift) + q.y_zp, q.qmin, q.qmax);
    }
}

#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
#define LUT_MIN 512 /* shorter runs: the 256-entry table costs more than it saves */

/* 64 lookups in table t0..t3 (entry u: the code (int8_t)u), as lut_int8.c's lut64 */
static inline __m512i lookup64(__m512i v, __m512i t0, __m512i t1, __m512i t2, __m512i t3) {
    const __m512i pos = _mm512_permutex2var_epi8(t0, v, t1);
    const __m512i neg = _mm512_permutex2var_epi8(t2, v, t3);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), pos, neg);
}

/* mul_run_vs_one by a table of its 256 results; y may be x */
static void mul_run_vs_one_lut(const int8_t *x, int32_t x_zp, int8_t k, int32_t k_zp,
                               int8_t *y, int n, const es_qmul_params *p) {
    int8_t codes[256], table[256];
    __m512i t0, t1, t2, t3;
    int i;
    for (i = 0; i < 256; ++i) codes[i] = (int8_t)(uint8_t)i;
    mul_run_vs_one(codes, x_zp, k, k_zp, table, 256, p);
    t0 = _mm512_loadu_si512(table);
    t1 = _mm512_loadu_si512(table + 64);
    t2 = _mm512_loadu_si512(table + 128);
    t3 = _mm512_loadu_si512(table + 192);
    for (i = 0; i + 64 <= n; i += 64)
        _mm512_storeu_si512(y + i, lookup64(_mm512_loadu_si512(x + i), t0, t1, t2, t3));
    if (i < n) { /* the tail under a mask: masked loads read nothing past n */
        const __mmask64 m = ((__mmask64)1 << (n - i)) - 1;
        _mm512_mask_storeu_epi8(y + i, m,
                                lookup64(_mm512_maskz_loadu_epi8(m, x + i), t0, t1, t2, t3));
    }
}
#else
#define LUT_MIN 0 /* no table path */
static void mul_run_vs_one_lut(const int8_t *x, int32_t x_zp, int8_t k, int32_t k_zp,
                               int8_t *y, int n, const es_qmul_params *p) {
    mul_run_vs_one(x, x_zp, k, k_zp, y, n, p);
}
#endif

/* a run against one element, by a table where the run is long enough to pay for one */
static void mul_vs_one(const int8_t *x, int32_t x_zp, int8_t k, int32_t k_zp, int8_t *y,
                       int n, const es_qmul_params *p) {
    if (LUT_MIN > 0 && n >= LUT_MIN)
        mul_run_vs_one_lut(x, x_zp, k, k_zp, y, n, p);
    else
        mul_run_vs_one(x, x_zp, k, k_zp, y, n, p);
}

void es_mul_i8(const int8_t *a, const int8_t *b, int8_t *y, const es_qmul_params *p) {
    const es_bcast *bc = &p->bc;
    const int nd = bc->ndim, n = bc->shape[nd - 1];
    const int a_runs = bc->sa[nd - 1] != 0, b_runs = bc->sb[nd - 1] != 0;
    int idx[ES_MAX_DIMS] = {0};
    long outer = es_bcast_outer(bc), o, ao = 0, bo = 0;
    for (o = 0; o < outer; ++o) {
        if (a_runs && b_runs)
            mul_run(a + ao, b + bo, y, n, p);
        else if (a_runs)
            mul_vs_one(a + ao, p->a_zp, b[bo], p->b_zp, y, n, p);
        else
            mul_vs_one(b + bo, p->b_zp, a[ao], p->a_zp, y, n, p);
        y += n;
        es_bcast_next(bc, idx, &ao, &bo);
    }
}

void es_mul_i8_ref(const int8_t *a, const int8_t *b, int8_t *y, const es_qmul_params *p) {
    const es_bcast *bc = &p->bc;
    const int nd = bc->ndim;
    int idx[ES_MAX_DIMS] = {0};
    long total = 1, k;
    int d;
    for (d = 0; d < nd; ++d) total *= bc->shape[d];
    for (k = 0; k < total; ++k) {
        long ao = 0, bo = 0;
        for (d = 0; d < nd; ++d) {
            ao += (long)idx[d] * bc->sa[d];
            bo += (long)idx[d] * bc->sb[d];
        }
        y[k] = mul1(a[ao], b[bo], p);
        for (d = nd - 1; d >= 0; --d) {
            if (++idx[d] < bc->shape[d]) break;
            idx[d] = 0;
        }
    }
}
