/* edgesmith runtime: a fixed pool of worker threads for models generated with
 * options: {threads: N}, N > 1 (model.h's ES_THREADS). POSIX threads only.
 *
 * es_pool_create starts N - 1 workers once, inside es_init; after that nothing allocates.
 * es_parallel_for(pool, n, fn, ctx) runs fn(ctx, k) for k = 0 .. n - 1, each task on
 * whichever thread claims it first (the caller claims too), and returns when all are
 * done, a barrier. model.c
 * splits a heavy step's output channels into n disjoint ranges and calls the unchanged
 * kernel once per range, each with its own scratch, so the tasks share nothing they
 * write. Workers spin (yielding the CPU) for a while between steps, then sleep on a
 * condition variable until the next es_parallel_for. es_pool_destroy joins them. */
#ifndef ES_THREADS_H
#define ES_THREADS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct es_pool es_pool;
typedef void (*es_task_fn)(void *ctx, int task);

/* NULL when a thread cannot be started (then none is left running) */
es_pool *es_pool_create(int threads);
void es_pool_destroy(es_pool *pool);
/* runs every task; with pool NULL (or one thread) all on the caller, in order */
void es_parallel_for(es_pool *pool, int n_tasks, es_task_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif /* ES_THREADS_H */
