/* The linears (on packed weights) and the dot-product tile that attention shares. */
#pragma once
#include "simd.h"

/* ---- the dot-product tile (attention's scores) ----------------------------------------- */
/* Every output is one 8-lane FMA chain over K, then hsum8 (the attention scores).
 * mt (<= 4) rows of x against 3 rows w0..w2 (row layout, K floats apart), 12 accumulators
 * + 3 weights + 1 input = 16 ymm registers. pf, if given, is prefetched along the way. */
#define TM 4        /* rows of x per tile */
#define TN 3        /* rows of w per tile */
#define M_CHUNK 64  /* input rows kept in L2 while a linear's weights stream past (prefill) */

/* one output: the lanes' fixed sum, the bias if any, then store or accumulate */
static inline void put(float *dst, vec acc, const float *b, int j, int acc_out) {
    float s = hsum8(acc);
    if (b) s += b[j];
    *dst = acc_out ? *dst + s : s;
}

static inline __attribute__((always_inline)) void tile_mn(const float *x, int mt, const float *w0,
        const float *w1, const float *w2, int K, float *y, int ldy, int nt, const float *b, int acc_out,
        const float *pf) {
    vec a[TM][TN];
    for (int i = 0; i < TM; i++) { a[i][0] = VZERO(); a[i][1] = VZERO(); a[i][2] = VZERO(); }
    for (int c = 0; c < K; c += 8) {
        vec v0 = VLOAD(w0 + c), v1 = VLOAD(w1 + c), v2 = VLOAD(w2 + c);
        if (pf) { PREFETCH(pf + c); PREFETCH(pf + K + c); PREFETCH(pf + 2 * (size_t)K + c); }
        for (int i = 0; i < mt; i++) {
            vec xv = VLOAD(x + (size_t)i * K + c);
            a[i][0] = VFMA(xv, v0, a[i][0]);
            a[i][1] = VFMA(xv, v1, a[i][1]);
            a[i][2] = VFMA(xv, v2, a[i][2]);
        }
    }
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < nt; j++) put(y + (size_t)i * ldy + j, a[i][j], b, j, acc_out);
}

/* ---- linear: y (M, N) [+]= x (M, K) @ W (N, K)^T + b, on packed weights ---------------- */
/* Every output of a linear is ONE scalar FMA chain over k = 0..K-1 in order (y = x[k] w[k] +
 * y), then the bias, then the store or accumulate: lane l of a vector accumulator is one
 * output and the input x[k] is broadcast. Every tile, of any number of rows, runs that same
 * chain per output, so a linear is bitwise shape-invariant by construction.
 * A weight is repacked at load into panels of NP outputs, k-major: P[panel][k][NP] holds
 * W[panel*NP + j][k] for j < NP, so a tile reads a panel as one sequential stream.
 * One input row (decode, bandwidth-bound): two panels per tile, 8 FMA chains, 2 streams.
 * Several rows (verify, prefill): one panel per tile of up to TMP rows; each k costs one
 * weight load per 8 outputs and one broadcast per row for rows x vectors FMAs (8 loads per
 * 12 FMAs on AVX2, where the 8-lane dot-product layout took 16 and was bound by loads).
 * The weights stream from memory while the FMAs run only if the prefetches are spread
 * evenly over a panel's passes (PF_* below); a burst in the first pass serialises the two.
 * Measured: benchmarks/results/native_tiles/NOTES.md. */
#define NP 32        /* outputs per panel: one k of a panel is 2 cache lines */
#define PF_STEPS 64  /* stream prefetch distance in k (8 KB of a panel); into L2, since into
                        L1 the loads stalled on misses; 32 and 128 measured within noise */
enum {               /* what a pass prefetches, per k (into L2) */
    PF_NONE,
    PF_AHEAD,        /* its own stream, PF_STEPS ahead: decode, and a panel's only pass */
    PF_HALF,         /* passes 0 and 1 of a panel: one line each of the next panel */
    PF_QUARTER,      /* passes 0-3: one line per two k each (a panel read by 4+ passes) */
};
#if defined(__AVX512VL__)
#define TMP 6
#define WIDE_ROWS 6  /* 32 registers: 6 rows x 4 vectors = 24 accumulators + 4 weights + 1 */
#define KEEP(v) __asm__("" : "+v"(v))
#elif defined(__AVX2__)
#define TMP 6
#define WIDE_ROWS 3  /* 16 registers: 2 rows x 4 vectors + 4 weights + 1 input = 13, or 6 rows
                        x 2 + 2 + 1 = 15; 3 x 4 takes its weights from memory (17 would spill),
                        which pays only when the 3 rows are the whole call (see WIDE) */
#define KEEP(v) __asm__("" : "+x"(v))
#else
#define TMP 6
#define WIDE_ROWS 3
#define KEEP(v) ((void)0)
#endif
/* KEEP(v) holds v in a register: the compiler would otherwise fold the weight loads into
 * the FMAs and load each weight once per row */

size_t sd_packed_floats(int N, int K) { return (size_t)((N + NP - 1) / NP) * NP * K; }

