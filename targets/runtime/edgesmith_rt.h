/* edgesmith C runtime: the shared part (types, error codes, kernel prototypes).
 *
 * Generated models (model.c/model.h) call the kernels below with pointers into one
 * arena planned at generation time and into the weights blob (mmap'd weights.bin or
 * const arrays). Nothing here allocates memory. Portable C99; optional SIMD paths sit
 * behind #ifdef next to the reference code, which is always built and tested.
 */
#ifndef EDGESMITH_RT_H
#define EDGESMITH_RT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error codes (es_strerror) ------------------------------------------------------- */
#define ES_OK 0
#define ES_MORE 1 /* es_run_slice: steps remain; call again to resume */
#define ES_ERR_ARG (-1)
#define ES_ERR_ARENA_SMALL (-2)
#define ES_ERR_ARENA_ALIGN (-3)
#define ES_ERR_WEIGHTS_OPEN (-4)
#define ES_ERR_WEIGHTS_SHORT (-5)
#define ES_ERR_WEIGHTS_MAGIC (-6)
#define ES_ERR_WEIGHTS_VERSION (-7)
#define ES_ERR_WEIGHTS_MODEL (-8)
#define ES_ERR_WEIGHTS_CRC (-9)
#define ES_ERR_WEIGHTS_LAYOUT (-10)
#define ES_ERR_NOT_INIT (-11)
#define ES_ERR_SIZE (-12)
#define ES_ERR_UNAVAILABLE (-13)
#define ES_ERR_INPUT_SPENT (-14) /* a run consumed the input (ES_INPUT<i>_CONSUMED) */

const char *es_strerror(int code);

/* ---- weights file ----------------------------------------------------------------------
 * weights.bin: a 64-byte header, then the payload; every tensor starts on 64 bytes.
 *   0  magic "ESWB"        4  format version (u32)   8  tensor count (u32)
 *   12 model id (u32)     16  payload bytes (u64)   24  CRC32 of the payload (u32)
 *   28 header bytes (u32, = 64)                      rest zero. All little-endian.     */
#define ES_WEIGHTS_MAGIC "ESWB"
#define ES_WEIGHTS_VERSION 1u
#define ES_WEIGHTS_HEADER 64u

typedef struct {
    const unsigned char *payload; /* start of tensor data */
    size_t payload_size;
    void *map_base; /* mmap'd region (NULL when embedded) */
    size_t map_size;
} es_weights;

uint32_t es_crc32(const unsigned char *p, size_t n);
/* Check a header+payload image already in memory (used for the file and for tests). */
int es_weights_check(const unsigned char *img, size_t size, uint32_t model_id,
                     uint32_t count, uint64_t payload_bytes, es_weights *out);
/* mmap a weights file (POSIX) and check it; ES_ERR_UNAVAILABLE without mmap. */
int es_weights_open(const char *path, uint32_t model_id, uint32_t count,
                    uint64_t payload_bytes, es_weights *out);
void es_weights_close(es_weights *w);

/* ---- hooks (power-aware scheduling) -------------------------------------------------- */
typedef struct {
    void (*before_step)(void *user, int index, const char *op, const char *name);
    void (*after_step)(void *user, int index, const char *op, const char *name,
                       uint64_t elapsed_ns);
    void *user;
} es_hooks;

uint64_t es_now_ns(void); /* monotonic clock; 0 where none exists */

/* ---- the model object ---------------------------------------------------------------- */
/* inputs es_bind_input can bind, at most (the rest are always copied in by es_input) */
#define ES_MAX_BOUND_INPUTS 8

typedef struct {
    unsigned char *arena;
    size_t arena_size;
    es_weights weights;
    /* where the steps read each input: its slot in the arena (es_input copies there), or
     * the caller's own buffer (es_bind_input: no copy per run) */
    const unsigned char *input[ES_MAX_BOUND_INPUTS];
    /* an input a run consumes (C option input: float_in_place) was copied into its slot
     * since the last run began */
    unsigned char input_fresh[ES_MAX_BOUND_INPUTS];
    int next_step; /* es_run_slice resumes here */
    int ready;
    void *pool; /* es_threads.c's workers (model.h's ES_THREADS > 1), else NULL */
} es_model;

/* ---- compile-time checks ------------------------------------------------------------
 * ES_STATIC_ASSERT(name, cond): a C99 static assertion (an array of negative size when cond
 * is false). model.c states each step's planned scratch against its kernel's
 * ES_*_SCRATCH macro with it, so a plan smaller than the kernel needs does not compile. */
#define ES_STATIC_ASSERT(name, cond) typedef char es_static_assert_##name[(cond) ? 1 : -1]

/* ---- kernel parameter blocks (generated code fills these as static const data) ------- */
#define ES_MAX_DIMS 6

typedef struct {
    int32_t C, H, W, M, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, group, act;
    float a0, a1;                      /* activation bounds/slope */
    int32_t x_zp, y_zp, qmin, qmax;    /* int8 only */
    int32_t rq;                        /* int8 only: ES_RQ_FIXED or ES_RQ_FP32 */
    /* int8 only: x (es_conv2d_i8_dot) or y (es_dwconv2d_i8_hwc) is not CHW but the dot
     * kernel's own input layout, uint8 channel-quad planes: word j of plane c4 holds the
     * bytes x[4*c4 + i][j] + 128, i = 0..3, and 64 readable bytes follow the last plane.
     * The generator hands a depthwise conv's output to the 1x1 conv after it this way, so
     * neither transposes it to CHW and back; x_quads needs a 1x1, stride-1, unpadded conv
     * and y_quads a channel count that is a multiple of 4. */
    int32_t x_quads, y_quads;
    /* int8 only: y (es_conv2d_i8_dot) or x (es_dwconv2d_i8_hwc) is not CHW but the
     * depthwise kernel's own input layout, pixel quads: 16 channels x 4 consecutive pixels
     * to 64 bytes, byte (c, j) at ((c / 16) * P + j - j % 4) * 16 + (c % 16) * 4 + j % 4
     * for pixel j of P, holding x + 128, so a depthwise row loader reads each dword of 4
     * columns x 16 channels as it is and transposes nothing. The generator hands an
     * expanding 1x1 conv's output to the depthwise conv after it this way (both need 16
     * whole channel blocks and rows of whole quads: y_pquads a 1x1, stride-1, unpadded
     * conv, x_pquads DW = 1). */
    int32_t x_pquads, y_pquads;
} es_conv_params;

