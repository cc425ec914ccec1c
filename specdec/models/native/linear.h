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
 * W[panel*NP + j][k] for j < NP, so a tile reads a panel as one sequential stream. Weights
 * are fp32, int8 with a scale per output, or int4 with a scale per group (linear_tiles.h).
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

/* elements (floats, or int8) of a packed (N, K) weight */
size_t sd_packed_floats(int N, int K) { return (size_t)((N + NP - 1) / NP) * NP * K; }

#if WIDE_ROWS >= 6
#define WIDE(mt) 1
#define PASSES(mt) 1
#else
/* MT rows over one panel: all 4 vectors at once, or its two halves in turn (two passes).
 * Wide: up to 2 rows, or 3 rows that are the whole call where the weights can be FMA memory
 * operands (WIDE3: fp32; measured: 3 rows beside a 4-row tile, T = 7, took 5.5 ms wide and
 * 4.3 ms as halves; T = 3 alone 3.6 wide, 4.0 halves). int8 weights must be widened in
 * registers first, and 3 wide rows spill (0.5B shape, T = 3: 1.82 t(1) wide). */
#define WIDE(mt) ((mt) <= 2 || (WIDE3 && (mt) <= WIDE_ROWS && m1 - m0 == (mt)))
#define PASSES(mt) (WIDE(mt) ? 1 : 2)
#endif

/* rows in the next tile when `left` rows remain: equal tiles of at most TMP */
static inline int tile_rows(int left) {
    int tiles = (left + TMP - 1) / TMP;
    return (left + tiles - 1) / tiles;
}


/* ---- packing: W (N, K) row-major -> panels; outputs past N are zero rows ------------- */
#define PACK_PANELS(T, W, P) \
    for (int pb = 0; pb < (N + NP - 1) / NP; pb++) \
        for (int k = 0; k < K; k++) \
            for (int j = 0; j < NP; j++) { \
                int n = pb * NP + j; \
                P[((size_t)pb * K + k) * NP + j] = n < N ? W[(size_t)n * K + k] : (T)0; \
            }
void sd_pack(const float *W, int N, int K, float *P) { PACK_PANELS(float, W, P) }
void sd_pack_i8(const int8_t *W, int N, int K, int8_t *P) { PACK_PANELS(int8_t, W, P) }

/* int4: weights grouped by I4_GROUP along K, each group with one float scale (w = q s_g,
 * q in -8..7, models/quantize.py). Stored: Q (N, K/2) bytes, k = 2i in byte i's low nibble
 * and 2i+1 in its high one; S (N, K/I4_GROUP). Packed: per panel and k, 16 bytes whose low
 * nibbles hold outputs 0-7 and 16-23 and high nibbles 8-15 and 24-31 (vector v of a k is
 * byte half v/2, nibble v%2, so half a panel starts 8 bytes in); scales per panel, group
 * and output: PS[panel][K/I4_GROUP][NP]. */
#define I4_GROUP 32   /* llama.cpp Q4_0's block: the comparison of benchmarks/real_size.py */
static inline int nibble(const uint8_t *Q, int K, int n, int k) {
    int b = Q[(size_t)n * (K / 2) + k / 2];
    return (k & 1) ? b >> 4 : b & 15;
}
size_t sd_packed_groups(int N, int K) { return (size_t)((N + NP - 1) / NP) * NP * (K / I4_GROUP); }
void sd_pack_i4(const uint8_t *Q, const float *S, int N, int K, uint8_t *P, float *PS) {
    int G = K / I4_GROUP;
    for (int pb = 0; pb < (N + NP - 1) / NP; pb++) {
        for (int k = 0; k < K; k++)
            for (int byte = 0; byte < NP / 2; byte++) {
                int lo = pb * NP + (byte / 8) * 16 + byte % 8, hi = lo + 8;   /* outputs */
                int a = lo < N ? nibble(Q, K, lo, k) : 0, c = hi < N ? nibble(Q, K, hi, k) : 0;
                P[((size_t)pb * K + k) * (NP / 2) + byte] = (uint8_t)(a | c << 4);
            }
        for (int g = 0; g < G; g++)
            for (int j = 0; j < NP; j++) {
                int n = pb * NP + j;
                PS[((size_t)pb * G + g) * NP + j] = n < N ? S[(size_t)n * G + g] : 0.0f;
            }
    }
}

/* 8 int4 weights, dequantized: nibble `hi` of the 8 bytes at p, sign-extended, times the 8
 * scales at s (exact widening; one rounding, the product) */
#if defined(__AVX2__) && defined(__FMA__)
static inline vec ldw_i4(const uint8_t *p, int hi, const float *s) {
    __m256i b = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));    /* bytes, signed */
    __m256i q = hi ? _mm256_srai_epi32(b, 4) : _mm256_srai_epi32(_mm256_slli_epi32(b, 28), 28);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_loadu_ps(s));
}
#else
static inline vec ldw_i4(const uint8_t *p, int hi, const float *s) {
    vec r;
    for (int i = 0; i < 8; i++) {
        int q = hi ? p[i] >> 4 : p[i] & 15;
        r.l[i] = (float)(q >= 8 ? q - 16 : q) * s[i];
    }
    return r;
}
#endif

/* the packed linear for each weight type (linear_tiles.h) */
#define WAT(p, e) ((p) + (e))
#define WPACK 1
#define WT float
#define LDW(pp, gp, k, v) VLOAD((pp) + (size_t)(k) * NP + 8 * (v))
#define SFX(n) n
#define WIDE3 1
#include "linear_tiles.h"
#undef WT
#undef LDW
#undef SFX
#undef WIDE3
#define WT int8_t
#define LDW(pp, gp, k, v) VLOAD_I8((pp) + (size_t)(k) * NP + 8 * (v))
#define SFX(n) n##_i8
#define WIDE3 0
#include "linear_tiles.h"
#undef WT
#undef LDW
#undef SFX
#undef WAT
#undef WPACK
#define WT uint8_t
#define WPACK 2
#define WAT(p, e) ((p) + (e) / 2)
#define LDW(pp, gp, k, v) ldw_i4((pp) + (size_t)(k) * (NP / 2) + 8 * ((v) >> 1), (v) & 1, \
                                 (gp) + (size_t)((k) / I4_GROUP) * NP + 8 * (v))
#define SFX(n) n##_i4
#include "linear_tiles.h"
#undef WT
#undef LDW
#undef SFX
#undef WIDE3
#undef WAT
#undef WPACK

/* y (M, N) = x (M, K) @ W (N, K)^T: the forward's linear on its own (benchmarks, tests) */
void sd_linear(const float *x, int M, int K, const float *W, int N, float *y, int threads) {
    #pragma omp parallel num_threads(threads)
    linear(x, M, K, W, NULL, NULL, NULL, N, y, 0);
}

/* y (M, N) = (x (M, K) @ Q (N, K)^T) * scale (N,), Q int8 packed by sd_pack_i8 */
void sd_linear_i8(const float *x, int M, int K, const int8_t *Q, const float *scale, int N, float *y,
                  int threads) {
    #pragma omp parallel num_threads(threads)
    linear_i8(x, M, K, Q, NULL, scale, NULL, N, y, 0);
}

/* y (M, N) = x (M, K) @ dequant(Q)^T, Q and its group scales PS packed by sd_pack_i4 */
void sd_linear_i4(const float *x, int M, int K, const uint8_t *Q, const float *PS, int N, float *y,
                  int threads) {
    #pragma omp parallel num_threads(threads)
    linear_i4(x, M, K, Q, PS, NULL, NULL, N, y, 0);
}
