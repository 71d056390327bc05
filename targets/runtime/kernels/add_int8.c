/* Add / Sub, int8 (TFLite's reference add: inputs rescaled to a common scale with 20 bits
 * of headroom, summed, rescaled to the output), same shapes or NumPy broadcasting.
 *
 * es_add_i8_ref is the plain per-element loop, kept as the oracle. es_add_i8 runs the
 * same arithmetic 16 elements at a time with AVX-512, AVX2 or NEON (sign-extend to int32, the
 * es_simd.h forms of es_mul_q, clamp, saturating narrow of values already in range), so
 * its output is bit-identical; it falls back to the reference loop for tails (except
 * AVX-512 in fp32 mode, whose tail is one masked vector), for portable builds, and for
 * parameters outside what the SIMD helpers cover (a left shift in a multiplier, a negative
 * multiplier). y may be a or b (element-wise, loads first).
 *
 * es_add_i8_bcast broadcasts without materialising anything. The generator merges
 * adjacent dims that broadcast alike, so the innermost dim is a run of n contiguous
 * elements of both inputs (es_add_i8) or of one input against a single repeated element
 * of the other (add_i8_run_vs_one: that element is rescaled once per run, the run takes
 * the same SIMD path). An odometer over the outer dims moves each input's offset by its
 * stride. es_add_i8_bcast_ref walks every element through the same stride table. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include "../edgesmith_rt.h"
#include "../es_lanes.h"
#include "../es_simd.h"

/* one input's contribution at the common scale: (v - zp) << left, times its multiplier */
static inline int32_t rescaled(int8_t v, int32_t zp, int32_t left, int32_t mult,
                               int32_t shift) {
    return es_mul_q(((int32_t)v - zp) * (1 << left), mult, shift);
}

/* the sum at the common scale -> output scale, + y_zp, clamped (a fused Relu / Clip) */
static inline int8_t to_output(int32_t sum, const es_qadd_params *p) {
    return es_sat8(es_mul_q(sum, p->y_mult, p->y_shift) + p->y_zp, p->qmin, p->qmax);
}

/* ES_RQ_FP32: onnxruntime's DequantizeLinear -> Add -> QuantizeLinear step by step, each
 * product in its own statement so that no compiler fuses it into the sum (an FMA would
 * round once where onnxruntime rounds twice) */
static inline int8_t add1_f32(int8_t a, int8_t b, const es_qadd_params *p) {
    const float lo = (float)(p->qmin - p->y_zp), hi = (float)(p->qmax - p->y_zp);
    const float fa = (float)((int32_t)a - p->a_zp) * p->a_scale;
    const float fb = (float)((int32_t)b - p->b_zp) * p->b_scale;
    float v = p->sub ? fa - fb : fa + fb;
    v /= p->y_scale;
    v = v < lo ? lo : (v > hi ? hi : v);
    return (int8_t)(es_round_even(v) + p->y_zp);
}

static inline int8_t add1(int8_t a, int8_t b, const es_qadd_params *p) {
    int32_t sa, sb;
    if (p->rq == ES_RQ_FP32) return add1_f32(a, b, p);
    sa = rescaled(a, p->a_zp, p->left_shift, p->a_mult, p->a_shift);
    sb = rescaled(b, p->b_zp, p->left_shift, p->b_mult, p->b_shift);
    return to_output(p->sub ? sa - sb : sa + sb, p);
}

void es_add_i8_ref(const int8_t *a, const int8_t *b, int8_t *y, int n,
                   const es_qadd_params *p) {
    int i;
    for (i = 0; i < n; ++i) y[i] = add1(a[i], b[i], p);
}