typedef struct {
    int32_t C, H, W, OH, OW, KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, count_pad;
    int32_t x_zp, y_zp, mult, shift; /* int8 average pooling only */
} es_pool_params;

typedef struct {
    int32_t ndim, shape[ES_MAX_DIMS], sa[ES_MAX_DIMS], sb[ES_MAX_DIMS];
} es_bcast;

/* Broadcast walks shared by the binary kernels (add, mul, the fp32 binary ops). The
 * generator merges dims that broadcast alike, so the innermost dim is one run; the outer
 * dims are walked by an odometer that moves each input's offset by its stride (0 where it
 * broadcasts) and rewinds a dim when it wraps. */
static inline long es_bcast_outer(const es_bcast *bc) {
    long n = 1;
    int d;
    for (d = 0; d < bc->ndim - 1; ++d) n *= bc->shape[d];
    return n;
}

/* the next run: idx over dims 0 .. ndim-2, offsets ao / bo of its first elements */
static inline void es_bcast_next(const es_bcast *bc, int *idx, long *ao, long *bo) {
    int d;
    for (d = bc->ndim - 2; d >= 0; --d) {
        *ao += bc->sa[d];
        *bo += bc->sb[d];
        if (++idx[d] < bc->shape[d]) return;
        *ao -= (long)bc->sa[d] * bc->shape[d];
        *bo -= (long)bc->sb[d] * bc->shape[d];
        idx[d] = 0;
    }
}

typedef struct {
    int32_t ndim, shape[ES_MAX_DIMS], perm[ES_MAX_DIMS];
} es_perm;

typedef struct {
    int32_t ndim, in[ES_MAX_DIMS], out[ES_MAX_DIMS], before[ES_MAX_DIMS], mode;
    float value;
} es_pad_params;

typedef struct { /* int8 add/sub: TFLite's integer form, or (rq ES_RQ_FP32) float */
    int32_t a_zp, b_zp, y_zp, left_shift;
    int32_t a_mult, a_shift, b_mult, b_shift, y_mult, y_shift, qmin, qmax, sub;
    int32_t rq;
    float a_scale, b_scale, y_scale; /* ES_RQ_FP32 */
} es_qadd_params;

typedef struct { /* es_add_i8_bcast: the add/sub parameters and the merged broadcast */
    es_qadd_params q;
    es_bcast bc;
} es_qadd_bcast_params;

typedef struct { /* TFLite-style int8 mul; bc is one contiguous dim when shapes match */
    int32_t a_zp, b_zp, y_zp, mult, shift, qmin, qmax;
    es_bcast bc;
} es_qmul_params;

/* activations fused into conv/gemm */
#define ES_ACT_NONE 0
#define ES_ACT_RELU 1
#define ES_ACT_CLIP 2
#define ES_ACT_LEAKY 3
#define ES_ACT_HARDSWISH 4   /* v * clamp(v / 6 + 1/2, 0, 1) */
#define ES_ACT_SIGMOID 5     /* 1 / (1 + e^-v) */
#define ES_ACT_SILU 6        /* v * sigmoid(v): ONNX Mul(x, Sigmoid(x)) */
#define ES_ACT_HARDSIGMOID 7 /* clamp(a0 v + a1, 0, 1) */

/* unary ops */
enum {
    ES_U_RELU, ES_U_CLIP, ES_U_LEAKY, ES_U_SIGMOID, ES_U_HARDSIGMOID, ES_U_HARDSWISH,
    ES_U_TANH, ES_U_ELU, ES_U_SELU, ES_U_SOFTPLUS, ES_U_SOFTSIGN, ES_U_EXP, ES_U_NEG,
    ES_U_ABS, ES_U_SQRT, ES_U_LOG, ES_U_RECIPROCAL, ES_U_ERF, ES_U_FLOOR, ES_U_CEIL
};
/* binary ops; ES_B_ADD_RELU is Add then Relu in one pass (a residual block's sum, whose
 * Relu was a second pass over the plane) */
enum {
    ES_B_ADD, ES_B_SUB, ES_B_MUL, ES_B_DIV, ES_B_POW, ES_B_MAX, ES_B_MIN, ES_B_PRELU,
    ES_B_ADD_RELU
};
/* reductions */
enum { ES_R_MEAN, ES_R_SUM, ES_R_MAX };
/* resize: interpolation, ONNX coordinate_transformation_mode, ONNX nearest_mode */
enum { ES_RESIZE_NEAREST, ES_RESIZE_LINEAR };
enum {
    ES_COORD_HALF_PIXEL, ES_COORD_ALIGN_CORNERS, ES_COORD_ASYMMETRIC,
    ES_COORD_PYTORCH_HALF_PIXEL, ES_COORD_TF_HALF_PIXEL_FOR_NN
};
enum {
    ES_NEAREST_ROUND_PREFER_FLOOR, ES_NEAREST_ROUND_PREFER_CEIL, ES_NEAREST_FLOOR,
    ES_NEAREST_CEIL
};

/* Parameter blocks of the kernels that are not convolutions, pooling windows or binary
 * ops: model.c fills one per call as a static const struct named after its ONNX node, so
 * no call passes a row of bare numbers. Sizes are element counts unless they say bytes;
 * every kernel copies the fields it loops over into locals first (its stores through int8
 * pointers may alias the block, so the compiler would otherwise reload them). */
typedef struct { /* es_gemm_f32: y[M][N] = act(x[M][K] . w[N][K]^T + b[N]) */
    int32_t M, N, K; /* rows of x and y, outputs per row, inputs per row */
    int32_t act;     /* fused activation, ES_ACT_* */
    float a0, a1;    /* ES_ACT_CLIP: bounds [a0, a1]; ES_ACT_LEAKY: slope a0;
                        ES_ACT_HARDSIGMOID: alpha a0, beta a1 */
} es_gemm_params;

typedef struct { /* es_matmul_f32: for each of batch: y[M][N] = a[M][K] . b[K][N] */
    int32_t batch, M, K, N;
    int32_t a_stride, b_stride; /* elements between batches of a, of b (0: broadcast) */
} es_matmul_params;

typedef struct { /* es_unary_f32: y[i] = op(x[i]) for i < n */
    int32_t n;
    int32_t op;   /* ES_U_* */
    float p0, p1; /* the op's constants: Clip bounds [p0, p1], LeakyRelu slope p0,
                     HardSigmoid alpha p0 and beta p1, Elu alpha p0, Selu alpha p0 and
                     gamma p1; 0 for the rest */
} es_unary_params;

