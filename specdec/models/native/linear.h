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
 * FMA latency. Several rows (verify, prefill; compute-bound): one panel x 3 input rows, and
 * while a panel's first row tile runs the next panel is prefetched, so its load overlaps
 * this panel's arithmetic. Measured: benchmarks/results/native_tiles/NOTES.md. */
#define PANEL 4     /* rows per panel: one 8-column chunk of a panel is 128 bytes, 2 lines */
#define TMP 3       /* input rows per tile for several rows: 3 x 4 accumulators (4 x 4 spills:
                       no faster at T = 4-5, slower at T = 9) */
#define ROW_BY_ROW 2 /* up to this many rows, the decode tile row by row: T = 2 of the target
                        4.29-4.61 ms against 4.54-4.96 with the 3-row tile; at 3 rows slower */

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
                          const float *b, int acc_out) {
    vec acc[2 * PANEL];
    for (int j = 0; j < 2 * PANEL; j++) acc[j] = VZERO();
    for (int c = 0; c < K; c += 8) {
        vec xv = VLOAD(x + c);
        const float *c0 = p0 + (size_t)c * PANEL, *c1 = p1 + (size_t)c * PANEL;
        for (int j = 0; j < PANEL; j++) acc[j] = VFMA(xv, VLOAD(c0 + 8 * j), acc[j]);
        for (int j = 0; j < PANEL; j++) acc[PANEL + j] = VFMA(xv, VLOAD(c1 + 8 * j), acc[PANEL + j]);
    }
    for (int j = 0; j < nt; j++) put(y + j, acc[j], b, j, acc_out);
}

/* One panel's 4 weight rows against mt input rows; prefetches pf (the next panel). */
static inline __attribute__((always_inline)) void panel_mn(const float *x, int mt, const float *p,
        int K, float *y, int ldy, int nt, const float *b, int acc_out, const float *pf) {
    vec a[TMP][PANEL];
    for (int i = 0; i < TMP; i++) for (int j = 0; j < PANEL; j++) a[i][j] = VZERO();
    for (int c = 0; c < K; c += 8) {
        const float *pc = p + (size_t)c * PANEL;
        vec w0 = VLOAD(pc), w1 = VLOAD(pc + 8), w2 = VLOAD(pc + 16), w3 = VLOAD(pc + 24);
        if (pf) { PREFETCH(pf + (size_t)c * PANEL); PREFETCH(pf + (size_t)c * PANEL + 16); }
        for (int i = 0; i < mt; i++) {
            vec xv = VLOAD(x + (size_t)i * K + c);
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
    if (M <= ROW_BY_ROW) {
        #pragma omp for schedule(static)
        for (int pair = 0; pair < (npanels + 1) / 2; pair++) {
            int n0 = pair * 2 * PANEL, nt = N - n0 < 2 * PANEL ? N - n0 : 2 * PANEL;
            const float *p0 = P + (size_t)n0 * K, *p1 = 2 * pair + 1 < npanels ? p0 + (size_t)PANEL * K : p0;
            for (int m = 0; m < M; m++)        /* a second row finds the two panels in L1/L2 */
                panel1(x + (size_t)m * K, p0, p1, K, y + (size_t)m * N + n0, nt, bias ? bias + n0 : NULL, acc_out);
        }
        return;
    }
    for (int m0 = 0; m0 < M; m0 += M_CHUNK) {
        int m1 = m0 + M_CHUNK < M ? m0 + M_CHUNK : M;
        #pragma omp for schedule(static)
        for (int nb = 0; nb < npanels; nb++) {
            int n0 = nb * PANEL, nt = N - n0 < PANEL ? N - n0 : PANEL;
            const float *p = P + (size_t)n0 * K, *next = nb + 1 < npanels ? p + (size_t)PANEL * K : NULL;
            const float *b = bias ? bias + n0 : NULL;
            for (int m = m0; m < m1; m += TMP) {
                const float *xm = x + (size_t)m * K, *pf = m == m0 ? next : NULL;
                float *ym = y + (size_t)m * N + n0;
                switch (m1 - m < TMP ? m1 - m : TMP) {   /* constant row counts: unrolled */
                    case 3: panel_mn(xm, 3, p, K, ym, N, nt, b, acc_out, pf); break;
                    case 2: panel_mn(xm, 2, p, K, ym, N, nt, b, acc_out, pf); break;
                    default: panel_mn(xm, 1, p, K, ym, N, nt, b, acc_out, pf); break;
                }
            }
        }
    }
}