#if defined(__AVX2__) || defined(__ARM_NEON)
static int simd_ok(const es_qadd_params *p) {
    return p->a_shift <= 0 && p->b_shift <= 0 && p->y_shift <= 0 && p->a_mult >= 0 &&
           p->b_mult >= 0 && p->y_mult >= 0 && p->left_shift >= 0 && p->left_shift <= 23 &&
           p->qmin >= -128 && p->qmax <= 127;
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
/* rescaled() on 16 bytes: one zmm of int32, es_simd.h's 16-lane es_mul_q */
static inline __m512i rescaled16(__m128i x16, int32_t zp, int32_t left, int32_t mult,
                                 int32_t shift) {
    const __m512i v = _mm512_sub_epi32(_mm512_cvtepi8_epi32(x16), _mm512_set1_epi32(zp));
    return es_mulq16_avx512(_mm512_sll_epi32(v, _mm_cvtsi32_si128(left)), mult, shift);
}

/* elements [0, n - n % 16) of es_add_i8; returns how many it did. to_output() on 16 sums
 * is es_requant16_avx512, the conv kernels' int8 store. */
static int add_simd(const int8_t *a, const int8_t *b, int8_t *y, int n,
                    const es_qadd_params *p) {
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512i av = rescaled16(_mm_loadu_si128((const __m128i *)(a + i)), p->a_zp,
                                      p->left_shift, p->a_mult, p->a_shift);
        const __m512i bv = rescaled16(_mm_loadu_si128((const __m128i *)(b + i)), p->b_zp,
                                      p->left_shift, p->b_mult, p->b_shift);
        es_requant16_avx512(p->sub ? _mm512_sub_epi32(av, bv) : _mm512_add_epi32(av, bv),
                            y + i, 16, p->y_mult, p->y_shift, ES_RQ_FIXED, p->y_zp, p->qmin,
                            p->qmax);
    }
    return i;
}

/* elements [0, n - n % 16) of add_i8_run_vs_one: x rescaled, then k - x or x + k */
static int run_vs_one_simd(const int8_t *x, int32_t x_zp, int32_t x_mult, int32_t x_shift,
                           int32_t k, int k_minus_x, int8_t *y, int n,
                           const es_qadd_params *p) {
    const __m512i kv = _mm512_set1_epi32(k);
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512i xv = rescaled16(_mm_loadu_si128((const __m128i *)(x + i)), x_zp,
                                      p->left_shift, x_mult, x_shift);
        es_requant16_avx512(k_minus_x ? _mm512_sub_epi32(kv, xv) : _mm512_add_epi32(xv, kv),
                            y + i, 16, p->y_mult, p->y_shift, ES_RQ_FIXED, p->y_zp, p->qmin,
                            p->qmax);
    }
    return i;
}

#elif defined(__AVX2__)
/* rescaled() on the low 8 bytes of x8 */
static inline __m256i rescaled8(__m128i x8, int32_t zp, int32_t left, int32_t mult,
                                int32_t shift) {
    const __m256i v = _mm256_sub_epi32(_mm256_cvtepi8_epi32(x8), _mm256_set1_epi32(zp));
    return es_mulq8_avx2(_mm256_sll_epi32(v, _mm_cvtsi32_si128(left)),
                         _mm256_set1_epi32(mult), shift);
}

/* to_output() on 16 sums (s0: elements 0-7, s1: 8-15), stored as 16 int8 */
static inline void store16(int8_t *y, __m256i s0, __m256i s1, const es_qadd_params *p) {
    const __m256i ym = _mm256_set1_epi32(p->y_mult), yzp = _mm256_set1_epi32(p->y_zp);
    const __m256i lo = _mm256_set1_epi32(p->qmin), hi = _mm256_set1_epi32(p->qmax);
    __m256i r0 = _mm256_add_epi32(es_mulq8_avx2(s0, ym, p->y_shift), yzp);
    __m256i r1 = _mm256_add_epi32(es_mulq8_avx2(s1, ym, p->y_shift), yzp);
    __m256i pk;
    r0 = _mm256_min_epi32(_mm256_max_epi32(r0, lo), hi);
    r1 = _mm256_min_epi32(_mm256_max_epi32(r1, lo), hi);
    /* packs works per 128-bit lane: [r0 0-3, r1 0-3 | r0 4-7, r1 4-7] -> in order */
    pk = _mm256_permute4x64_epi64(_mm256_packs_epi32(r0, r1), 0xD8);
    _mm_storeu_si128((__m128i *)y, _mm_packs_epi16(_mm256_castsi256_si128(pk),
                                                   _mm256_extracti128_si256(pk, 1)));
}

