/* y (M, N) = x (M, K) @ W^T + b for the few rows of a decode step (rlvr.rollout.skinny).

   W (N, K) is packed once into panels of VW output columns: panel p holds W[p*VW : (p+1)*VW, :]
   as K rows of VW floats (the last panel zero-padded), so a product streams each panel once,
   front to back. Rows are taken MB at a time: MB accumulators of VW columns stay in registers
   over all of K, each weight vector loaded once per MB rows. Each output is one chain of fused
   multiply-adds over k in order, then + b: the same numbers whatever the vector width, so the
   AVX2 and AVX-512 builds agree bit for bit. Panels are shared out among the threads (OpenMP,
   the runtime torch loaded). */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define VW 16
#define MB 16
#else
#define VW 8
#define MB 12
#endif
#ifndef PREFETCH_AHEAD
/* k rows ahead (4 kB at AVX-512) into L2: a SmolLM2 step's products at 16 rows took 26 ms, 39 without */
#define PREFETCH_AHEAD 64
#endif

typedef float vec __attribute__((vector_size(VW * 4), aligned(4)));

int rlvr_skinny_panel_width(void) { return VW; }

void rlvr_skinny_pack(const float *w, int n, int k, float *out, int threads) {
    int panels = (n + VW - 1) / VW;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int p = 0; p < panels; p++)
        for (int kk = 0; kk < k; kk++)
            for (int j = 0; j < VW; j++) {
                int row = p * VW + j;
                out[((size_t)p * k + kk) * VW + j] = row < n ? w[(size_t)row * k + kk] : 0.f;
            }
}

/* 16-float vectors whatever the ISA (two registers at AVX2): fixed-order sums, the same numbers everywhere. */
typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef int i16 __attribute__((vector_size(64)));

static inline __attribute__((always_inline)) float hsum(v16 a) {
    v8 b = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7)
         + __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
    v4 c = __builtin_shufflevector(b, b, 0, 1, 2, 3) + __builtin_shufflevector(b, b, 4, 5, 6, 7);
    return (c[0] + c[2]) + (c[1] + c[3]);
}

/* exp(x), Cephes' expf: 2^n times a degree-6 polynomial of the remainder (~1 ulp); below -87.3 it
   gives 0 (-inf included), above 88 it gives exp(88). */
static inline __attribute__((always_inline)) v16 vexp(v16 x) {
    const v16 zero = {0}, magic = zero + 12582912.f; /* 1.5 * 2^23: adding, then subtracting rounds to an integer */
    i16 under = x < -87.3f, over = x > 88.f;
    x = (v16)(((i16)x & ~(under | over)) | ((i16)(zero - 87.3f) & under) | ((i16)(zero + 88.f) & over));
    v16 n = (x * 1.44269504f + magic) - magic;
    v16 r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v16 p = zero + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.f;
    i16 scale = (__builtin_convertvector(n, i16) + 127) << 23;
    return (v16)((i16)(p * (v16)scale) & ~under);
}

/* The op before a product: RMSNorm of a row (x * 1/sqrt(mean(x^2) + eps) * w, as LlamaRMSNorm) or
   the gated unit silu(gate) * up, 16 floats at a time (k a multiple of 16), sums in a fixed order. */
static void rms_norm_row(const float *x, const float *w, float eps, int k, float *out) {
    v16 sq = {0};
    for (int i = 0; i < k; i += 16) { v16 v = *(const v16 *)(x + i); sq += v * v; }
    float scale = 1.f / sqrtf(hsum(sq) / k + eps);
    for (int i = 0; i < k; i += 16) *(v16 *)(out + i) = *(const v16 *)(w + i) * (*(const v16 *)(x + i) * scale);
}

static void glu_row(const float *gate, const float *up, int k, float *out) {
    for (int i = 0; i < k; i += 16) {
        v16 g = *(const v16 *)(gate + i);
        *(v16 *)(out + i) = g / (1.f + vexp(-g)) * *(const v16 *)(up + i);
    }
}

