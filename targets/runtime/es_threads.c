/* edgesmith runtime: the worker pool behind es_parallel_for (es_threads.h).
 *
 * One job at a time. The caller publishes (fn, ctx, n_tasks) under the mutex, moves the
 * job generation on and wakes sleeping workers; then every thread, the caller included,
 * claims tasks one by one from the job's counter until none is left, and the caller
 * returns once all n_tasks are done. Tasks are claimed, not dealt: on a loaded machine a
 * worker the scheduler has not run yet claims nothing, and the caller runs the tasks
 * itself instead of waiting for it (a step then costs what it costs on one thread). The
 * counter holds the generation in its high 32 bits, so a worker still holding an old
 * job's fields can never claim a task of the next job. A worker with no job spins on the
 * generation, yielding the CPU, for ES_POOL_SPINS rounds before it sleeps on `wake`:
 * steps follow each other within microseconds, and a futex wake-up per step would cost
 * as much as a small conv. Counters use the GCC/Clang __atomic builtins (acquire /
 * release), so what a task wrote is visible to the caller once it counted it done. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L
#endif
#include "es_fp_exact.h" /* first: contraction off in every function below */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "es_threads.h"

#ifndef ES_POOL_SPINS
#define ES_POOL_SPINS 4000 /* yields before a worker sleeps (a few ms) */
#endif
#define ES_POOL_MAX 64

typedef struct {
    es_pool *pool;
    int index; /* 1 .. N - 1; the caller is 0 */
} es_worker;

struct es_pool {
    int threads;                 /* N, the caller included */
    pthread_t tid[ES_POOL_MAX];
    es_worker worker[ES_POOL_MAX];
    pthread_mutex_t mu;
    pthread_cond_t wake, done_cv; /* a job is ready; its last task finished */
    unsigned gen;                /* job generation (atomic) */
    uint64_t next;               /* gen << 32 | the job's next unclaimed task (atomic) */
    int done;                    /* the job's tasks finished (atomic) */
    int stop;                    /* set under mu: workers exit */
    es_task_fn fn;               /* the job, written under mu before gen moves */
    void *ctx;
    int n_tasks;
};

static unsigned load_gen(es_pool *p) { return __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE); }

static void run_all(es_task_fn fn, void *ctx, int n_tasks) {
    int k;
    for (k = 0; k < n_tasks; ++k) fn(ctx, k);
}

/* the next task of job `gen`, or -1 when it has none left (or is no longer the job) */
static int claim(es_pool *p, unsigned gen, int n_tasks) {
    uint64_t v = __atomic_load_n(&p->next, __ATOMIC_ACQUIRE);
    for (;;) {
        if ((unsigned)(v >> 32) != gen || (int)(v & 0xffffffffu) >= n_tasks) return -1;
        if (__atomic_compare_exchange_n(&p->next, &v, v + 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return (int)(v & 0xffffffffu);
    }
}

/* claim and run tasks of job `gen` until none is left; the last one done wakes the caller */
static void work(es_pool *p, unsigned gen, es_task_fn fn, void *ctx, int n_tasks) {
    int k;
    while ((k = claim(p, gen, n_tasks)) >= 0) {
        fn(ctx, k);
        if (__atomic_add_fetch(&p->done, 1, __ATOMIC_ACQ_REL) == n_tasks) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* wait for a generation other than `seen` (or stop); returns 0 on stop */
static int next_job(es_pool *p, unsigned seen) {
    int i, go;
    for (i = 0; i < ES_POOL_SPINS; ++i) {
        if (load_gen(p) != seen) return 1;
        sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    while (!p->stop && load_gen(p) == seen) pthread_cond_wait(&p->wake, &p->mu);
    go = !p->stop;
    pthread_mutex_unlock(&p->mu);
    return go;
}

static void *worker_main(void *arg) {
    es_worker *w = (es_worker *)arg;
    es_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        es_task_fn fn;
        void *ctx;
        int n;
        if (!next_job(p, seen)) break;
        pthread_mutex_lock(&p->mu); /* the job's fields, consistent with its generation */
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        seen = load_gen(p);
        fn = p->fn;
        ctx = p->ctx;
        n = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        work(p, seen, fn, ctx, n);
    }
    return NULL;
}

static void stop_workers(es_pool *p, int started) {
    int i;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (i = 1; i <= started; ++i) pthread_join(p->tid[i], NULL);
}

es_pool *es_pool_create(int threads) {
    es_pool *p;
    int i;
    if (threads < 2 || threads > ES_POOL_MAX) return NULL;
    p = (es_pool *)calloc(1, sizeof *p);
    if (!p) return NULL;
    p->threads = threads;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    for (i = 1; i < threads; ++i) {
        p->worker[i].pool = p;
        p->worker[i].index = i;
        if (pthread_create(&p->tid[i], NULL, worker_main, &p->worker[i]) != 0) {
            stop_workers(p, i - 1);
            pthread_cond_destroy(&p->wake);
            pthread_cond_destroy(&p->done_cv);
            pthread_mutex_destroy(&p->mu);
            free(p);
            return NULL;
        }
    }
    return p;
}

void es_pool_destroy(es_pool *p) {
    if (!p) return;
    stop_workers(p, p->threads - 1);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void es_parallel_for(es_pool *p, int n_tasks, es_task_fn fn, void *ctx) {
    unsigned gen;
    int i;
    if (!p || n_tasks < 2) {
        run_all(fn, ctx, n_tasks);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    gen = p->gen + 1u;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->next, (uint64_t)gen << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&p->gen, gen, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    work(p, gen, fn, ctx, n_tasks);
    for (i = 0; i < ES_POOL_SPINS; ++i) { /* the barrier: tasks workers claimed, done */
        if (__atomic_load_n(&p->done, __ATOMIC_ACQUIRE) == n_tasks) return;
        sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    while (__atomic_load_n(&p->done, __ATOMIC_ACQUIRE) != n_tasks)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
