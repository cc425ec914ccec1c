/* The linears (on packed weights) and the dot-product tile that attention shares. */
#pragma once
#include "simd.h"

/* ---- the dot-product tile (attention's scores) ----------------------------------------- */
/* Every output is one 8-lane FMA chain over K, then hsum8: the linears below do the same.
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
/* A linear's weight is repacked at load into panels of PANEL rows: for each 8-column chunk
 * c of the input, the panel's rows' 8 floats lie side by side (P[panel][c/8][row][8]). A
 * thread then reads sequential streams, as the bandwidth probe does, instead of many
 * interleaved rows; the arithmetic per output is unchanged (one FMA chain, then hsum8).
 * One input row (decode, bandwidth-bound): two panels per tile, 8 FMA chains to hide the
 * FMA latency. Several rows (verify, prefill; compute-bound): one panel x up to TMP input
 * rows. Both prefetch the weights a few panels ahead into L2, which keeps enough cache
 * misses in flight to stream at the machine's rate while the FMAs run.
 * Measured: benchmarks/results/native_tiles/NOTES.md. */
#define PANEL 4     /* rows per panel: one 8-column chunk of a panel is 128 bytes, 2 lines */
#define PF_PANELS 2 /* several-row tiles prefetch the panel this far ahead ... */
#define PF_PAIRS 2  /* ... and the one-row tile the pair of panels this far ahead (distance 1-4
                       measured within noise; into L2, since into L1 stalled on misses) */
#if defined(__AVX512VL__)
/* 32 vector registers: 6 rows x 4 accumulators + 4 weights + 1 input = 29. KEEP(v) makes the
 * compiler hold v in a register: otherwise it folds the loads into the FMAs and loads each
 * weight once per row (24 loads per 24 FMAs instead of 10). */
#define TMP 6
#define KEEP(v) __asm__("" : "+v"(v))
#else
/* 16 registers: 3 x 4 accumulators + 4 weights fill them, so the input stays a memory operand */
#define TMP 3
#define KEEP(v) ((void)0)
#endif

size_t sd_packed_floats(int N, int K) { return (size_t)((N + PANEL - 1) / PANEL) * PANEL * K; }

/* W (N, K) row-major -> P; rows past N are zeros */
void sd_pack(const float *W, int N, int K, float *P) {
    for (int nb = 0; nb < (N + PANEL - 1) / PANEL; nb++)
        for (int c = 0; c < K; c += 8)
            for (int j = 0; j < PANEL; j++)
                for (int l = 0; l < 8; l++) {
                    int n = nb * PANEL + j;
                    P[(size_t)nb * PANEL * K + (size_t)c * PANEL + j * 8 + l] = n < N ? W[(size_t)n * K + c + l] : 0.0f;
                }
}

/* One input row against two panels p0, p1 (8 weight rows, 8 FMA chains, 2 streams). */
static inline void panel1(const float *x, const float *p0, const float *p1, int K, float *y, int nt,
                          const float *b, int acc_out, const float *pf) {
    vec acc[2 * PANEL];
    for (int j = 0; j < 2 * PANEL; j++) acc[j] = VZERO();
    for (int c = 0; c < K; c += 8) {
        vec xv = VLOAD(x + c);
        const float *c0 = p0 + (size_t)c * PANEL, *c1 = p1 + (size_t)c * PANEL;
        if (pf) {                       /* the pair's 4 lines of this chunk, PF_PAIRS ahead */
            const float *q = pf + (size_t)c * PANEL;
            PREFETCH_L2(q); PREFETCH_L2(q + 16); PREFETCH_L2(q + (size_t)PANEL * K); PREFETCH_L2(q + (size_t)PANEL * K + 16);
        }
        for (int j = 0; j < PANEL; j++) acc[j] = VFMA(xv, VLOAD(c0 + 8 * j), acc[j]);
        for (int j = 0; j < PANEL; j++) acc[PANEL + j] = VFMA(xv, VLOAD(c1 + 8 * j), acc[PANEL + j]);
    }
    for (int j = 0; j < nt; j++) put(y + j, acc[j], b, j, acc_out);
}

