/* In-process fuzzer for the generated runtime's weights.bin parser.
 *   weights_fuzz GOOD.bin SCRATCH.bin N SEED
 * Each round mutates a copy of GOOD (bit flips, byte stores, truncation, extension; half
 * the rounds aimed at the 64-byte header), writes it to SCRATCH, and calls es_init on it;
 * an accepted file is also run once. Built with ASan+UBSan, any out-of-bounds read aborts.
 * Prints {"rounds", "rejected", "accepted", "accepted_outside_padding"}: a file accepted
 * although a byte outside the header's reserved padding changed, or although it was cut
 * short, is a parser bug. Bytes after the declared payload are never read, so a file
 * extended with garbage may load: those rounds count as "trailing". */
#define _POSIX_C_SOURCE 200112L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define PAD_FIRST 32 /* header bytes 32..63 are reserved padding, not checked */
#define PAD_END 64

static unsigned char arena_raw[ES_ARENA_BYTES + ES_ARENA_ALIGN];
static float input[ES_INPUT0_ELEMS];

static uint64_t rng_state;
static uint32_t rnd(void) { /* xorshift64*: deterministic for a seed */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 4096);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

int main(int argc, char **argv) {
    size_t good_len, len, i, data_end;
    unsigned char *good, *buf;
    long rounds, r, rejected = 0, accepted = 0, outside = 0, trailing = 0;
    void *arena;
    if (argc != 5) return 2;
    good = read_file(argv[1], &good_len);
    if (!good) return 2;
    buf = malloc(good_len + 4096);
    rounds = atol(argv[3]);
    /* bytes past the declared payload (header bytes 16..23) are never read */
    data_end = PAD_END + (size_t)(good[16] | (good[17] << 8) | (good[18] << 16) |
                                  ((size_t)good[19] << 24));
    rng_state = (uint64_t)atol(argv[4]) * 0x9E3779B97F4A7C15ull + 1;
    arena = arena_raw + (ES_ARENA_ALIGN - (uintptr_t)arena_raw % ES_ARENA_ALIGN) % ES_ARENA_ALIGN;
    for (r = 0; r < rounds; ++r) {
        int changed_outside = 0, extended = 0, edits = 1 + (int)(rnd() % 4), e;
        char what[160] = "";
        FILE *f;
        es_model m;
        memcpy(buf, good, good_len);
        len = good_len;
        for (e = 0; e < edits; ++e) {
            size_t pos = (r % 2 == 0) ? rnd() % PAD_END : rnd() % len;
            unsigned kind = rnd() % 8;
            snprintf(what + strlen(what), sizeof what - strlen(what), "%u@%lu ", kind,
                     (unsigned long)pos);
            if (kind < 4) {
                buf[pos] ^= (unsigned char)(1u << (rnd() % 8));
            } else if (kind < 6) {
                unsigned char v = (unsigned char)rnd();
                if (v == buf[pos]) continue;
                buf[pos] = v;
            } else if (kind == 6) {
                len = pos; /* truncate */
                break;
            } else {
                size_t extra = 1 + rnd() % 4000; /* trailing garbage */
                for (i = 0; i < extra; ++i) buf[len + i] = (unsigned char)rnd();
                len += extra;
                extended = 1;
                break;
            }
        }
        /* judged on the result, not the edits: two flips of one bit cancel out */
        changed_outside = len < data_end;
        for (i = 0; i < data_end && i < len && !changed_outside; ++i)
            if ((i < PAD_FIRST || i >= PAD_END) && buf[i] != good[i]) changed_outside = 1;
        f = fopen(argv[2], "wb");
        if (!f || fwrite(buf, 1, len, f) != len) return 3;
        fclose(f);
        if (es_init(&m, arena, ES_ARENA_BYTES, argv[2]) == ES_OK) {
            ++accepted;
            if (changed_outside && ++outside <= 5)  /* name the first few for the report */
                fprintf(stderr, "accepted: round %ld edits %s\n", r, what);
            if (extended) ++trailing;
            memset(input, 0, sizeof input);
            es_input(&m, 0, input, sizeof input);
            es_run(&m, NULL);
            es_deinit(&m);
        } else {
            ++rejected;
        }
    }
    printf("{\"rounds\": %ld, \"rejected\": %ld, \"accepted\": %ld, "
           "\"accepted_outside_padding\": %ld, \"trailing\": %ld}\n", rounds, rejected,
           accepted, outside, trailing);
    free(buf);
    free(good);
    return 0;
}
