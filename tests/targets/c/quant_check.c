/* quant_check SCALE_BITS ZP [STEP]: es_quantize_f32_i8 (the build's fastest path) against
 * the definition, q = clamp(rint(x / scale) + zp, -128, 127) with a true division, on every
 * STEP-th 32-bit pattern as x (STEP 1: all 2^32 of them; a NaN gives -128).
 * Prints "ok N" or the first mismatch, exit 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgesmith_rt.h"

#define CHUNK 65531 /* not a multiple of 16: every call leaves a scalar tail */

static int8_t reference(float x, float scale, int zp) {
    const float v = rintf(x / scale) + (float)zp;
    if (v != v) return -128;
    return (int8_t)(v > 127.0f ? 127.0f : (v < -128.0f ? -128.0f : v));
}

int main(int argc, char **argv) {
    static float x[CHUNK];
    static int8_t y[CHUNK];
    uint32_t sb = (uint32_t)strtoul(argv[1], NULL, 0);
    const int zp = atoi(argv[2]);
    const uint64_t step = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
    float scale;
    uint64_t b = 0, n = 0;
    int i;
    memcpy(&scale, &sb, sizeof scale);
    while (b < (1ull << 32)) {
        for (i = 0; i < CHUNK && b < (1ull << 32); ++i, b += step) {
            const uint32_t u = (uint32_t)b;
            memcpy(&x[i], &u, sizeof u);
        }
        es_quantize_f32_i8(x, y, i, scale, zp);
        for (int j = 0; j < i; ++j) {
            const int8_t want = reference(x[j], scale, zp);
            if (y[j] != want) {
                printf("x %a (%g) scale %a zp %d: got %d, want %d\n", x[j], x[j], scale, zp,
                       y[j], want);
                return 1;
            }
        }
        n += (uint64_t)i;
    }
    printf("ok %llu\n", (unsigned long long)n);
    return 0;
}