typedef struct { /* es_reduce_f32: y[outer][inner] = op over n of x[outer][n][inner] */
    int32_t outer, n, inner;
    int32_t op; /* ES_R_* */
} es_reduce_params;

typedef struct { /* es_softmax_f32: over n of x[outer][n][inner] */
    int32_t outer, n, inner;
    int32_t is_log; /* 1: LogSoftmax, 0: Softmax */
} es_softmax_params;

typedef struct { /* es_lrn_f32 on one image x[C][inner], ONNX LRN */
    int32_t C, inner;
    int32_t size;            /* channels in the window */
    float alpha, beta, bias; /* y = x / (bias + alpha / size * sum of squares)^beta */
} es_lrn_params;

typedef struct { /* es_layernorm_f32: ONNX LayerNormalization over n of x[rows][n] */
    int32_t rows, n;
    float eps; /* y = (x - mean) / sqrt(var + eps) * scale[n] + bias[n] */
} es_layernorm_params;

typedef struct { /* es_gru_f32: ONNX GRU, layout 0, x[T][N][I] -> y[T][dirs][N][H] */
    int32_t T, N, I, H;          /* time steps, batch, inputs, hidden size */
    int32_t dirs;                /* 1, or 2: bidirectional (forward, then reverse) */
    int32_t reverse;             /* dirs 1: run t = T-1 .. 0 */
    int32_t linear_before_reset; /* ONNX attribute: 1 applies r after h . Rh^T + Rbh */
} es_gru_params;
/* input projection [T][N][3H], state, recurrent sums, r * h and candidate term */
#define ES_GRU_SCRATCH(T, N, H) (4u * (3u * (unsigned)(T) + 6u) * (unsigned)(N) * (unsigned)(H))

typedef struct { /* es_resize2d_f32: NC planes of H x W to OH x OW */
    int32_t NC, H, W, OH, OW;
    int32_t mode;    /* ES_RESIZE_NEAREST or ES_RESIZE_LINEAR */
    int32_t coord;   /* ES_COORD_*: how an output coordinate maps back to the input */
    int32_t nearest; /* ES_NEAREST_*: rounding of that coordinate in nearest mode */
    float sh, sw;    /* scale factors, output over input, rows and columns */
} es_resize_params;

typedef struct { /* es_copy_rows: rows rows of row_bytes bytes each (Concat, Split) */
    int32_t rows, row_bytes;
    int32_t dst_stride, src_stride; /* bytes from one row's start to the next's */
} es_copy_rows_params;

/* int8 kernels below: zero points are int8 values (-128..127); (mult, shift) is one
 * rescale, real = mult * 2^(shift - 31) (es_mul_q, es_rq_scale); qmin..qmax the int8
 * range the output is clamped to (narrower than -128..127 where a ReLU or Clip is fused);
 * rq is ES_RQ_FIXED or ES_RQ_FP32 (es_requant). */
typedef struct { /* es_fc_i8: y[M][N] = requant(bias[N] + (x[M][K] - x_zp) . w[N][K]^T) */
    int32_t M, N, K;
    int32_t x_zp, y_zp, qmin, qmax;
    int32_t rq; /* the per-output (mult, shift) tables are pointer arguments */
} es_fc_params;

typedef struct { /* es_requant_i8: y[i] = y_zp + (x[i] - x_zp) rescaled, clamped; i < n */
    int32_t n;
    int32_t x_zp, y_zp, mult, shift, qmin, qmax; /* always ES_RQ_FIXED arithmetic */
} es_requant_params;

typedef struct { /* es_global_avgpool_i8: C channels of HW int8 values -> C means */
    int32_t C, HW;
    int32_t x_zp, y_zp;
    int32_t mult, shift; /* x_scale / (y_scale * HW) */
    int32_t rq;
} es_gavgpool_params;

/* ---- float32 kernels ------------------------------------------------------------------- */
void es_conv2d_f32(const float *x, const float *w, const float *b, float *y,
                   const es_conv_params *p);
/* fast paths: kernels/conv_f32_fast.c, one-group 8x32 GEMM on packed weights;
 * kernels/dwconv_f32.c, depthwise (es_dwconv2d_f32, scratch below).
 * The GEMM reads a 1x1 stride-1 unpadded conv's input in place (ES_F32_GEMM_DIRECT: K row
 * offsets twice and a 32-pixel im2col tile for the last partial tile), every other conv
 * from the stride phases of each channel's padded plane (K row offsets over the phases and
 * over the input, which a stride-1 conv's chunks clear of the padding read in place; an
 * 8 x 32 output tile, C x SH x SW phases of HQ x WQ + WQ + 32 floats, one padded row of
 * WQ x SW). AVX-512 runs stems (at most 4 channels, stride 2) from their input rows and
 * leaves this scratch unused; the other ISAs use it. */
#define ES_F32_K16(K) (((unsigned)(K) + 15u) / 16u * 16u)
#define ES_F32_GEMM_DIRECT(C, H, W, OH, OW, KH, KW, SH, SW, PT, PL)                           \
    ((KH) == 1 && (KW) == 1 && (SH) == 1 && (SW) == 1 && (PT) == 0 && (PL) == 0 &&        \
     (OH) == (H) && (OW) == (W))
#define ES_F32_GEMM_SCRATCH(C, OH, OW, KH, KW, SH, SW, DH, DW, direct)                         \
    (4u * ((direct) ? 2u * ES_F32_K16(C) + 32u * (unsigned)(C)                                 \
                    : 2u * ES_F32_K16((C) * (KH) * (KW)) + 256u +                              \
                          (unsigned)(C) * (unsigned)((SH) * (SW)) *                            \
                              ((unsigned)ES_F32_DW_HQ(OH, KH, SH, DH) *                        \
                                   (unsigned)ES_F32_DW_HQ(OW, KW, SW, DW) +                    \
                               (unsigned)ES_F32_DW_HQ(OW, KW, SW, DW) + 32u) +                 \
                          (unsigned)ES_F32_DW_HQ(OW, KW, SW, DW) * (unsigned)(SW)))
/* es_dwconv2d_f32: the SH x SW stride phases of a channel's padded plane, each
 * ES_F32_DW_HQ(OH, KH, SH, DH) x ES_F32_DW_HQ(OW, KW, SW, DW) plus WQ + 32 floats of slack,
 * the OH x WQ output grid + 32, and one padded row of WQ * SW floats. Taps are summed in
 * groups of at most ES_F32_DW_MAXTAPS. */
