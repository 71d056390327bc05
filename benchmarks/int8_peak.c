/* The single-core int8 multiply-accumulate peak of this CPU, measured (benchmarks/c_runtime.py
 * compiles it at run time with -O2 -march=native and runs it once).
 *
 * The loop issues only independent dot-product instructions into ACC accumulators, so the
 * figure is the core's throughput, not a latency chain: with AVX512-VNNI one vpdpbusd
 * (zmm) is 16 lanes x 4 u8*s8 products = 64 MACs; without it, AVX2's int8 path is
 * vpmaddubsw (32 u8*s8 products summed in pairs to int16) + vpmaddwd (pairs to int32) +
 * vpaddd per 32 MACs, which is what an AVX2 int8 kernel has to issue.
 *
 * Prints one JSON line: {"isa": ..., "gmac_per_s": best of REPS timings, "macs_per_iter": ...}.
 */
#define _POSIX_C_SOURCE 199309L
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define ITERS 150000L /* ~0.5 ms at 236 GMAC/s: short windows, so the best of REPS
                       * catches a slice when the (shared) core is ours */
#define REPS 400
#define ACC 12 /* the STEP lists below spell out 12 */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#define ISA "avx512_vnni vpdpbusd zmm"
#define MACS_PER_ACC_STEP 64
/* one vpdpbusd per accumulator, written as asm so the compiler neither hoists nor copies */
#define DP(r) __asm__ volatile("vpdpbusd %1, %2, %0" : "+v"(r) : "v"(b), "v"(a))
static long run(long iters, int seed) {
    __m512i a = _mm512_set1_epi8((char)(seed | 1)), b = _mm512_set1_epi8(3);
    __m512i c0 = _mm512_set1_epi32(0), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    __m512i c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0, s;
    long i;
    for (i = 0; i < iters; ++i) {
        DP(c0); DP(c1); DP(c2); DP(c3); DP(c4); DP(c5);
        DP(c6); DP(c7); DP(c8); DP(c9); DP(c10); DP(c11);
    }
    s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                         _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9),
                                             _mm512_add_epi32(c10, c11)));
    return (long)_mm512_reduce_add_epi32(s);
}
#elif defined(__AVX2__)
#define ISA "avx2 vpmaddubsw+vpmaddwd+vpaddd ymm"
#define MACS_PER_ACC_STEP 32
static long run(long iters, int seed) {
    __m256i acc[ACC], a = _mm256_set1_epi8((char)(seed | 1)), b = _mm256_set1_epi8(3);
    __m256i one = _mm256_set1_epi16(1), s = _mm256_setzero_si256();
    long i;
    int k;
    for (k = 0; k < ACC; ++k) acc[k] = _mm256_set1_epi32(k);
    for (i = 0; i < iters; ++i) {
/* a is "new" each step (the empty asm), so the products are not hoisted out of the loop */
#define STEP(k)                                                                         \
    __asm__ volatile("" : "+x"(a));                                                     \
    acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one))
        STEP(0); STEP(1); STEP(2); STEP(3); STEP(4); STEP(5);
        STEP(6); STEP(7); STEP(8); STEP(9); STEP(10); STEP(11);
#undef STEP
    }
    for (k = 0; k < ACC; ++k) s = _mm256_add_epi32(s, acc[k]);
    return (long)_mm256_extract_epi32(s, 0);
}
#else
#error "int8_peak.c needs AVX2 or AVX512-VNNI (compile with -march=native on x86-64)"
#endif

int main(int argc, char **argv) {
    double best = 1e30;
    long sink = 0;
    int r;
    (void)argv;
    sink += run(ITERS / 10, argc); /* warm up: clocks up, caches in */
    for (r = 0; r < REPS; ++r) {
        double t0 = now_s();
        sink += run(ITERS, argc + r);
        t0 = now_s() - t0;
        if (t0 < best) best = t0;
    }
    printf("{\"isa\": \"%s\", \"accumulators\": %d, \"macs_per_iter\": %d, "
           "\"gmac_per_s\": %.2f, \"sink\": %ld}\n",
           ISA, ACC, ACC * MACS_PER_ACC_STEP,
           (double)ITERS * ACC * MACS_PER_ACC_STEP / best * 1e-9, sink);
    return 0;
}
