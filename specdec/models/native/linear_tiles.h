/* The packed linear, written once for each weight type. linear.h includes this file three times:
 *   WT float,   SFX(n) n        -> linear (fp32 weights)
 *   WT int8_t,  SFX(n) n##_i8   -> linear_i8 (int8 weights, a scale per output)
 *   WT uint8_t, SFX(n) n##_i4   -> linear_i4 (int4 weights, two a byte, a scale per group)
 * WAT(p, e) is the weight at element e of a panel stream, LDW(pp, gp, k, v) vector v of k.
 * An int8 weight's 8 lanes are widened to floats as they are loaded and enter the same FMA
 * chain; its per-output scale multiplies the finished chain (y = s * sum_k x[k] q[k] + b).
 * An int4 weight is widened and multiplied by its group's scale as it is loaded (w = q * s_g,
 * the same float in every call), then enters the same chain. So quantized linears are
 * shape-invariant for the same reason as the fp32 one (linear.h). */
#define KBYTES (NP * sizeof(WT) / WPACK)     /* bytes of one k of a panel */

/* The next panel's prefetch, spread evenly over the first n passes of this one: the panel
 * has K * KBYTES / 64 lines, so pass q at step k takes line (qK + k) / PF_EVERY(n) when
 * that divides (fp32: every k for 2 passes, every other k for 4; int8: 4 and 8; int4: 8, 16). */
#define LINE_AT(base, line) ((const char *)(base) + (size_t)(line) * 64)
#define PF_EVERY(n) ((size_t)(n) * 64 / KBYTES)
#define PF_SPREAD(n, k) do {                                                                   \
    size_t at = (size_t)q * K + (k);                                                           \
    if (at % PF_EVERY(n) == 0) PREFETCH_L2(LINE_AT(next, at / PF_EVERY(n)));                   \
} while (0)

/* one k of a tile: NV vectors of each of NPN panels, a broadcast per row */
#define K_STEP(MT, NPN, NV, PF, k, KP) {                                                           \
    vec w[NPN * NV];                                                                           \
    for (int j = 0; j < NPN; j++) for (int v = 0; v < NV; v++) {                               \
        w[j * NV + v] = LDW(WAT(p, j * ps), g ? g + j * gs : NULL, k, v);                       \
        if (KP) KEEP(w[j * NV + v]);                                                           \
    }                                                                                          \
    if (PF == PF_AHEAD && ((k) * KBYTES) % 64 == 0) for (int j = 0; j < NPN; j++)              \
        for (size_t l = 0; l < KBYTES; l += 64)                                                \
            PREFETCH_L2((const char *)WAT(p, j * ps + (size_t)((k) + PF_STEPS) * NP) + l);     \
    if (PF == PF_HALF) PF_SPREAD(2, k);                                                        \
    for (int i = 0; i < MT; i++) {                                                             \
        vec xb = VBCAST(x + (size_t)i * K + (k));                                              \
        for (int j = 0; j < NPN * NV; j++) a[i][j] = VFMA(xb, w[j], a[i][j]);                 \
    }                                                                                          \
}
/* the k loop, two k at a time (K is a multiple of 8) */
#define K_LOOP(MT, NPN, NV, PF, KP) for (int k = 0; k < K; k += 2) {                               \
    K_STEP(MT, NPN, NV, PF, k, KP) K_STEP(MT, NPN, NV, PF, k + 1, KP)                                \
    if (PF == PF_QUARTER) PF_SPREAD(4, k);                                                     \
}

/* MT input rows against NV vectors (8 outputs each) of NPN consecutive panels at p (p may
 * point into a panel; g: their group scales, int4): y[i][n] for n < nt, each scaled by sc[n]
 * if sc is given. Pass q of its
 * panel prefetches by mode pf, from `next` (the next panel) for PF_HALF/PF_QUARTER. One
 * function per shape and one loop per mode, so the accumulators are a fixed array the
 * compiler keeps in registers (a branch inside the loop made it store them on every k). */
#define DEFINE_TILE(MT, NPN, NV, KP)                                                             \
static inline void SFX(tile_##MT##x##NPN##x##NV)(const float *x, const WT *p, const float *g,    \
        int K, float *y, int ldy, int nt, const float *sc, const float *b, int acc_out, int pf, \
        const WT *next, int q) {                                                               \
    vec a[MT][NPN * NV];                                                                       \
    for (int i = 0; i < MT; i++) for (int j = 0; j < NPN * NV; j++) a[i][j] = VZERO();        \
    const size_t ps = (size_t)K * NP;                 /* elements from one panel to the next */ \
    const size_t gs = (size_t)K / I4_GROUP * NP;      /* group scales from one to the next */  \
    (void)gs; (void)g;                                                                         \
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
                float v = o[i][j * NV + n / 8][n % 8];                                         \
                if (sc) v *= sc[j * NP + n];                                                   \
                if (b) v += b[j * NP + n];                                                     \
                float *dst = y + (size_t)i * ldy + j * NP + n;                                 \
                *dst = acc_out ? *dst + v : v;                                                 \
            }                                                                                  \
}

