/* One whole decoder forward (Llama / Mistral / Qwen2, fp32) in a single call.
 *
 * Why: at batch 1 a tiny model's step in eager PyTorch is bound by per-op dispatch, not by
 * memory bandwidth. This file runs embed -> layers -> norm -> lm_head inside one OpenMP
 * parallel region, so a step costs what its weight and KV bytes cost to stream.
 *
 * Exactness by construction: every output element (of a linear, an attention row, a norm)
 * is computed by the same sequence of floating-point operations whatever the number of
 * rows M = B*T in the call and however the rows are tiled or split between threads:
 *   - a dot product accumulates 8 lanes with FMA in order over K, then sums the lanes in
 *     one fixed order (hsum8); tiles of fewer rows or columns repeat rows, never change it;
 *   - a thread always owns whole output elements (no split reductions).
 * So a position's logits are bit-identical whether it is scored alone or among k+1
 * positions, at any batch size. docs/exactness.md.
 *
 * Layouts (row-major, fp32):
 *   linear weight (N, K) as in Hugging Face; qkv and gate_up are fused at load:
 *   qkv (H*D + 2*Hkv*D, d), gate_up (2*F, d); KV cache per layer (rows, Hkv, max_len, D).
 */
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <omp.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

typedef struct {
    int hidden, heads, kv_heads, head_dim, inter, vocab, layers, rope_len;
    float eps;
    const float *embed, *norm, *head;         /* (V, d), (d,), (V, d) */
    const float *rope_cos, *rope_sin;         /* (rope_len, D/2) */
    const float **in_norm, **qkv, **qkv_bias, **o, **post_norm, **gate_up, **down;
} Model;

typedef struct {
    float **k, **v;                            /* per layer: (rows, Hkv, max_len, D) */
    int rows, max_len;
} Cache;

/* ---- the one dot-product order ------------------------------------------------------- */
#if defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VSET(x) _mm256_set1_ps(x)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
static inline float hsum8(vec v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}
#else  /* portable: the same 8-lane order, written out (built with -ffp-contract=off) */
typedef struct { float l[8]; } vec;
#define PREFETCH(p) __builtin_prefetch(p)
static inline vec VZERO(void) { vec r = {{0}}; return r; }
static inline vec VLOAD(const float *p) { vec r; for (int i = 0; i < 8; i++) r.l[i] = p[i]; return r; }
#define VOP(name, expr) static inline vec name(vec a, vec b) { for (int i = 0; i < 8; i++) a.l[i] = (expr); return a; }
VOP(VMUL, a.l[i] * b.l[i])
VOP(VADD, a.l[i] + b.l[i])
VOP(VSUB, a.l[i] - b.l[i])
VOP(VMAX, a.l[i] > b.l[i] ? a.l[i] : b.l[i])
static inline vec VSET(float x) { vec r; for (int i = 0; i < 8; i++) r.l[i] = x; return r; }
static inline void VSTORE(float *p, vec v) { for (int i = 0; i < 8; i++) p[i] = v.l[i]; }
static inline vec VFMA(vec a, vec b, vec c) { for (int i = 0; i < 8; i++) c.l[i] += a.l[i] * b.l[i]; return c; }
static inline float hsum8(vec v) {
    float a[4]; for (int i = 0; i < 4; i++) a[i] = v.l[i] + v.l[i + 4];
    float b0 = a[0] + a[2], b1 = a[1] + a[3];
    return b0 + b1;
}
#endif

/* exp by Cephes' range reduction and polynomial, with plain multiplies and adds (no FMA),
 * so the vector and the scalar versions round identically element by element. */
#define EXP_HI 88.3762626647949f
#define EXP_LO -87.3365447505531f  /* ln(2^-126): results stay normal, so 2^fx is exact both ways */
#define LOG2E 1.44269504088896341f
#define EXP_C1 0.693359375f
#define EXP_C2 -2.12194440e-4f
static const float EXP_P[6] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                               4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};

static inline float exp_s(float x) {
    x = x > EXP_HI ? EXP_HI : (x < EXP_LO ? EXP_LO : x);
    float fx = floorf(x * LOG2E + 0.5f);
    x = x - fx * EXP_C1;
    x = x - fx * EXP_C2;
    float y = EXP_P[0];
    for (int i = 1; i < 6; i++) y = y * x + EXP_P[i];
    y = y * (x * x) + x + 1.0f;
    return ldexpf(y, (int)fx);
}

#if defined(__AVX2__) && defined(__FMA__)
static inline __m256 exp_v(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
    __m256 fx = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _mm256_set1_ps(0.5f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(EXP_C1)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(EXP_C2)));
    __m256 y = _mm256_set1_ps(EXP_P[0]);
    for (int i = 1; i < 6; i++) y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(EXP_P[i]));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, _mm256_mul_ps(x, x)), x), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
