/* How an application runs a model on the profile's power schedule: es_run_scheduled for
 * one sliced inference, es_period for one inference per frame. Compiled against a
 * generated folder by tests/targets/test_power_schedule.py; prints one JSON line:
 *
 *   scheduled FRAMES   "trace": when each step of the first inference started and ended
 *                      (a gap between two steps is a sleep between slices), and the
 *                      wall time of FRAMES inferences paced by ES_POWER_PERIOD_US */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>

#include "es_power.h"
#include "model.h"

static unsigned char arena_raw[ES_ARENA_BYTES + ES_ARENA_ALIGN];
static float input[ES_INPUT0_ELEMS];
static uint64_t t0, start_ns[ES_NUM_STEPS], end_ns[ES_NUM_STEPS];
static int tracing = 1;

static void before(void *user, int i, const char *op, const char *name) {
    (void)user, (void)op, (void)name;
    if (tracing) start_ns[i] = es_now_ns() - t0;
}

static void after(void *user, int i, const char *op, const char *name, uint64_t ns) {
    (void)user, (void)op, (void)name, (void)ns;
    if (tracing) end_ns[i] = es_now_ns() - t0;
}

int main(int argc, char **argv) {
    es_hooks hooks = {before, after, NULL};
    es_period period = {0, 0, 0, 0};
    es_model m;
    unsigned char *arena = arena_raw + (ES_ARENA_ALIGN - (uintptr_t)arena_raw % ES_ARENA_ALIGN);
    int frames = argc > 1 ? atoi(argv[1]) : 1, i, rc;
    uint64_t wall_ns = 0;
    rc = es_init(&m, arena, ES_ARENA_BYTES, argc > 2 ? argv[2] : NULL);
    if (rc != ES_OK) {
        fprintf(stderr, "es_init: %s\n", es_strerror(rc));
        return 1;
    }
    if (ES_POWER_PERIOD_US > 0) es_period_start(&period, ES_POWER_PERIOD_US);
    for (i = 0; i < frames; ++i) {
        es_input(&m, 0, input, sizeof input); /* a camera would fill it here */
        t0 = es_now_ns();
        rc = es_run_scheduled(&m, &hooks);
        tracing = 0;
        if (rc != ES_OK) return 1;
        if (ES_POWER_PERIOD_US > 0) es_period_wait(&period);
    }
    if (ES_POWER_PERIOD_US > 0) wall_ns = es_now_ns() - period.start_ns;
    printf("{\"steps\": %d, \"max_steps\": %d, \"sleep_us\": %lu, \"period_us\": %lu, "
           "\"wall_ms\": %.3f, \"missed\": %lu, \"trace\": [",
           ES_NUM_STEPS, ES_POWER_MAX_STEPS, (unsigned long)ES_POWER_SLEEP_US,
           (unsigned long)ES_POWER_PERIOD_US, (double)wall_ns / 1e6,
           (unsigned long)(ES_POWER_PERIOD_US > 0 ? period.missed : 0));
    for (i = 0; i < ES_NUM_STEPS; ++i)
        printf("%s[%.3f, %.3f]", i ? ", " : "", (double)start_ns[i] / 1e3,
               (double)end_ns[i] / 1e3);
    printf("]}\n");
    es_deinit(&m);
    return 0;
}