/* elements [0, n - n % 16) of es_add_i8; returns how many it did */
static int add_simd(const int8_t *a, const int8_t *b, int8_t *y, int n,
                    const es_qadd_params *p) {
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        const __m128i a16 = _mm_loadu_si128((const __m128i *)(a + i));
        const __m128i b16 = _mm_loadu_si128((const __m128i *)(b + i));
        __m256i sum[2];
        int h;
        for (h = 0; h < 2; ++h) {
            const __m128i a8 = h ? _mm_srli_si128(a16, 8) : a16;
            const __m128i b8 = h ? _mm_srli_si128(b16, 8) : b16;
            const __m256i av = rescaled8(a8, p->a_zp, p->left_shift, p->a_mult, p->a_shift);
            const __m256i bv = rescaled8(b8, p->b_zp, p->left_shift, p->b_mult, p->b_shift);
            sum[h] = p->sub ? _mm256_sub_epi32(av, bv) : _mm256_add_epi32(av, bv);
        }
        store16(y + i, sum[0], sum[1], p);
    }
    return i;
}

/* elements [0, n - n % 16) of add_i8_run_vs_one: x rescaled, then k - x or x + k */
static int run_vs_one_simd(const int8_t *x, int32_t x_zp, int32_t x_mult, int32_t x_shift,
                           int32_t k, int k_minus_x, int8_t *y, int n,
                           const es_qadd_params *p) {
    const __m256i kv = _mm256_set1_epi32(k);
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        const __m128i x16 = _mm_loadu_si128((const __m128i *)(x + i));
        __m256i sum[2];
        int h;
        for (h = 0; h < 2; ++h) {
            const __m256i xv = rescaled8(h ? _mm_srli_si128(x16, 8) : x16, x_zp,
                                         p->left_shift, x_mult, x_shift);
            sum[h] = k_minus_x ? _mm256_sub_epi32(kv, xv) : _mm256_add_epi32(xv, kv);
        }
        store16(y + i, sum[0], sum[1], p);
    }
    return i;
}

#elif defined(__ARM_NEON)
/* rescaled() on 4 lanes already widened to int32 */
static inline int32x4_t rescaled4(int32x4_t v, int32_t zp, int32_t left, int32_t mult,
                                  int32_t shift) {
    return es_mulq4_neon(vshlq_s32(vsubq_s32(v, vdupq_n_s32(zp)), vdupq_n_s32(left)), mult,
                         shift);
}

/* 16 int8 -> four int32x4 quarters, in order */
static inline void widen16(int8x16_t x, int32x4_t q[4]) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(x)), hi = vmovl_s8(vget_high_s8(x));
    q[0] = vmovl_s16(vget_low_s16(lo));
    q[1] = vmovl_s16(vget_high_s16(lo));
    q[2] = vmovl_s16(vget_low_s16(hi));
    q[3] = vmovl_s16(vget_high_s16(hi));
}

/* to_output() on 16 sums in four quarters, stored as 16 int8 */
static inline void store16(int8_t *y, const int32x4_t sum[4], const es_qadd_params *p) {
    const int32x4_t yzp = vdupq_n_s32(p->y_zp);
    const int32x4_t lo = vdupq_n_s32(p->qmin), hi = vdupq_n_s32(p->qmax);
    int16x4_t q[4];
    int h;
    for (h = 0; h < 4; ++h) {
        const int32x4_t s = vaddq_s32(es_mulq4_neon(sum[h], p->y_mult, p->y_shift), yzp);
        q[h] = vqmovn_s32(vminq_s32(vmaxq_s32(s, lo), hi));
    }
    vst1q_s8(y, vcombine_s8(vqmovn_s16(vcombine_s16(q[0], q[1])),
                            vqmovn_s16(vcombine_s16(q[2], q[3]))));
}

static int add_simd(const int8_t *a, const int8_t *b, int8_t *y, int n,
                    const es_qadd_params *p) {
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        int32x4_t av[4], bv[4], sum[4];
        int h;
        widen16(vld1q_s8(a + i), av);
        widen16(vld1q_s8(b + i), bv);
        for (h = 0; h < 4; ++h) {
            av[h] = rescaled4(av[h], p->a_zp, p->left_shift, p->a_mult, p->a_shift);
            bv[h] = rescaled4(bv[h], p->b_zp, p->left_shift, p->b_mult, p->b_shift);
            sum[h] = p->sub ? vsubq_s32(av[h], bv[h]) : vaddq_s32(av[h], bv[h]);
        }
        store16(y + i, sum, p);
    }
    return i;
}

