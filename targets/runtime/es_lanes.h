/* The mask of a loop's tail: a kernel that walks n elements 16 at a time finishes the
 * last n % 16 in one masked load or store (AVX-512's __mmask16, or 16 bytes of an xmm)
 * instead of a scalar loop. One definition here, where six kernels and es_simd.h each kept a copy. */
#ifndef ES_LANES_H
#define ES_LANES_H

/* the first n of 16 lanes set; n below 0 gives none and above 16 all, so a caller can
 * pass "what is left" without clamping it first */
static inline unsigned es_mask16(int n) {
    return n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u;
}

#endif /* ES_LANES_H */
