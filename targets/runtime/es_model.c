/* edgesmith C runtime: the model API (model.h), the same for every model.
 *
 * Copied unchanged into every generated folder. What differs between models lives in the
 * generated model.c: the sizes (model.h's ES_* macros), the memory plan as data
 * (es_input_offsets / es_output_offsets, es_tensors) and es_run_step, one case per
 * step. This file only checks arguments, binds the arena and the weights, copies inputs
 * (or binds the caller's buffers in their place) and outputs, and walks the steps,
 * resumably, with the hooks around each. With
 * ES_THREADS > 1 (options: {threads: N}) es_init also starts the worker pool the heavy
 * steps split their output channels over (es_threads.h), and es_deinit joins it; the
 * hooks still run once per step on the calling thread. */
#include "es_fp_exact.h" /* first: contraction off in every function below */
#include <string.h>

#include "model.h"
#if ES_THREADS > 1
#include "es_threads.h"
#endif

#if ES_WEIGHTS_EMBEDDED
extern const unsigned char es_weights_blob[];
#endif

/* input index read from its arena slot again (ends an es_bind_input) */
static void unbind(es_model *m, int index) {
    if (index < ES_MAX_BOUND_INPUTS) m->input[index] = m->arena + es_input_offsets[index];
}

/* An input the build consumes (es_input_consumed: C option input: float_in_place) has
 * its int8 copy written over its own arena slot by the run, so a run may start only on a
 * slot filled since the last run began (es_input, es_input_ptr) or on a bound buffer,
 * which the steps only read. The index is below ES_MAX_BOUND_INPUTS: the generator marks
 * no other input consumed. Called where a run begins; it takes the fresh inputs. */
static int take_inputs(es_model *m) {
    int i;
    for (i = 0; i < ES_NUM_INPUTS && i < ES_MAX_BOUND_INPUTS; ++i)
        if (es_input_consumed[i] && m->input[i] == m->arena + es_input_offsets[i] &&
            !m->input_fresh[i])
            return ES_ERR_INPUT_SPENT;
    for (i = 0; i < ES_NUM_INPUTS && i < ES_MAX_BOUND_INPUTS; ++i) m->input_fresh[i] = 0;
    return ES_OK;
}

int es_init(es_model *m, void *arena, size_t arena_size, const char *weights_path) {
    int rc = ES_OK, i;
    if (!m || !arena) return ES_ERR_ARG;
    memset(m, 0, sizeof *m);
    if (arena_size < ES_ARENA_BYTES) return ES_ERR_ARENA_SMALL;
    if ((uintptr_t)arena % ES_ARENA_ALIGN)
        return ES_ERR_ARENA_ALIGN;
#if ES_WEIGHTS_EMBEDDED
    m->weights.payload = es_weights_blob;
    m->weights.payload_size = ES_WEIGHTS_BYTES;
    m->weights.map_base = NULL;
    m->weights.map_size = 0;
    (void)weights_path;
#else
    rc = es_weights_open(weights_path ? weights_path : "weights.bin", ES_MODEL_ID,
                         ES_WEIGHTS_COUNT, ES_WEIGHTS_BYTES, &m->weights);
    if (rc != ES_OK) return rc;
#endif
#if ES_THREADS > 1
    m->pool = es_pool_create(ES_THREADS); /* the last allocation: none after es_init */
    if (!m->pool) {
#if !ES_WEIGHTS_EMBEDDED
        es_weights_close(&m->weights);
#endif
        return ES_ERR_UNAVAILABLE;
    }
#endif
    m->arena = (unsigned char *)arena;
    m->arena_size = arena_size;
    for (i = 0; i < ES_NUM_INPUTS; ++i) unbind(m, i); /* every input read from the arena */
    m->next_step = 0;
    m->ready = 1;
    return rc;
}

void es_deinit(es_model *m) {
    if (!m) return;
#if ES_THREADS > 1
    es_pool_destroy((es_pool *)m->pool);
    m->pool = NULL;
#endif
#if !ES_WEIGHTS_EMBEDDED
    es_weights_close(&m->weights);
#endif
    m->ready = 0;
}

