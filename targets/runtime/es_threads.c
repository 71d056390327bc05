/* edgesmith runtime: the worker pool behind es_parallel_for (es_threads.h).
 *
 * One job at a time. The caller publishes (fn, ctx, n_tasks) under the mutex, bumps the
 * generation counter and wakes sleeping workers; worker w runs tasks w, w + N, ...
 * (the caller is worker 0) and decrements `pending`; the caller returns once `pending`
 * reaches 0. A worker that finished a job spins on the generation counter, yielding the
 * CPU, for ES_POOL_SPINS rounds before it sleeps on `wake`: steps follow each other
 * within microseconds, and a futex wake-up per step would cost as much as a small conv.
 * The counters are read with GCC/Clang __atomic builtins (acquire/release), so the
 * job's fields written before the release are visible to the worker after its acquire. */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L
#endif
#include <pthread.h>
#include <sched.h>
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
    pthread_cond_t wake, done;   /* a job is ready; the last worker finished */
    unsigned gen;                /* job generation (atomic) */
    int pending;                 /* workers still running the job (atomic) */
    int stop;                    /* set under mu: workers exit */
    es_task_fn fn;               /* the job, written under mu before gen moves */
    void *ctx;
    int n_tasks;
};

static unsigned load_gen(es_pool *p) { return __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE); }

static void run_tasks(es_task_fn fn, void *ctx, int n_tasks, int first, int step) {
    int k;
    for (k = first; k < n_tasks; k += step) fn(ctx, k);
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
        run_tasks(fn, ctx, n, w->index, p->threads);
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
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
    pthread_cond_init(&p->done, NULL);
    for (i = 1; i < threads; ++i) {
        p->worker[i].pool = p;
        p->worker[i].index = i;
        if (pthread_create(&p->tid[i], NULL, worker_main, &p->worker[i]) != 0) {
            stop_workers(p, i - 1);
            pthread_cond_destroy(&p->wake);
            pthread_cond_destroy(&p->done);
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
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void es_parallel_for(es_pool *p, int n_tasks, es_task_fn fn, void *ctx) {
    int i;
    if (!p || n_tasks < 2) {
        run_tasks(fn, ctx, n_tasks, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    __atomic_store_n(&p->pending, p->threads - 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&p->gen, 1u, __ATOMIC_ACQ_REL);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(fn, ctx, n_tasks, 0, p->threads);
    for (i = 0; i < ES_POOL_SPINS; ++i) { /* the barrier: every worker done */
        if (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) == 0) return;
        sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    while (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) != 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