/* One panel's 4 weight rows against mt input rows; prefetches pf (a panel ahead). */
static inline __attribute__((always_inline)) void panel_mn(const float *x, int mt, const float *p,
        int K, float *y, int ldy, int nt, const float *b, int acc_out, const float *pf) {
    vec a[TMP][PANEL];
    for (int i = 0; i < TMP; i++) for (int j = 0; j < PANEL; j++) a[i][j] = VZERO();
    for (int c = 0; c < K; c += 8) {
        const float *pc = p + (size_t)c * PANEL;
        vec w0 = VLOAD(pc), w1 = VLOAD(pc + 8), w2 = VLOAD(pc + 16), w3 = VLOAD(pc + 24);
        KEEP(w0); KEEP(w1); KEEP(w2); KEEP(w3);
        if (pf) { PREFETCH_L2(pf + (size_t)c * PANEL); PREFETCH_L2(pf + (size_t)c * PANEL + 16); }
        for (int i = 0; i < mt; i++) {
            vec xv = VLOAD(x + (size_t)i * K + c);
            KEEP(xv);
            a[i][0] = VFMA(xv, w0, a[i][0]);
            a[i][1] = VFMA(xv, w1, a[i][1]);
            a[i][2] = VFMA(xv, w2, a[i][2]);
            a[i][3] = VFMA(xv, w3, a[i][3]);
        }
    }
    for (int i = 0; i < mt; i++)
        for (int j = 0; j < nt; j++) put(y + (size_t)i * ldy + j, a[i][j], b, j, acc_out);
}

/* y (M, N) [+]= x (M, K) @ W^T (+ b), W packed by sd_pack. Called by every thread of the
 * team; splits the panels between them. */
static void linear(const float *x, int M, int K, const float *P, const float *bias, int N,
                   float *y, int acc_out) {
    int npanels = (N + PANEL - 1) / PANEL;
    if (M == 1) {   /* 2 rows are faster as one 2 x 4 tile than row by row (NOTES.md) */
        #pragma omp for schedule(static)
        for (int pair = 0; pair < (npanels + 1) / 2; pair++) {
            int n0 = pair * 2 * PANEL, nt = N - n0 < 2 * PANEL ? N - n0 : 2 * PANEL;
            const float *p0 = P + (size_t)n0 * K, *p1 = 2 * pair + 1 < npanels ? p0 + (size_t)PANEL * K : p0;
            const float *pf = 2 * (pair + PF_PAIRS) + 1 < npanels ? p0 + (size_t)2 * PF_PAIRS * PANEL * K : NULL;
            panel1(x, p0, p1, K, y + n0, nt, bias ? bias + n0 : NULL, acc_out, pf);
        }
        return;
    }
    for (int m0 = 0; m0 < M; m0 += M_CHUNK) {
        int m1 = m0 + M_CHUNK < M ? m0 + M_CHUNK : M;
        #pragma omp for schedule(static)
        for (int nb = 0; nb < npanels; nb++) {
            int n0 = nb * PANEL, nt = N - n0 < PANEL ? N - n0 : PANEL;
            const float *p = P + (size_t)n0 * K, *next = nb + PF_PANELS < npanels ? p + (size_t)PF_PANELS * PANEL * K : NULL;
            const float *b = bias ? bias + n0 : NULL;
            /* rows split into equal tiles (9 = 5 + 4, not 6 + 3): the longest tile sets the time */
            for (int m = m0, mt; m < m1; m += mt) {
                int left = m1 - m, tiles = (left + TMP - 1) / TMP;
                mt = (left + tiles - 1) / tiles;
                const float *xm = x + (size_t)m * K, *pf = m == m0 ? next : NULL;
                float *ym = y + (size_t)m * N + n0;
                switch (mt) {   /* constant row counts: unrolled */
#if TMP >= 6
                    case 6: panel_mn(xm, 6, p, K, ym, N, nt, b, acc_out, pf); break;
                    case 5: panel_mn(xm, 5, p, K, ym, N, nt, b, acc_out, pf); break;
                    case 4: panel_mn(xm, 4, p, K, ym, N, nt, b, acc_out, pf); break;
#endif
                    case 3: panel_mn(xm, 3, p, K, ym, N, nt, b, acc_out, pf); break;
                    case 2: panel_mn(xm, 2, p, K, ym, N, nt, b, acc_out, pf); break;
                    default: panel_mn(xm, 1, p, K, ym, N, nt, b, acc_out, pf); break;
                }
            }
        }
    }
}
