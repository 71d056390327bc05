/* es_transpose against es_transpose_ref on random permutations of 1-6 dimensions (size-1
   axes included) and 1-, 2-, 4-byte elements; each output is written into a buffer of exactly
   its size, so a sanitizer build catches any read or write past x or y. Exit 0: all equal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgesmith_rt.h"

static unsigned rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

int main(void) {
    unsigned seed = 11;
    int c;
    for (c = 0; c < 3000; ++c) {
        es_perm p;
        const int elems[3] = {1, 2, 4};
        const int elem = elems[c % 3];
        long n = 1, i;
        int d;
        unsigned char *x, *y, *z;
        p.ndim = 1 + (int)(rnd(&seed) % ES_MAX_DIMS);
        for (d = 0; d < p.ndim; ++d) {
            p.shape[d] = 1 + (int)(rnd(&seed) % 5);
            p.perm[d] = d;
            n *= p.shape[d];
        }
        for (d = p.ndim - 1; d > 0; --d) { /* Fisher-Yates */
            int j = (int)(rnd(&seed) % (unsigned)(d + 1)), t = p.perm[d];
            p.perm[d] = p.perm[j];
            p.perm[j] = t;
        }
        x = malloc((size_t)n * elem);
        y = malloc((size_t)n * elem);
        z = malloc((size_t)n * elem);
        for (i = 0; i < n * elem; ++i) x[i] = (unsigned char)rnd(&seed);
        es_transpose(x, y, elem, &p);
        es_transpose_ref(x, z, elem, &p);
        if (memcmp(y, z, (size_t)n * elem) != 0) {
            printf("case %d differs (ndim %d, elem %d)\n", c, (int)p.ndim, elem);
            return 1;
        }
        free(x);
        free(y);
        free(z);
    }
    return 0;
}
