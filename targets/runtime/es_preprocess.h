/* edgesmith preprocessing: an HWC uint8 RGB camera frame -> the model's input tensor.
 *
 * The same arithmetic as pipeline/preprocess.py (its docstring is the definition):
 * bilinear resize with half-pixel centres and Q8 integer weights (bit-exact with the
 * Python path), centre crop, optional RGB->BGR, then float32 (pixel - mean) / std, uint8
 * as is, or int8 pixel - 128; NCHW or NHWC. The resize is computed per output pixel from
 * the source frame, so there is no intermediate image and no malloc.
 *
 * Standalone (only <stdint.h>/<stddef.h>): a camera pipeline can take this pair of files
 * without the rest of the runtime. The spec's values are the manifest's
 * data.preprocess; a generated model.h carries them as ES_PREPROCESS_SPEC. */
#ifndef ES_PREPROCESS_H
#define ES_PREPROCESS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ES_PRE_CHANNELS 3
#define ES_PRE_F32 0 /* float32 (pixel - mean) / std */
#define ES_PRE_U8 1  /* uint8 pixel */
#define ES_PRE_I8 2  /* int8 pixel - 128 */

/* the same values as edgesmith_rt.h's ES_OK / ES_ERR_ARG / ES_ERR_SIZE */
#define ES_PRE_OK 0
#define ES_PRE_ERR_ARG (-1)
#define ES_PRE_ERR_SIZE (-12)

typedef struct {
    int resize_h, resize_w;        /* 0, 0: no resize */
    int crop_h, crop_w;            /* 0, 0: no centre crop */
    float mean[ES_PRE_CHANNELS];   /* in the model's channel order, 0..255 frame units */
    float std[ES_PRE_CHANNELS];    /* > 0 */
    int bgr;                       /* 1: the model takes B, G, R */
    int nhwc;                      /* 1: H, W, C; 0: C, H, W */
    int dtype;                     /* ES_PRE_F32 | ES_PRE_U8 | ES_PRE_I8 */
} es_preprocess_spec;

/* Output height and width for an h x w frame; ES_PRE_ERR_SIZE when the crop is larger
 * than the (resized) frame, ES_PRE_ERR_ARG for a bad spec or size. */
int es_preprocess_out_hw(const es_preprocess_spec *spec, int h, int w, int *out_h, int *out_w);
/* Bytes es_preprocess_u8 writes for an h x w frame (0 when the spec or size is bad). */
size_t es_preprocess_out_bytes(const es_preprocess_spec *spec, int h, int w);
/* Turn one h x w x 3 uint8 RGB frame into the model input at out (es_preprocess_out_bytes
 * bytes, aligned for float). Returns ES_PRE_OK or an error code; writes nothing on error. */
int es_preprocess_u8(const uint8_t *hwc, int h, int w, const es_preprocess_spec *spec,
                     void *out);

#ifdef __cplusplus
}
#endif
#endif /* ES_PREPROCESS_H */
