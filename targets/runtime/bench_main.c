/* edgesmith_bench: run the generated model on a raw input file, write the raw output,
 * print one JSON line of latency figures.
 *
 *   edgesmith_bench [--weights F] [--input in.raw] [--output out.raw] [--runs N]
 *                   [--warmup W] [--profile] [--trace] [--sysfs ROOT]
 *                   [--slice K] [--run-us U] [--sleep-us S] [--period-ms P]
 *                   [--governor NAME] [--no-power] [--copy-input]
 *   edgesmith_bench [--weights F] --frames frames.u8 --frame-hw H W [--labels L]
 *                   [--output out.raw]
 *   edgesmith_bench [--weights F] --samples N --input in.raw --output out.raw
 *   edgesmith_bench [--weights F] --input in.raw --dump steps.raw
 *
 * Input: every model input back to back, raw little-endian float32 in the model's layout;
 * output likewise. Memory: arena and I/O buffers are static; no allocation at all.
 * --profile adds "steps": the mean time of every step (op, node name) over the timed runs,
 * measured by the after_step hook, so a slow layer is found on the device itself.
 * The timed runs read the inputs where they were loaded (es_bind_input), as an application
 * reading a camera buffer in place does and as the peers' benchmarks run (an input set
 * once, then invoked); --copy-input copies them into the arena before every run instead
 * (es_input), so the figure includes that copy. The JSON line says which: "input".
 *
 * Power: the run starts from model.h's ES_POWER_* (the profile's power: block), or, with
 * --no-power anywhere on the line, from everything off (back to back, the governor
 * untouched); each flag below then overrides one setting. The JSON line records the
 * settings the run used.
 *   --slice K / --run-us U / --sleep-us S  run each inference in slices of at most K steps
 *       and U microseconds, sleeping S microseconds between slices (es_run_duty)
 *   --period-ms P  one inference per P ms, sleeping to absolute deadlines between (a
 *       camera's frame loop); reports the duty cycle (time in the steps / wall time) and
 *       the missed deadlines
 *   --governor NAME  the cpufreq governor of every CPU for the timed runs, restored after
 *   --trace  adds "trace": when each step of the first timed run started and ended
 * Energy comes from RAPL or hwmon under --sysfs (es_energy_open); where neither can be
 * read, the figures are null and "energy_unavailable" says why - never a made-up figure.
 *
 * Frames (a model.h with ES_PREPROCESS_SPEC, i.e. a profile with a preprocess: block):
 * --frames F holds raw H x W x 3 uint8 RGB frames back to back (--frame-hw H W); each
 * goes through es_preprocess_u8 with model.h's spec, then the model, one at a time (no
 * timing, no power schedule). --output gets every frame's outputs back to back; --labels
 * (whitespace-separated class numbers, one per frame) adds the top-1 count of output 0.
 * The JSON line: frames, correct, top1, preprocess_ms (mean per frame).
 *
 * Samples (validation's batch in one process): --samples N reads N samples back to back
 * from --input (each sample every input, as above), runs them one after another in the
 * same arena (no timing, no power schedule) and writes each sample's outputs to --output
 * in the same order. Starting one process per sample cost more than the inference of a
 * small model. The input file must hold exactly N samples: a short or long file is an
 * error that names the sizes, never a read past its end. The JSON line: samples, ms
 * (mean wall time per sample).
 *
 * Dump (finding the first step where a build leaves its reference): --dump F runs the
 * given input once and writes the whole arena after every step to F, ES_NUM_STEPS images
 * of ES_ARENA_BYTES back to back. model.c's T_* defines say where each tensor lies in the
 * arena, so a step's output is read from the image after that step, before a later step
 * reuses its bytes. Big models make big files (steps x arena). The JSON line: steps,
 * arena_bytes. */
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
#ifndef ES_BENCH_MAX_CPUS
#define ES_BENCH_MAX_CPUS 256
#endif
#define ES_BENCH_STEPS (ES_NUM_STEPS > 0 ? ES_NUM_STEPS : 1)

/* the arena: static, aligned by hand (portable C99) */
static unsigned char arena_raw[ES_ARENA_BYTES + ES_ARENA_ALIGN];
static double lat_ms[ES_BENCH_MAX_RUNS];

/* what the command line asked for */
typedef struct {
    const char *weights, *input, *output, *sysfs, *governor;
    const char *frames, *labels; /* --frames mode */
    const char *dump;            /* --dump: the arena after every step */
    int frame_h, frame_w;        /* --frame-hw */
    long samples;                /* --samples mode: N samples in one file; 0 = off */
    int runs, warmup, profile, trace;
    int copy_input;     /* --copy-input: es_input before every timed run, not es_bind_input */
    es_duty duty;       /* slicing: --slice, --run-us, --sleep-us */
    uint32_t period_us; /* --period-ms: one inference per period; 0 = back to back */
} bench_args;