/* fx (m, k) = the op before a product of x: RMSNorm (norm_w) or the gated unit (glu: x is (m, 2k)). */
int rlvr_layer_op(const float *x, int m, int k, const float *norm_w, float eps, int glu, float *fx, int threads) {
    if (k % 16 || !(norm_w || glu)) return -1;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < m; r++) {
        if (norm_w) rms_norm_row(x + (size_t)r * k, norm_w, eps, k, fx + (size_t)r * k);
        else glu_row(x + (size_t)r * 2 * k, x + (size_t)r * 2 * k + k, k, fx + (size_t)r * k);
    }
    return 0;
}

#define BLOCK(R)                                                                                   \
static void block_##R(const float *x, int k, const float *panel, float *y, int ldy, int cols,     \
                      const float *bias, const float *res) {                                      \
    vec acc[R];                                                                                    \
    for (int r = 0; r < R; r++) acc[r] = (vec){0};                                                 \
    for (int kk = 0; kk < k; kk++) {                                                               \
        __builtin_prefetch(panel + (size_t)(kk + PREFETCH_AHEAD) * VW, 0, 1);                      \
        vec w = *(const vec *)(panel + (size_t)kk * VW);                                           \
        for (int r = 0; r < R; r++) acc[r] += x[(size_t)r * k + kk] * w;                           \
    }                                                                                              \
    for (int r = 0; r < R; r++) {                                                                  \
        float out[VW];                                                                             \
        memcpy(out, &acc[r], sizeof out);                                                          \
        for (int j = 0; j < cols; j++) {                                                           \
            float v = bias ? out[j] + bias[j] : out[j];                                            \
            y[(size_t)r * ldy + j] = res ? res[(size_t)r * ldy + j] + v : v;                       \
        }                                                                                          \
    }                                                                                              \
}
BLOCK(1) BLOCK(2) BLOCK(3) BLOCK(4) BLOCK(5) BLOCK(6) BLOCK(7) BLOCK(8) BLOCK(9) BLOCK(10) BLOCK(11) BLOCK(12)
#if MB == 16
BLOCK(13) BLOCK(14) BLOCK(15) BLOCK(16)
#endif

typedef void (*block_fn)(const float *, int, const float *, float *, int, int, const float *, const float *);
static const block_fn blocks[MB + 1] = {
    0, block_1, block_2, block_3, block_4, block_5, block_6, block_7, block_8, block_9, block_10, block_11, block_12,
#if MB == 16
    block_13, block_14, block_15, block_16,
#endif
};

/* y (m, n) = f(x) @ W^T (+ bias) (+ res), the ops a Llama layer puts around its products, one pass each:
   f = RMSNorm where norm_w is given (x * 1/sqrt(mean(x^2) + eps) * norm_w, as LlamaRMSNorm), the gated
   unit where glu (x (m, 2k): silu(x[:, :k]) * x[:, k:]), else x; res (m, n) is added last and may be y
   itself (the residual stream updated in place). Returns -1 where memory for f(x) cannot be had or
   k is not a multiple of 16 with f. */
int rlvr_skinny_linear(const float *x, int m, int k, const float *packed, int n, const float *bias,
                       const float *norm_w, float eps, int glu, const float *res, float *y, int threads) {
    float *fx = 0;
    if (norm_w || glu) {
        fx = malloc((size_t)m * k * sizeof(float));
        if (!fx || rlvr_layer_op(x, m, k, norm_w, eps, glu, fx, threads)) { free(fx); return -1; }
        x = fx;
    }
    int panels = (n + VW - 1) / VW;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int p = 0; p < panels; p++) {
        const float *panel = packed + (size_t)p * k * VW;
        int cols = n - p * VW < VW ? n - p * VW : VW;
        for (int r0 = 0; r0 < m; r0 += MB) {
            int rows = m - r0 < MB ? m - r0 : MB;
            size_t at = (size_t)r0 * n + p * VW;
            blocks[rows](x + (size_t)r0 * k, k, panel, y + at, n, cols, bias ? bias + p * VW : 0, res ? res + at : 0);
        }
    }
    free(fx);
    return 0;
}

