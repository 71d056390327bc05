/* Type-agnostic data movement: copies for concat/split/outputs, N-d transpose. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "../edgesmith_rt.h"

void es_copy(void *dst, const void *src, size_t n) {
    if (dst != src) memmove(dst, src, n);
}

void es_copy_rows(void *dst, const void *src, const es_copy_rows_params *p) {
    const int rows = p->rows, row_bytes = p->row_bytes;
    const int dst_stride = p->dst_stride, src_stride = p->src_stride;
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    int r;
    for (r = 0; r < rows; ++r) memcpy(d + (size_t)r * dst_stride, s + (size_t)r * src_stride,
                                      (size_t)row_bytes);
}

/* Merge the permutation into as few dimensions as it really has: size-1 dimensions go, and
   input dimensions that stay next to each other in the same order become one (NCHW -> NHWC
   is then [N, C, HW] -> [N, HW, C]). Returns the number of dimensions left (0: one element). */
static int collapse(const es_perm *p, int shape[ES_MAX_DIMS], int perm[ES_MAX_DIMS]) {
    int keep[ES_MAX_DIMS], kshape[ES_MAX_DIMS], kperm[ES_MAX_DIMS], start[ES_MAX_DIMS];
    int size[ES_MAX_DIMS];
    int n = 0, m = 0, d, g, groups = 0;
    for (d = 0; d < p->ndim; ++d) {
        keep[d] = p->shape[d] > 1 ? n : -1;
        if (p->shape[d] > 1) kshape[n++] = p->shape[d];
    }
    for (d = 0; d < p->ndim; ++d)
        if (keep[p->perm[d]] >= 0) kperm[m++] = keep[p->perm[d]];
    /* groups in output order: a run of input dimensions that follow one another */
    for (d = 0; d < m; ++d) {
        if (d == 0 || kperm[d] != kperm[d - 1] + 1) {
            start[groups] = kperm[d];
            size[groups++] = 1;
        }
        size[groups - 1] *= kshape[kperm[d]];
    }
    /* a group's input position is its rank among the groups' first input dimensions */
    for (g = 0; g < groups; ++g) {
        int rank = 0, h;
        for (h = 0; h < groups; ++h) rank += start[h] < start[g];
        perm[g] = rank;
        shape[rank] = size[g];
    }
    return groups;
}

/* y = x with its dimensions permuted (ONNX Transpose). After collapse, the walk keeps the
   source offset as it goes (no index arithmetic per element) and moves the innermost output
   dimension as one memcpy when it is contiguous in x, else as a strided gather by element
   size. es_transpose_ref below is the element-by-element oracle. */
void es_transpose(const void *x, void *y, int elem, const es_perm *p) {
    const unsigned char *xs = (const unsigned char *)x;
    unsigned char *yd = (unsigned char *)y;
    int shape[ES_MAX_DIMS], perm[ES_MAX_DIMS], oshape[ES_MAX_DIMS], idx[ES_MAX_DIMS] = {0};
    long in_stride[ES_MAX_DIMS], ostride[ES_MAX_DIMS], s = 1, src = 0, rows = 1, r;
    const int nd = collapse(p, shape, perm);
    int d, inner, j;
    long step;
    if (nd == 0) {
        memcpy(yd, xs, (size_t)elem);
        return;
    }
    for (d = nd - 1; d >= 0; --d) {
        in_stride[d] = s;
        s *= shape[d];
    }
    for (d = 0; d < nd; ++d) {
        oshape[d] = shape[perm[d]];
        ostride[d] = in_stride[perm[d]];
    }
    inner = oshape[nd - 1];
    step = ostride[nd - 1];
    for (d = 0; d < nd - 1; ++d) rows *= oshape[d];
    for (r = 0; r < rows; ++r) {
        const unsigned char *row = xs + (size_t)src * elem;
        if (step == 1) {
            memcpy(yd, row, (size_t)inner * elem);
        } else if (elem == 4) {
            const uint32_t *f = (const uint32_t *)row;
            uint32_t *o = (uint32_t *)yd;
            for (j = 0; j < inner; ++j) o[j] = f[(long)j * step];
        } else if (elem == 1) {
            for (j = 0; j < inner; ++j) yd[j] = row[(long)j * step];
        } else {
            for (j = 0; j < inner; ++j) memcpy(yd + (size_t)j * elem, row + (size_t)j * step * elem,
                                               (size_t)elem);
        }
        yd += (size_t)inner * elem;
        for (d = nd - 2; d >= 0; --d) { /* odometer over the outer output dimensions */
            src += ostride[d];
            if (++idx[d] < oshape[d]) break;
            src -= ostride[d] * oshape[d];
            idx[d] = 0;
        }
    }
}

void es_transpose_ref(const void *x, void *y, int elem, const es_perm *p) {
    const unsigned char *xs = (const unsigned char *)x;
    unsigned char *yd = (unsigned char *)y;
    long in_stride[ES_MAX_DIMS], ostride[ES_MAX_DIMS];
    int oshape[ES_MAX_DIMS], idx[ES_MAX_DIMS] = {0};
    long total = 1, o, s = 1;
    int d;
    for (d = p->ndim - 1; d >= 0; --d) {
        in_stride[d] = s;
        s *= p->shape[d];
    }
    for (d = 0; d < p->ndim; ++d) {
        oshape[d] = p->shape[p->perm[d]];
        ostride[d] = in_stride[p->perm[d]];
        total *= oshape[d];
    }
    for (o = 0; o < total; ++o) {
        long src = 0;
        for (d = 0; d < p->ndim; ++d) src += idx[d] * ostride[d];
        memcpy(yd + (size_t)o * elem, xs + (size_t)src * elem, (size_t)elem);
        for (d = p->ndim - 1; d >= 0; --d) {
            if (++idx[d] < oshape[d]) break;
            idx[d] = 0;
        }
    }
}