/* what the timed runs measured */
typedef struct {
    uint64_t busy_ns;  /* inside the steps (after_step hook), or the whole runs without hooks */
    uint64_t wall_ns;  /* the timed loop from its start to its end, sleeps included */
    uint32_t missed;   /* --period-ms: runs that ended after the next deadline */
    int tracing;       /* the hooks record this run into trace_* */
    uint64_t trace_t0; /* start of the traced run */
} bench_stats;

/* per step: time over the timed runs and the fastest run's (--profile), and the traced
 * run's timeline (--trace). The minimum is the figure to compare on a shared or noisy core:
 * a mean takes in every interruption. */
static uint64_t step_ns[ES_BENCH_STEPS], step_min_ns[ES_BENCH_STEPS];
static const char *step_op[ES_BENCH_STEPS];
static const char *step_name[ES_BENCH_STEPS];
static uint64_t trace_start_ns[ES_BENCH_STEPS], trace_end_ns[ES_BENCH_STEPS];

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

/* the inputs as read from --input, each aligned as the arena is, so that the timed runs can
 * read them in place (es_bind_input) */
#define ES_BENCH_IN_STRIDE \
    ((ES_MAX_INPUT_BYTES + ES_ARENA_ALIGN - 1) / ES_ARENA_ALIGN * ES_ARENA_ALIGN)
static unsigned char in_raw[ES_NUM_INPUTS * ES_BENCH_IN_STRIDE + ES_ARENA_ALIGN];
static int inputs_bound; /* the timed runs read in_buf(i) in place: feed copies nothing */

/* the first ES_ARENA_ALIGN-aligned byte of raw (its last ES_ARENA_ALIGN bytes are slack) */
static unsigned char *aligned(unsigned char *raw) {
    size_t mis = (size_t)((uintptr_t)raw % ES_ARENA_ALIGN);
    return raw + (mis ? ES_ARENA_ALIGN - mis : 0);
}

static unsigned char *in_buf(int i) { return aligned(in_raw) + (size_t)i * ES_BENCH_IN_STRIDE; }