#define ES_F32_DW_MAXTAPS 64
#define ES_F32_DW_HQ(O, K, S, D) ((((O) - 1) * (S) + ((K) - 1) * (D) + (S)) / (S))
/* planes of at most 64 outputs, or of at most 256 with 25+ taps (5 x 5 on 14 x 14), run
 * 16 channels in the lanes: the padded input of 16 channels as [Hp][Wp][16], one output
 * row [OW][16], the [KH KW][16] weights and 16 biases */
#define ES_F32_DW_LANES(OH, OW, KH, KW)                                                    \
    ((OH) * (OW) <= 64 || ((OH) * (OW) <= 256 && (KH) * (KW) >= 25))
#define ES_F32_DW_SCRATCH(OH, OW, KH, KW, SH, SW, DH, DW)                                  \
    (ES_F32_DW_LANES(OH, OW, KH, KW)                                                      \
         ? 64u * (((unsigned)((OH) - 1) * (unsigned)(SH) + (unsigned)((KH) - 1) * (unsigned)(DH) + 1u) * \
                      ((unsigned)((OW) - 1) * (unsigned)(SW) + (unsigned)((KW) - 1) * (unsigned)(DW) + 1u) + \
                  (unsigned)(OW) + (unsigned)((KH) * (KW)) + 1u)                              \
         : ES_F32_DW_PHASE_SCRATCH(OH, OW, KH, KW, SH, SW, DH, DW))
#define ES_F32_DW_PHASE_SCRATCH(OH, OW, KH, KW, SH, SW, DH, DW)                            \
    (4u * ((unsigned)((SH) * (SW)) *                                                      \
               ((unsigned)ES_F32_DW_HQ(OH, KH, SH, DH) * (unsigned)ES_F32_DW_HQ(OW, KW, SW, DW) + \
                (unsigned)ES_F32_DW_HQ(OW, KW, SW, DW) + 32u) +                           \
           (unsigned)(OH) * (unsigned)ES_F32_DW_HQ(OW, KW, SW, DW) + 32u +                \
           (unsigned)ES_F32_DW_HQ(OW, KW, SW, DW) * (unsigned)(SW)))
void es_conv2d_f32_gemm(const float *x, const float *w, const float *b, float *scratch,
                        float *y, const es_conv_params *p);
/* es_conv2d_f32_wino (3 x 3, stride 1, undilated, one group; Winograd F(2 x 2, 3 x 3)):
 * tiles of 2 x 2 outputs, TH x TW of them, worked ES_F32_WINO_RB tile rows (about 64 tiles)
 * at a time. Scratch: C row offsets, the block's transformed input (16 planes of C rows of
 * TP floats, at least 16 past the block's tiles, where the transforms' whole vectors spill;
 * the planes VS = C TP + 16 floats apart, not a multiple of 4 KB, which put the 16 rows one
 * channel writes into one L1 set), one 8-channel block's 16 GEMM outputs (16 x 8 rows of
 * TP), the column transforms of the block's 2 RB + 2 input rows (4 rows of TWP each) and
 * those rows padded (PROW each), two output rows and their four halves (2 TWP, 2 TWP,
 * 4 TWP). */
#define ES_F32_WINO_TH(OH) (((OH) + 1) / 2)
#define ES_F32_WINO_TW(OW) (((OW) + 1) / 2)
#define ES_F32_WINO_TWP(OW) ((ES_F32_WINO_TW(OW) + 15) / 16 * 16)
#define ES_F32_WINO_PROW(OW) (2 * ES_F32_WINO_TWP(OW) + 16)
#define ES_F32_WINO_RB(OH, OW)                                                                 \
    (64 / ES_F32_WINO_TW(OW) < 1 ? 1                                                           \
     : 64 / ES_F32_WINO_TW(OW) > ES_F32_WINO_TH(OH) ? ES_F32_WINO_TH(OH) : 64 / ES_F32_WINO_TW(OW))
#define ES_F32_WINO_TP(OH, OW) ((ES_F32_WINO_RB(OH, OW) * ES_F32_WINO_TW(OW) + 16 + 31) / 32 * 32)
#define ES_F32_WINO_VS(C, OH, OW) ((size_t)(C) * (size_t)ES_F32_WINO_TP(OH, OW) + 16u)
#define ES_F32_WINO_SCRATCH(C, OH, OW)                                                         \
    (4u * (ES_F32_K16(C) + 16u * ES_F32_WINO_VS(C, OH, OW) +                                   \
           128u * (unsigned)ES_F32_WINO_TP(OH, OW) +                                            \
           (unsigned)((2 * ES_F32_WINO_RB(OH, OW) + 2) * 4 + 8) * (unsigned)ES_F32_WINO_TWP(OW) + \
           (unsigned)(2 * ES_F32_WINO_RB(OH, OW) + 2) * (unsigned)ES_F32_WINO_PROW(OW)))
void es_conv2d_f32_wino(const float *x, const float *u, const float *b, float *scratch,
                        float *y, const es_conv_params *p);
void es_dwconv2d_f32(const float *x, const float *w, const float *b, float *scratch,
                     float *y, const es_conv_params *p);
void es_conv_transpose2d_f32(const float *x, const float *w, const float *b, float *y,
                             const es_conv_params *p);
void es_gemm_f32(const float *x, const float *w, const float *b, float *y,
                 const es_gemm_params *p);
void es_gemm_f32_ref(const float *x, const float *w, const float *b, float *y,
                     const es_gemm_params *p);
void es_matmul_f32(const float *a, const float *b, float *y, const es_matmul_params *p);
void es_unary_f32(const float *x, float *y, const es_unary_params *p);
void es_binary_f32(const float *a, const float *b, float *y, int op, const es_bcast *bc);
void es_channel_affine_f32(const float *x, const float *s, const float *b, float *y, int outer,
                           int C, int inner);
void es_maxpool2d_f32(const float *x, float *y, const es_pool_params *p);
void es_maxpool2d_f32_ref(const float *x, float *y, const es_pool_params *p);
void es_avgpool2d_f32(const float *x, float *y, const es_pool_params *p);
void es_reduce_f32(const float *x, float *y, const es_reduce_params *p);
void es_softmax_f32(const float *x, float *y, const es_softmax_params *p);
void es_lrn_f32(const float *x, float *y, const es_lrn_params *p);
void es_layernorm_f32(const float *x, const float *scale, const float *bias, float *y,
                      const es_layernorm_params *p);
void es_gru_f32(const float *x, const float *w, const float *r, const float *b,
                const float *h0, float *scratch, float *y, float *y_h, const es_gru_params *p);
void es_gru_f32_ref(const float *x, const float *w, const float *r, const float *b,
                    const float *h0, float *scratch, float *y, float *y_h,
                    const es_gru_params *p);
