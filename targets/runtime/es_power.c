/* Power hooks: duty cycle over es_run_slice, cpufreq and RAPL through sysfs. */
#if !defined(_POSIX_C_SOURCE) && !defined(ES_NO_POSIX)
#define _POSIX_C_SOURCE 200112L
#endif
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
    if (!fgets(buf, (int)n, f)) {
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
    if (end == line) return ES_ERR_UNAVAILABLE;
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

int es_rapl_read_uj(const char *root, int zone, uint64_t *energy_uj, uint64_t *max_range_uj) {
    char path[512];
    int rc;
    if (!energy_uj) return ES_ERR_ARG;
    if (path_of(path, sizeof path, root, "/class/powercap/intel-rapl:%d/energy_uj", zone))
        return ES_ERR_ARG;
    rc = read_u64(path, energy_uj);
    if (rc != ES_OK) return rc;
    if (max_range_uj) {
        *max_range_uj = 0;
        if (path_of(path, sizeof path, root, "/class/powercap/intel-rapl:%d/max_energy_range_uj",
                    zone) == ES_OK)
            (void)read_u64(path, max_range_uj);
    }
    return ES_OK;
}
#endif

uint64_t es_energy_delta_uj(uint64_t before, uint64_t after, uint64_t max_range_uj) {
    if (after >= before) return after - before;
    if (max_range_uj >= before) return (max_range_uj - before) + after + 1u;
    return after; /* unknown range: count from the wrap */
}