static int load_inputs(const char *path) {
    FILE *f;
    int i;
    if (!path) return 0;
    f = fopen(path, "rb");
    if (!f) return -1;
    for (i = 0; i < ES_NUM_INPUTS; ++i) {
        if (es_input_bytes[i] > ES_MAX_INPUT_BYTES ||
            fread(in_buf(i), 1, es_input_bytes[i], f) != es_input_bytes[i]) {
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

static int feed(es_model *m) {
    int i, rc;
    if (inputs_bound) return ES_OK;
    for (i = 0; i < ES_NUM_INPUTS; ++i) {
        rc = es_input(m, i, in_buf(i), es_input_bytes[i]);
        if (rc != ES_OK) return rc;
    }
    return ES_OK;
}

static void before_step(void *user, int index, const char *op, const char *name) {
    bench_stats *st = (bench_stats *)user;
    (void)op;
    (void)name;
    if (st->tracing && index >= 0 && index < ES_NUM_STEPS)
        trace_start_ns[index] = es_now_ns() - st->trace_t0;
}

static void after_step(void *user, int index, const char *op, const char *name,
                       uint64_t elapsed_ns) {
    bench_stats *st = (bench_stats *)user;
    if (index < 0 || index >= ES_NUM_STEPS) return;
    if (st->tracing) trace_end_ns[index] = es_now_ns() - st->trace_t0;
    st->busy_ns += elapsed_ns;
    step_ns[index] += elapsed_ns;
    if (elapsed_ns < step_min_ns[index]) step_min_ns[index] = elapsed_ns;
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

/* every input read in place from in_buf (es_bind_input); 0, and feed copies them before
 * each run, where the model cannot bind one */
static int bind_inputs(es_model *m) {
    int i;
    for (i = 0; i < ES_NUM_INPUTS; ++i)
        if (es_bind_input(m, i, in_buf(i), es_input_bytes[i]) != ES_OK) return 0;
    return 1;
}

/* one inference, sliced when the duty says so */
static int run_once(es_model *m, const es_duty *duty, const es_hooks *hooks) {
    int rc = feed(m);
    if (rc != ES_OK) return rc;
    if (duty->max_steps > 0 || duty->run_us > 0) return es_run_duty(m, duty, hooks);
    return es_run(m, hooks);
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--weights F] [--input in.raw] [--output out.raw] "
                    "[--runs N>=1] [--warmup W>=0] [--profile] [--trace] [--sysfs ROOT] "
                    "[--slice K>=0] [--run-us U>=0] [--sleep-us S>=0] [--period-ms P>=0] "
                    "[--governor NAME] [--no-power] [--copy-input]\n"
                    "       %s [--weights F] --frames F --frame-hw H W [--labels L] "
                    "[--output out.raw]\n"
                    "       %s [--weights F] --samples N>=1 --input in.raw --output out.raw\n"
                    "       %s [--weights F] --input in.raw --dump steps.raw\n",
            argv0, argv0, argv0, argv0);
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

/* --period-ms: milliseconds, fractions allowed (a 30 fps camera is 33.333), to whole
 * microseconds; 0 turns the period off, anything else must be at least 1 us */
static int parse_period(const char *text, uint32_t *period_us) {
    char *end = NULL;
    double ms;
    errno = 0;
    ms = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(ms >= 0.0 && ms <= 3600000.0) ||
        (ms > 0.0 && ms < 0.001)) {
        fprintf(stderr, "error: --period-ms %s: expected 0 (off) or milliseconds from 0.001 "
                        "to 3600000\n", text);
        return -1;
    }
    *period_us = (uint32_t)(ms * 1000.0 + 0.5);
    return 0;
}

/* model.h's defaults, or everything off when --no-power is anywhere on the line */
static void power_defaults(int argc, char **argv, bench_args *a) {
    int i, off = 0;
    for (i = 1; i < argc; ++i) off |= strcmp(argv[i], "--no-power") == 0;
    a->duty.max_steps = off ? 0 : ES_POWER_MAX_STEPS;
    a->duty.run_us = off ? 0u : ES_POWER_RUN_US;
    a->duty.sleep_us = off ? 0u : ES_POWER_SLEEP_US;
    a->period_us = off ? 0u : ES_POWER_PERIOD_US;
    a->governor = off ? "" : ES_POWER_GOVERNOR;
}

/* one flag with its value at argv[*i]; 0 when understood, -1 otherwise */
static int parse_flag(int argc, char **argv, int *i, bench_args *a) {
    const char *flag = argv[*i], *value = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long num = 0;
    if (strcmp(flag, "--profile") == 0) {
        a->profile = 1;
        return 0;
    }
    if (strcmp(flag, "--trace") == 0) {
        a->trace = 1;
        return 0;
    }
    if (strcmp(flag, "--copy-input") == 0) {
        a->copy_input = 1;
        return 0;
    }
    if (strcmp(flag, "--no-power") == 0) return 0; /* applied before the other flags */
    if (!value) return -1;
    if (strcmp(flag, "--frame-hw") == 0) { /* two values: H W */
        if (*i + 2 >= argc || parse_number(flag, value, 1, 65535, &num) != 0) return -1;
        a->frame_h = (int)num;
        if (parse_number(flag, argv[*i + 2], 1, 65535, &num) != 0) return -1;
        a->frame_w = (int)num;
        *i += 2;
        return 0;
    }
    ++*i;
    if (strcmp(flag, "--weights") == 0) a->weights = value;
    else if (strcmp(flag, "--input") == 0) a->input = value;
    else if (strcmp(flag, "--output") == 0) a->output = value;
    else if (strcmp(flag, "--sysfs") == 0) a->sysfs = value;
    else if (strcmp(flag, "--governor") == 0) a->governor = value;
    else if (strcmp(flag, "--frames") == 0) a->frames = value;
    else if (strcmp(flag, "--labels") == 0) a->labels = value;
    else if (strcmp(flag, "--dump") == 0) a->dump = value;
    else if (strcmp(flag, "--period-ms") == 0) return parse_period(value, &a->period_us);
    else if (strcmp(flag, "--samples") == 0 &&
             parse_number(flag, value, 1, LONG_MAX, &num) == 0)
        a->samples = (long)num;
    else if (strcmp(flag, "--runs") == 0 && parse_number(flag, value, 1, INT_MAX, &num) == 0)
        a->runs = (int)num;
    else if (strcmp(flag, "--warmup") == 0 && parse_number(flag, value, 0, INT_MAX, &num) == 0)
        a->warmup = (int)num;
    else if (strcmp(flag, "--slice") == 0 && parse_number(flag, value, 0, INT_MAX, &num) == 0)
        a->duty.max_steps = (int)num;
    else if (strcmp(flag, "--run-us") == 0 &&
             parse_number(flag, value, 0, UINT32_MAX, &num) == 0)
        a->duty.run_us = (uint32_t)num;
    else if (strcmp(flag, "--sleep-us") == 0 &&
             parse_number(flag, value, 0, UINT32_MAX, &num) == 0)
        a->duty.sleep_us = (uint32_t)num;
    else return -1;
    return 0;
}

static int parse_args(int argc, char **argv, bench_args *a) {
    int i;
    memset(a, 0, sizeof *a);
    a->sysfs = "/sys";
    a->runs = 50;
    a->warmup = 5;
    power_defaults(argc, argv, a);
    for (i = 1; i < argc; ++i)
        if (parse_flag(argc, argv, &i, a) != 0) return -1;
    if (a->runs > ES_BENCH_MAX_RUNS) a->runs = ES_BENCH_MAX_RUNS; /* the JSON line says how many */
    if ((a->frames != NULL) != (a->frame_h > 0)) {
        fprintf(stderr, "error: --frames and --frame-hw H W go together\n");
        return -1;
    }
    if (a->samples > 0 && (!a->input || !a->output || a->frames)) {
        fprintf(stderr, "error: --samples N needs --input and --output (and no --frames)\n");
        return -1;
    }
    if (a->dump && (!a->input || a->samples || a->frames)) {
        fprintf(stderr, "error: --dump F needs --input (and no --samples or --frames)\n");
        return -1;
    }
    return 0;
}

/* ---- cpufreq governor: set on every CPU for the timed runs, then put back ---- */
static char old_governor[ES_BENCH_MAX_CPUS][32];

static void governor_restore(const char *root, int ncpus) {
    int cpu;
    for (cpu = 0; cpu < ncpus; ++cpu) (void)es_cpufreq_set_governor(root, cpu, old_governor[cpu]);
}

/* the number of CPUs set (cpu0, cpu1, ... up to the first without cpufreq); -1 with
 * ``why`` filled when cpu0 has none or one refuses (no permission, unknown governor) */
static int governor_apply(const char *root, const char *name, char *why, size_t n) {
    int cpu;
    for (cpu = 0; cpu < ES_BENCH_MAX_CPUS; ++cpu) {
        const char *step = "read";
        if (es_cpufreq_get_governor(root, cpu, old_governor[cpu], sizeof old_governor[cpu]) ==
            ES_OK) {
            step = "write";
            if (es_cpufreq_set_governor(root, cpu, name) == ES_OK) continue;
        } else if (cpu > 0) {
            return cpu;
        }
        snprintf(why, n, "%s %s/devices/system/cpu/cpu%d/cpufreq/scaling_governor: %s", step,
                 root, cpu, strerror(errno));
        governor_restore(root, cpu);
        return -1;
    }
    return cpu;
}

/* ---- the timed runs ---- */
static int timed_runs(es_model *m, const bench_args *a, const es_hooks *hooks,
                      bench_stats *st) {
    es_period period;
    uint64_t start;
    int i, rc;
    if (a->period_us > 0 && es_period_start(&period, a->period_us) != ES_OK) {
        fprintf(stderr, "error: --period-ms: no monotonic clock to pace the runs with\n");
        return ES_ERR_UNAVAILABLE;
    }
    for (i = 0; i < ES_NUM_STEPS; ++i) step_min_ns[i] = UINT64_MAX;
    start = a->period_us > 0 ? period.start_ns : es_now_ns();
    for (i = 0; i < a->runs; ++i) {
        const uint64_t t0 = es_now_ns();
        uint64_t t1;
        st->tracing = a->trace && i == 0;
        st->trace_t0 = t0;
        rc = run_once(m, &a->duty, hooks);
        t1 = es_now_ns();
        lat_ms[i] = (double)(t1 - t0) / 1e6;
        if (!hooks) st->busy_ns += t1 - t0; /* no hooks: the run is all work */
        if (rc != ES_OK) return rc;
        if (a->period_us > 0) (void)es_period_wait(&period);
    }
    st->tracing = 0;
    st->wall_ns = es_now_ns() - start;
    st->missed = a->period_us > 0 ? period.missed : 0;
    return ES_OK;
}

/* --output: the output of the given input, before any timing (sliced, without sleeps) */
static int write_output(es_model *m, const bench_args *a) {
    es_duty no_sleep = a->duty;
    FILE *f;
    int i, rc;
    no_sleep.sleep_us = 0;
    rc = run_once(m, &no_sleep, NULL);
    if (rc != ES_OK) {
        fprintf(stderr, "error: run: %s\n", es_strerror(rc));
        return -1;
    }
    f = fopen(a->output, "wb");
    if (!f) {
        fprintf(stderr, "error: cannot write %s\n", a->output);
        return -1;
    }
    for (i = 0; i < ES_NUM_OUTPUTS; ++i)
        if (fwrite(es_output_ptr(m, i), 1, es_output_bytes[i], f) != es_output_bytes[i]) rc = -1;
    if (fclose(f) != 0 || rc != ES_OK) {
        fprintf(stderr, "error: cannot write %s\n", a->output);
        return -1;
    }
    return 0;
}

/* ---- --dump: the arena after every step ---- */
typedef struct {
    FILE *f;
    const es_model *m;
    int failed; /* a short write: the file is incomplete, so the run reports an error */
} dump_state;

static void dump_step(void *user, int index, const char *op, const char *name,
                      uint64_t elapsed_ns) {
    dump_state *d = (dump_state *)user;
    (void)index;
    (void)op;
    (void)name;
    (void)elapsed_ns;
    if (fwrite(d->m->arena, 1, ES_ARENA_BYTES, d->f) != ES_ARENA_BYTES) d->failed = 1;
}

static int dump_mode(es_model *m, const bench_args *a) {
    dump_state d;
    es_hooks hooks = {NULL, dump_step, NULL};
    int rc;
    d.f = fopen(a->dump, "wb");
    d.m = m;
    d.failed = 0;
    hooks.user = &d;
    if (!d.f) {
        fprintf(stderr, "error: cannot write %s\n", a->dump);
        return 1;
    }
    rc = feed(m);
    if (rc == ES_OK) rc = es_run(m, &hooks);
    if (fclose(d.f) != 0) d.failed = 1;
    if (rc != ES_OK) {
        fprintf(stderr, "error: run: %s\n", es_strerror(rc));
        return 1;
    }
    if (d.failed) {
        fprintf(stderr, "error: cannot write %s\n", a->dump);
        return 1;
    }
    printf("{\"steps\": %d, \"arena_bytes\": %u}\n", (int)ES_NUM_STEPS,
           (unsigned)ES_ARENA_BYTES);
    return 0;
}

/* ---- --frames: raw camera frames through model.h's preprocess spec ---- */
#ifdef ES_PREPROCESS
#ifndef ES_BENCH_MAX_FRAME_BYTES
#define ES_BENCH_MAX_FRAME_BYTES (3840u * 2160u * 3u) /* one 4K frame */
#endif
static uint8_t frame_buf[ES_BENCH_MAX_FRAME_BYTES];
static float pre_buf[ES_INPUT0_ELEMS]; /* es_preprocess_u8's output (float-aligned) */

/* es_preprocess_u8's output as the model's input 0: float32 as is, uint8/int8 widened to
 * float for a float input (the build fed the model float32), or copied for a byte input */
static int to_input(const es_preprocess_spec *spec) {
    size_t k;
    if (ES_INPUT0_BYTES == ES_INPUT0_ELEMS * sizeof(float)) {
        float *in = (float *)(void *)pre_buf;
        if (spec->dtype == ES_PRE_U8)
            for (k = ES_INPUT0_ELEMS; k-- > 0;) in[k] = (float)((const uint8_t *)pre_buf)[k];
        else if (spec->dtype == ES_PRE_I8)
            for (k = ES_INPUT0_ELEMS; k-- > 0;) in[k] = (float)((const int8_t *)pre_buf)[k];
    } else if (ES_INPUT0_BYTES != ES_INPUT0_ELEMS || spec->dtype == ES_PRE_F32) {
        fprintf(stderr, "error: --frames: the spec's dtype does not fit input 0 (%u bytes for "
                        "%u values)\n", (unsigned)ES_INPUT0_BYTES, (unsigned)ES_INPUT0_ELEMS);
        return -1;
    }
    memcpy(in_buf(0), pre_buf, ES_INPUT0_BYTES);
    return 0;
}

/* the index of the largest value of output 0 (the first, on a tie) */
static long top_class(const es_model *m) {
    const void *out = es_output_ptr(m, 0);
    const int is_float = ES_OUTPUT0_BYTES == ES_OUTPUT0_ELEMS * sizeof(float);
    long k, best = 0;
    for (k = 1; k < (long)ES_OUTPUT0_ELEMS; ++k) {
        const double v = is_float ? ((const float *)out)[k] : ((const int8_t *)out)[k];
        const double b = is_float ? ((const float *)out)[best] : ((const int8_t *)out)[best];
        if (v > b) best = k;
    }
    return best;
}

/* the frame count of a --frames file of frame_bytes-sized frames; -1 (said why) if the
 * file cannot be read or is not whole frames */
static long frame_count(FILE *f, const char *path, size_t frame_bytes) {
    long size;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "error: cannot read %s\n", path);
        return -1;
    }
    if ((size_t)size % frame_bytes != 0) {
        fprintf(stderr, "error: %s is %ld bytes, not a whole number of %lu-byte frames "
                        "(--frame-hw and 3 channels of uint8)\n", path, size,
                (unsigned long)frame_bytes);
        return -1;
    }
    return (long)((size_t)size / frame_bytes);
}

