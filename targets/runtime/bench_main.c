/* edgesmith_bench: run the generated model on a raw input file, write the raw output,
 * print one JSON line of latency figures.
 *
 *   edgesmith_bench [--weights F] [--input in.raw] [--output out.raw] [--runs N]
 *                   [--warmup W] [--slice K] [--sleep-us S] [--sysfs ROOT] [--profile]
 *
 * Input: every model input back to back, raw little-endian float32 in the model's layout;
 * output likewise. Memory: arena and I/O buffers are static; no allocation at all.
 * --profile adds "steps": the mean time of every step (op, node name) over the timed runs,
 * measured by the after_step hook, so a slow layer is found on the device itself. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L
#endif
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "es_power.h"
#include "model.h"

#ifndef ES_BENCH_MAX_RUNS
#define ES_BENCH_MAX_RUNS 100000
#endif

/* the arena: static, aligned by hand (portable C99) */
static unsigned char arena_raw[ES_ARENA_BYTES + ES_ARENA_ALIGN];
static double lat_ms[ES_BENCH_MAX_RUNS];

/* peak RSS of this process: VmHWM (Linux; not inherited across exec), else ru_maxrss */
static long peak_rss_kb(void) {
    struct rusage ru;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (f) {
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "VmHWM:", 6) == 0) kb = strtol(line + 6, NULL, 10);
        fclose(f);
    }
    if (kb < 0 && getrusage(RUSAGE_SELF, &ru) == 0) kb = (long)ru.ru_maxrss;
    return kb;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