void es_pad_f32(const float *x, float *y, const es_pad_params *p);
void es_resize2d_f32(const float *x, float *y, const es_resize_params *p);

/* ---- type-agnostic data movement ------------------------------------------------------- */
void es_copy(void *dst, const void *src, size_t n);
void es_copy_rows(void *dst, const void *src, const es_copy_rows_params *p);
void es_transpose(const void *x, void *y, int elem, const es_perm *p);
void es_transpose_ref(const void *x, void *y, int elem, const es_perm *p);

/* ---- int8 kernels (TFLite scheme) ------------------------------------------------------ */
void es_quantize_f32_i8(const float *x, int8_t *y, int n, float scale, int zp);
void es_dequantize_i8_f32(const int8_t *x, float *y, int n, float scale, int zp);
/* acc: one int32 plane of OH x OW accumulators */
#define ES_I8_CONV_SCRATCH(OH, OW) (4u * (unsigned)(OH) * (unsigned)(OW))
void es_conv2d_i8(const int8_t *x, const int8_t *w, const int32_t *bias, const int32_t *mult,
                  const int32_t *shift, int32_t *acc, int8_t *y, const es_conv_params *p);
/* one group on a microcontroller (kernels/conv_int8_mcu.c): int8 weights [M][K4] in quad
 * order (w0, w2, w1, w3), widened at run time (SXTB16 + SMLAD with the DSP extension);
 * scratch: two int16 im2col columns of K4 = K rounded up to 4 taps, K = C*KH*KW */
#define ES_I8_MCU_SCRATCH(K) (4u * (((unsigned)(K) + 3u) & ~3u))
void es_conv2d_i8_mcu(const int8_t *x, const int8_t *w, const int32_t *bias,
                      const int32_t *mult, const int32_t *shift, int16_t *scratch, int8_t *y,
                      const es_conv_params *p);
/* depthwise on a microcontroller (kernels/dwconv_int8_mcu.c): int8 weights [C][KH][KW] as
 * ONNX has them, widened at run time (SMLAD on tap pairs with the DSP extension); scratch:
 * the channel's padded input plane as int16 */
#define ES_I8_DW_MCU_SCRATCH(OH, OW, KH, KW, SH, SW, DH, DW)                                \
    (2u * ((unsigned)((OH) - 1) * (unsigned)(SH) + (unsigned)((KH) - 1) * (unsigned)(DH) + 1u) * \
     ((unsigned)((OW) - 1) * (unsigned)(SW) + (unsigned)((KW) - 1) * (unsigned)(DW) + 1u))
#define ES_I8_DW_MCU_MAX_PAIRS 64 /* KH * (KW / 2) the DSP path widens on the stack */
void es_dwconv2d_i8_mcu(const int8_t *x, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int16_t *scratch, int8_t *y,
                        const es_conv_params *p);
/* fast paths (kernels/conv_int8_fast.c), bit-identical to es_conv2d_i8. es_conv2d_i8_fast
 * (any grouping): four int32 output planes, then the input widened to int16 */
#define ES_I8_FAST_SCRATCH(C, H, W, OH, OW)                                                 \
    (16u * (unsigned)(OH) * (unsigned)(OW) + 2u * (unsigned)(C) * (unsigned)(H) * (unsigned)(W) + \
     4u)
void es_conv2d_i8_fast(const int8_t *x, const int8_t *w, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                       const es_conv_params *p);
/* one-group conv as im2col + blocked GEMM; wp = int16 pairs of w.reshape(M, C*KH*KW) */
/* pairs per reduction block: all K2 when short, else 64 pairs (128 taps) with an int32
 * [M][16] partial-sum buffer, whichever scratch is smaller (same rule in lower/kernels.py) */
#define ES_I8_GEMM_KB2(K2, M) (((K2) > 64 && 64 + (M) < (K2)) ? 64 : (K2))
#define ES_I8_GEMM_SCRATCH(K, M)                                                          \
    (64u * (unsigned)ES_I8_GEMM_KB2(((K) + 1) / 2, (M)) +                                 \
     (ES_I8_GEMM_KB2(((K) + 1) / 2, (M)) < ((K) + 1) / 2 ? 64u * (unsigned)(M) : 0u))
void es_conv2d_i8_gemm(const int8_t *x, const int32_t *wp, const int32_t *bias,
                       const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                       const es_conv_params *p);
/* one group, u8 x s8 dot-product GEMM (AVX-512 VNNI; plain C elsewhere); w8:
 * [ceil(M/8)][KH][KW][C4][8][4] int8 (C4 = ceil(C/4)), bias_u8 = bias - (x_zp + 128) * row
 * sums of w.
 * es_i8_dot_plan is the walk the kernel takes and ES_I8_DOT_SCRATCH (es_i8_dot_scratch)
 * the scratch bytes it needs, both from the ES_DOT_* macros below, which are constant
 * expressions so that model.c can check its planned scratch at compile time;
 * lower/kernels.py dot_i8_scratch mirrors them. */
#define ES_DOT_MAXT 49 /* taps a direct walk keeps offsets for (7x7); more use im2col */
#define ES_DOT_CEIL(A, B) (((A) + (B) - 1) / (B))
/* padded input rows (or columns) the taps read */
#define ES_DOT_PADDED(O, S, K, D) (((O) - 1) * (S) + ((K) - 1) * (D) + 1)
/* phases per axis a direct walk would split into: the stride when both are 1 or 2 */
#define ES_DOT_PHASES(SH, SW) ((SH) == (SW) && (SH) <= 2 ? (SH) : 0)
#define ES_DOT_PHASES1(SH, SW) (ES_DOT_PHASES(SH, SW) ? ES_DOT_PHASES(SH, SW) : 1)
#define ES_DOT_DIRECT(OH, OW, KH, KW, SH, SW, DW)                                          \
    (ES_DOT_PHASES(SH, SW) > 0 && (KH) * (KW) <= ES_DOT_MAXT &&                            \
     4 * ES_DOT_CEIL(((OH) - 1) * ES_DOT_CEIL(ES_DOT_PADDED(OW, SW, KW, DW),                \
                                              ES_DOT_PHASES1(SH, SW)) + (OW), 16) <=        \
         5 * ES_DOT_CEIL((OH) * (OW), 16))
/* phases per axis of the walk taken: 1 unless direct */
#define ES_DOT_S(OH, OW, KH, KW, SH, SW, DW)                                               \
    (ES_DOT_DIRECT(OH, OW, KH, KW, SH, SW, DW) ? ES_DOT_PHASES1(SH, SW) : 1)
