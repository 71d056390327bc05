/* Test harness linked against a generated model (compiled with its sources).
 *   harness noalloc N          runs N inferences after es_init; prints allocation count
 *   harness weights FILE       es_init with FILE; prints the code and message, never crashes
 *   harness slice K            es_run_slice(K) to completion == es_run, counts hooks
 *   harness power ROOT         cpufreq / RAPL helpers against a sysfs tree
 *   harness duty K SLEEP_US    es_run_duty output == es_run output
 *   harness bind               es_bind_input: the steps read the caller's buffer in place,
 *                              leave it untouched, and es_input / es_input_ptr end it   */
#define _POSIX_C_SOURCE 200112L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "es_power.h"
#include "model.h"

static unsigned char arena_raw[ES_ARENA_BYTES + ES_ARENA_ALIGN];
static float in0[ES_INPUT0_ELEMS], ref[ES_OUTPUT0_ELEMS], got[ES_OUTPUT0_ELEMS];
static int before_calls, after_calls;
static unsigned long long total_ns;

static void *arena(void) {
    size_t mis = (size_t)((uintptr_t)arena_raw % ES_ARENA_ALIGN);
    return arena_raw + (mis ? ES_ARENA_ALIGN - mis : 0);
}

static void before(void *u, int i, const char *op, const char *name) {
    (void)u; (void)i; (void)op; (void)name;
    ++before_calls;
}
static void after(void *u, int i, const char *op, const char *name, uint64_t ns) {
    (void)u; (void)i; (void)op; (void)name;
    ++after_calls;
    total_ns += ns;
}

static void fill(void) {
    unsigned i;
    for (i = 0; i < ES_INPUT0_ELEMS; ++i) in0[i] = (float)((int)(i * 7919u % 200u) - 100) / 50.0f;
}

/* what es_output gives after one es_run, compared with want */
static int run_matches(es_model *m, const float *want) {
    if (es_run(m, NULL) != ES_OK) return 0;
    es_output(m, 0, got, sizeof got);
    return memcmp(want, got, sizeof got) == 0;
}

/* es_bind_input against es_input, on input 0 (ref: the output of in0 through es_input) */
static int bind_mode(es_model *m) {
    static unsigned char raw[sizeof in0 + 2 * ES_ARENA_ALIGN];
    static float neg[ES_INPUT0_ELEMS], ref_neg[ES_OUTPUT0_ELEMS];
    unsigned char *buf = raw + (ES_ARENA_ALIGN - (uintptr_t)raw % ES_ARENA_ALIGN) % ES_ARENA_ALIGN;
    int rc, same, again, untouched, follows, input_ends, ptr_ends;
    unsigned i;
    for (i = 0; i < ES_INPUT0_ELEMS; ++i) neg[i] = -in0[i];
    es_input(m, 0, neg, sizeof neg);
    es_run(m, NULL);
    es_output(m, 0, ref_neg, sizeof ref_neg);
    memcpy(buf, in0, sizeof in0);
    rc = es_bind_input(m, 0, buf, sizeof in0);
    same = run_matches(m, ref);
    again = run_matches(m, ref); /* a second run: the arena reused, the input still there */
    untouched = memcmp(buf, in0, sizeof in0) == 0;
    memcpy(buf, neg, sizeof neg); /* no call: the next run reads the new values */
    follows = run_matches(m, ref_neg);
    es_input(m, 0, in0, sizeof in0); /* back to the arena: the buffer no longer counts */
    input_ends = run_matches(m, ref);
    es_bind_input(m, 0, buf, sizeof in0);
    memcpy(es_input_ptr(m, 0), in0, sizeof in0); /* written in place: read from there */
    ptr_ends = run_matches(m, ref);
    printf("{\"rc\": %d, \"same\": %d, \"again\": %d, \"untouched\": %d, \"follows\": %d, "
           "\"input_ends\": %d, \"ptr_ends\": %d, \"misaligned\": %d, \"short\": %d, "
           "\"index\": %d, \"null\": %d}\n",
           rc, same, again, untouched, follows, input_ends, ptr_ends,
           es_bind_input(m, 0, buf + 4, sizeof in0), es_bind_input(m, 0, buf, sizeof in0 - 1),
           es_bind_input(m, ES_NUM_INPUTS, buf, sizeof in0), es_bind_input(m, 0, NULL, sizeof in0));
    return 0;
}