/* One decode step's attention for every decoding row (rlvr.rollout.stepper.LlamaStepper): each row's
   g = Hq / Hkv query heads per KV head over its prompt's keys (kept once per prompt, padding masked
   by an additive 0 / -inf mask) and its own generated ones, one softmax over both. The row's new key
   and value are written into its cache slot t first. Units of work: (row, KV head). Dot products
   over D in 16-float pieces summed in a fixed order, and the exponential below: the same numbers at
   AVX2 and AVX-512. D is a multiple of 16. */
#define MAX_G 16
#define MAX_D 256

/* The largest of x[0:n], n a multiple of 16. */
static inline __attribute__((always_inline)) float vmax(const float *x, int n) {
    v16 most = *(const v16 *)x;
    for (int j = 16; j < n; j += 16) {
        v16 v = *(const v16 *)(x + j);
        i16 more = v > most;
        most = (v16)(((i16)v & more) | ((i16)most & ~more));
    }
    float top = most[0];
    for (int j = 1; j < 16; j++) top = most[j] > top ? most[j] : top;
    return top;
}

static inline void rotate(const float *x, const float *c, const float *s, int d, float *out) {
    int half = d / 2;
    for (int i = 0; i < half; i++) out[i] = x[i] * c[i] - x[i + half] * s[i];
    for (int i = half; i < d; i++) out[i] = x[i] * c[i] + x[i - half] * s[i];
}
/* What a thread reads next (up to 6 runs of memory), asked for a few cache lines at a time (prefetches
   into L2) while it computes on what it read before: the next (row, head)'s keys and values stream in
   during this one's arithmetic instead of after it. A 128-row SmolLM2 step's attention over 64
   generated tokens took 23 ms instead of 29 with the old scheme (each unit's own keys 16 ahead, in
   bursts, while its arithmetic waited; bench/bench_rollout_steps.py, 2-core Xeon). */
typedef struct { const char *at[6]; long lines[6]; int seg, segs; long line; } ahead;

static inline void ahead_add(ahead *a, const float *p, long floats) {
    if (floats > 0 && a->segs < 6) { a->at[a->segs] = (const char *)p; a->lines[a->segs++] = (floats * 4 + 63) / 64; }
}

static inline __attribute__((always_inline)) void ahead_ask(ahead *a, int n) {
    for (; n > 0 && a->seg < a->segs; n--) {
        __builtin_prefetch(a->at[a->seg] + a->line * 64, 0, 2);
        if (++a->line == a->lines[a->seg]) { a->line = 0; a->seg++; }
    }
}

#ifndef ASK_SCORE
#define ASK_SCORE 2 /* lines asked for per key scored (per value weighted, for each query: one) */
#endif

/* Scores s[i][j] = q_i . key_j * scale + mask_j of `count` keys (mask NULL: 0), each key read once for
   the g queries. */
static inline __attribute__((always_inline)) void scores(const float *q, const float *keys, int count,
        const float *mask, int g, const int d, float scale, float *s, int width, ahead *a) {
    for (int j = 0; j < count; j++) {
        const float *key = keys + (size_t)j * d;
        float add = mask ? mask[j] : 0.f;
        ahead_ask(a, ASK_SCORE);
        for (int i = 0; i < g; i++) {
            v16 acc = *(const v16 *)(q + i * d) * *(const v16 *)key;
            for (int c = 16; c < d; c += 16) acc += *(const v16 *)(q + i * d + c) * *(const v16 *)(key + c);
            s[i * width + j] = hsum(acc) * scale + add;
        }
    }
}

/* acc += sum_j w[j] * values[j] over `count` values, even and odd positions in two chains of fused
   multiply-adds (one chain waits on its own latency), added at the end. */