/* --frames: checks, then one frame after another; prints the JSON line */
static int frames_mode(es_model *m, const bench_args *a) {
    static const es_preprocess_spec spec = ES_PREPROCESS_SPEC;
    const size_t frame_bytes = (size_t)a->frame_h * (size_t)a->frame_w * 3u;
    es_duty plain;
    FILE *f, *lf = NULL, *of = NULL;
    long n, i, label, correct = 0;
    uint64_t pre_ns = 0;
    int oh = 0, ow = 0, rc = 0;
    memset(&plain, 0, sizeof plain);
    if (ES_NUM_INPUTS != 1 || frame_bytes > ES_BENCH_MAX_FRAME_BYTES ||
        es_preprocess_out_hw(&spec, a->frame_h, a->frame_w, &oh, &ow) != ES_PRE_OK ||
        (size_t)oh * (size_t)ow * 3u != ES_INPUT0_ELEMS) {
        fprintf(stderr, "error: --frames: a %dx%d frame preprocessed by model.h's spec is "
                        "%dx%dx3 values (0x0: it does not fit the spec, or is over "
                        "ES_BENCH_MAX_FRAME_BYTES); the model's one input takes %u values\n",
                a->frame_h, a->frame_w, oh, ow, (unsigned)ES_INPUT0_ELEMS);
        return 2;
    }
    f = fopen(a->frames, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot open %s: %s\n", a->frames, strerror(errno));
        return 1;
    }
    n = frame_count(f, a->frames, frame_bytes);
    if (n >= 0 && a->labels && !(lf = fopen(a->labels, "r"))) {
        fprintf(stderr, "error: cannot open %s: %s\n", a->labels, strerror(errno));
        n = -1;
    }
    if (n >= 0 && a->output && !(of = fopen(a->output, "wb"))) {
        fprintf(stderr, "error: cannot write %s: %s\n", a->output, strerror(errno));
        n = -1;
    }
    for (i = 0; i < n && rc == 0; ++i) {
        uint64_t t0;
        if (fread(frame_buf, 1, frame_bytes, f) != frame_bytes) {
            fprintf(stderr, "error: %s: frame %ld is cut short\n", a->frames, i);
            rc = 1;
            break;
        }
        t0 = es_now_ns();
        rc = es_preprocess_u8(frame_buf, a->frame_h, a->frame_w, &spec, pre_buf);
        if (rc != ES_PRE_OK || to_input(&spec) != 0) {
            if (rc != ES_PRE_OK) fprintf(stderr, "error: es_preprocess_u8: %s\n", es_strerror(rc));
            rc = 1;
            break;
        }
        pre_ns += es_now_ns() - t0;
        rc = run_once(m, &plain, NULL);
        if (rc != ES_OK) {
            fprintf(stderr, "error: run: %s\n", es_strerror(rc));
            break;
        }
        if (of && fwrite(es_output_ptr(m, 0), 1, es_output_bytes[0], of) != es_output_bytes[0]) {
            fprintf(stderr, "error: cannot write %s\n", a->output);
            rc = 1;
        }
        if (lf && fscanf(lf, "%ld", &label) != 1) {
            fprintf(stderr, "error: %s: no label for frame %ld (one class number per frame)\n",
                    a->labels, i);
            rc = 1;
        }
        if (lf && rc == 0) correct += top_class(m) == label;
    }
    fclose(f);
    if (lf) fclose(lf);
    if (of && fclose(of) != 0 && rc == 0) {
        fprintf(stderr, "error: cannot write %s\n", a->output);
        rc = 1;
    }
    if (n < 0 || rc != 0) return 1;
    printf("{\"frames\": %ld, \"frame_hw\": [%d, %d], \"input_hw\": [%d, %d], ", n, a->frame_h,
           a->frame_w, oh, ow);
    if (lf) printf("\"correct\": %ld, \"top1\": %.6f", correct, n ? (double)correct / (double)n : 0.0);
    else printf("\"correct\": null, \"top1\": null");
    printf(", \"preprocess_ms\": %.6f}\n", n ? (double)pre_ns / 1e6 / (double)n : 0.0);
    return 0;
}
#else
static int frames_mode(es_model *m, const bench_args *a) {
    (void)m;
    (void)a;
    fprintf(stderr, "error: --frames: this model.h has no ES_PREPROCESS_SPEC (the profile "
                    "declared no preprocess: block); rebuild with one, or with --preprocess\n");
    return 2;
}
#endif

