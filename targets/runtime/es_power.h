/* edgesmith power-aware scheduling: duty-cycled inference on top of es_run_slice, a
 * fixed-rate frame loop, plus Linux helpers for cpufreq (sysfs) and energy counters
 * (RAPL powercap, hwmon).
 *
 * The profile's power: block is compiled into model.h as ES_POWER_* defaults (0 = off);
 * es_run_scheduled follows them, and the bench harness starts from them.
 *
 * Every sysfs helper takes the sysfs root ("/sys" on a real system) so tests can point it
 * at a fake tree; each returns ES_ERR_UNAVAILABLE when the file is absent or not
 * permitted, and then, like fopen, leaves errno saying which (ENOENT, EACCES, ...). */
#ifndef ES_POWER_H
#define ES_POWER_H

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int max_steps;     /* steps per slice (0 = no step limit) */
    uint32_t run_us;   /* time budget per slice (0 = no time limit) */
    uint32_t sleep_us; /* sleep between slices */
} es_duty;

/* One complete inference, run in slices with sleeps between them. */
int es_run_duty(es_model *m, const es_duty *duty, const es_hooks *hooks);
/* One complete inference the way the profile's power: block says (ES_POWER_MAX_STEPS,
 * ES_POWER_RUN_US, ES_POWER_SLEEP_US); a plain es_run when they are all 0. */
int es_run_scheduled(es_model *m, const es_hooks *hooks);
void es_sleep_us(uint32_t us);

/* A fixed-rate loop (a camera's frames): one inference per period, sleeping between.
 * Deadlines are absolute (start + k * period), so sleep jitter does not add up. */
typedef struct {
    uint64_t start_ns;  /* when the loop started, on es_now_ns's clock */
    uint64_t next_ns;   /* the next deadline */
    uint64_t period_ns;
    uint32_t missed;    /* periods whose work ended after the next deadline */
} es_period;

int es_period_start(es_period *p, uint32_t period_us);
/* Sleep until the next deadline. A period whose work overran it counts as missed, and the
 * loop skips to the first deadline still ahead: a late frame is dropped rather than
 * processed in a burst that would make the next one late too. ES_ERR_UNAVAILABLE where
 * there is no clock to sleep on (bare metal: use the board's timer). */
int es_period_wait(es_period *p);

int es_cpufreq_get_governor(const char *sysfs_root, int cpu, char *buf, size_t n);
int es_cpufreq_set_governor(const char *sysfs_root, int cpu, const char *governor);
int es_cpufreq_get_khz(const char *sysfs_root, int cpu, long *khz);
int es_cpufreq_set_max_khz(const char *sysfs_root, int cpu, long khz);

/* RAPL package energy: zone = N in intel-rapl:N. */
int es_rapl_read_uj(const char *sysfs_root, int zone, uint64_t *energy_uj,
                    uint64_t *max_range_uj);
/* after - before, handling one wrap-around of a counter that wraps at max_range. */
uint64_t es_energy_delta_uj(uint64_t before, uint64_t after, uint64_t max_range_uj);

/* The first readable energy counter under a sysfs root: RAPL package zone 0
 * (class/powercap/intel-rapl:0/energy_uj), else a hwmon one
 * (class/hwmon/hwmonN/energyM_input, e.g. a board's power monitor), both in microjoules. */
typedef struct {
    char path[256];        /* the counter file; the RAPL one when none is readable */
    uint64_t max_range_uj; /* where the counter wraps; 0 = unknown */
} es_energy_meter;

/* ES_ERR_UNAVAILABLE when no counter can be read: then em->path is the RAPL file and
 * errno says why it could not be read. */
int es_energy_open(es_energy_meter *em, const char *sysfs_root);
int es_energy_read_uj(const es_energy_meter *em, uint64_t *energy_uj);

#ifdef __cplusplus
}
#endif
#endif