static int run_vs_one_simd(const int8_t *x, int32_t x_zp, int32_t x_mult, int32_t x_shift,
                           int32_t k, int k_minus_x, int8_t *y, int n,
                           const es_qadd_params *p) {
    const int32x4_t kv = vdupq_n_s32(k);
    int i;
    for (i = 0; i + 16 <= n; i += 16) {
        int32x4_t xv[4], sum[4];
        int h;
        widen16(vld1q_s8(x + i), xv);
        for (h = 0; h < 4; ++h) {
            xv[h] = rescaled4(xv[h], x_zp, p->left_shift, x_mult, x_shift);
            sum[h] = k_minus_x ? vsubq_s32(kv, xv[h]) : vaddq_s32(xv[h], kv);
        }
        store16(y + i, sum, p);
    }
    return i;
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ES_ADD_F32_SIMD 1
/* add1_f32 on 16 lanes; cvtps2dq rounds half to even and the quotient is the correctly
 * rounded one (below), so the bytes are add1_f32's. Whole vectors load and store plainly;
 * the last n % 16 elements run as one masked vector: the fused conv + Add
 * (conv_int8_dot.c) calls this per channel on runs of about 250 pixels, where a scalar
 * tail, a division each, cost as much as the vectors (one channel's run of 247 at a time
 * over a 64 x 56 x 56 tensor: 98 -> 61 us). */
static __m512 dequant16(__m128i x, int32_t zp, float scale) {
    const __m512i v = _mm512_cvtepi8_epi32(x);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, _mm512_set1_epi32(zp))),
                         _mm512_set1_ps(scale));
}

/* Whether the division by y_scale may run as Markstein's reciprocal correction: with
 * r = RN(1 / y), q0 = RN(s r) and the remainder e = s - q0 y (exact, one FMA), RN(q0 + e r)
 * is the correctly rounded s / y, the IEEE quotient, as long as nothing overflows or
 * underflows. Scales within 2^-40 .. 2^40 keep every nonzero sum of two dequantised bytes
 * above 2^-64 and every quotient below 2^89, so that holds; other scales keep vdivps. */
static int recip_exact(const es_qadd_params *p) {
    const float lo = 0x1p-40f, hi = 0x1p40f;
    return p->a_scale >= lo && p->a_scale <= hi && p->b_scale >= lo && p->b_scale <= hi &&
           p->y_scale >= lo && p->y_scale <= hi;
}

typedef struct { /* add_f32_simd's per-call vectors */
    __m512 ys, yr, lo, hi;
    __m512i yzp;
    int recip, sub;
} add_f32_consts;

/* 16 outputs from 16 bytes of each input */
static inline __m128i add16_f32(__m128i a, __m128i b, const add_f32_consts *c,
                                const es_qadd_params *p) {
    const __m512 fa = dequant16(a, p->a_zp, p->a_scale);
    const __m512 fb = dequant16(b, p->b_zp, p->b_scale);
    const __m512 s = c->sub ? _mm512_sub_ps(fa, fb) : _mm512_add_ps(fa, fb);
    __m512 v;
    if (c->recip) {
        const __m512 q0 = _mm512_mul_ps(s, c->yr);
        v = _mm512_fmadd_ps(_mm512_fnmadd_ps(q0, c->ys, s), c->yr, q0);
    } else {
        v = _mm512_div_ps(s, c->ys);
    }
    v = _mm512_min_ps(_mm512_max_ps(v, c->lo), c->hi);
    return _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), c->yzp));
}

/* The reciprocal, and whole vectors without masks, measured on the Intel Xeon (200,704
 * random bytes a side in runs of 3,136, old and new alternating): unmasked 0.89-0.97x, the
 * reciprocal then 0.93x, with the division's bytes on every (a, b) pair of 2,000 random
 * scale sets. (A GNU-mode GCC build would contract the dequantising multiply into the
 * sum's FMA and change bytes; es_fp_exact.h, included first, keeps every rounding.) */
static int add_f32_simd(const int8_t *a, const int8_t *b, int8_t *y, int n,
                        const es_qadd_params *p) {
    add_f32_consts c;
    int i;
    c.ys = _mm512_set1_ps(p->y_scale);
    c.yr = _mm512_set1_ps(1.0f / p->y_scale); /* RN(1 / y_scale) */
    c.lo = _mm512_set1_ps((float)(p->qmin - p->y_zp));
    c.hi = _mm512_set1_ps((float)(p->qmax - p->y_zp));
    c.yzp = _mm512_set1_epi32(p->y_zp);
    c.recip = recip_exact(p);
    c.sub = p->sub;
    for (i = 0; i + 16 <= n; i += 16)
        _mm_storeu_si128((__m128i *)(y + i),
                         add16_f32(_mm_loadu_si128((const __m128i *)(a + i)),
                                   _mm_loadu_si128((const __m128i *)(b + i)), &c, p));
    if (i < n) {
        const __mmask16 k = (__mmask16)es_mask16(n - i);
        _mm_mask_storeu_epi8(y + i, k,
                             add16_f32(_mm_maskz_loadu_epi8(k, a + i),
                                       _mm_maskz_loadu_epi8(k, b + i), &c, p));
    }
    return n;
}
#endif