/* ---- --samples: a batch of samples in one process ---- */

/* the bytes of one sample: every input back to back */
static size_t sample_bytes(void) {
    size_t total = 0;
    int i;
    for (i = 0; i < ES_NUM_INPUTS; ++i) total += es_input_bytes[i];
    return total;
}

/* 0 when ``path`` holds exactly ``n`` samples; else -1, said why (a short file would
 * otherwise be read past its end, a long one would hide a mismatch of layouts) */
static int check_samples_size(FILE *f, const char *path, long n) {
    const size_t each = sample_bytes();
    long size;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "error: cannot read %s\n", path);
        return -1;
    }
    if (each == 0 || (size_t)size / each != (size_t)n || (size_t)size % each != 0) {
        fprintf(stderr, "error: %s is %ld bytes; --samples %ld needs %ld x %lu = %.0f bytes "
                        "(each sample: every input, raw float32, back to back)\n",
                path, size, n, n, (unsigned long)each, (double)n * (double)each);
        return -1;
    }
    return 0;
}

/* one sample's inputs from ``f`` into in_buf; -1 if the file ends early */
static int read_sample(FILE *f) {
    int i;
    for (i = 0; i < ES_NUM_INPUTS; ++i)
        if (es_input_bytes[i] > ES_MAX_INPUT_BYTES ||
            fread(in_buf(i), 1, es_input_bytes[i], f) != es_input_bytes[i])
            return -1;
    return 0;
}

