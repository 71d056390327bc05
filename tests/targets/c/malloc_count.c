/* LD_PRELOAD shim: counts every malloc/calloc/realloc/free in the process. The harness
 * reads es_shim_counts() before and after the measured runs. */
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static volatile long counts;

long es_shim_counts(void) { return counts; }

void *malloc(size_t n) {
    ++counts;
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    ++counts;
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    ++counts;
    return __libc_realloc(p, n);
}
void free(void *p) {
    if (p) ++counts;
    __libc_free(p);
}