/* W (N, K) row-major -> P; outputs past N are zero rows */
void sd_pack(const float *W, int N, int K, float *P) {
    for (int pb = 0; pb < (N + NP - 1) / NP; pb++)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < NP; j++) {
                int n = pb * NP + j;
                P[((size_t)pb * K + k) * NP + j] = n < N ? W[(size_t)n * K + k] : 0.0f;
            }
}

/* one k of a tile: NV vectors of each of NPN panels, a broadcast per row */
#define K_STEP(MT, NPN, NV, PF, k, KP) {                                                           \
    vec w[NPN * NV];                                                                           \
    for (int j = 0; j < NPN; j++) for (int v = 0; v < NV; v++) {                               \
        w[j * NV + v] = VLOAD(p + j * ps + (size_t)(k) * NP + 8 * v);                           \
        if (KP) KEEP(w[j * NV + v]);                                                           \
    }                                                                                          \
    if (PF == PF_AHEAD) for (int j = 0; j < NPN; j++) {                                        \
        const float *at = p + j * ps + (size_t)((k) + PF_STEPS) * NP;                          \
        PREFETCH_L2(at); PREFETCH_L2(at + 16);                                                 \
    }                                                                                          \
    if (PF == PF_HALF) PREFETCH_L2(next + ((size_t)q * K + (k)) * 16);   /* line qK + k */     \
    for (int i = 0; i < MT; i++) {                                                             \
        vec xb = VBCAST(x + (size_t)i * K + (k));                                              \
        for (int j = 0; j < NPN * NV; j++) a[i][j] = VFMA(xb, w[j], a[i][j]);                 \
    }                                                                                          \
}
/* the k loop, two k at a time (K is a multiple of 8) */
#define K_LOOP(MT, NPN, NV, PF, KP) for (int k = 0; k < K; k += 2) {                               \
    K_STEP(MT, NPN, NV, PF, k, KP) K_STEP(MT, NPN, NV, PF, k + 1, KP)                                \
    if (PF == PF_QUARTER) PREFETCH_L2(next + ((size_t)q * K + k) / 2 * 16); /* (qK + k) / 2 */ \
}

/* MT input rows against NV vectors (8 outputs each) of NPN consecutive panels at p (p may
 * point into a panel): y[i][n] for n < nt. Pass q of its panel prefetches by mode pf, from
 * `next` (the next panel) for PF_HALF/PF_QUARTER. One function per shape and one loop per
 * mode, so the accumulators are a fixed array the compiler keeps in registers (a branch
 * inside the loop made it store them on every k). */
#define DEFINE_TILE(MT, NPN, NV, KP)                                                             \
static inline void tile_##MT##x##NPN##x##NV(const float *x, const float *p, int K, float *y,   \
        int ldy, int nt, const float *b, int acc_out, int pf, const float *next, int q) {      \
    vec a[MT][NPN * NV];                                                                       \
    for (int i = 0; i < MT; i++) for (int j = 0; j < NPN * NV; j++) a[i][j] = VZERO();        \
    const size_t ps = (size_t)K * NP;                 /* floats from one panel to the next */ \
    if ((pf == PF_HALF && q >= 2) || (pf == PF_QUARTER && q >= 4)) pf = PF_NONE;               \
    switch (pf) {                                                                              \
        case PF_AHEAD: K_LOOP(MT, NPN, NV, PF_AHEAD, KP) break;                                    \
        case PF_HALF: K_LOOP(MT, NPN, NV, PF_HALF, KP) break;                                      \
        case PF_QUARTER: K_LOOP(MT, NPN, NV, PF_QUARTER, KP) break;                                \
        default: K_LOOP(MT, NPN, NV, PF_NONE, KP) break;                                           \
    }                                                                                          \
    float o[MT][NPN * NV][8];                         /* the lanes, then the scalar stores */ \
    _Pragma("GCC unroll 8")                                                                    \
    for (int i = 0; i < MT; i++)                                                               \
        _Pragma("GCC unroll 8")                                                                \
        for (int j = 0; j < NPN * NV; j++) VSTORE(o[i][j], a[i][j]);                           \
    for (int i = 0; i < MT; i++)                                                               \
        for (int j = 0; j < NPN; j++)                                                          \
            for (int n = 0; n < 8 * NV && j * NP + n < nt; n++) {                              \
                float v = o[i][j * NV + n / 8][n % 8] + (b ? b[j * NP + n] : 0.0f);            \
                float *dst = y + (size_t)i * ldy + j * NP + n;                                 \
                *dst = acc_out ? *dst + v : v;                                                 \
            }                                                                                  \
}