int es_input(es_model *m, int index, const void *data, size_t nbytes) {
    if (!m || !m->ready) return ES_ERR_NOT_INIT;
    if (index < 0 || index >= ES_NUM_INPUTS || !data) return ES_ERR_ARG;
    if (nbytes != es_input_bytes[index]) return ES_ERR_SIZE;
    memcpy(m->arena + es_input_offsets[index], data, nbytes);
    unbind(m, index);
    if (index < ES_MAX_BOUND_INPUTS) m->input_fresh[index] = 1;
    return ES_OK;
}

/* The steps never write an input (a step that works in place writes its own output, at
 * the same arena offset), so a caller's buffer can stand in for the arena slot: a camera
 * frame or a DMA buffer is read where it lies, with no copy per run, and stays untouched.
 * It must stay valid and unchanged while a run reads it, and be aligned as the arena is
 * (kernels may load it in whole vectors). */
int es_bind_input(es_model *m, int index, const void *data, size_t nbytes) {
    if (!m || !m->ready) return ES_ERR_NOT_INIT;
    if (index < 0 || index >= ES_NUM_INPUTS || !data) return ES_ERR_ARG;
    if (nbytes != es_input_bytes[index]) return ES_ERR_SIZE;
    if ((uintptr_t)data % ES_ARENA_ALIGN) return ES_ERR_ARG;
    if (index >= ES_MAX_BOUND_INPUTS || !es_input_bindable[index]) return ES_ERR_UNAVAILABLE;
    m->input[index] = (const unsigned char *)data;
    return ES_OK;
}

void *es_input_ptr(es_model *m, int index) {
    if (!m || !m->ready || index < 0 || index >= ES_NUM_INPUTS) return NULL;
    unbind(m, index); /* the caller writes the arena slot: the steps read it from there */
    if (index < ES_MAX_BOUND_INPUTS) m->input_fresh[index] = 1;
    return m->arena + es_input_offsets[index];
}

int es_output(const es_model *m, int index, void *data, size_t nbytes) {
    if (!m || !m->ready) return ES_ERR_NOT_INIT;
    if (index < 0 || index >= ES_NUM_OUTPUTS || !data) return ES_ERR_ARG;
    if (nbytes != es_output_bytes[index]) return ES_ERR_SIZE;
    memcpy(data, m->arena + es_output_offsets[index], nbytes);
    return ES_OK;
}

const void *es_output_ptr(const es_model *m, int index) {
    if (!m || !m->ready || index < 0 || index >= ES_NUM_OUTPUTS) return NULL;
    return m->arena + es_output_offsets[index];
}

int es_run_slice(es_model *m, int max_steps, const es_hooks *hooks) {
    int n;
    if (!m || !m->ready) return ES_ERR_NOT_INIT;
    if (max_steps <= 0) return ES_ERR_ARG;
    if (m->next_step == 0) {
        const int rc = take_inputs(m);
        if (rc != ES_OK) return rc;
    }
    for (n = 0; n < max_steps && m->next_step < ES_NUM_STEPS; ++n) {
        const int i = m->next_step;
        uint64_t t0 = 0;
        if (hooks && hooks->before_step)
            hooks->before_step(hooks->user, i, es_step_ops[i], es_step_names[i]);
        if (hooks && hooks->after_step) t0 = es_now_ns();
        es_run_step(m, i);
        if (hooks && hooks->after_step)
            hooks->after_step(hooks->user, i, es_step_ops[i], es_step_names[i], es_now_ns() - t0);
        m->next_step = i + 1;
    }
    if (m->next_step >= ES_NUM_STEPS) {
        m->next_step = 0;
        return ES_OK;
    }
    return ES_MORE;
}

int es_run(es_model *m, const es_hooks *hooks) {
    if (!m || !m->ready) return ES_ERR_NOT_INIT;
    m->next_step = 0;
    return es_run_slice(m, ES_NUM_STEPS > 0 ? ES_NUM_STEPS : 1, hooks);
}