/* taps per im2col block: all, unless the fewest that fill 32 words plus the partials are
 * the smaller */
#define ES_DOT_TB(C4, T) (ES_DOT_CEIL(32, C4) < (T) ? ES_DOT_CEIL(32, C4) : (T))
#define ES_DOT_KT(C4, M, T, DIRECT)                                                         \
    (!(DIRECT) && ES_DOT_TB(C4, T) * (C4) + (M) < (T) * (C4) ? ES_DOT_TB(C4, T) : (T))
/* the im2col block and partial sums (im2col walk only), then the padded input as C4 quad
 * planes of S*S phases of Hq*Wq 32-bit words, then 64 bytes that a direct tile's unused
 * lanes may read (neither with XQ, x_quads: x is those planes), then (S == 2) one padded
 * row of Wp words to split into phases */
#define ES_I8_DOT_SCRATCH(C, M, OH, OW, KH, KW, SH, SW, DH, DW, XQ)                          \
    ES_I8_DOT_SCRATCH_(ES_DOT_CEIL(C, 4), M, (KH) * (KW), ES_DOT_PADDED(OH, SH, KH, DH),      \
                       ES_DOT_PADDED(OW, SW, KW, DW), ES_DOT_S(OH, OW, KH, KW, SH, SW, DW),   \
                       ES_DOT_DIRECT(OH, OW, KH, KW, SH, SW, DW), XQ)
#define ES_I8_DOT_SCRATCH_(C4, M, T, HP, WP, S, DIRECT, XQ)                                  \
    (((XQ) ? (size_t)0 : 4u * (size_t)(S) * (S) * ES_DOT_CEIL(HP, S) * ES_DOT_CEIL(WP, S) *  \
                             (C4) + 64u) +                                                  \
     ((S) > 1 ? 4u * (size_t)(WP) : 0u) +                                                   \
     (!(DIRECT) ? 64u * (size_t)ES_DOT_KT(C4, M, T, DIRECT) * (C4) : 0u) +                  \
     (ES_DOT_KT(C4, M, T, DIRECT) < (T) ? 64u * (size_t)(M) : 0u))
typedef struct {
    int Hp, Wp;  /* padded input rows and columns */
    int S;       /* phases per axis: a direct stride-2 walk splits every quad plane into its
                    2x2 (row parity, column parity) phases, so each tap reads one phase at
                    stride 1; 1 otherwise */
    int Hq, Wq;  /* rows and columns of one phase (Hp and Wp when S == 1) */
    int C4, T;   /* channel quads, taps */
    int direct;  /* stride 1 or 2, unless that wastes over a quarter more tiles than im2col:
                    tiles run over the flattened (phase) plane, taps read the input in place */
    int KT;      /* otherwise, taps per im2col block: all T, unless the fewest taps that fill
                    32 words plus int32 [M][16] partial sums need less scratch */
} es_dot_plan;

static inline es_dot_plan es_i8_dot_plan(const es_conv_params *p) {
    es_dot_plan d;
    d.Hp = ES_DOT_PADDED(p->OH, p->SH, p->KH, p->DH);
    d.Wp = ES_DOT_PADDED(p->OW, p->SW, p->KW, p->DW);
    d.C4 = ES_DOT_CEIL(p->C, 4);
    d.T = p->KH * p->KW;
    d.direct = ES_DOT_DIRECT(p->OH, p->OW, p->KH, p->KW, p->SH, p->SW, p->DW);
    d.S = ES_DOT_S(p->OH, p->OW, p->KH, p->KW, p->SH, p->SW, p->DW);
    d.Hq = ES_DOT_CEIL(d.Hp, d.S); /* im2col reads plain planes: S = 1 */
    d.Wq = ES_DOT_CEIL(d.Wp, d.S);
    d.KT = ES_DOT_KT(d.C4, p->M, d.T, d.direct);
    return d;
}

static inline size_t es_i8_dot_scratch(const es_conv_params *p) {
    return ES_I8_DOT_SCRATCH(p->C, p->M, p->OH, p->OW, p->KH, p->KW, p->SH, p->SW, p->DH,
                             p->DW, p->x_quads);
}
void es_conv2d_i8_dot(const int8_t *x, const int8_t *w8, const int32_t *bias_u8,
                      const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                      const es_conv_params *p);
/* es_conv2d_i8_dot with a residual add fused into its epilogue (lower/fuse_int8.py): y =
 * es_add_i8(conv(x), skip, q) over the whole output, q's input a the conv's requantised
 * output and b skip (same shape as y, not y's buffer); each chunk of output pixels is
 * added while still in cache, bytes equal to the conv step followed by the Add step;
 * add is es_add_i8 (a pointer, so that the conv kernels link without add_int8.c). */
typedef void (*es_add_i8_fn)(const int8_t *a, const int8_t *b, int8_t *y, int n,
                             const es_qadd_params *p);
void es_conv2d_i8_dot_add(const int8_t *x, const int8_t *w8, const int32_t *bias_u8,
                          const int32_t *mult, const int32_t *shift, int32_t *scratch,
                          int8_t *y, const int8_t *skip, const es_qadd_params *q,
                          es_add_i8_fn add, const es_conv_params *p);
/* one group, few input channels (C <= 3: a stem), the reduction over whole patches: w8
 * [ceil(M/8)][K4][8][4] int8, the C*KH*KW taps in (c, kh, kw) order four to a word, K4 =
 * ceil(C*KH*KW / 4), taps past the last zero; bias_u8 as for es_conv2d_i8_dot
 * (kernels/conv_int8_dot.c). Scratch: the im2col block of ES_STEM_ROWS output rows (about
 * 256 pixels), K4 rows of NP words (their pixels rounded up to a tile pair), then a window
 * of the padded input rows one block reads (ES_STEM_WINDOW per channel), split into SW
 * column phases of ceil(WP / SW) bytes, then one padded row of WP bytes, at least 64 (a
 * vector load from the window's last row may read on into it; lower/kernels.py
 * stem_i8_scratch mirrors it). */
#define ES_STEM_ROWS(OH, OW) ((OH) < 256 / (OW) ? (OH) : (256 / (OW) > 1 ? 256 / (OW) : 1))
#define ES_STEM_NP(OH, OW) (ES_DOT_CEIL(ES_STEM_ROWS(OH, OW) * (OW), 32) * 32)
#define ES_STEM_WINDOW(OH, OW, KH, SH, DH)                                                   \
    ((ES_STEM_ROWS(OH, OW) - 1) * (SH) + ((KH) - 1) * (DH) + 1)
