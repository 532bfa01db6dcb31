/* y (M, N) = x (M, K) @ W^T + b for the few rows of a decode step (rlvr.rollout.skinny).

   W (N, K) is packed once into panels of VW output columns: panel p holds W[p*VW : (p+1)*VW, :]
   as K rows of VW floats (the last panel zero-padded), so a product streams each panel once,
   front to back. Rows are taken MB at a time: MB accumulators of VW columns stay in registers
   over all of K, each weight vector loaded once per MB rows. Each output is one chain of fused
   multiply-adds over k in order, then + b: the same numbers whatever the vector width, so the
   AVX2 and AVX-512 builds agree bit for bit. Panels are shared out among the threads (OpenMP,
   the runtime torch loaded). */
#include <stddef.h>
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

#define BLOCK(R)                                                                                   \
static void block_##R(const float *x, int k, const float *panel, float *y, int ldy, int cols,     \
                      const float *bias) {                                                        \
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
        for (int j = 0; j < cols; j++) y[(size_t)r * ldy + j] = bias ? out[j] + bias[j] : out[j];  \
    }                                                                                              \
}
BLOCK(1) BLOCK(2) BLOCK(3) BLOCK(4) BLOCK(5) BLOCK(6) BLOCK(7) BLOCK(8) BLOCK(9) BLOCK(10) BLOCK(11) BLOCK(12)
#if MB == 16
BLOCK(13) BLOCK(14) BLOCK(15) BLOCK(16)
#endif

typedef void (*block_fn)(const float *, int, const float *, float *, int, int, const float *);
static const block_fn blocks[MB + 1] = {
    0, block_1, block_2, block_3, block_4, block_5, block_6, block_7, block_8, block_9, block_10, block_11, block_12,
#if MB == 16
    block_13, block_14, block_15, block_16,
#endif
};

void rlvr_skinny_linear(const float *x, int m, int k, const float *packed, int n, const float *bias, float *y,
                        int threads) {
    int panels = (n + VW - 1) / VW;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int p = 0; p < panels; p++) {
        const float *panel = packed + (size_t)p * k * VW;
        int cols = n - p * VW < VW ? n - p * VW : VW;
        for (int r0 = 0; r0 < m; r0 += MB) {
            int rows = m - r0 < MB ? m - r0 : MB;
            blocks[rows](x + (size_t)r0 * k, k, panel, y + (size_t)r0 * n + p * VW, n, cols, bias ? bias + p * VW : 0);
        }
    }
}