static inline __attribute__((always_inline)) void weighted(const float *w, const float *values, int count,
        const int d, v16 *acc, ahead *a) {
    v16 even[MAX_D / 16], odd[MAX_D / 16];
    for (int c = 0; c < d / 16; c++) even[c] = odd[c] = (v16){0};
    int j = 0;
    for (; j + 1 < count; j += 2) {
        ahead_ask(a, 2); /* a line per value */
        for (int c = 0; c < d / 16; c++) {
            even[c] += w[j] * *(const v16 *)(values + (size_t)j * d + c * 16);
            odd[c] += w[j + 1] * *(const v16 *)(values + (size_t)(j + 1) * d + c * 16);
        }
    }
    if (j < count)
        for (int c = 0; c < d / 16; c++) even[c] += w[j] * *(const v16 *)(values + (size_t)j * d + c * 16);
    for (int c = 0; c < d / 16; c++) acc[c] += even[c] + odd[c];
}

static inline __attribute__((always_inline)) void attend_unit(
        const float *q, const float *kp, const float *vp, const float *mask, int plen, const float *ko,
        const float *vo, int own, int g, const int d, float scale, float *s, int width, float *out, ahead *a) {
    int n = plen + own;
    scores(q, kp, plen, mask, g, d, scale, s, width, a);
    scores(q, ko, own, 0, g, d, scale, s + plen, width, a);
    for (int i = 0; i < g; i++) {
        float *si = s + i * width;
        for (int j = n; j < width; j++) si[j] = -__builtin_inff();
        float top = vmax(si, width);
        v16 sum = {0};
        for (int j = 0; j < width; j += 16) {
            v16 e = vexp(*(v16 *)(si + j) - top);
            *(v16 *)(si + j) = e;
            sum += e;
        }
        float total = hsum(sum);
        v16 acc[MAX_D / 16];
        for (int c = 0; c < d / 16; c++) acc[c] = (v16){0};
        weighted(si, vp, plen, d, acc, a);
        weighted(si + plen, vo, own, d, acc, a);
        for (int c = 0; c < d / 16; c++) *(v16 *)(out + i * d + c * 16) = acc[c] / total;
    }
}

/* q, knew, vnew: each row's queries (Hq, D), new keys and values (Hkv, D), at row strides q_row,
   k_row, v_row, queries and keys before the rotary embedding: rotated here by the row's cos, sin
   (rows, D), in the rotate-half form (x * cos + [-x2, x1] * sin); kc, vc: the generated-token
   caches (cache rows, Hkv, max_new, D), row r's at cache row cache_of[r], written at slot t; pk, pv: the prompts' keys and values
   (B, Hkv, plen, D), pmask (B, plen), row r's prompt prompt_of[r]; out (rows, Hq, D); scratch:
   threads x g x width floats, width = plen + t + 1 rounded up to 16. Each thread takes a run of
   (row, head) units and, while computing one, asks for the next one's keys and values. */
