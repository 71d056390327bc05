/* Resize over the last two axes: nearest or (bi)linear, ONNX coordinate modes. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>

#include "../edgesmith_rt.h"

static float src_coord(int o, float scale, int in, int out, int coord) {
    switch (coord) {
    case ES_COORD_ALIGN_CORNERS:
        return out > 1 ? (float)o * (float)(in - 1) / (float)(out - 1) : 0.0f;
    case ES_COORD_ASYMMETRIC: return (float)o / scale;
    case ES_COORD_PYTORCH_HALF_PIXEL: return out > 1 ? ((float)o + 0.5f) / scale - 0.5f : 0.0f;
    case ES_COORD_TF_HALF_PIXEL_FOR_NN: return ((float)o + 0.5f) / scale;
    default: return ((float)o + 0.5f) / scale - 0.5f;
    }
}

static int nearest_idx(float v, int mode, int n) {
    int i;
    switch (mode) {
    case ES_NEAREST_ROUND_PREFER_CEIL: i = (int)floorf(v + 0.5f); break; /* a tie goes up */
    case ES_NEAREST_FLOOR: i = (int)floorf(v); break;
    case ES_NEAREST_CEIL: i = (int)ceilf(v); break;
    default: i = (int)floorf(v + 0.5f); /* ES_NEAREST_ROUND_PREFER_FLOOR */
        if (v + 0.5f == floorf(v + 0.5f)) i = (int)floorf(v);
    }
    return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

void es_resize2d_f32(const float *x, float *y, const es_resize_params *p) {
    const int NC = p->NC, H = p->H, W = p->W, OH = p->OH, OW = p->OW;
    const int mode = p->mode, coord = p->coord, nearest = p->nearest;
    const float sh = p->sh, sw = p->sw;
    int c, oh, ow;
    for (c = 0; c < NC; ++c) {
        const float *xc = x + (size_t)c * H * W;
        for (oh = 0; oh < OH; ++oh) {
            const float fy = src_coord(oh, sh, H, OH, coord);
            for (ow = 0; ow < OW; ++ow) {
                const float fx = src_coord(ow, sw, W, OW, coord);
                if (mode == ES_RESIZE_NEAREST) {
                    *y++ = xc[nearest_idx(fy, nearest, H) * W + nearest_idx(fx, nearest, W)];
                } else {
                    float cy = fy < 0.0f ? 0.0f : (fy > (float)(H - 1) ? (float)(H - 1) : fy);
                    float cx = fx < 0.0f ? 0.0f : (fx > (float)(W - 1) ? (float)(W - 1) : fx);
                    int y0 = (int)cy, x0 = (int)cx;
                    int y1 = y0 + 1 < H ? y0 + 1 : H - 1, x1 = x0 + 1 < W ? x0 + 1 : W - 1;
                    float dy = cy - (float)y0, dx = cx - (float)x0;
                    *y++ = (1.0f - dy) * ((1.0f - dx) * xc[y0 * W + x0] + dx * xc[y0 * W + x1]) +
                           dy * ((1.0f - dx) * xc[y1 * W + x0] + dx * xc[y1 * W + x1]);
                }
            }
        }
    }
}