#else
static inline vec exp_v(vec x) { for (int i = 0; i < 8; i++) x.l[i] = exp_s(x.l[i]); return x; }
#endif
#define VEXP exp_v

/* r[s] *= scale for s < n; returns the max (exact in any order) */
static inline float scale_max(float *r, int n, float scale) {
    int s = 0;
    vec mx8 = VSET(-INFINITY);
    for (; s + 8 <= n; s += 8) { vec v = VMUL(VLOAD(r + s), VSET(scale)); VSTORE(r + s, v); mx8 = VMAX(mx8, v); }
    float buf[8], mx = -INFINITY;
    VSTORE(buf, mx8);
    for (int i = 0; i < 8; i++) mx = buf[i] > mx ? buf[i] : mx;
    for (; s < n; s++) { r[s] *= scale; mx = r[s] > mx ? r[s] : mx; }
    return mx;
}

/* v[i] = exp(v[i] - shift) for i < n; returns their sum: 8 lanes over whole chunks, hsum8,
 * then the tail in order (a function of n alone, so the same for a query in any block) */
static inline float exp_shift(float *v, int n, float shift) {
    int i = 0;
    vec acc = VZERO();
    for (; i + 8 <= n; i += 8) {
        vec e = VEXP(VSUB(VLOAD(v + i), VSET(shift)));
        VSTORE(v + i, e);
        acc = VADD(acc, e);
    }
    float sum = hsum8(acc);
    for (; i < n; i++) { v[i] = exp_s(v[i] - shift); sum += v[i]; }
    return sum;
}

static inline float dot(const float *a, const float *b, int n) {
    vec acc = VZERO();
    for (int c = 0; c < n; c += 8) acc = VFMA(VLOAD(a + c), VLOAD(b + c), acc);
    return hsum8(acc);
}

/* ---- the dot-product tile (attention's scores) ----------------------------------------- */
/* Every output is one 8-lane FMA chain over K, then hsum8: the linears below do the same.
 * mt (<= 4) rows of x against 3 rows w0..w2 (row layout, K floats apart), 12 accumulators
 * + 3 weights + 1 input = 16 ymm registers. pf, if given, is prefetched along the way. */
#define TM 4        /* rows of x per tile */
#define TN 3        /* rows of w per tile */
#define M_CHUNK 64  /* input rows kept in L2 while a linear's weights stream past (prefill) */

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
        for (int j = 0; j < nt; j++) {
            float s = hsum8(a[i][j]);
            if (b) s += b[j];
            float *dst = y + (size_t)i * ldy + j;
            *dst = acc_out ? *dst + s : s;
        }
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
    for (int j = 0; j < nt; j++) {
        float s = hsum8(acc[j]);
        if (b) s += b[j];
        y[j] = acc_out ? y[j] + s : s;
    }
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
        for (int j = 0; j < nt; j++) {
            float s = hsum8(a[i][j]);
            if (b) s += b[j];
            float *dst = y + (size_t)i * ldy + j;
            *dst = acc_out ? *dst + s : s;
        }
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

/* ---- row-wise pieces ----------------------------------------------------------------- */
static void rmsnorm_rows(const float *x, const float *w, float *y, int M, int d, float eps) {
    #pragma omp for schedule(static)
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * d;
        float r = 1.0f / sqrtf(dot(xr, xr, d) / (float)d + eps);
        for (int i = 0; i < d; i++) y[(size_t)m * d + i] = w[i] * (xr[i] * r);
    }
}

static inline void rope(float *v, const float *cs, const float *sn, int half) {
    for (int i = 0; i < half; i++) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
    }
}

/* rope on q and k, then write k and v into the cache at each row's position */
static void rope_and_store(const Model *md, const Cache *c, int layer, float *qkv, int M, int T,
                           const int64_t *pos, int row0) {
    int H = md->heads, Hkv = md->kv_heads, D = md->head_dim, half = D / 2;
    int ld = (H + 2 * Hkv) * D;
    #pragma omp for schedule(static)
    for (int m = 0; m < M; m++) {
        int p = (int)pos[m], row = row0 + m / T;
        float *q = qkv + (size_t)m * ld, *k = q + H * D, *v = k + Hkv * D;
        const float *cs = md->rope_cos + (size_t)p * half, *sn = md->rope_sin + (size_t)p * half;
        for (int h = 0; h < H; h++) rope(q + h * D, cs, sn, half);
        for (int g = 0; g < Hkv; g++) {
            rope(k + g * D, cs, sn, half);
            size_t at = (((size_t)row * Hkv + g) * c->max_len + p) * D;
            for (int i = 0; i < D; i++) { c->k[layer][at + i] = k[g * D + i]; c->v[layer][at + i] = v[g * D + i]; }
        }
    }
}

