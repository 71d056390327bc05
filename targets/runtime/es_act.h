/* The fused activations (edgesmith_rt.h ES_ACT_*) of one float value, written once: the
 * reference kernels apply it as it stands, and it is the oracle of the fast kernels'
 * vector epilogues (which compute e^-v by a polynomial, not expf) and their scalar tails. */
#ifndef ES_ACT_H
#define ES_ACT_H
#include <math.h>

#include "edgesmith_rt.h"

static inline float es_act_f32(float v, int act, float a0, float a1) {
    float t;
    switch (act) {
    case ES_ACT_RELU: return v > 0.0f ? v : 0.0f;
    case ES_ACT_CLIP: return v < a0 ? a0 : (v > a1 ? a1 : v);
    case ES_ACT_LEAKY: return v >= 0.0f ? v : v * a0;
    case ES_ACT_HARDSWISH:
        t = v / 6.0f + 0.5f;
        return v * (t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t));
    case ES_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case ES_ACT_SILU: return v / (1.0f + expf(-v));
    case ES_ACT_HARDSIGMOID:
        t = a0 * v + a1;
        return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
    default: return v;
    }
}

#endif