DEFINE_TILE(1, 2, 4, 1) DEFINE_TILE(1, 1, 4, 1) DEFINE_TILE(2, 1, 4, 1)
#if WIDE_ROWS >= 6
#define WIDE(mt) 1
DEFINE_TILE(3, 1, 4, 1) DEFINE_TILE(4, 1, 4, 1) DEFINE_TILE(5, 1, 4, 1) DEFINE_TILE(6, 1, 4, 1)
#define PASSES(mt) 1
#define ROWS_TILE(MT) do { tile_##MT##x1x4(xm, p, K, ym, N, nt, b, acc_out, pf, next, q); q++; } while (0)
#else
DEFINE_TILE(3, 1, 4, 0) DEFINE_TILE(3, 1, 2, 1) DEFINE_TILE(4, 1, 2, 1) DEFINE_TILE(5, 1, 2, 1) DEFINE_TILE(6, 1, 2, 1)
/* MT rows over one panel: all 4 vectors at once, or its two halves in turn (two passes).
 * Wide: up to 2 rows, or 3 rows that are the whole call (measured: 3 rows beside a 4-row
 * tile, T = 7, took 5.5 ms wide and 4.3 ms as halves; T = 3 alone 3.6 wide, 4.0 halves) */
#define WIDE(mt) ((mt) <= 2 || ((mt) <= WIDE_ROWS && m1 - m0 == (mt)))
#define PASSES(mt) (WIDE(mt) ? 1 : 2)
#define ROWS_TILE(MT) do {                                                                     \
    if (WIDE(MT)) { WIDE_TILE(MT); q++; break; }                                               \
    NARROW_TILE(MT, xm, p, K, ym, N, nt, b, acc_out, pf, next, q); q++;                        \
    if (nt > 16) {                                                                             \
        NARROW_TILE(MT, xm, p + 16, K, ym + 16, N, nt - 16, b ? b + 16 : NULL, acc_out, pf, next, q); \
        q++;                                                                                   \
    }                                                                                          \
} while (0)
#define WIDE_TILE(MT) (MT <= 1 ? tile_1x1x4(xm, p, K, ym, N, nt, b, acc_out, pf, next, q)      \
                       : MT == 2 ? tile_2x1x4(xm, p, K, ym, N, nt, b, acc_out, pf, next, q)    \
                       : tile_3x1x4(xm, p, K, ym, N, nt, b, acc_out, pf, next, q))
#define NARROW_TILE(MT, ...) (MT <= 3 ? tile_3x1x2(__VA_ARGS__) : MT == 4 ? tile_4x1x2(__VA_ARGS__) : MT == 5 ? tile_5x1x2(__VA_ARGS__) \
                                                                           : tile_6x1x2(__VA_ARGS__))
#endif

/* rows in the next tile when `left` rows remain: equal tiles of at most TMP */
static inline int tile_rows(int left) {
    int tiles = (left + TMP - 1) / TMP;
    return (left + tiles - 1) / tiles;
}

/* y (M, N) [+]= x (M, K) @ W^T (+ b), W packed by sd_pack. Called by every thread of the
 * team; splits the panels between them. */
static void linear(const float *x, int M, int K, const float *P, const float *bias, int N,
                   float *y, int acc_out) {
    int npanels = (N + NP - 1) / NP;
    if (M == 1) {
        #pragma omp for schedule(static)
        for (int pair = 0; pair < (npanels + 1) / 2; pair++) {
            int n0 = pair * 2 * NP, nt = N - n0 < 2 * NP ? N - n0 : 2 * NP;
            const float *p = P + (size_t)n0 * K, *b = bias ? bias + n0 : NULL;
            int pf = 2 * pair + 3 < npanels ? PF_AHEAD : PF_NONE;   /* never past the end */
            if (2 * pair + 1 < npanels) tile_1x2x4(x, p, K, y + n0, N, nt, b, acc_out, pf, NULL, 0);
            else tile_1x1x4(x, p, K, y + n0, N, nt, b, acc_out, PF_NONE, NULL, 0);
        }
        return;
    }
    for (int m0 = 0; m0 < M; m0 += M_CHUNK) {
        int m1 = m0 + M_CHUNK < M ? m0 + M_CHUNK : M;
        #pragma omp for schedule(static)
        for (int nb = 0; nb < npanels; nb++) {
            int n0 = nb * NP, nt = N - n0 < NP ? N - n0 : NP, q = 0, Q = 0;
            const float *p = P + (size_t)n0 * K, *b = bias ? bias + n0 : NULL, *next = p + (size_t)NP * K;
            /* rows split into equal tiles (9 = 5 + 4, not 6 + 3): the longest tile sets the
             * time; Q passes over the panel in all share the prefetch of the next one */
            for (int m = m0, mt; m < m1; m += mt) {
                mt = tile_rows(m1 - m);
                Q += PASSES(mt);
            }
            int pf = nb + 1 == npanels ? PF_NONE : Q == 1 ? PF_AHEAD : Q < 4 ? PF_HALF : PF_QUARTER;
            for (int m = m0, mt; m < m1; m += mt) {
                mt = tile_rows(m1 - m);
                const float *xm = x + (size_t)m * K;
                float *ym = y + (size_t)m * N + n0;
                switch (mt) {
                    case 6: ROWS_TILE(6); break;
                    case 5: ROWS_TILE(5); break;
                    case 4: ROWS_TILE(4); break;
                    case 3: ROWS_TILE(3); break;
                    case 2: ROWS_TILE(2); break;
                    default: ROWS_TILE(1); break;
                }
            }
        }
    }
}