/* softmax(q K^T / sqrt(D)) V over each query's cached positions 0..pos. One work item is a
 * (batch row, kv head, block of up to QB of that row's T*G queries). The block's scores are
 * a small linear (queries x keys, through tile_mn), so each key row is loaded once per 4
 * queries; a query's weighted sum of values keeps D/8 accumulators in registers. Each
 * query's arithmetic is the same as if it were alone: its scores, its softmax, its sum,
 * all in key order. Scores past a query's own position are computed and never read. */
#define QB 16       /* queries per block: 16 score rows of scratch per thread */
#define MAX_D 256   /* head_dim bound for the register accumulators (checked by the caller) */

static void attention(const Model *md, const Cache *c, int layer, const float *qkv, int B, int T,
                      const int64_t *pos, int row0, float *out, float *scratch) {
    int H = md->heads, Hkv = md->kv_heads, D = md->head_dim, G = H / Hkv, L = c->max_len;
    int ld = (H + 2 * Hkv) * D, nq = T * G, nblk = (nq + QB - 1) / QB;
    float scale = 1.0f / sqrtf((float)D);
    float *qs = scratch + (size_t)omp_get_thread_num() * QB * (L + D), *sc = qs + QB * D;
    #pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < B * Hkv * nblk; item++) {
        int b = item / (Hkv * nblk), g = (item / nblk) % Hkv, q0 = (item % nblk) * QB;
        int n = (q0 + QB < nq ? q0 + QB : nq) - q0, row = row0 + b, p[QB], pmax = 0;
        const float *kb = c->k[layer] + ((size_t)row * Hkv + g) * L * D;
        const float *vb = c->v[layer] + ((size_t)row * Hkv + g) * L * D;
        float *o[QB];
        for (int j = 0; j < n; j++) {       /* query q0+j: position (q0+j)/G, head g*G + (q0+j)%G */
            int m = b * T + (q0 + j) / G, h = g * G + (q0 + j) % G;
            for (int i = 0; i < D; i++) qs[j * D + i] = qkv[(size_t)m * ld + h * D + i];
            o[j] = out + (size_t)m * H * D + h * D;
            p[j] = (int)pos[m];
            pmax = p[j] > pmax ? p[j] : pmax;
        }
        for (int s0 = 0; s0 <= pmax; s0 += TN) {      /* sc (n, pmax+1) = qs (n, D) @ K^T */
            int st = pmax + 1 - s0 < TN ? pmax + 1 - s0 : TN;
            const float *k0 = kb + (size_t)s0 * D, *k1 = st > 1 ? k0 + D : k0, *k2 = st > 2 ? k0 + 2 * D : k0;
            for (int j = 0; j < n; j += TM) {
                float *y = sc + (size_t)j * L + s0;
                switch (n - j < TM ? n - j : TM) {
                    case 4: tile_mn(qs + j * D, 4, k0, k1, k2, D, y, L, st, NULL, 0, NULL); break;
                    case 3: tile_mn(qs + j * D, 3, k0, k1, k2, D, y, L, st, NULL, 0, NULL); break;
                    case 2: tile_mn(qs + j * D, 2, k0, k1, k2, D, y, L, st, NULL, 0, NULL); break;
                    default: tile_mn(qs + j * D, 1, k0, k1, k2, D, y, L, st, NULL, 0, NULL); break;
                }
            }
        }
        for (int j = 0; j < n; j++) {
            float *r = sc + (size_t)j * L, mx = scale_max(r, p[j] + 1, scale);
            float inv = 1.0f / exp_shift(r, p[j] + 1, mx);
            vec acc[MAX_D / 8];
            for (int i = 0; i < D / 8; i++) acc[i] = VZERO();
            for (int s = 0; s <= p[j]; s++) {
                vec w = VSET(r[s] * inv);
                const float *vs = vb + (size_t)s * D;
                for (int i = 0; i < D / 8; i++) acc[i] = VFMA(w, VLOAD(vs + 8 * i), acc[i]);
            }
            for (int i = 0; i < D / 8; i++) VSTORE(o[j] + 8 * i, acc[i]);
        }
    }
}