static double pct(const double *v, int n, double q) {
    int i = (int)(q * (double)(n - 1) + 0.5);
    return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

static unsigned char in_buf[ES_NUM_INPUTS][ES_MAX_INPUT_BYTES];

static int load_inputs(const char *path) {
    FILE *f;
    int i;
    if (!path) return 0;
    f = fopen(path, "rb");
    if (!f) return -1;
    for (i = 0; i < ES_NUM_INPUTS; ++i) {
        if (es_input_bytes[i] > sizeof in_buf[i] || fread(in_buf[i], 1, es_input_bytes[i], f) != es_input_bytes[i]) {
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

static int feed(es_model *m) {
    int i, rc;
    for (i = 0; i < ES_NUM_INPUTS; ++i) {
        rc = es_input(m, i, in_buf[i], es_input_bytes[i]);
        if (rc != ES_OK) return rc;
    }
    return ES_OK;
}

/* --profile: time spent in each step over the timed runs, through the after_step hook */
static uint64_t step_ns[ES_NUM_STEPS > 0 ? ES_NUM_STEPS : 1];
static const char *step_op[ES_NUM_STEPS > 0 ? ES_NUM_STEPS : 1];
static const char *step_name[ES_NUM_STEPS > 0 ? ES_NUM_STEPS : 1];

static void on_step(void *user, int index, const char *op, const char *name,
                    uint64_t elapsed_ns) {
    (void)user;
    if (index < 0 || index >= ES_NUM_STEPS) return;
    step_ns[index] += elapsed_ns;
    step_op[index] = op;
    step_name[index] = name;
}

/* a JSON string body: quotes, backslashes and control characters escaped */
static void print_json_text(const char *t) {
    for (; t && *t; ++t) {
        if (*t == '"' || *t == '\\') printf("\\%c", *t);
        else if ((unsigned char)*t < 0x20) printf("\\u%04x", (unsigned)(unsigned char)*t);
        else putchar(*t);
    }
}

static int run_once(es_model *m, int slice, uint32_t sleep_us, const es_hooks *hooks) {
    int rc = feed(m);
    if (rc != ES_OK) return rc;
    if (slice > 0 || sleep_us > 0) {
        es_duty d;
        d.max_steps = slice;
        d.run_us = 0;
        d.sleep_us = sleep_us;
        return es_run_duty(m, &d, hooks);
    }
    return es_run(m, hooks);
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--weights F] [--input in.raw] [--output out.raw] "
                    "[--runs N>=1] [--warmup W>=0] [--slice K>=0] [--sleep-us S>=0] "
                    "[--sysfs ROOT] [--profile]\n",
            argv0);
    return 2;
}

/* the whole of ``text`` as a decimal number in [lo, hi]; else say which flag and why
 * (atoi would read "abc" as 0 and "-5" as -5, and the run would quietly measure
 * something else) */
static int parse_number(const char *flag, const char *text, long long lo, long long hi,
                        long long *out) {
    char *end = NULL;
    long long v;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "error: %s %s: expected a whole number from %lld to %lld\n", flag, text,
                lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* Longer than 60 lines on purpose: the harness's whole sequence (parse the flags, map the
 * weights, init, warm up, time each run, read energy, print one JSON line) stays in one
 * place a reader can follow top to bottom; each step is a few lines or one helper. */
int main(int argc, char **argv) {
    const char *weights = NULL, *input = NULL, *output = NULL, *sysfs = "/sys";
    int runs = 50, warmup = 5, slice = 0, profile = 0, i, rc, energy_ok;
    es_hooks prof_hooks = {NULL, on_step, NULL};
    uint32_t sleep_us = 0;
    uint64_t e0 = 0, e1 = 0, erange = 0;
    long long num = 0;
    es_model m;
    for (i = 1; i < argc; ++i) {
        const int has_value = i + 1 < argc;
        if (has_value && strcmp(argv[i], "--weights") == 0) weights = argv[++i];
        else if (has_value && strcmp(argv[i], "--input") == 0) input = argv[++i];
        else if (has_value && strcmp(argv[i], "--output") == 0) output = argv[++i];
        else if (has_value && strcmp(argv[i], "--runs") == 0) {
            if (parse_number("--runs", argv[++i], 1, INT_MAX, &num) != 0) return usage(argv[0]);
            runs = (int)num;
        } else if (has_value && strcmp(argv[i], "--warmup") == 0) {
            if (parse_number("--warmup", argv[++i], 0, INT_MAX, &num) != 0) return usage(argv[0]);
            warmup = (int)num;
        } else if (has_value && strcmp(argv[i], "--slice") == 0) {
            if (parse_number("--slice", argv[++i], 0, INT_MAX, &num) != 0) return usage(argv[0]);
            slice = (int)num;
        } else if (has_value && strcmp(argv[i], "--sleep-us") == 0) {
            if (parse_number("--sleep-us", argv[++i], 0, UINT32_MAX, &num) != 0)
                return usage(argv[0]);
            sleep_us = (uint32_t)num;
        } else if (has_value && strcmp(argv[i], "--sysfs") == 0) sysfs = argv[++i];
        else if (strcmp(argv[i], "--profile") == 0) profile = 1;
        else return usage(argv[0]);
    }
    if (runs > ES_BENCH_MAX_RUNS) runs = ES_BENCH_MAX_RUNS; /* the JSON line says how many */
    if (load_inputs(input) != 0) {
        fprintf(stderr, "error: cannot read %s (%u bytes per input expected)\n", input,
                (unsigned)es_input_bytes[0]);
        return 1;
    }
    {
        size_t mis = (size_t)((uintptr_t)arena_raw % ES_ARENA_ALIGN);
        unsigned char *arena = arena_raw + (mis ? ES_ARENA_ALIGN - mis : 0);
        rc = es_init(&m, arena, ES_ARENA_BYTES, weights);
    }
    if (rc != ES_OK) {
        fprintf(stderr, "error: es_init: %s\n", es_strerror(rc));
        return 1;
    }
    if (output) { /* the output of the given input, before any timing */
        FILE *f;
        rc = run_once(&m, slice, 0, NULL);
        if (rc != ES_OK) {
            fprintf(stderr, "error: run: %s\n", es_strerror(rc));
            return 1;
        }
        f = fopen(output, "wb");
        if (!f) {
            fprintf(stderr, "error: cannot write %s\n", output);
            return 1;
        }
        for (i = 0; i < ES_NUM_OUTPUTS; ++i)
            if (fwrite(es_output_ptr(&m, i), 1, es_output_bytes[i], f) != es_output_bytes[i]) rc = -1;
        if (fclose(f) != 0 || rc != ES_OK) {
            fprintf(stderr, "error: cannot write %s\n", output);
            return 1;
        }
    }
    for (i = 0; i < warmup; ++i) run_once(&m, slice, sleep_us, NULL);
    energy_ok = es_rapl_read_uj(sysfs, 0, &e0, &erange) == ES_OK;
    for (i = 0; i < runs; ++i) {
        uint64_t t0 = es_now_ns();
        rc = run_once(&m, slice, sleep_us, profile ? &prof_hooks : NULL);
        lat_ms[i] = (double)(es_now_ns() - t0) / 1e6;
        if (rc != ES_OK) {
            fprintf(stderr, "error: run: %s\n", es_strerror(rc));
            return 1;
        }
    }
    if (energy_ok) energy_ok = es_rapl_read_uj(sysfs, 0, &e1, NULL) == ES_OK;
    qsort(lat_ms, (size_t)runs, sizeof lat_ms[0], cmp_double);
    printf("{\"latency_ms\": {\"p50\": %.6f, \"p90\": %.6f, \"p99\": %.6f, \"min\": %.6f}, "
           "\"arena_bytes\": %u, \"weights_bytes\": %u, \"runs\": %d, \"warmup\": %d, "
           "\"slice\": %d, \"peak_rss_kb\": %ld, \"energy_j_per_inference\": ",
           pct(lat_ms, runs, 0.5), pct(lat_ms, runs, 0.9), pct(lat_ms, runs, 0.99), lat_ms[0],
           (unsigned)ES_ARENA_BYTES, (unsigned)ES_WEIGHTS_BYTES, runs, warmup, slice,
           peak_rss_kb());
    if (energy_ok)
        printf("%.9f", (double)es_energy_delta_uj(e0, e1, erange) / 1e6 / (double)runs);
    else
        printf("null");
    if (profile) { /* mean per step; the hooks' own cost is included in latency_ms */
        printf(", \"steps\": [");
        for (i = 0; i < ES_NUM_STEPS; ++i) {
            printf("%s{\"index\": %d, \"op\": \"", i ? ", " : "", i);
            print_json_text(step_op[i]);
            printf("\", \"name\": \"");
            print_json_text(step_name[i]);
            printf("\", \"mean_us\": %.3f}", (double)step_ns[i] / 1e3 / (double)runs);
        }
        printf("]");
    }
    printf("}\n");
    es_deinit(&m);
    return 0;
}
