/* es_lut_i8 (vector paths where built) against es_lut_i8_ref on a random table and random
 * codes, for every length 0..300 and a few long ones, out of place and in place (y == x,
 * as the planner may place it); exit 1 at the first difference. argv: seed */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"
static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }
static int check(const int8_t *table, int n) {
    int8_t *x = calloc((size_t)n + 1, 1), *y0 = calloc((size_t)n + 1, 1);
    int8_t *y1 = calloc((size_t)n + 1, 1);
    int i, bad = 0;
    for (i = 0; i < n; ++i) x[i] = (int8_t)(r(256) - 128);
    y1[n] = 77;
    es_lut_i8_ref(x, y0, table, n);
    es_lut_i8(x, y1, table, n);
    for (i = 0; i < n && !bad; ++i)
        if (y0[i] != y1[i] || y0[i] != table[(uint8_t)x[i]]) {
            printf("n %d: differs at %d: %d vs %d\n", n, i, y0[i], y1[i]);
            bad = 1;
        }
    if (!bad && y1[n] != 77) { printf("n %d: wrote past the end\n", n); bad = 1; }
    if (!bad) {
        es_lut_i8(x, x, table, n);
        if (memcmp(x, y0, (size_t)n)) { printf("n %d: in place differs\n", n); bad = 1; }
    }
    free(x); free(y0); free(y1);
    return bad;
}
int main(int argc, char **argv) {
    int8_t table[256];
    int n, i;
    if (argc < 2) return 2;
    s = (uint32_t)atoi(argv[1]);
    for (i = 0; i < 256; ++i) table[i] = (int8_t)(r(256) - 128);
    for (n = 0; n <= 300; ++n)
        if (check(table, n)) return 1;
    for (n = 1000; n < 1004; ++n)
        if (check(table, n * 37)) return 1;
    printf("ok\n");
    return 0;
}