/* act = silu(gate) * up; F is a multiple of 8 */
static void silu_mul(const float *gu, float *act, int M, int F) {
    #pragma omp for schedule(static)
    for (int m = 0; m < M; m++) {
        const float *g = gu + (size_t)m * 2 * F, *u = g + F;
        float *a = act + (size_t)m * F;
#if defined(__AVX2__) && defined(__FMA__)
        for (int i = 0; i < F; i += 8) {
            __m256 gv = _mm256_loadu_ps(g + i);
            __m256 e = exp_v(_mm256_sub_ps(_mm256_setzero_ps(), gv));
            __m256 s = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
            _mm256_storeu_ps(a + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
        }
#else
        for (int i = 0; i < F; i++) a[i] = g[i] / (1.0f + exp_s(-g[i])) * u[i];
#endif
    }
}

/* floats of scratch sd_forward needs for M rows */
size_t sd_scratch_floats(const Model *md, int M, int max_len, int threads) {
    size_t d = md->hidden, qkv = (size_t)(md->heads + 2 * md->kv_heads) * md->head_dim;
    size_t att = (size_t)md->heads * md->head_dim, f2 = 2 * (size_t)md->inter;
    return (size_t)M * (2 * d + qkv + att + f2 + md->inter) + (size_t)threads * QB * (max_len + md->head_dim);
}

/* tokens, pos: (B, T) int64. Rows b use cache row row0 + b. out: (B*T, V) logits, or
 * (B*T, d) final hidden states when want_logits is 0. Returns 0, or a negative code for an
 * argument the caller should have refused (-1 position out of range, -2 token id). */
int sd_forward(const Model *md, const Cache *c, int B, int T, const int64_t *tokens,
               const int64_t *pos, int row0, int layers, int want_logits, float *out,
               float *scratch, int threads) {
    int M = B * T, d = md->hidden, F = md->inter;
    int H = md->heads, D = md->head_dim, Hkv = md->kv_heads;
    int nq = (H + 2 * Hkv) * D;
    for (int m = 0; m < M; m++) {
        if (pos[m] < 0 || pos[m] >= c->max_len || pos[m] >= md->rope_len) return -1;
        if (tokens[m] < 0 || tokens[m] >= md->vocab) return -2;
    }
    if (md->head_dim > MAX_D) return -3;
    float *x = scratch, *h = x + (size_t)M * d, *qkv = h + (size_t)M * d;
    float *att = qkv + (size_t)M * nq, *gu = att + (size_t)M * H * D, *act = gu + (size_t)M * 2 * F;
    float *scores = act + (size_t)M * F;
    #pragma omp parallel num_threads(threads)
    {
        #pragma omp for schedule(static)
        for (int m = 0; m < M; m++)
            for (int i = 0; i < d; i++) x[(size_t)m * d + i] = md->embed[(size_t)tokens[m] * d + i];
        for (int l = 0; l < layers; l++) {
            rmsnorm_rows(x, md->in_norm[l], h, M, d, md->eps);
            linear(h, M, d, md->qkv[l], md->qkv_bias[l], nq, qkv, 0);
            rope_and_store(md, c, l, qkv, M, T, pos, row0);
            attention(md, c, l, qkv, B, T, pos, row0, att, scores);
            linear(att, M, H * D, md->o[l], NULL, d, x, 1);
            rmsnorm_rows(x, md->post_norm[l], h, M, d, md->eps);
            linear(h, M, d, md->gate_up[l], NULL, 2 * F, gu, 0);
            silu_mul(gu, act, M, F);
            linear(act, M, F, md->down[l], NULL, d, x, 1);
        }
        rmsnorm_rows(x, md->norm, want_logits ? h : out, M, d, md->eps);
        if (want_logits) linear(h, M, d, md->head, NULL, md->vocab, out, 0);
    }
    return 0;
}

/* The roofline probe: read n floats (n a multiple of 8*threads) the way the linears read
 * their weights, split between the threads in contiguous chunks. Returns the sum. */
float sd_stream(const float *buf, size_t n, int threads) {
    float total = 0.0f;
    #pragma omp parallel num_threads(threads) reduction(+:total)
    {
        size_t per = n / (size_t)omp_get_num_threads() / 32 * 32;
        const float *p = buf + per * (size_t)omp_get_thread_num();
        vec a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
        for (size_t i = 0; i < per; i += 32) {
            a0 = VFMA(VLOAD(p + i), VLOAD(p + i), a0);
            a1 = VFMA(VLOAD(p + i + 8), VLOAD(p + i + 8), a1);
            a2 = VFMA(VLOAD(p + i + 16), VLOAD(p + i + 16), a2);
            a3 = VFMA(VLOAD(p + i + 24), VLOAD(p + i + 24), a3);
        }
        total += hsum8(a0) + hsum8(a1) + hsum8(a2) + hsum8(a3);
    }
    return total;
}

/* y (M, N) = x (M, K) @ W (N, K)^T: the forward's linear on its own (benchmarks, tests) */
void sd_linear(const float *x, int M, int K, const float *W, int N, float *y, int threads) {
    #pragma omp parallel num_threads(threads)
    linear(x, M, K, W, NULL, N, y, 0);
}
