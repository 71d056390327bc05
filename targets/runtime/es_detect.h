/* Detection post-processing: an anchor-free head's maps -> boxes, then NMS.
 *
 * The same steps as edgesmith.pipeline.detection (decode, nms), so the host's validation
 * and a camera product get the same boxes. No malloc: the caller passes the buffers, and
 * es_detect() (for a generated detector) uses static ones sized by model.h.
 *
 * Head layout, per level (one model output per stride, or one output packing every
 * level's map along the cells: (5 + K) x sum(H * W), finest level first), one image,
 * channel-major:
 *   channel 0..3  l, t, r, b distances from the cell centre, in strides (max(d, 0) is used)
 *   channel 4     objectness logit
 *   channel 5..   one logit per class
 * A cell proposes one box, of its best class, scored sigmoid(obj) * sigmoid(class).
 */
#ifndef ES_DETECT_H
#define ES_DETECT_H

#include <stdint.h>

#include "edgesmith_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float x0, y0, x1, y1; /* input pixels */
    float score;          /* sigmoid(objectness) * sigmoid(class logit), 0..1 */
    int32_t cls;          /* 0-based class */
} es_box;

typedef struct {
    const float *map;       /* (5 + num_classes) x height x width floats */
    int32_t height, width;  /* cells */
    int32_t stride;         /* input pixels per cell */
    /* floats from one channel to the next: 0 = height * width (a map of its own); in a
     * packed output, the cells of all levels (map then points at the level's offset) */
    int32_t channel_stride;
} es_detect_level;

/* Every cell whose best class scores >= score_threshold, in the order level, row, column.
 * Returns the number written to out (<= max_out), or ES_ERR_ARG / ES_ERR_SIZE (more
 * candidates than max_out: size out as the sum of height * width over the levels). */
int es_detect_decode(const es_detect_level *levels, int num_levels, int num_classes,
                     float score_threshold, es_box *out, int max_out);

/* Greedy per-class NMS in place: sorts boxes by descending score (stable: equal scores
 * keep their order), keeps a box when its IoU with every kept box of its class is
 * <= iou_threshold, stops at max_keep. The kept boxes end up first, best first.
 * Returns how many were kept, or ES_ERR_ARG. */
int es_nms(es_box *boxes, int count, float iou_threshold, int max_keep);

/* For a generated detector (model.h defines ES_DETECT_LEVELS ... ES_DETECT_MAX_BOXES
 * when every output has the head's shape): decode the model's outputs after es_run and
 * apply NMS, writing at most min(max_out, ES_DETECT_MAX_BOXES) boxes to out, best first.
 * Candidates go to a static buffer of ES_DETECT_MAX_CANDIDATES boxes (one per cell),
 * so one thread at a time. Returns the box count, ES_ERR_NOT_INIT before es_init, or
 * ES_ERR_ARG. */
int es_detect(const es_model *m, float score_threshold, float iou_threshold, es_box *out,
              int max_out);

#ifdef __cplusplus
}
#endif
#endif /* ES_DETECT_H */
