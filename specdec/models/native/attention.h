/* Attention over the KV cache (decoder.c's forward), for chains and token trees. */
#pragma once
#include "simd.h"
#include "model.h"
#include "linear.h"   /* tile_mn: a block's scores are a small linear */

/* softmax(q K^T / sqrt(D)) V over each query's cached positions 0..pos. One work item is a
 * (batch row, kv head, block of up to QB of that row's T*G queries). The block's scores are
 * a small linear (queries x keys, through tile_mn), so each key row is loaded once per 4
 * queries; a query's weighted sum of values keeps D/8 accumulators in registers. Each
 * query's arithmetic is the same as if it were alone: its scores, its softmax, its sum,
 * all in key order. Scores past a query's own position are computed and never read.
 * A token tree (anc given): a query sees the row's cache before slot tree_base[b], then the
 * tree's inputs that are its ancestors or itself (bit i of anc: the input at slot base + i). Their
 * scores are moved down to follow the cache's, and the values are read through their slots,
 * so a node's arithmetic is its path's scored as a chain, key for key: the same logits. */
#define MAX_TREE 64 /* slots a tree may span past its base: one bit each in anc */
#define QB 16       /* queries per block: 16 score rows of scratch per thread */

/* out[0..8 NV) = sum over s < n of (r[s] inv) v[s][0..8 NV), each element's FMA chain in key
 * order. NV is a constant at each call, so the accumulators stay in registers (with a
 * runtime count they lived on the stack: a load and a store around every FMA). */
static inline __attribute__((always_inline)) void weighted_sum(const float *r, float inv, int n,
        const float *v, int ldv, float *out, int NV, const int *extra, int n_extra) {
    vec acc[8];
    for (int i = 0; i < NV; i++) acc[i] = VZERO();
    for (int s = 0; s < n; s++) {
        vec w = VSET(r[s] * inv);
        const float *vs = v + (size_t)s * ldv;
        for (int i = 0; i < NV; i++) acc[i] = VFMA(w, VLOAD(vs + 8 * i), acc[i]);
    }
    for (int t = 0; t < n_extra; t++) {              /* a tree's ancestors, read at their slots */
        vec w = VSET(r[n + t] * inv);
        const float *vs = v + (size_t)extra[t] * ldv;
        for (int i = 0; i < NV; i++) acc[i] = VFMA(w, VLOAD(vs + 8 * i), acc[i]);
    }
    for (int i = 0; i < NV; i++) VSTORE(out + 8 * i, acc[i]);
}
#define MAX_D 256   /* head_dim bound (checked by the caller) */

static void attention(const Model *md, const Cache *c, int layer, const float *qkv, int B, int T,
                      const int64_t *pos, const int64_t *slots, const uint64_t *anc,
                      const int64_t *tree_base, int row0, float *out, float *scratch) {
    int H = md->heads, Hkv = md->kv_heads, D = md->head_dim, G = H / Hkv, L = c->max_len;
    int ld = (H + 2 * Hkv) * D, nq = T * G, nblk = (nq + QB - 1) / QB;
    float scale = 1.0f / sqrtf((float)D);
    float *qs = scratch + (size_t)omp_get_thread_num() * QB * (L + D), *sc = qs + QB * D;
    #pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < B * Hkv * nblk; item++) {
        int b = item / (Hkv * nblk), g = (item / nblk) % Hkv, q0 = (item % nblk) * QB;
        int n = (q0 + QB < nq ? q0 + QB : nq) - q0, row = row0 + b, p[QB], mq[QB], pmax = 0;
        const float *kb = c->k[layer] + ((size_t)row * Hkv + g) * L * D;
        const float *vb = c->v[layer] + ((size_t)row * Hkv + g) * L * D;
        float *o[QB];
        for (int j = 0; j < n; j++) {       /* query q0+j: position (q0+j)/G, head g*G + (q0+j)%G */
            int m = b * T + (q0 + j) / G, h = g * G + (q0 + j) % G;
            for (int i = 0; i < D; i++) qs[j * D + i] = qkv[(size_t)m * ld + h * D + i];
            o[j] = out + (size_t)m * H * D + h * D;
            p[j] = (int)(slots ? slots[m] : pos[m]);                /* its last visible key */
            mq[j] = m;
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
            float *r = sc + (size_t)j * L;
            int nc = p[j] + 1, ne = 0, extra[MAX_TREE];    /* nc contiguous keys, then ne by slot */
            if (anc) {                                      /* bit i: the key at slot base + i */
                int base = (int)tree_base[b];
                nc = base;
                for (uint64_t bits = anc[mq[j]]; bits; bits &= bits - 1) {
                    int i = __builtin_ctzll(bits);
                    extra[ne] = base + i;
                    r[base + ne] = r[base + i];                /* i >= ne: a move down */
                    ne++;
                }
            }
            float mx = scale_max(r, nc + ne, scale);
            float inv = 1.0f / exp_shift(r, nc + ne, mx);
            for (int d0 = 0; d0 < D; d0 += 64) {          /* up to 64 dims at a time */
                switch (D - d0 >= 64 ? 8 : (D - d0) / 8) {
                    case 8: weighted_sum(r, inv, nc, vb + d0, D, o[j] + d0, 8, extra, ne); break;
                    case 4: weighted_sum(r, inv, nc, vb + d0, D, o[j] + d0, 4, extra, ne); break;
                    default:
                        for (int i = 0; i < (D - d0) / 8; i++)
                            weighted_sum(r, inv, nc, vb + d0 + 8 * i, D, o[j] + d0 + 8 * i, 1, extra, ne);
                }
            }
        }
    }
}