void es_add_i8(const int8_t *a, const int8_t *b, int8_t *y, int n, const es_qadd_params *p) {
    const es_qadd_params q = *p; /* a local copy: stores to y (int8) cannot alias it */
    int i = 0;
#if defined(ES_ADD_F32_SIMD)
    if (q.rq == ES_RQ_FP32) i = add_f32_simd(a, b, y, n, &q);
#endif
#if defined(__AVX2__) || defined(__ARM_NEON)
    if (q.rq != ES_RQ_FP32 && simd_ok(&q)) i = add_simd(a, b, y, n, &q);
#endif
    for (; i < n; ++i) y[i] = add1(a[i], b[i], &q);
}

/* y[i] = a[i] (+|-) k or k (+|-) b[i]: a run x of one input against one element k of the
 * other (x_is_b says which input x is). k is rescaled once; the sum is the reference's
 * sa +/- sb in the order that keeps it exact: x + k, or k - x when x is b of a Sub. */
static void add_i8_run_vs_one(const int8_t *x, int x_is_b, int8_t k, int8_t *y, int n,
                              const es_qadd_params *p) {
    const es_qadd_params q = *p;
    const int32_t x_zp = x_is_b ? q.b_zp : q.a_zp;
    const int32_t x_mult = x_is_b ? q.b_mult : q.a_mult;
    const int32_t x_shift = x_is_b ? q.b_shift : q.a_shift;
    const int32_t k_rescaled = x_is_b ? rescaled(k, q.a_zp, q.left_shift, q.a_mult, q.a_shift)
                                      : rescaled(k, q.b_zp, q.left_shift, q.b_mult, q.b_shift);
    const int k_minus_x = q.sub && x_is_b;
    const int32_t kv = q.sub && !x_is_b ? -k_rescaled : k_rescaled;
    int i = 0;
    if (q.rq == ES_RQ_FP32) { /* per element, in the reference's operand order */
        for (; i < n; ++i) y[i] = x_is_b ? add1_f32(k, x[i], &q) : add1_f32(x[i], k, &q);
        return;
    }
#if defined(__AVX2__) || defined(__ARM_NEON)
    if (simd_ok(&q))
        i = run_vs_one_simd(x, x_zp, x_mult, x_shift, kv, k_minus_x, y, n, &q);
#endif
    for (; i < n; ++i) {
        const int32_t xv = rescaled(x[i], x_zp, q.left_shift, x_mult, x_shift);
        y[i] = to_output(k_minus_x ? kv - xv : xv + kv, &q);
    }
}

void es_add_i8_bcast(const int8_t *a, const int8_t *b, int8_t *y,
                     const es_qadd_bcast_params *p) {
    const es_bcast *bc = &p->bc;
    const int nd = bc->ndim, n = bc->shape[nd - 1];
    const int a_runs = bc->sa[nd - 1] != 0, b_runs = bc->sb[nd - 1] != 0;
    int idx[ES_MAX_DIMS] = {0};
    long outer = es_bcast_outer(bc), o, ao = 0, bo = 0;
    for (o = 0; o < outer; ++o) {
        if (a_runs && b_runs)
            es_add_i8(a + ao, b + bo, y, n, &p->q);
        else if (a_runs)
            add_i8_run_vs_one(a + ao, 0, b[bo], y, n, &p->q);
        else
            add_i8_run_vs_one(b + bo, 1, a[ao], y, n, &p->q);
        y += n;
        es_bcast_next(bc, idx, &ao, &bo);
    }
}

void es_add_i8_bcast_ref(const int8_t *a, const int8_t *b, int8_t *y,
                         const es_qadd_bcast_params *p) {
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
        y[k] = add1(a[ao], b[bo], &p->q);
        for (d = nd - 1; d >= 0; --d) {
            if (++idx[d] < bc->shape[d]) break;
            idx[d] = 0;
        }
    }
}
