/* Detection post-processing, written to be read: see es_detect.h for the layout.
 * Mirrors edgesmith/pipeline/detection.py step by step (float32 throughout), which the
 * tests hold it to: same boxes, scores within 1e-5. */
#include "es_fp_exact.h" /* first: contraction off in every function below */
#include "es_detect.h"

#include <math.h>
#include <stddef.h>

#include "edgesmith_rt.h"
#include "model.h"

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static float positive(float x) { return x > 0.0f ? x : 0.0f; }

int es_detect_decode(const es_detect_level *levels, int num_levels, int num_classes,
                     float score_threshold, es_box *out, int max_out) {
    int count = 0;
    if (levels == NULL || out == NULL || num_levels < 1 || num_classes < 1 || max_out < 0)
        return ES_ERR_ARG;
    for (int l = 0; l < num_levels; l++) {
        const es_detect_level *lv = &levels[l];
        const int cells = lv->channel_stride > 0 ? lv->channel_stride : lv->height * lv->width;
        const float s = (float)lv->stride;
        if (lv->map == NULL || lv->height < 1 || lv->width < 1 || lv->stride < 1 ||
            (lv->channel_stride != 0 && lv->channel_stride < lv->height * lv->width))
            return ES_ERR_ARG;
        for (int y = 0; y < lv->height; y++) {
            for (int x = 0; x < lv->width; x++) {
                /* channel c: cell[c * cells], cells = the channel stride */
                const float *cell = lv->map + y * lv->width + x;
                int best = 0; /* first of equal logits */
                for (int k = 1; k < num_classes; k++)
                    if (cell[(5 + k) * cells] > cell[(5 + best) * cells]) best = k;
                const float score = sigmoid(cell[4 * cells]) * sigmoid(cell[(5 + best) * cells]);
                if (!(score >= score_threshold)) continue;
                if (count == max_out) return ES_ERR_SIZE;
                const float cx = ((float)x + 0.5f) * s, cy = ((float)y + 0.5f) * s;
                es_box *b = &out[count++];
                b->x0 = cx - positive(cell[0 * cells]) * s;
                b->y0 = cy - positive(cell[1 * cells]) * s;
                b->x1 = cx + positive(cell[2 * cells]) * s;
                b->y1 = cy + positive(cell[3 * cells]) * s;
                b->score = score;
                b->cls = best;
            }
        }
    }
    return count;
}

static float iou(const es_box *a, const es_box *b) {
    const float iw = positive(fminf(a->x1, b->x1) - fmaxf(a->x0, b->x0));
    const float ih = positive(fminf(a->y1, b->y1) - fmaxf(a->y0, b->y0));
    const float inter = iw * ih;
    const float area_a = (a->x1 - a->x0) * (a->y1 - a->y0);
    const float area_b = (b->x1 - b->x0) * (b->y1 - b->y0);
    const float uni = area_a + area_b - inter;
    return uni > 0.0f ? inter / uni : 0.0f;
}

/* Insertion sort by descending score: stable, in place, no scratch; candidates number in
 * the hundreds for a small head, where its n^2 / 4 moves are microseconds. */
static void sort_by_score(es_box *boxes, int count) {
    for (int i = 1; i < count; i++) {
        const es_box key = boxes[i];
        int j = i - 1;
        while (j >= 0 && boxes[j].score < key.score) {
            boxes[j + 1] = boxes[j];
            j--;
        }
        boxes[j + 1] = key;
    }
}

int es_nms(es_box *boxes, int count, float iou_threshold, int max_keep) {
    int kept = 0;
    if ((boxes == NULL && count > 0) || count < 0 || max_keep < 0) return ES_ERR_ARG;
    sort_by_score(boxes, count);
    for (int i = 0; i < count && kept < max_keep; i++) {
        int suppressed = 0;
        for (int k = 0; k < kept && !suppressed; k++)
            suppressed = boxes[k].cls == boxes[i].cls && iou(&boxes[k], &boxes[i]) > iou_threshold;
        if (!suppressed) boxes[kept++] = boxes[i]; /* kept <= i: moves a box forward only */
    }
    return kept;
}

#ifdef ES_DETECT_MAX_CANDIDATES /* model.h: this model's outputs are a detection head */
static es_box es_detect_candidates[ES_DETECT_MAX_CANDIDATES];
static const int32_t es_detect_strides[ES_DETECT_LEVELS] = ES_DETECT_STRIDES;
static const int32_t es_detect_heights[ES_DETECT_LEVELS] = ES_DETECT_HEIGHTS;
static const int32_t es_detect_widths[ES_DETECT_LEVELS] = ES_DETECT_WIDTHS;
#if defined(ES_DETECT_PACKED) && ES_DETECT_PACKED /* one output, levels along the cells */
static const int32_t es_detect_offsets[ES_DETECT_LEVELS] = ES_DETECT_OFFSETS;
#define ES_DETECT_MAP(m, l) ((const float *)es_output_ptr(m, 0) + es_detect_offsets[l])
#define ES_DETECT_STRIDE_OF(l) ES_DETECT_CHANNEL_STRIDE
#else /* one output per level */
#define ES_DETECT_MAP(m, l) ((const float *)es_output_ptr(m, l))
#define ES_DETECT_STRIDE_OF(l) 0
#endif

int es_detect(const es_model *m, float score_threshold, float iou_threshold, es_box *out,
              int max_out) {
    es_detect_level levels[ES_DETECT_LEVELS];
    if (m == NULL || out == NULL || max_out < 0) return ES_ERR_ARG;
    for (int l = 0; l < ES_DETECT_LEVELS; l++) {
        if (es_output_ptr(m, 0) == NULL) return ES_ERR_NOT_INIT;
        levels[l].map = ES_DETECT_MAP(m, l);
        if (levels[l].map == NULL) return ES_ERR_NOT_INIT;
        levels[l].channel_stride = ES_DETECT_STRIDE_OF(l);
        levels[l].height = es_detect_heights[l];
        levels[l].width = es_detect_widths[l];
        levels[l].stride = es_detect_strides[l];
    }
    const int n = es_detect_decode(levels, ES_DETECT_LEVELS, ES_DETECT_CLASSES, score_threshold,
                                   es_detect_candidates, ES_DETECT_MAX_CANDIDATES);
    if (n < 0) return n;
    const int kept = es_nms(es_detect_candidates, n, iou_threshold,
                            max_out < ES_DETECT_MAX_BOXES ? max_out : ES_DETECT_MAX_BOXES);
    for (int i = 0; i < kept; i++) out[i] = es_detect_candidates[i];
    return kept;
}
#else
int es_detect(const es_model *m, float score_threshold, float iou_threshold, es_box *out,
              int max_out) {
    (void)m, (void)score_threshold, (void)iou_threshold, (void)out, (void)max_out;
    return ES_ERR_UNAVAILABLE; /* this model's outputs are not a detection head */
}
#endif