int rlvr_decode_attention(const float *q, long q_row, const float *knew, long k_row, const float *vnew, long v_row,
                          const float *cos, const float *sin, int rows, int hq, int hkv,
                          int d, float scale, float *kc, float *vc, long cache_row, int max_new, int t,
                          const long *cache_of, const float *pk, const float *pv, int plen, const float *pmask,
                          const long *prompt_of, float *out, float *scratch, int threads) {
    int g = hq / hkv, width = (plen + t + 1 + 15) / 16 * 16, units = rows * hkv;
    if (d % 16 || d > MAX_D || hq % hkv || g > MAX_G || t >= max_new) return -1;
    if (threads > units) threads = units > 0 ? units : 1;
    #pragma omp parallel num_threads(threads)
    {
        int me = omp_get_thread_num(), team = omp_get_num_threads();
        int first = (int)((long)units * me / team), last = (int)((long)units * (me + 1) / team);
        float *s = scratch + (size_t)me * g * width;
        for (int unit = first; unit < last; unit++) {
            int r = unit / hkv, h = unit % hkv;
            const float *qr = q + r * q_row + (size_t)h * g * d;
            float *ko = kc + cache_of[r] * cache_row + (size_t)h * max_new * d;
            float *vo = vc + cache_of[r] * cache_row + (size_t)h * max_new * d;
            const float *kp = pk + ((size_t)prompt_of[r] * hkv + h) * plen * d;
            const float *vp = pv + ((size_t)prompt_of[r] * hkv + h) * plen * d;
            ahead a = {.segs = 0};
            if (unit == first) { /* nothing asked for ahead of the first */
                ahead_add(&a, ko, (long)t * d), ahead_add(&a, vo, (long)t * d);
            }
            if (unit + 1 < last) { /* the next unit's own keys and values; its prompt's, where a new prompt */
                int r2 = (unit + 1) / hkv, h2 = (unit + 1) % hkv;
                ahead_add(&a, kc + cache_of[r2] * cache_row + (size_t)h2 * max_new * d, (long)t * d);
                ahead_add(&a, vc + cache_of[r2] * cache_row + (size_t)h2 * max_new * d, (long)t * d);
                if (r2 == first / hkv || prompt_of[r2] != prompt_of[r2 - 1]) {
                    ahead_add(&a, pk + ((size_t)prompt_of[r2] * hkv + h2) * plen * d, (long)plen * d);
                    ahead_add(&a, pv + ((size_t)prompt_of[r2] * hkv + h2) * plen * d, (long)plen * d);
                }
            }
            const float *c = cos + (size_t)r * d, *sn = sin + (size_t)r * d;
            float qrot[MAX_G * MAX_D];
            for (int i = 0; i < g; i++) rotate(qr + i * d, c, sn, d, qrot + i * d);
            rotate(knew + r * k_row + (size_t)h * d, c, sn, d, ko + (size_t)t * d);
            memcpy(vo + (size_t)t * d, vnew + r * v_row + (size_t)h * d, d * sizeof(float));
            const float *mask = pmask + (size_t)prompt_of[r] * plen;
            float *o = out + (size_t)r * hq * d + (size_t)h * g * d;
            switch (d) { /* the common head sizes with D known to the compiler: accumulators in registers */
                case 64: attend_unit(qrot, kp, vp, mask, plen, ko, vo, t + 1, g, 64, scale, s, width, o, &a); break;
                case 128: attend_unit(qrot, kp, vp, mask, plen, ko, vo, t + 1, g, 128, scale, s, width, o, &a); break;
                default: attend_unit(qrot, kp, vp, mask, plen, ko, vo, t + 1, g, d, scale, s, width, o, &a);
            }
        }
    }
    return 0;
}

/* exp(logits * inv_t - top) of block b (16 logits; past v: 0). */
static inline __attribute__((always_inline)) v16 block_exp(const float *l, int v, int b, float inv_t, float top) {
    v16 z;
    if ((b + 1) * 16 <= v) {
        z = *(const v16 *)(l + b * 16) * inv_t;
    } else {
        for (int i = 0; i < 16; i++) z[i] = b * 16 + i < v ? l[b * 16 + i] * inv_t : -__builtin_inff();
    }
    return vexp(z - top);
}

/* One token per row drawn from softmax(logits / temperature) by inverse CDF, and its log-prob:
   e_i = exp(z_i - max z), z = logits * (1 / temperature); the row's uniform u in [0, 1) times the
   sum of the e_i picks the first token whose running sum passes it (over blocks of 16, then within
   the block; a zero-probability token is never drawn). logits (rows, v); tok, logp (rows,). */
