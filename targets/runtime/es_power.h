/* edgesmith power-aware scheduling: duty-cycled inference on top of es_run_slice, plus
 * Linux helpers for cpufreq (sysfs) and RAPL energy (powercap).
 *
 * Every helper takes the sysfs root ("/sys" on a real system) so tests can point it at a
 * fake tree; each returns ES_ERR_UNAVAILABLE when the file is absent or not permitted. */
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
void es_sleep_us(uint32_t us);

int es_cpufreq_get_governor(const char *sysfs_root, int cpu, char *buf, size_t n);
int es_cpufreq_set_governor(const char *sysfs_root, int cpu, const char *governor);
int es_cpufreq_get_khz(const char *sysfs_root, int cpu, long *khz);
int es_cpufreq_set_max_khz(const char *sysfs_root, int cpu, long khz);

/* RAPL package energy: zone = N in intel-rapl:N. */
int es_rapl_read_uj(const char *sysfs_root, int zone, uint64_t *energy_uj,
                    uint64_t *max_range_uj);
/* after - before, handling one wrap-around of a counter that wraps at max_range. */
uint64_t es_energy_delta_uj(uint64_t before, uint64_t after, uint64_t max_range_uj);

#ifdef __cplusplus
}
#endif
#endif