/* every output of the last run, appended to ``f``; -1 on a write error */
static int append_outputs(const es_model *m, FILE *f) {
    int i;
    for (i = 0; i < ES_NUM_OUTPUTS; ++i)
        if (fwrite(es_output_ptr(m, i), 1, es_output_bytes[i], f) != es_output_bytes[i])
            return -1;
    return 0;
}

/* --samples: check the input's size, then one sample after another in the same arena;
 * prints the JSON line. 2: the input file does not hold N samples; 1: a run or I/O fault */
static int samples_mode(es_model *m, const bench_args *a) {
    es_duty plain;
    FILE *in, *out;
    long i;
    int rc = 0;
    uint64_t t0;
    memset(&plain, 0, sizeof plain);
    in = fopen(a->input, "rb");
    if (!in) {
        fprintf(stderr, "error: cannot open %s: %s\n", a->input, strerror(errno));
        return 1;
    }
    if (check_samples_size(in, a->input, a->samples) != 0) {
        fclose(in);
        return 2;
    }
    out = fopen(a->output, "wb");
    if (!out) {
        fprintf(stderr, "error: cannot write %s: %s\n", a->output, strerror(errno));
        fclose(in);
        return 1;
    }
    t0 = es_now_ns();
    for (i = 0; i < a->samples && rc == 0; ++i) {
        if (read_sample(in) != 0) {
            fprintf(stderr, "error: %s: sample %ld is cut short\n", a->input, i);
            rc = 1;
        } else if ((rc = run_once(m, &plain, NULL)) != ES_OK) {
            fprintf(stderr, "error: run of sample %ld: %s\n", i, es_strerror(rc));
            rc = 1;
        } else if (append_outputs(m, out) != 0) {
            fprintf(stderr, "error: cannot write %s\n", a->output);
            rc = 1;
        }
    }
    fclose(in);
    if (fclose(out) != 0 && rc == 0) {
        fprintf(stderr, "error: cannot write %s\n", a->output);
        rc = 1;
    }
    if (rc != 0) return rc;
    printf("{\"samples\": %ld, \"ms\": %.6f}\n", a->samples,
           (double)(es_now_ns() - t0) / 1e6 / (double)a->samples);
    return 0;
}