void rlvr_sample(const float *logits, int rows, int v, float temperature, const float *u, long *tok, float *logp,
                 int threads) {
    int blocks = (v + 15) / 16;
    float inv_t = 1.f / temperature;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * v;
        v16 most = (v16){0} - __builtin_inff();
        int i = 0;
        for (; i + 16 <= v; i += 16) {
            v16 x = *(const v16 *)(l + i);
            i16 more = x > most;
            most = (v16)(((i16)x & more) | ((i16)most & ~more));
        }
        float top = -__builtin_inff();
        for (int j = 0; j < 16; j++) top = most[j] > top ? most[j] : top;
        for (; i < v; i++) top = l[i] > top ? l[i] : top;
        top = top * inv_t;
        v16 sums = {0};
        for (int b = 0; b < blocks; b++) sums += block_exp(l, v, b, inv_t, top);
        float total = hsum(sums), target = u[r] * total, run = 0.f;
        int pick = -1;
        for (int b = 0; b < blocks && pick < 0; b++) {
            v16 e = block_exp(l, v, b, inv_t, top);
            float sum = hsum(e);
            if (run + sum <= target && b < blocks - 1) {
                run += sum;
                continue;
            }
            for (int j = 0; j < 16 && b * 16 + j < v; j++) {
                if (e[j] > 0.f) pick = b * 16 + j; /* the last nonzero one, should rounding leave none past */
                if (e[j] > 0.f && (run += e[j]) > target) break;
            }
        }
        for (int j = 0; pick < 0 && j < v; j++) /* none passed (rounding): the most likely token */
            if (l[j] * inv_t == top) pick = j;
        tok[r] = pick;
        logp[r] = (l[pick] * inv_t - top) - logf(total);
    }
}

/* The row's max and log-sum-exp of z = l / temperature, in two passes (as rlvr_sample's). */
static void row_lse(const float *l, int v, float inv_t, float *top_out, float *lse_out) {
    int blocks = (v + 15) / 16;
    float top = -__builtin_inff();
    for (int i = 0; i < v; i++) top = l[i] > top ? l[i] : top;
    top = top * inv_t;
    v16 sums = {0};
    for (int b = 0; b < blocks; b++) sums += block_exp(l, v, b, inv_t, top);
    *top_out = top;
    *lse_out = top + logf(hsum(sums));
}

static void heap_down(float *hv, int *hi, int n, int at) { /* a min-heap on hv */
    for (;;) {
        int a = 2 * at + 1, b = a + 1, m = at;
        if (a < n && hv[a] < hv[m]) m = a;
        if (b < n && hv[b] < hv[m]) m = b;
        if (m == at) return;
        float tv = hv[m]; hv[m] = hv[at]; hv[at] = tv;
        int ti = hi[m]; hi[m] = hi[at]; hi[at] = ti;
        at = m;
    }
}

typedef struct { float v; int i; } cand;

static int by_value_desc(const void *x, const void *y) {
    float a = ((const cand *)x)->v, b = ((const cand *)y)->v;
    return a < b ? 1 : a > b ? -1 : ((const cand *)x)->i - ((const cand *)y)->i;
}

/* rlvr_sample over a truncated distribution (rlvr.algos.truncation: top_k, then top_p over what it
   kept, then min_p; vllm_order: min_p, top_k, top_p), renormalised over the kept set, with the set's
   size and hash (the sum of table[id] over it, mod 2^43). Its candidates are gathered without
   sorting the vocabulary: the top_k largest (a heap of k, every one: top_p may normalise over
   them), else every z at or above a bound the set
   cannot reach below (min_p's threshold max + log min_p; top_p over the whole vocabulary:
   lse + log((1 - top_p) / v), since the tokens under it hold less than 1 - top_p together); then
   sorted, and the rules count on them. */