#define ES_I8_STEM_SCRATCH(C, OH, OW, KH, KW, SH, SW, DH, DW)                                 \
    (4u * (size_t)ES_DOT_CEIL((C) * (KH) * (KW), 4) * (size_t)ES_STEM_NP(OH, OW) +           \
     (size_t)(C) * (size_t)ES_STEM_WINDOW(OH, OW, KH, SH, DH) * (size_t)(SW) *               \
         (size_t)ES_DOT_CEIL(ES_DOT_PADDED(OW, SW, KW, DW), SW) +                            \
     (ES_DOT_PADDED(OW, SW, KW, DW) > 64 ? (size_t)ES_DOT_PADDED(OW, SW, KW, DW) : 64u))
static inline size_t es_i8_stem_scratch(const es_conv_params *p) {
    return ES_I8_STEM_SCRATCH(p->C, p->OH, p->OW, p->KH, p->KW, p->SH, p->SW, p->DH, p->DW);
}
void es_conv2d_i8_stem(const int8_t *x, const int8_t *w8, const int32_t *bias_u8,
                       const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                       const es_conv_params *p);
/* one group, output channels in the vector lanes (kernels/conv_int8_cl.c), for small output
 * planes; wc: [ceil(M/16)][KH][KW][C4][16][4] int8, bias_u8 as for es_conv2d_i8_dot.
 * Scratch: the padded input as HWC uint8 quads, or for the row tiles of a stride-1 conv as
 * channel-quad planes (es_quads_i8.h), the same bytes (lower/kernels.py cl_i8_scratch
 * mirrors it). */
#define ES_I8_CL_SCRATCH(C, M, OH, OW, KH, KW, SH, SW, DH, DW)                               \
    (4u * (size_t)ES_DOT_PADDED(OH, SH, KH, DH) * (size_t)ES_DOT_PADDED(OW, SW, KW, DW) *       \
     (size_t)ES_DOT_CEIL(C, 4))
static inline size_t es_i8_cl_scratch(const es_conv_params *p) {
    return ES_I8_CL_SCRATCH(p->C, p->M, p->OH, p->OW, p->KH, p->KW, p->SH, p->SW, p->DH,
                            p->DW);
}
void es_conv2d_i8_cl(const int8_t *x, const int8_t *wc, const int32_t *bias_u8,
                     const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                     const es_conv_params *p);
/* depthwise in 16-channel HWC blocks (kernels/dwconv_int8_hwc.c); w: int8 [KH][KW][Cp], Cp =
 * C rounded up to 16, zero-padded. Scratch, independent of C (WP = (OW-1)*SW + (KW-1)*DW + 1):
 * a ring of KH + B - 1 rows of WP x 64 B (B input rows of W <= 24 bytes transposed at once:
 * 16 / gcd(W, 16) rows, whole 16-byte chunks, or 64 / W when that passes 64 bytes), a byte row
 * when DW > 1, OBC output columns x 16 B (RB output rows: 16 / gcd(OW, 16) of them fill whole
 * 16-column transposes, when that is at most 128 columns), the block's weights and row sums */
#define ES_I8_DW_HWC_G16(N) /* 16 / gcd(N, 16) */                                          \
    (((N) & 15) == 0 ? 1u : ((N) & 7) == 0 ? 2u : ((N) & 3) == 0 ? 4u : ((N) & 1) == 0 ? 8u : 16u)
#define ES_I8_DW_HWC_BATCH(KW, DH, DW, W)                                                  \
    ((DH) == 1 && ((DW) == 1 || (KW) == 1) && (W) <= 24                                   \
         ? (ES_I8_DW_HWC_G16(W) * (unsigned)(W) <= 64u ? ES_I8_DW_HWC_G16(W)              \
                                                      : 64u / (unsigned)(W))              \
         : 1u)
#define ES_I8_DW_HWC_RB(OW)                                                                \
    (ES_I8_DW_HWC_G16(OW) * (unsigned)(OW) <= 128u ? ES_I8_DW_HWC_G16(OW)                  \
     : (OW) >= 16 ? 1u : (15u + (unsigned)(OW)) / (unsigned)(OW))
#define ES_I8_DW_HWC_OBC(OW) ((ES_I8_DW_HWC_RB(OW) * (unsigned)(OW) + 15u) / 16u * 16u)
#define ES_I8_DW_HWC_SCRATCH(KH, KW, DH, DW, W, OW, WP)                                     \
    (64u * ((unsigned)(KH) + ES_I8_DW_HWC_BATCH(KW, DH, DW, W) - 1u) * (unsigned)(WP) +       \
     ((DW) > 1 ? 16u * (((unsigned)(WP) + 3u * (unsigned)(DW) + 15u) / 16u * 16u) : 0u) +     \
     16u * ES_I8_DW_HWC_OBC(OW) + 64u * (unsigned)(KH) * (((unsigned)(KW) + 1u) / 2u + 1u) +  \
     4u * (3u * (unsigned)(KH) + ES_I8_DW_HWC_BATCH(KW, DH, DW, W) - 1u))
void es_dwconv2d_i8_hwc(const int8_t *x, const int8_t *w, const int32_t *bias,
                        const int32_t *mult, const int32_t *shift, int32_t *scratch, int8_t *y,
                        const es_conv_params *p);
/* four outputs per pass over the input row (AVX2 / NEON); es_fc_i8_ref, the plain loop, is
 * its oracle (kernels/fc_int8.c) */
void es_fc_i8(const int8_t *x, const int8_t *w, const int32_t *bias, const int32_t *mult,
              const int32_t *shift, int8_t *y, const es_fc_params *p);
void es_fc_i8_ref(const int8_t *x, const int8_t *w, const int32_t *bias, const int32_t *mult,
                  const int32_t *shift, int8_t *y, const es_fc_params *p);
void es_add_i8(const int8_t *a, const int8_t *b, int8_t *y, int n, const es_qadd_params *p);
/* the plain per-element loop es_add_i8's SIMD paths are tested against */
void es_add_i8_ref(const int8_t *a, const int8_t *b, int8_t *y, int n,
                   const es_qadd_params *p);
/* Add / Sub with NumPy broadcasting through p->bc (lower.common.bcast_params: adjacent
 * dims that broadcast alike merged, so the innermost stride of each side is 1 or 0). The
 * broadcast operand is never materialised: each innermost run is es_add_i8's contiguous
 * loop or one input against a single repeated element of the other. y may be a full-shape
 * input. es_add_i8_bcast_ref is the per-element oracle over the same stride table. */
