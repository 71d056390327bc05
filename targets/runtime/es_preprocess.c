/* es_preprocess_u8: see es_preprocess.h; the arithmetic is pipeline/preprocess.py's. */
#include "es_fp_exact.h" /* first: contraction off in every function below */
#include "es_preprocess.h"

#define Q 256

/* Left tap, right tap and Q8 weight of the right tap for output index d of n_out over
 * n_in source pixels (half-pixel centres, clamped at both ends). */
static void taps(int d, int n_in, int n_out, int *s0, int *s1, int *f) {
    long long n = (long long)(2 * d + 1) * n_in - n_out;
    long long lo;
    if (n < 0) n = 0;
    lo = n / (2LL * n_out);
    *f = (int)(((n - lo * 2LL * n_out) * Q) / (2LL * n_out));
    if (lo >= n_in - 1) {
        lo = n_in - 1;
        *f = 0;
    }
    *s0 = (int)lo;
    *s1 = (int)(lo + 1 < n_in ? lo + 1 : n_in - 1);
}

/* Channel c of the resized frame's pixel (y, x), computed from the source. */
static uint8_t sample(const uint8_t *hwc, int h, int w, int rh, int rw, int y, int x, int c) {
    int y0, y1, fy, x0, x1, fx;
    int32_t top, bottom;
    if (rh == 0) return hwc[((size_t)y * (size_t)w + (size_t)x) * ES_PRE_CHANNELS + (size_t)c];
    taps(y, h, rh, &y0, &y1, &fy);
    taps(x, w, rw, &x0, &x1, &fx);
#define PX(yy, xx) ((int32_t)hwc[((size_t)(yy) * (size_t)w + (size_t)(xx)) * ES_PRE_CHANNELS + (size_t)c])
    top = (Q - fx) * PX(y0, x0) + fx * PX(y0, x1);
    bottom = (Q - fx) * PX(y1, x0) + fx * PX(y1, x1);
#undef PX
    return (uint8_t)(((Q - fy) * top + fy * bottom + 32768) >> 16);
}

int es_preprocess_out_hw(const es_preprocess_spec *spec, int h, int w, int *out_h, int *out_w) {
    int c;
    if (!spec || h <= 0 || w <= 0 || !out_h || !out_w) return ES_PRE_ERR_ARG;
    if ((spec->resize_h > 0) != (spec->resize_w > 0) || spec->resize_h < 0 ||
        (spec->crop_h > 0) != (spec->crop_w > 0) || spec->crop_h < 0)
        return ES_PRE_ERR_ARG;
    if (spec->dtype < ES_PRE_F32 || spec->dtype > ES_PRE_I8) return ES_PRE_ERR_ARG;
    for (c = 0; c < ES_PRE_CHANNELS; ++c)
        if (spec->dtype == ES_PRE_F32 && !(spec->std[c] > 0.0f)) return ES_PRE_ERR_ARG;
    if (spec->resize_h > 0) {
        h = spec->resize_h;
        w = spec->resize_w;
    }
    if (spec->crop_h > 0) {
        if (spec->crop_h > h || spec->crop_w > w) return ES_PRE_ERR_SIZE;
        h = spec->crop_h;
        w = spec->crop_w;
    }
    *out_h = h;
    *out_w = w;
    return ES_PRE_OK;
}

size_t es_preprocess_out_bytes(const es_preprocess_spec *spec, int h, int w) {
    int oh, ow;
    if (es_preprocess_out_hw(spec, h, w, &oh, &ow) != ES_PRE_OK) return 0;
    return (size_t)oh * (size_t)ow * ES_PRE_CHANNELS *
           (spec->dtype == ES_PRE_F32 ? sizeof(float) : 1u);
}

/* Where channel c of output pixel (y, x) goes, in elements. */
static size_t out_index(const es_preprocess_spec *spec, int oh, int ow, int y, int x, int c) {
    if (spec->nhwc) return ((size_t)y * (size_t)ow + (size_t)x) * ES_PRE_CHANNELS + (size_t)c;
    return ((size_t)c * (size_t)oh + (size_t)y) * (size_t)ow + (size_t)x;
}

int es_preprocess_u8(const uint8_t *hwc, int h, int w, const es_preprocess_spec *spec,
                     void *out) {
    int oh, ow, y, x, c, rc;
    int rh = spec ? spec->resize_h : 0, rw = spec ? spec->resize_w : 0;
    int top, left;
    if (!hwc || !out) return ES_PRE_ERR_ARG;
    rc = es_preprocess_out_hw(spec, h, w, &oh, &ow);
    if (rc != ES_PRE_OK) return rc;
    top = ((rh ? rh : h) - oh) / 2;
    left = ((rw ? rw : w) - ow) / 2;
    for (y = 0; y < oh; ++y) {
        for (x = 0; x < ow; ++x) {
            for (c = 0; c < ES_PRE_CHANNELS; ++c) {
                const int src_c = spec->bgr ? ES_PRE_CHANNELS - 1 - c : c;
                const uint8_t p = sample(hwc, h, w, rh, rw, y + top, x + left, src_c);
                const size_t i = out_index(spec, oh, ow, y, x, c);
                if (spec->dtype == ES_PRE_F32)
                    ((float *)out)[i] = ((float)p - spec->mean[c]) / spec->std[c];
                else if (spec->dtype == ES_PRE_U8)
                    ((uint8_t *)out)[i] = p;
                else
                    ((int8_t *)out)[i] = (int8_t)((int)p - 128);
            }
        }
    }
    return ES_PRE_OK;
}