void rlvr_sample_truncated(const float *logits, int rows, int v, float temperature, int top_k, float top_p,
                           float min_p, int vllm_order, const float *u, const long *table, long *tok, float *logp,
                           long *size, long *hash, int threads) {
    float inv_t = 1.f / temperature;
    int use_k = top_k > 0 && top_k < v;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * v;
        float top, lse;
        row_lse(l, v, inv_t, &top, &lse);
        float bound = -__builtin_inff();
        if (min_p > 0.f) bound = top + logf(min_p);
        int whole_p = top_p < 1.f && !use_k && (!vllm_order || min_p <= 0.f); /* top_p over the whole vocabulary */
        if (whole_p) {
            float b = lse + logf((1.f - top_p) / v);
            bound = b > bound ? b : bound;
        }
        cand *c = malloc(sizeof(cand) * (use_k ? top_k : v)); /* 8 bytes a candidate; freed below */
        float *hv = use_k ? malloc(sizeof(float) * top_k) : NULL;
        int *hi = use_k ? malloc(sizeof(int) * top_k) : NULL;
        int k = 0;
        if (!c || (use_k && (!hv || !hi))) { /* out of memory: no candidate, reported as NaN below */
            free(hv), free(hi);
        } else if (use_k) {
            for (int i = 0; i < v; i++) {
                float z = l[i] * inv_t; /* no bound: top_p may normalise over all k (transformers' order) */
                if (k < top_k) { /* push, sift up */
                    int at = k++;
                    hv[at] = z, hi[at] = i;
                    while (at > 0 && hv[(at - 1) / 2] > hv[at]) {
                        int up = (at - 1) / 2;
                        float tv = hv[up]; hv[up] = hv[at]; hv[at] = tv;
                        int ti = hi[up]; hi[up] = hi[at]; hi[at] = ti;
                        at = up;
                    }
                } else if (z > hv[0]) {
                    hv[0] = z, hi[0] = i;
                    heap_down(hv, hi, k, 0);
                }
            }
            for (int j = 0; j < k; j++) c[j].v = hv[j], c[j].i = hi[j];
            free(hv);
            free(hi);
        } else {
            for (int i = 0; i < v; i++) {
                float z = l[i] * inv_t;
                if (z >= bound) c[k].v = z, c[k].i = i, k++;
            }
        }
        if (k == 0) { /* NaN logits: nothing compares; a NaN log-prob for the run's non-finite guard */
            tok[r] = 0, logp[r] = __builtin_nanf(""), size[r] = 1, hash[r] = table[0] & ((1L << 43) - 1);
            free(c);
            continue;
        }
        qsort(c, k, sizeof(cand), by_value_desc);
        int n = k;
        for (int stage = 0; stage < 3; stage++) {
            int which = vllm_order ? (stage == 0 ? 2 : stage - 1) : stage; /* 0 top_k, 1 top_p, 2 min_p */
            if (which == 0 && use_k) {
                n = n < top_k ? n : top_k;
            } else if (which == 2 && min_p > 0.f) {
                float t = c[0].v + logf(min_p);
                int m = 0;
                while (m < n && c[m].v >= t) m++;
                n = m;
            } else if (which == 1 && top_p < 1.f) {
                float norm = lse;
                if (!whole_p) {
                    double s = 0.0;
                    for (int j = 0; j < n; j++) s += expf(c[j].v - c[0].v);
                    norm = c[0].v + (float)log(s);
                }
                double before = 0.0;
                int m = 0;
                while (m < n && before < top_p) before += expf(c[m].v - norm), m++;
                n = m > 0 ? m : 1;
            }
        }
        double total = 0.0;
        for (int j = 0; j < n; j++) total += expf(c[j].v - c[0].v);
        double target = u[r] * total, run = 0.0;
        int pick = 0;
        for (int j = 0; j < n; j++) {
            pick = j;
            if ((run += expf(c[j].v - c[0].v)) > target) break;
        }
        unsigned long h = 0;
        for (int j = 0; j < n; j++) h += (unsigned long)table[c[j].i];
        tok[r] = c[pick].i;
        logp[r] = (c[pick].v - c[0].v) - (float)log(total);
        size[r] = n;
        hash[r] = (long)(h & ((1UL << 43) - 1));
        free(c);
    }
}
