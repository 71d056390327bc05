/* Element-wise float32 ops: unary (activations, math), binary with broadcast through a
 * stride table (generated per step), and the per-channel affine of an unfolded BN. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>

#include "../edgesmith_rt.h"

static float unary1(float v, int op, float p0, float p1) {
    switch (op) {
    case ES_U_RELU: return v > 0.0f ? v : 0.0f;
    case ES_U_CLIP: return v < p0 ? p0 : (v > p1 ? p1 : v);
    case ES_U_LEAKY: return v >= 0.0f ? v : v * p0;
    case ES_U_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case ES_U_HARDSIGMOID: {
        float t = p0 * v + p1;
        return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
    }
    case ES_U_HARDSWISH: {
        float t = v / 6.0f + 0.5f;
        return v * (t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t));
    }
    case ES_U_TANH: return tanhf(v);
    case ES_U_ELU: return v >= 0.0f ? v : p0 * (expf(v) - 1.0f);
    case ES_U_SELU: return v > 0.0f ? p1 * v : p1 * (p0 * expf(v) - p0);
    case ES_U_SOFTPLUS: return v > 20.0f ? v : log1pf(expf(v));
    case ES_U_SOFTSIGN: return v / (1.0f + fabsf(v));
    case ES_U_EXP: return expf(v);
    case ES_U_NEG: return -v;
    case ES_U_ABS: return fabsf(v);
    case ES_U_SQRT: return sqrtf(v);
    case ES_U_LOG: return logf(v);
    case ES_U_RECIPROCAL: return 1.0f / v;
    case ES_U_ERF: return erff(v);
    case ES_U_FLOOR: return floorf(v);
    case ES_U_CEIL: return ceilf(v);
    default: return v;
    }
}

void es_unary_f32(const float *x, float *y, const es_unary_params *p) {
    const int n = p->n, op = p->op;
    const float p0 = p->p0, p1 = p->p1;
    int i;
    if (op == ES_U_RELU) {
        for (i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    }
    if (op == ES_U_CLIP) {
        for (i = 0; i < n; ++i) y[i] = x[i] < p0 ? p0 : (x[i] > p1 ? p1 : x[i]);
        return;
    }
    for (i = 0; i < n; ++i) y[i] = unary1(x[i], op, p0, p1);
}

static float binary1(float a, float b, int op) {
    switch (op) {
    case ES_B_ADD: return a + b;
    case ES_B_SUB: return a - b;
    case ES_B_MUL: return a * b;
    case ES_B_DIV: return a / b;
    case ES_B_POW: return powf(a, b);
    case ES_B_MAX: return a > b ? a : b;
    case ES_B_MIN: return a < b ? a : b;
    case ES_B_PRELU: return a >= 0.0f ? a : a * b;
    case ES_B_ADD_RELU: return a + b > 0.0f ? a + b : 0.0f;
    default: return a;
    }
}

void es_binary_f32(const float *a, const float *b, float *y, int op, const es_bcast *bc) {
    const int nd = bc->ndim, last = bc->shape[nd - 1];
    const int sa = bc->sa[nd - 1], sb = bc->sb[nd - 1];
    int idx[ES_MAX_DIMS] = {0};
    long outer = es_bcast_outer(bc), o, ao = 0, bo = 0;
    for (o = 0; o < outer; ++o) {
        int i;
        if (op == ES_B_ADD && sa == 1 && sb == 1) {
            for (i = 0; i < last; ++i) y[i] = a[ao + i] + b[bo + i];
        } else if (op == ES_B_ADD_RELU && sa == 1 && sb == 1) {
            for (i = 0; i < last; ++i) {
                const float v = a[ao + i] + b[bo + i];
                y[i] = v > 0.0f ? v : 0.0f;
            }
        } else if (op == ES_B_ADD && sa == 1 && sb == 0) {
            const float bv = b[bo];
            for (i = 0; i < last; ++i) y[i] = a[ao + i] + bv;
        } else if (op == ES_B_MUL && sa == 1 && sb == 1) {
            for (i = 0; i < last; ++i) y[i] = a[ao + i] * b[bo + i];
        } else if (op == ES_B_MUL && sa == 1 && sb == 0) {
            const float bv = b[bo];
            for (i = 0; i < last; ++i) y[i] = a[ao + i] * bv;
        } else {
            for (i = 0; i < last; ++i) y[i] = binary1(a[ao + (long)i * sa], b[bo + (long)i * sb], op);
        }
        y += last;
        es_bcast_next(bc, idx, &ao, &bo);
    }
}

void es_channel_affine_f32(const float *x, const float *s, const float *b, float *y, int outer,
                           int C, int inner) {
    int o, c, i;
    for (o = 0; o < outer; ++o) {
        for (c = 0; c < C; ++c) {
            const size_t base = ((size_t)o * C + c) * inner;
            for (i = 0; i < inner; ++i) y[base + i] = x[base + i] * s[c] + b[c];
        }
    }
}
