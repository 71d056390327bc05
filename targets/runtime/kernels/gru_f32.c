/* GRU (ONNX, opset 14, layout 0), float32: per direction d and time step t, with the
 * gates in ONNX's z-r-h order (W[d] is [3H][I], R[d] is [3H][H], B[d] is Wb[3H] then Rb[3H]):
 *
 *     z  = sigmoid(x_t . Wz^T + h . Rz^T + Wbz + Rbz)
 *     r  = sigmoid(x_t . Wr^T + h . Rr^T + Wbr + Rbr)
 *     h~ = tanh(x_t . Wh^T + (r * h) . Rh^T + Rbh + Wbh)        linear_before_reset = 0
 *     h~ = tanh(x_t . Wh^T + r * (h . Rh^T + Rbh) + Wbh)        linear_before_reset = 1
 *     h  = (1 - z) * h~ + z * h
 *
 * x is [T][N][I], h0 [D][N][H] (NULL: zeros), y [T][D][N][H] and y_h [D][N][H] (either may
 * be NULL when the model does not read it). The input projection x . W^T + Wb does not
 * depend on h, so it is computed for all T steps first as one GEMM (T*N rows), leaving
 * only the recurrent h . R^T inside the loop over time. The scratch (ES_GRU_SCRATCH) holds
 * that projection, the state and the recurrent projections; nothing is allocated.
 *
 * es_gru_f32_ref is the oracle: the same equations as plain loops, one dot product per
 * gate value. es_gru_f32 does both projections with es_gemm_f32 (gemm_f32.c: four
 * outputs per pass, in vectors), so the two agree to float rounding. */
#include "../es_fp_exact.h" /* first: contraction off in every function below */
#include <math.h>
#include <string.h>

#include "../edgesmith_rt.h"

static float sigmoid1(float v) { return 1.0f / (1.0f + expf(-v)); }

