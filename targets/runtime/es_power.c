/* Power hooks: duty cycle over es_run_slice, the profile's schedule, a fixed-rate frame
 * loop, cpufreq and energy counters (RAPL, hwmon) through sysfs. */
#if !defined(_POSIX_C_SOURCE) && !defined(ES_NO_POSIX)
#define _POSIX_C_SOURCE 200112L
#endif
#include "es_fp_exact.h" /* first: contraction off in every function below */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "es_power.h"

#if (defined(__unix__) || defined(__APPLE__)) && !defined(ES_NO_POSIX)
#define ES_HAVE_POSIX 1
#include <time.h>
#endif

void es_sleep_us(uint32_t us) {
#ifdef ES_HAVE_POSIX
    struct timespec ts;
    ts.tv_sec = (time_t)(us / 1000000u);
    ts.tv_nsec = (long)(us % 1000000u) * 1000L;
    while (nanosleep(&ts, &ts) != 0) {
    }
#else
    (void)us;
#endif
}

int es_run_duty(es_model *m, const es_duty *duty, const es_hooks *hooks) {
    int rc;
    if (!m || !duty) return ES_ERR_ARG;
    m->next_step = 0;
    for (;;) {
        const uint64_t t0 = es_now_ns();
        int steps = 0;
        do {
            rc = es_run_slice(m, 1, hooks);
            ++steps;
            if (rc != ES_MORE) break;
            if (duty->max_steps > 0 && steps >= duty->max_steps) break;
        } while (duty->run_us == 0 || es_now_ns() - t0 < (uint64_t)duty->run_us * 1000u);
        if (rc != ES_MORE) return rc;
        if (duty->sleep_us) es_sleep_us(duty->sleep_us);
    }
}

int es_run_scheduled(es_model *m, const es_hooks *hooks) {
    /* the profile's power: block, as model.h states it */
    static const es_duty profile = {ES_POWER_MAX_STEPS, ES_POWER_RUN_US, ES_POWER_SLEEP_US};
    if (profile.max_steps == 0 && profile.run_us == 0) return es_run(m, hooks);
    return es_run_duty(m, &profile, hooks);
}

#ifdef ES_HAVE_POSIX
/* Sleep until an absolute time on es_now_ns's clock (CLOCK_MONOTONIC). Sleeping to an
 * absolute deadline, not for a duration, is what keeps a periodic loop from drifting:
 * the time spent waking up is not added to the next period. */
static void sleep_until_ns(uint64_t deadline_ns) {
#ifdef __APPLE__ /* no clock_nanosleep: sleep what is left; the deadline stays absolute */
    const uint64_t now = es_now_ns();
    uint64_t left_us = deadline_ns > now ? (deadline_ns - now) / 1000u : 0;
    for (; left_us > 0xFFFFFFFFu; left_us -= 0xFFFFFFFFu) es_sleep_us(0xFFFFFFFFu);
    es_sleep_us((uint32_t)left_us);
#else
    struct timespec ts;
    ts.tv_sec = (time_t)(deadline_ns / 1000000000u);
    ts.tv_nsec = (long)(deadline_ns % 1000000000u);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
#endif
}
#endif

int es_period_start(es_period *p, uint32_t period_us) {
    if (!p || period_us == 0) return ES_ERR_ARG;
    p->start_ns = es_now_ns();
    if (p->start_ns == 0) return ES_ERR_UNAVAILABLE; /* no clock on this platform */
    p->period_ns = (uint64_t)period_us * 1000u;
    p->next_ns = p->start_ns + p->period_ns;
    p->missed = 0;
    return ES_OK;
}

int es_period_wait(es_period *p) {
#ifdef ES_HAVE_POSIX
    const uint64_t now = es_now_ns();
    if (!p || p->period_ns == 0) return ES_ERR_ARG;
    if (now > p->next_ns) { /* overran: drop to the first deadline still ahead */
        ++p->missed;
        p->next_ns += ((now - p->next_ns) / p->period_ns + 1u) * p->period_ns;
    }
    sleep_until_ns(p->next_ns);
    p->next_ns += p->period_ns;
    return ES_OK;
#else
    (void)p;
    return ES_ERR_UNAVAILABLE;
#endif
}

#if defined(ES_HAVE_POSIX) || !defined(ES_NO_STDIO)
static int path_of(char *buf, size_t n, const char *root, const char *fmt, int idx) {
    char tail[128];
    int k = snprintf(tail, sizeof tail, fmt, idx);
    if (k < 0 || (size_t)k >= sizeof tail) return ES_ERR_ARG;
    k = snprintf(buf, n, "%s%s", root ? root : "/sys", tail);
    return (k < 0 || (size_t)k >= n) ? ES_ERR_ARG : ES_OK;
}

