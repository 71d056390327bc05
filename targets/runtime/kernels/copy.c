/* Type-agnostic data movement: copies for concat/split/outputs, N-d transpose. */
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

void es_transpose(const void *x, void *y, int elem, const es_perm *p) {
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