/* ---- the JSON line ---- */
static void print_string_or_null(const char *key, const char *text) {
    printf(", \"%s\": ", key);
    if (!text) {
        printf("null");
        return;
    }
    putchar('"');
    print_json_text(text);
    putchar('"');
}

static void print_power(const bench_args *a, const bench_stats *st, int gov_cpus,
                        const char *gov_why) {
    const double wall_ms = (double)st->wall_ns / 1e6, busy_ms = (double)st->busy_ns / 1e6;
    /* nanosecond figures and a duty cycle to 6 significant digits: a 0.06 ms inference in a
     * 25 ms period is a 0.0003 duty cycle, which fixed decimals would round away */
    printf(", \"run_us\": %lu, \"sleep_us\": %lu, \"period_ms\": %.3f, \"wall_ms\": %.6f, "
           "\"busy_ms\": %.6f, \"duty_cycle\": %.6g, \"missed_deadlines\": %lu",
           (unsigned long)a->duty.run_us, (unsigned long)a->duty.sleep_us,
           (double)a->period_us / 1e3, wall_ms, busy_ms, wall_ms > 0 ? busy_ms / wall_ms : 0.0,
           (unsigned long)st->missed);
    printf(", \"governor\": ");
    if (!a->governor[0]) {
        printf("null");
        return;
    }
    printf("{\"name\": \"");
    print_json_text(a->governor);
    printf("\"");
    if (gov_cpus >= 0) printf(", \"cpus\": %d", gov_cpus);
    else print_string_or_null("unavailable", gov_why);
    printf("}");
}

static void print_energy(const bench_args *a, const bench_stats *st, double energy_j,
                         const char *source, const char *why) {
    const double wall_s = (double)st->wall_ns / 1e9;
    if (source) printf(", \"energy_j_per_inference\": %.9f, \"avg_power_w\": %.6f",
                       energy_j / (double)a->runs, wall_s > 0 ? energy_j / wall_s : 0.0);
    else printf(", \"energy_j_per_inference\": null, \"avg_power_w\": null");
    print_string_or_null("energy_source", source);
    print_string_or_null("energy_unavailable", source ? NULL : why);
}

static void print_steps(const bench_args *a) {
    int i;
    if (a->profile) { /* mean and minimum per step; the hooks' own cost is in latency_ms */
        printf(", \"steps\": [");
        for (i = 0; i < ES_NUM_STEPS; ++i) {
            printf("%s{\"index\": %d, \"op\": \"", i ? ", " : "", i);
            print_json_text(step_op[i]);
            printf("\", \"name\": \"");
            print_json_text(step_name[i]);
            printf("\", \"mean_us\": %.3f, \"min_us\": %.3f}",
                   (double)step_ns[i] / 1e3 / (double)a->runs, (double)step_min_ns[i] / 1e3);
        }
        printf("]");
    }
    if (a->trace) { /* the first timed run; a gap between two steps is a sleep */
        printf(", \"trace\": [");
        for (i = 0; i < ES_NUM_STEPS; ++i)
            printf("%s{\"step\": %d, \"start_us\": %.3f, \"end_us\": %.3f}", i ? ", " : "", i,
                   (double)trace_start_ns[i] / 1e3, (double)trace_end_ns[i] / 1e3);
        printf("]");
    }
}

