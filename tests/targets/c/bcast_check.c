/* Broadcasting int8 Add/Sub and Mul against a plain per-element reference: random int8
 * inputs of the given (unmerged) shapes, each output element computed on its own from
 * NumPy's index rule with the one-element oracles (es_add_i8_ref, es_mul_i8_ref); then
 * the kernel's reference and fast forms over the merged stride table, out of place and in
 * place (y == a or y == b when that input has the output's shape). Exit 1 on a mismatch.
 * argv: op(0 add, 1 mul) seed rank ashape[rank] bshape[rank] ndim shape[ndim] sa[ndim]
 *       sb[ndim], then add: a_zp b_zp y_zp left a_mult a_shift b_mult b_shift y_mult
 *       y_shift qmin qmax sub rq a_scale b_scale y_scale; mul: a_zp b_zp y_zp mult shift
 *       qmin qmax */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "edgesmith_rt.h"

static uint32_t s = 1;
static int r(int n) { s = s * 1664525u + 1013904223u; return (int)((s >> 8) % (uint32_t)n); }

static char **arg;
static int next(void) { return atoi(*arg++); }

static int is_mul;
static es_qadd_bcast_params add;
static es_qmul_params mul;

static void kernel(const int8_t *a, const int8_t *b, int8_t *y, int fast) {
    if (is_mul) {
        if (fast) es_mul_i8(a, b, y, &mul);
        else es_mul_i8_ref(a, b, y, &mul);
    } else {
        if (fast) es_add_i8_bcast(a, b, y, &add);
        else es_add_i8_bcast_ref(a, b, y, &add);
    }
}

static int differs(const int8_t *want, const int8_t *got, long n, const char *what) {
    long i;
    for (i = 0; i < n; ++i) {
        if (want[i] != got[i]) {
            printf("%s differs at %ld: %d vs %d\n", what, i, want[i], got[i]);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int rank, d, ashape[ES_MAX_DIMS], bshape[ES_MAX_DIMS], oshape[ES_MAX_DIMS];
    int idx[ES_MAX_DIMS] = {0};
    long na = 1, nb = 1, ny = 1, k;
    int8_t *a, *b, *want, *got;
    es_bcast *bc;
    es_qmul_params one = {0};
    if (argc < 5) return 2;
    arg = argv + 1;
    is_mul = next();
    s = (uint32_t)next();
    rank = next();
    for (d = 0; d < rank; ++d) ashape[d] = next();
    for (d = 0; d < rank; ++d) bshape[d] = next();
    bc = is_mul ? &mul.bc : &add.bc;
    bc->ndim = next();
    for (d = 0; d < bc->ndim; ++d) bc->shape[d] = next();
    for (d = 0; d < bc->ndim; ++d) bc->sa[d] = next();
    for (d = 0; d < bc->ndim; ++d) bc->sb[d] = next();
    if (is_mul) {
        mul.a_zp = next(); mul.b_zp = next(); mul.y_zp = next(); mul.mult = next();
        mul.shift = next(); mul.qmin = next(); mul.qmax = next();
        one = mul;
        one.bc.ndim = 1; one.bc.shape[0] = 1; one.bc.sa[0] = 1; one.bc.sb[0] = 1;
    } else {
        es_qadd_params *q = &add.q;
        q->a_zp = next(); q->b_zp = next(); q->y_zp = next(); q->left_shift = next();
        q->a_mult = next(); q->a_shift = next(); q->b_mult = next(); q->b_shift = next();
        q->y_mult = next(); q->y_shift = next(); q->qmin = next(); q->qmax = next();
        q->sub = next();
        q->rq = next();
        q->a_scale = strtof(*arg++, NULL);
        q->b_scale = strtof(*arg++, NULL);
        q->y_scale = strtof(*arg++, NULL);
    }
    for (d = 0; d < rank; ++d) {
        oshape[d] = ashape[d] > bshape[d] ? ashape[d] : bshape[d];
        na *= ashape[d];
        nb *= bshape[d];
        ny *= oshape[d];
    }
    a = malloc((size_t)na + 1); b = malloc((size_t)nb + 1);
    want = malloc((size_t)ny + 1); got = malloc((size_t)ny + 1);
    for (k = 0; k < na; ++k) a[k] = (int8_t)(r(256) - 128);
    for (k = 0; k < nb; ++k) b[k] = (int8_t)(r(256) - 128);
    for (k = 0; k < ny; ++k) { /* NumPy's rule, one element at a time */
        long ai = 0, bi = 0;
        for (d = 0; d < rank; ++d) {
            ai = ai * ashape[d] + (ashape[d] == 1 ? 0 : idx[d]);
            bi = bi * bshape[d] + (bshape[d] == 1 ? 0 : idx[d]);
        }
        if (is_mul) es_mul_i8_ref(a + ai, b + bi, want + k, &one);
        else es_add_i8_ref(a + ai, b + bi, want + k, 1, &add.q);
        for (d = rank - 1; d >= 0; --d) {
            if (++idx[d] < oshape[d]) break;
            idx[d] = 0;
        }
    }
    kernel(a, b, got, 0);
    if (differs(want, got, ny, "reference over the stride table")) return 1;
    memset(got, 0, (size_t)ny);
    kernel(a, b, got, 1);
    if (differs(want, got, ny, "fast kernel")) return 1;
    if (na == ny) {
        memcpy(got, a, (size_t)ny);
        kernel(got, b, got, 1);
        if (differs(want, got, ny, "in place over a")) return 1;
    }
    if (nb == ny) {
        memcpy(got, b, (size_t)ny);
        kernel(a, got, got, 1);
        if (differs(want, got, ny, "in place over b")) return 1;
    }
    free(a); free(b); free(want); free(got);
    return 0;
}