/* the plain dot product of the reference */
static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    int i;
    for (i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

/* the time step of output row t in processing order k (reverse runs T-1 .. 0) */
static int step_of(int k, int T, int reverse) { return reverse ? T - 1 - k : k; }

/* h0 of direction d into the state h[N][H] */
static void init_state(float *h, const float *h0, int d, int NH) {
    if (h0) memcpy(h, h0 + (size_t)d * NH, (size_t)NH * sizeof(float));
    else memset(h, 0, (size_t)NH * sizeof(float));
}

/* the new state from the gate pre-activations: xz/xr/xh the input projection (bias Wb
 * included), gz/gr the recurrent z and r sums (bias Rb included), hh the candidate's
 * recurrent term (linear_before_reset = 1: h . Rh^T + Rbh, still to be scaled by r;
 * = 0: (r * h) . Rh^T + Rbh, already computed from r) */
static void update(float *h, const float *xp, const float *gz, const float *gr,
                   const float *hh, int H, int lbr) {
    int j;
    for (j = 0; j < H; ++j) {
        const float z = sigmoid1(xp[j] + gz[j]);
        const float r = sigmoid1(xp[H + j] + gr[j]);
        const float c = tanhf(xp[2 * H + j] + (lbr ? r * hh[j] : hh[j]));
        h[j] = (1.0f - z) * c + z * h[j];
    }
}

static void write_outputs(float *y, float *y_h, const float *h, int t, int d, int D, int NH,
                          int last) {
    if (y) memcpy(y + ((size_t)t * D + d) * NH, h, (size_t)NH * sizeof(float));
    if (y_h && last) memcpy(y_h + (size_t)d * NH, h, (size_t)NH * sizeof(float));
}

void es_gru_f32_ref(const float *x, const float *w, const float *r, const float *b,
                    const float *h0, float *scratch, float *y, float *y_h,
                    const es_gru_params *p) {
    const int T = p->T, N = p->N, I = p->I, H = p->H, D = p->dirs, NH = N * H;
    float *h = scratch, *g = h + NH, *rh = g + 3 * H, *xp = rh + H;
    int d, k, n, j;
    for (d = 0; d < D; ++d) {
        const float *wd = w + (size_t)d * 3 * H * I, *rd = r + (size_t)d * 3 * H * H;
        const float *wb = b + (size_t)d * 6 * H, *rb = wb + 3 * H;
        const int reverse = D == 2 ? d == 1 : p->reverse;
        init_state(h, h0, d, NH);
        for (k = 0; k < T; ++k) {
            const int t = step_of(k, T, reverse);
            for (n = 0; n < N; ++n) {
                const float *xt = x + ((size_t)t * N + n) * I;
                float *hn = h + (size_t)n * H;
                for (j = 0; j < 3 * H; ++j) xp[j] = dot(xt, wd + (size_t)j * I, I) + wb[j];
                for (j = 0; j < 2 * H; ++j) g[j] = dot(hn, rd + (size_t)j * H, H) + rb[j];
                for (j = 0; j < H; ++j) {
                    const float rj = sigmoid1(xp[H + j] + g[H + j]);
                    rh[j] = p->linear_before_reset ? hn[j] : rj * hn[j];
                }
                for (j = 0; j < H; ++j)
                    g[2 * H + j] = dot(rh, rd + (size_t)(2 * H + j) * H, H) + rb[2 * H + j];
                update(hn, xp, g, g + H, g + 2 * H, H, p->linear_before_reset);
            }
            write_outputs(y, y_h, h, t, d, D, NH, k == T - 1);
        }
    }
}

void es_gru_f32(const float *x, const float *w, const float *r, const float *b,
                const float *h0, float *scratch, float *y, float *y_h, const es_gru_params *p) {
    const int T = p->T, N = p->N, I = p->I, H = p->H, D = p->dirs, NH = N * H;
    const int lbr = p->linear_before_reset;
    /* scratch: state h[N][H], recurrent sums g[N][3H], r * h [N][H], candidate term
     * hh[N][H], input projection xp[T][N][3H] */
    float *h = scratch, *g = h + NH, *rh = g + 3 * NH, *hh = rh + NH, *xp = hh + NH;
    es_gemm_params in = {0}, rec = {0}, cand = {0};
    int d, k, n, j;
    in.M = T * N, in.N = 3 * H, in.K = I;
    rec.M = N, rec.N = lbr ? 3 * H : 2 * H, rec.K = H;
    cand.M = N, cand.N = H, cand.K = H;
    for (d = 0; d < D; ++d) {
        const float *wd = w + (size_t)d * 3 * H * I, *rd = r + (size_t)d * 3 * H * H;
        const float *wb = b + (size_t)d * 6 * H, *rb = wb + 3 * H;
        const int reverse = D == 2 ? d == 1 : p->reverse;
        es_gemm_f32(x, wd, wb, xp, &in); /* every step's x . W^T + Wb at once */
        init_state(h, h0, d, NH);
        for (k = 0; k < T; ++k) {
            const int t = step_of(k, T, reverse);
            const int gs = rec.N; /* columns of g per batch row */
            es_gemm_f32(h, rd, rb, g, &rec);
            if (!lbr) { /* the candidate reads r * h: r first, then (r * h) . Rh^T */
                for (n = 0; n < N; ++n)
                    for (j = 0; j < H; ++j) {
                        const size_t o = (size_t)n * H + j;
                        const float rj = sigmoid1(xp[((size_t)t * N + n) * 3 * H + H + j] +
                                                  g[(size_t)n * gs + H + j]);
                        rh[o] = rj * h[o];
                    }
                es_gemm_f32(rh, rd + (size_t)2 * H * H, rb + 2 * H, hh, &cand);
            }
            for (n = 0; n < N; ++n) {
                const float *gn = g + (size_t)n * gs;
                update(h + (size_t)n * H, xp + ((size_t)t * N + n) * 3 * H, gn, gn + H,
                       lbr ? gn + 2 * H : hh + (size_t)n * H, H, lbr);
            }
            write_outputs(y, y_h, h, t, d, D, NH, k == T - 1);
        }
    }
}
