/* main of the bare-metal check image: one inference of the generated model on a Cortex-M.
 *
 * Reads input.raw (the model's input 0 as es_input takes it: raw float32 little-endian,
 * or int8 for a model built with the C option input: int8) from the directory
 * QEMU runs in through semihosting, runs the model from its static arena with the weights
 * compiled into flash, writes output 0 to output.raw and prints one JSON line with the
 * plan's figures. Any failure prints what went wrong and returns non-zero, which QEMU
 * passes on as its exit status. */
#include <stdio.h>

#include "model.h"

static unsigned char es_arena[ES_ARENA_BYTES] __attribute__((aligned(ES_ARENA_ALIGN)));
/* ES_INPUT0_BYTES, not ELEMS floats: an int8-input model takes one byte per value */
static unsigned char es_in[ES_INPUT0_BYTES] __attribute__((aligned(4)));
static float es_out[ES_OUTPUT0_ELEMS];

static int fail(const char *what, const char *detail) {
    printf("{\"ok\": 0, \"error\": \"%s: %s\"}\n", what, detail);
    return 1;
}

int main(void) {
    es_model m;
    FILE *f;
    int rc;
    size_t n;
    if (!(f = fopen("input.raw", "rb"))) return fail("cannot open", "input.raw");
    n = fread(es_in, 1, sizeof es_in, f);
    fclose(f);
    if (n != sizeof es_in) return fail("input.raw is shorter than input 0", "see model.h");
    if ((rc = es_init(&m, es_arena, sizeof es_arena, NULL)) != ES_OK)
        return fail("es_init", es_strerror(rc));
    if ((rc = es_input(&m, 0, es_in, sizeof es_in)) != ES_OK ||
        (rc = es_run(&m, NULL)) != ES_OK || (rc = es_output(&m, 0, es_out, sizeof es_out)) != ES_OK)
        return fail("inference", es_strerror(rc));
    if (!(f = fopen("output.raw", "wb"))) return fail("cannot create", "output.raw");
    n = fwrite(es_out, 1, sizeof es_out, f);
    fclose(f);
    if (n != sizeof es_out) return fail("short write", "output.raw");
    printf("{\"ok\": 1, \"arena_bytes\": %u, \"weights_bytes\": %u}\n",
           (unsigned)ES_ARENA_BYTES, (unsigned)ES_WEIGHTS_BYTES);
    es_deinit(&m);
    return 0;
}