/* The harness's sequence, top to bottom: parse the flags, map the weights, init, write
 * the output, warm up, set the governor, read energy, time the runs, read energy again,
 * put the governor back, print one JSON line. Each step is a few lines or one helper. */
int main(int argc, char **argv) {
    bench_args a;
    bench_stats st;
    es_hooks hooks = {before_step, after_step, NULL};
    es_energy_meter meter;
    uint64_t e0 = 0, e1 = 0;
    double mean_ms = 0.0;
    char gov_why[512] = "", energy_why[512] = "";
    int i, rc, gov_cpus = 0, energy_ok, use_hooks;
    es_model m;
    if (parse_args(argc, argv, &a) != 0) return usage(argv[0]);
    if (!a.samples && load_inputs(a.input) != 0) {
        fprintf(stderr, "error: cannot read %s (%u bytes per input expected)\n", a.input,
                (unsigned)es_input_bytes[0]);
        return 1;
    }
    rc = es_init(&m, aligned(arena_raw), ES_ARENA_BYTES, a.weights);
    if (rc != ES_OK) {
        fprintf(stderr, "error: es_init: %s\n", es_strerror(rc));
        return 1;
    }
    if (a.frames || a.samples || a.dump) {
        rc = a.frames ? frames_mode(&m, &a) : a.samples ? samples_mode(&m, &a) : dump_mode(&m, &a);
        es_deinit(&m);
        return rc;
    }
    if (!a.copy_input) inputs_bound = bind_inputs(&m);
    if (a.output && write_output(&m, &a) != 0) return 1;
    memset(&st, 0, sizeof st);
    hooks.user = &st;
    /* the hooks measure the time in the steps; only runs that sleep need it told apart
     * from the wall time, so a plain run keeps its latency free of the hooks' cost */
    use_hooks = a.profile || a.trace || a.period_us > 0 || a.duty.sleep_us > 0;
    if (a.governor[0]) gov_cpus = governor_apply(a.sysfs, a.governor, gov_why, sizeof gov_why);
    for (i = 0; i < a.warmup; ++i) run_once(&m, &a.duty, NULL);
    memset(&meter, 0, sizeof meter);
    energy_ok = es_energy_open(&meter, a.sysfs) == ES_OK &&
                es_energy_read_uj(&meter, &e0) == ES_OK;
    if (!energy_ok)
        snprintf(energy_why, sizeof energy_why, "%s: %s; no class/hwmon/hwmon*/energy*_input",
                 meter.path[0] ? meter.path : a.sysfs, strerror(errno));
    rc = timed_runs(&m, &a, use_hooks ? &hooks : NULL, &st);
    if (energy_ok && es_energy_read_uj(&meter, &e1) != ES_OK) {
        energy_ok = 0;
        snprintf(energy_why, sizeof energy_why, "%s: %s after the runs", meter.path,
                 strerror(errno));
    }
    if (gov_cpus > 0) governor_restore(a.sysfs, gov_cpus);
    if (rc != ES_OK) {
        fprintf(stderr, "error: run: %s\n", es_strerror(rc));
        return 1;
    }
    for (i = 0; i < a.runs; ++i) mean_ms += lat_ms[i] / (double)a.runs;
    qsort(lat_ms, (size_t)a.runs, sizeof lat_ms[0], cmp_double);
    printf("{\"latency_ms\": {\"p50\": %.6f, \"p90\": %.6f, \"p99\": %.6f, \"min\": %.6f, "
           "\"mean\": %.6f}, "
           "\"arena_bytes\": %u, \"weights_bytes\": %u, \"runs\": %d, \"warmup\": %d, "
           "\"slice\": %d, \"input\": \"%s\", \"peak_rss_kb\": %ld",
           pct(lat_ms, a.runs, 0.5), pct(lat_ms, a.runs, 0.9), pct(lat_ms, a.runs, 0.99),
           lat_ms[0], mean_ms, (unsigned)ES_ARENA_BYTES, (unsigned)ES_WEIGHTS_BYTES, a.runs, a.warmup,
           a.duty.max_steps, inputs_bound ? "bound" : "copied", peak_rss_kb());
    print_energy(&a, &st, (double)es_energy_delta_uj(e0, e1, meter.max_range_uj) / 1e6,
                 energy_ok ? meter.path : NULL, energy_why);
    print_power(&a, &st, gov_cpus, gov_why);
    print_steps(&a);
    printf("}\n");
    es_deinit(&m);
    return 0;
}
