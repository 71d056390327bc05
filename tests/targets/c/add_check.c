/* Runs es_add_i8_ref and es_add_i8 (SIMD where built) on random int8 inputs, out of place
 * and in place (y == a); exit 1 if they differ.
 * argv: n seed a_zp b_zp y_zp left a_mult a_shift b_mult b_shift y_mult y_shift qmin qmax sub
 *       [a_scale b_scale y_scale: ES_RQ_FP32 with these scales] [dump: print a, b, y |
 *       pairs: a and b are every pair of bytes, n = 65536] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }
int main(int argc, char **argv) {
    es_qadd_params p;
    int n, i, pairs;
    int8_t *a, *b, *y0, *y1;
    if (argc < 16) return 2;
    memset(&p, 0, sizeof p);
    n = atoi(argv[1]); s = (uint32_t)atoi(argv[2]);
    p.a_zp = atoi(argv[3]); p.b_zp = atoi(argv[4]); p.y_zp = atoi(argv[5]);
    p.left_shift = atoi(argv[6]); p.a_mult = atoi(argv[7]); p.a_shift = atoi(argv[8]);
    p.b_mult = atoi(argv[9]); p.b_shift = atoi(argv[10]); p.y_mult = atoi(argv[11]);
    p.y_shift = atoi(argv[12]); p.qmin = atoi(argv[13]); p.qmax = atoi(argv[14]);
    p.sub = atoi(argv[15]);
    if (argc >= 19) {
        p.rq = ES_RQ_FP32;
        p.a_scale = strtof(argv[16], NULL);
        p.b_scale = strtof(argv[17], NULL);
        p.y_scale = strtof(argv[18], NULL);
    }
    a = malloc((size_t)n + 1); b = malloc((size_t)n + 1);
    y0 = malloc((size_t)n + 1); y1 = malloc((size_t)n + 1);
    pairs = argc >= 20 && strcmp(argv[19], "pairs") == 0;
    if (pairs && n != 65536) return 2;
    for (i = 0; i < n; ++i) {
        a[i] = (int8_t)(pairs ? i & 255 : r(256) - 128);
        b[i] = (int8_t)(pairs ? i >> 8 : r(256) - 128);
    }
    es_add_i8_ref(a, b, y0, n, &p);
    es_add_i8(a, b, y1, n, &p);
    for (i = 0; i < n; ++i)
        if (y0[i] != y1[i]) { printf("differs at %d: %d vs %d\n", i, y0[i], y1[i]); return 1; }
    if (argc >= 20 && strcmp(argv[19], "dump") == 0)
        for (i = 0; i < n; ++i) printf("%d %d %d\n", a[i], b[i], y0[i]);
    memcpy(y1, a, (size_t)n);
    es_add_i8(y1, b, y1, n, &p);
    if (memcmp(y0, y1, (size_t)n)) { printf("in-place differs\n"); return 1; }
    free(a); free(b); free(y0); free(y1);
    return 0;
}