void es_add_i8_bcast(const int8_t *a, const int8_t *b, int8_t *y,
                     const es_qadd_bcast_params *p);
void es_add_i8_bcast_ref(const int8_t *a, const int8_t *b, int8_t *y,
                         const es_qadd_bcast_params *p);
/* Mul: y = (a - a_zp) * (b - b_zp) rescaled by s_a * s_b / s_y, + y_zp, clamped; same
 * broadcasting and runs as es_add_i8_bcast; es_mul_i8_ref is its per-element oracle. */
void es_mul_i8(const int8_t *a, const int8_t *b, int8_t *y, const es_qmul_params *p);
void es_mul_i8_ref(const int8_t *a, const int8_t *b, int8_t *y, const es_qmul_params *p);
void es_requant_i8(const int8_t *x, int8_t *y, const es_requant_params *p);
/* max pooling with the window clipped once per output row and border column, no bounds
 * check per tap; es_maxpool2d_i8_ref (a check per tap) is its oracle */
void es_maxpool2d_i8(const int8_t *x, int8_t *y, const es_pool_params *p);
void es_maxpool2d_i8_ref(const int8_t *x, int8_t *y, const es_pool_params *p);
void es_avgpool2d_i8(const int8_t *x, int8_t *y, const es_pool_params *p);
void es_global_avgpool_i8(const int8_t *x, int8_t *y, const es_gavgpool_params *p);
/* y[i] = table[(uint8_t)x[i]], i < n (kernels/lut_int8.c): a quantized element-wise function
 * (HardSwish, Sigmoid, Tanh, GELU, ...) tabulated at generation time for its int8 codes;
 * es_lut_i8_ref is the plain loop its vector paths are tested against */
void es_lut_i8(const int8_t *x, int8_t *y, const int8_t *table, int n);
void es_lut_i8_ref(const int8_t *x, int8_t *y, const int8_t *table, int n);

/* ---- fixed-point requantisation --------------------------------------------------------- */
/* x * real_multiplier, the multiplier given as (mult in Q31, shift): real = mult * 2^(shift-31).
 * One rounding, TFLite's TFLITE_SINGLE_ROUNDING form of MultiplyByQuantizedMultiplier: the
 * 64-bit product is rounded once (half up) by the whole right shift. gemmlowp's older form
 * rounds twice (a doubling high multiply, then a rounding shift) and lands 1 LSB off the
 * exactly rounded value on ~0.1-0.5% of outputs; across 28 layers of MobileNetV2 that drift
 * left only 21% of outputs within 1 LSB of onnxruntime, whose integer kernels round once.
 * Needs mult >= 0 and shift in [-31, 30] (lower.requant.quantize_multiplier guarantees both). */
static inline int32_t es_mul_q(int32_t x, int32_t mult, int32_t shift) {
    const int total = 31 - shift;
    int64_t v = (int64_t)x * (int64_t)mult + ((int64_t)1 << (total - 1));
    v >>= total; /* arithmetic on every compiler this runtime targets (C99 leaves it open) */
    if (v > INT32_MAX) return INT32_MAX;
    if (v < INT32_MIN) return INT32_MIN;
    return (int32_t)v;
}

static inline int8_t es_sat8(int32_t v, int32_t lo, int32_t hi) {
    return (int8_t)(v < lo ? lo : (v > hi ? hi : v));
}

/* ---- fp32 requantisation ------------------------------------------------------------------ */
/* Two ways to turn an int32 sum into int8, chosen per kernel call:
 *   ES_RQ_FIXED  integer only, es_mul_q above (TFLite's reference kernels); for cores
 *                without an FPU.
 *   ES_RQ_FP32   one float32 multiply by the scale x_scale * w_scale / y_scale (computed in
 *                float32, in that order), rounded half to even: the arithmetic of XNNPACK's
 *                int8 kernels and of onnxruntime's QLinearConv, so outputs match those
 *                runtimes exactly where the fixed-point form lands a tie 1 LSB away. It is
 *                also cheaper on wide SIMD: a float multiply where the fixed-point form
 *                needs two 64-bit integer multiplies per vector, which share a port with
 *                the dot-product instructions of the convolutions.
 * Both read the same (mult, shift) tables: real = mult * 2^(shift - 31). For ES_RQ_FP32 the
 * generator keeps only a float32's 24-bit significand in mult (the low 7 bits zero), so the
 * pair is that float exactly and es_rq_scale rebuilds its bits. */
#define ES_RQ_FIXED 0
#define ES_RQ_FP32 1

/* the float32 mult * 2^(shift - 31), for mult = significand * 2^31 with the significand in
 * [1/2, 1) and 24 bits, and shift + 126 in [1, 254] (lower.requant.fp32_multiplier) */
static inline float es_rq_scale(int32_t mult, int32_t shift) {
    const uint32_t bits = ((uint32_t)(shift + 126) << 23) | (((uint32_t)mult >> 7) & 0x7fffffu);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* v rounded half to even, for |v| < 2^22: adding 1.5 * 2^23 leaves no fraction bits, so
 * the float adder rounds in the default mode (nearest, ties to even), as cvtps2dq does.
 * The sum is stored to a float first: where float arithmetic runs wider (x87), C99 rounds
 * on assignment. Not under -ffast-math, which may fold the two operations away. */
static inline int32_t es_round_even(float v) {
    const float magic = 12582912.0f;
    const float t = v + magic;
    return (int32_t)(t - magic);
}

/* one int32 sum as int8: y_zp + the sum rescaled by (mult, shift), clamped to [qmin, qmax].
 * In fp32 the clamp comes before the rounding, in float, as in XNNPACK and onnxruntime:
 * bounds are integers, so that is the same as clamping after, and it keeps the value in
 * es_round_even's range. */
static inline int8_t es_requant(int32_t acc, int32_t mult, int32_t shift, int32_t rq,
                                int32_t y_zp, int32_t qmin, int32_t qmax) {
    if (rq == ES_RQ_FP32) {
        const float lo = (float)(qmin - y_zp), hi = (float)(qmax - y_zp);
        float v = (float)acc * es_rq_scale(mult, shift);
        v = v < lo ? lo : (v > hi ? hi : v);
        return (int8_t)(es_round_even(v) + y_zp);
    }
    return es_sat8(es_mul_q(acc, mult, shift) + y_zp, qmin, qmax);
}

#ifdef __cplusplus
}
#endif
#endif /* EDGESMITH_RT_H */