int main(int argc, char **argv) {
    es_model m;
    int rc;
    if (argc < 2) return 2;
    if (strcmp(argv[1], "weights") == 0) {
        rc = es_init(&m, arena(), ES_ARENA_BYTES, argv[2]);
        printf("%d %s\n", rc, es_strerror(rc));
        if (rc == ES_OK) {
            fill();
            es_input(&m, 0, in0, sizeof in0);
            es_run(&m, NULL);
            es_deinit(&m);
        }
        return 0;
    }
    if (strcmp(argv[1], "power") == 0) {
        char gov[64];
        long khz = 0;
        uint64_t e = 0, range = 0;
        int r1 = es_cpufreq_get_governor(argv[2], 0, gov, sizeof gov);
        int r2 = es_cpufreq_set_governor(argv[2], 0, "powersave");
        int r3 = es_cpufreq_get_khz(argv[2], 0, &khz);
        int r4 = es_cpufreq_set_max_khz(argv[2], 0, 1200000);
        int r5 = es_rapl_read_uj(argv[2], 0, &e, &range);
        printf("{\"governor_rc\": %d, \"governor\": \"%s\", \"set_governor_rc\": %d, "
               "\"khz_rc\": %d, \"khz\": %ld, \"set_max_rc\": %d, \"rapl_rc\": %d, "
               "\"energy_uj\": %llu, \"range_uj\": %llu, \"wrap_delta\": %llu}\n",
               r1, r1 == ES_OK ? gov : "", r2, r3, khz, r4, r5, (unsigned long long)e,
               (unsigned long long)range,
               (unsigned long long)es_energy_delta_uj(range - 10u, 5u, range));
        return 0;
    }
    rc = es_init(&m, arena(), ES_ARENA_BYTES, argc > 3 && strcmp(argv[1], "noalloc") == 0
                                                   ? argv[3] : "weights.bin");
    if (rc != ES_OK) {
        printf("init failed: %s\n", es_strerror(rc));
        return 1;
    }
    fill();
    es_input(&m, 0, in0, sizeof in0);
    es_run(&m, NULL);
    es_output(&m, 0, ref, sizeof ref);
    if (strcmp(argv[1], "noalloc") == 0) {
        long (*counts)(void) = (long (*)(void))dlsym(RTLD_DEFAULT, "es_shim_counts");
        long c0, c1;
        int i, n = atoi(argv[2]);
        es_hooks h = {before, after, NULL};
        if (!counts) {
            printf("no shim\n");
            return 1;
        }
        c0 = counts();
        for (i = 0; i < n; ++i) {
            es_input(&m, 0, in0, sizeof in0);
            if (es_run(&m, i % 2 ? &h : NULL) != ES_OK) return 1;
            es_output(&m, 0, got, sizeof got);
        }
        c1 = counts();
        printf("{\"allocations\": %ld, \"runs\": %d, \"same\": %d}\n", c1 - c0, n,
               memcmp(ref, got, sizeof got) == 0);
        return 0;
    }
    if (strcmp(argv[1], "bind") == 0) return bind_mode(&m);
    if (strcmp(argv[1], "slice") == 0 || strcmp(argv[1], "duty") == 0) {
        es_hooks h = {before, after, NULL};
        int k = atoi(argv[2]), slices = 0;
        es_input(&m, 0, in0, sizeof in0);
        if (strcmp(argv[1], "duty") == 0) {
            es_duty d;
            d.max_steps = k;
            d.run_us = 0;
            d.sleep_us = (uint32_t)atoi(argv[3]);
            rc = es_run_duty(&m, &d, &h);
            slices = -1;
        } else {
            m.next_step = 0;
            while ((rc = es_run_slice(&m, k, &h)) == ES_MORE) ++slices;
            ++slices;
        }
        es_output(&m, 0, got, sizeof got);
        printf("{\"rc\": %d, \"slices\": %d, \"steps\": %d, \"before\": %d, \"after\": %d, "
               "\"same\": %d, \"ns\": %llu}\n", rc, slices, ES_NUM_STEPS, before_calls,
               after_calls, memcmp(ref, got, sizeof got) == 0, total_ns);
        return 0;
    }
    return 2;
}
