/* edgesmith runtime core: error strings, CRC32, weights-file checks and mapping, clock.
 * No allocation: the weights file is mmap'd (POSIX) and never copied. */
#if !defined(_POSIX_C_SOURCE) && !defined(ES_NO_POSIX)
#define _POSIX_C_SOURCE 200112L
#endif
#include "es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "edgesmith_rt.h"

#if (defined(__unix__) || defined(__APPLE__)) && !defined(ES_NO_POSIX)
#define ES_HAVE_POSIX 1
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#endif

const char *es_strerror(int code) {
    switch (code) {
    case ES_OK: return "ok";
    case ES_MORE: return "steps remain (es_run_slice)";
    case ES_ERR_ARG: return "invalid argument";
    case ES_ERR_ARENA_SMALL: return "arena smaller than ES_ARENA_BYTES";
    case ES_ERR_ARENA_ALIGN: return "arena not aligned to ES_ARENA_ALIGN bytes";
    case ES_ERR_WEIGHTS_OPEN: return "cannot open or map the weights file";
    case ES_ERR_WEIGHTS_SHORT: return "weights file truncated";
    case ES_ERR_WEIGHTS_MAGIC: return "not an edgesmith weights file (bad magic)";
    case ES_ERR_WEIGHTS_VERSION: return "unsupported weights file format version";
    case ES_ERR_WEIGHTS_MODEL: return "weights file belongs to another model";
    case ES_ERR_WEIGHTS_CRC: return "weights payload corrupted (CRC32 mismatch)";
    case ES_ERR_WEIGHTS_LAYOUT: return "weights file layout does not match the model";
    case ES_ERR_NOT_INIT: return "model not initialised (es_init failed or not called)";
    case ES_ERR_SIZE: return "buffer size does not match the tensor";
    case ES_ERR_UNAVAILABLE: return "unavailable on this platform or without permission";
    case ES_ERR_INPUT_SPENT:
        return "the last run consumed the input; copy it in again (es_input)";
    default: return "unknown error";
    }
}

/* CRC32 (IEEE 802.3, as zlib), nibble table: small enough for flash. */
uint32_t es_crc32(const unsigned char *p, size_t n) {
    static const uint32_t t[16] = {
        0x00000000u, 0x1db71064u, 0x3b6e20c8u, 0x26d930acu, 0x76dc4190u, 0x6b6b51f4u,
        0x4db26158u, 0x5005713cu, 0xedb88320u, 0xf00f9344u, 0xd6d6a3e8u, 0xcb61b38cu,
        0x9b64c2b0u, 0x86d3d2d4u, 0xa00ae278u, 0xbdbdf21cu};
    uint32_t c = 0xffffffffu;
    size_t i;
    for (i = 0; i < n; ++i) {
        c ^= p[i];
        c = (c >> 4) ^ t[c & 15u];
        c = (c >> 4) ^ t[c & 15u];
    }
    return c ^ 0xffffffffu;
}

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

int es_weights_check(const unsigned char *img, size_t size, uint32_t model_id, uint32_t count,
                     uint64_t payload_bytes, es_weights *out) {
    uint64_t payload;
    if (!img || !out) return ES_ERR_ARG;
    if (size < ES_WEIGHTS_HEADER) return ES_ERR_WEIGHTS_SHORT;
    if (memcmp(img, ES_WEIGHTS_MAGIC, 4) != 0) return ES_ERR_WEIGHTS_MAGIC;
    if (rd32(img + 4) != ES_WEIGHTS_VERSION) return ES_ERR_WEIGHTS_VERSION;
    if (rd32(img + 28) != ES_WEIGHTS_HEADER) return ES_ERR_WEIGHTS_LAYOUT;
    if (rd32(img + 12) != model_id) return ES_ERR_WEIGHTS_MODEL;
    if (rd32(img + 8) != count) return ES_ERR_WEIGHTS_LAYOUT;
    payload = (uint64_t)rd32(img + 16) | ((uint64_t)rd32(img + 20) << 32);
    if (payload != payload_bytes) return ES_ERR_WEIGHTS_LAYOUT;
    if ((uint64_t)(size - ES_WEIGHTS_HEADER) < payload) return ES_ERR_WEIGHTS_SHORT;
    if (es_crc32(img + ES_WEIGHTS_HEADER, (size_t)payload) != rd32(img + 24))
        return ES_ERR_WEIGHTS_CRC;
    out->payload = img + ES_WEIGHTS_HEADER;
    out->payload_size = (size_t)payload;
    return ES_OK;
}

int es_weights_open(const char *path, uint32_t model_id, uint32_t count, uint64_t payload_bytes,
                    es_weights *out) {
#ifdef ES_HAVE_POSIX
    struct stat st;
    void *base;
    int fd, rc;
    if (!path || !out) return ES_ERR_ARG;
    out->map_base = NULL;
    out->map_size = 0;
    fd = open(path, O_RDONLY);
    if (fd < 0) return ES_ERR_WEIGHTS_OPEN;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return ES_ERR_WEIGHTS_OPEN;
    }
    if ((uint64_t)st.st_size < ES_WEIGHTS_HEADER) {
        close(fd);
        return ES_ERR_WEIGHTS_SHORT;
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return ES_ERR_WEIGHTS_OPEN;
    rc = es_weights_check((const unsigned char *)base, (size_t)st.st_size, model_id, count,
                          payload_bytes, out);
    if (rc != ES_OK) {
        munmap(base, (size_t)st.st_size);
        return rc;
    }
    out->map_base = base;
    out->map_size = (size_t)st.st_size;
    return ES_OK;
#else
    (void)path;
    (void)model_id;
    (void)count;
    (void)payload_bytes;
    (void)out;
    return ES_ERR_UNAVAILABLE;
#endif
}

void es_weights_close(es_weights *w) {
    if (!w) return;
#ifdef ES_HAVE_POSIX
    if (w->map_base) munmap(w->map_base, w->map_size);
#endif
    w->map_base = NULL;
    w->map_size = 0;
    w->payload = NULL;
    w->payload_size = 0;
}

uint64_t es_now_ns(void) {
#ifdef ES_HAVE_POSIX
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#else
    return 0;
#endif
}