DEFINE_TILE(1, 2, 4, 1) DEFINE_TILE(1, 1, 4, 1) DEFINE_TILE(2, 1, 4, 1)
#define TILE_ARGS(xm, p, g, ym, nt, sc, b) xm, p, g, K, ym, N, nt, sc, b, acc_out, pf, next, q
#if WIDE_ROWS >= 6
DEFINE_TILE(3, 1, 4, 1) DEFINE_TILE(4, 1, 4, 1) DEFINE_TILE(5, 1, 4, 1) DEFINE_TILE(6, 1, 4, 1)
#define ROWS_TILE(MT) do { SFX(tile_##MT##x1x4)(TILE_ARGS(xm, p, g, ym, nt, s, b)); q++; } while (0)
#else
DEFINE_TILE(3, 1, 4, 0) DEFINE_TILE(3, 1, 2, 1) DEFINE_TILE(4, 1, 2, 1) DEFINE_TILE(5, 1, 2, 1) DEFINE_TILE(6, 1, 2, 1)
/* MT rows over one panel: all 4 vectors at once (WIDE), or its two halves in turn */
#define ROWS_TILE(MT) do {                                                                     \
    if (WIDE(MT)) { WIDE_TILE(MT, TILE_ARGS(xm, p, g, ym, nt, s, b)); q++; break; }               \
    NARROW_TILE(MT, TILE_ARGS(xm, p, g, ym, nt, s, b)); q++;                                      \
    if (nt > 16) {                                                                             \
        NARROW_TILE(MT, TILE_ARGS(xm, WAT(p, 16), g ? g + 16 : NULL, ym + 16, nt - 16, s ? s + 16 : NULL, \
                                  b ? b + 16 : NULL));                                         \
        q++;                                                                                   \
    }                                                                                          \
} while (0)
#define WIDE_TILE(MT, ...) (MT <= 1 ? SFX(tile_1x1x4)(__VA_ARGS__) : MT == 2 ? SFX(tile_2x1x4)(__VA_ARGS__) \
                            : SFX(tile_3x1x4)(__VA_ARGS__))
#define NARROW_TILE(MT, ...) (MT <= 3 ? SFX(tile_3x1x2)(__VA_ARGS__) : MT == 4 ? SFX(tile_4x1x2)(__VA_ARGS__) \
                              : MT == 5 ? SFX(tile_5x1x2)(__VA_ARGS__) : SFX(tile_6x1x2)(__VA_ARGS__))
#endif

/* y (M, N) [+]= (x (M, K) @ W^T) * scale (+ b), W packed by sd_pack*; scale (N,) or NULL;
 * G: int4's packed group scales (sd_pack_i4), else NULL.
 * Called by every thread of the team; splits the panels between them. */
static void SFX(linear)(const float *x, int M, int K, const WT *P, const float *G, const float *scale,
                        const float *bias, int N, float *y, int acc_out) {
    int npanels = (N + NP - 1) / NP;
    const size_t gp = (size_t)K / I4_GROUP * NP;    /* group scales per panel */
    if (M == 1 && sizeof(WT) == sizeof(float)) {  /* int8: one panel a tile, below (0.5B shape, t(1) 22.2 -> 20.7-21.1 ms) */
        #pragma omp for schedule(static)
        for (int pair = 0; pair < (npanels + 1) / 2; pair++) {
            int n0 = pair * 2 * NP, nt = N - n0 < 2 * NP ? N - n0 : 2 * NP;
            const WT *p = WAT(P, (size_t)n0 * K);
            const float *b = bias ? bias + n0 : NULL, *s = scale ? scale + n0 : NULL;
            const float *g = G ? G + 2 * pair * gp : NULL;
            int pf = 2 * pair + 3 < npanels ? PF_AHEAD : PF_NONE;   /* never past the end */
            if (2 * pair + 1 < npanels) SFX(tile_1x2x4)(x, p, g, K, y + n0, N, nt, s, b, acc_out, pf, NULL, 0);
            else SFX(tile_1x1x4)(x, p, g, K, y + n0, N, nt, s, b, acc_out, PF_NONE, NULL, 0);
        }
        return;
    }
    for (int m0 = 0; m0 < M; m0 += M_CHUNK) {
        int m1 = m0 + M_CHUNK < M ? m0 + M_CHUNK : M;
        #pragma omp for schedule(static)
        for (int nb = 0; nb < npanels; nb++) {
            int n0 = nb * NP, nt = N - n0 < NP ? N - n0 : NP, q = 0, Q = 0;
            const WT *p = WAT(P, (size_t)n0 * K), *next = WAT(p, (size_t)NP * K);
            const float *b = bias ? bias + n0 : NULL, *s = scale ? scale + n0 : NULL;
            const float *g = G ? G + nb * gp : NULL;
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

#undef KBYTES
#undef LINE_AT
#undef PF_EVERY
#undef PF_SPREAD
#undef K_STEP
#undef K_LOOP
#undef DEFINE_TILE
#undef TILE_ARGS
#undef ROWS_TILE
#undef WIDE_TILE
#undef NARROW_TILE