static int read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t len;
    if (!f) return ES_ERR_UNAVAILABLE;
    if (!fgets(buf, (int)n, f)) { /* empty, or a read error (errno set) */
        if (!ferror(f)) errno = EINVAL;
        fclose(f);
        return ES_ERR_UNAVAILABLE;
    }
    fclose(f);
    len = strlen(buf);
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ')) buf[--len] = '\0';
    return ES_OK;
}

static int write_line(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    int ok;
    if (!f) return ES_ERR_UNAVAILABLE;
    ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    return ok ? ES_OK : ES_ERR_UNAVAILABLE;
}

static int read_u64(const char *path, uint64_t *v) {
    char line[64], *end;
    unsigned long long x;
    int rc = read_line(path, line, sizeof line);
    if (rc != ES_OK) return rc;
    x = strtoull(line, &end, 10);
    if (end == line) {
        errno = EINVAL; /* not a number */
        return ES_ERR_UNAVAILABLE;
    }
    *v = (uint64_t)x;
    return ES_OK;
}

#define CPUFREQ "/devices/system/cpu/cpu%d/cpufreq/"

int es_cpufreq_get_governor(const char *root, int cpu, char *buf, size_t n) {
    char path[512];
    if (!buf || n == 0 || path_of(path, sizeof path, root, CPUFREQ "scaling_governor", cpu))
        return ES_ERR_ARG;
    return read_line(path, buf, n);
}

int es_cpufreq_set_governor(const char *root, int cpu, const char *governor) {
    char path[512];
    if (!governor || path_of(path, sizeof path, root, CPUFREQ "scaling_governor", cpu))
        return ES_ERR_ARG;
    return write_line(path, governor);
}

int es_cpufreq_get_khz(const char *root, int cpu, long *khz) {
    char path[512];
    uint64_t v;
    int rc;
    if (!khz || path_of(path, sizeof path, root, CPUFREQ "scaling_cur_freq", cpu))
        return ES_ERR_ARG;
    rc = read_u64(path, &v);
    if (rc == ES_OK) *khz = (long)v;
    return rc;
}

int es_cpufreq_set_max_khz(const char *root, int cpu, long khz) {
    char path[512], text[32];
    if (khz <= 0 || path_of(path, sizeof path, root, CPUFREQ "scaling_max_freq", cpu))
        return ES_ERR_ARG;
    snprintf(text, sizeof text, "%ld", khz);
    return write_line(path, text);
}

#define RAPL "/class/powercap/intel-rapl:%d/"

int es_rapl_read_uj(const char *root, int zone, uint64_t *energy_uj, uint64_t *max_range_uj) {
    char path[512];
    int rc;
    if (!energy_uj) return ES_ERR_ARG;
    if (path_of(path, sizeof path, root, RAPL "energy_uj", zone)) return ES_ERR_ARG;
    rc = read_u64(path, energy_uj);
    if (rc != ES_OK) return rc;
    if (max_range_uj) {
        *max_range_uj = 0;
        if (path_of(path, sizeof path, root, RAPL "max_energy_range_uj", zone) == ES_OK)
            (void)read_u64(path, max_range_uj);
    }
    return ES_OK;
}

/* hwmon numbers its devices and their channels from 0 and 1; a few of each is every board
 * seen so far, and the scan is a handful of failed opens when there are none */
#define ES_HWMON_DEVICES 16
#define ES_HWMON_CHANNELS 8

int es_energy_open(es_energy_meter *em, const char *root) {
    char path[sizeof em->path];
    uint64_t v;
    int rapl_errno, dev, ch, k;
    if (!em) return ES_ERR_ARG;
    em->max_range_uj = 0;
    if (es_rapl_read_uj(root, 0, &v, &em->max_range_uj) == ES_OK)
        return path_of(em->path, sizeof em->path, root, RAPL "energy_uj", 0);
    rapl_errno = errno; /* the reason to report if nothing else is readable either */
    for (dev = 0; dev < ES_HWMON_DEVICES; ++dev) {
        for (ch = 1; ch <= ES_HWMON_CHANNELS; ++ch) {
            k = snprintf(path, sizeof path, "%s/class/hwmon/hwmon%d/energy%d_input",
                         root ? root : "/sys", dev, ch);
            if (k > 0 && (size_t)k < sizeof path && read_u64(path, &v) == ES_OK) {
                memcpy(em->path, path, sizeof path);
                return ES_OK; /* hwmon energy counters state no wrap range */
            }
        }
    }
    (void)path_of(em->path, sizeof em->path, root, RAPL "energy_uj", 0);
    errno = rapl_errno;
    return ES_ERR_UNAVAILABLE;
}

int es_energy_read_uj(const es_energy_meter *em, uint64_t *energy_uj) {
    if (!em || !energy_uj) return ES_ERR_ARG;
    return read_u64(em->path, energy_uj);
}
#endif

uint64_t es_energy_delta_uj(uint64_t before, uint64_t after, uint64_t max_range_uj) {
    if (after >= before) return after - before;
    if (max_range_uj >= before) return (max_range_uj - before) + after + 1u;
    return after; /* unknown range: count from the wrap */
}
