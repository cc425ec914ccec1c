/* One whole decoder forward (Llama / Mistral / Qwen2, fp32) in a single call.
 *
 * Why: at batch 1 a tiny model's step in eager PyTorch is bound by per-op dispatch, not by
 * memory bandwidth. This file runs embed -> layers -> norm -> lm_head inside one OpenMP
 * parallel region, so a step costs what its weight and KV bytes cost to stream.
 *
 * Exactness by construction: every output element (of a linear, an attention row, a norm)
 * is computed by the same sequence of floating-point operations whatever the number of
 * rows M = B*T in the call and however the rows are tiled or split between threads:
 *   - a linear's output is one FMA chain over K in order (linear.h); an attention score
 *     accumulates 8 lanes with FMA in order over D, then sums the lanes in one fixed order
 *     (hsum8); tiles of fewer rows or columns repeat rows, never change it;
 *   - a thread always owns whole output elements (no split reductions).
 * So a position's logits are bit-identical whether it is scored alone or among k+1
 * positions, at any batch size. docs/exactness.md.
 *
 * Layouts (row-major, fp32):
 *   linear weight (N, K) as in Hugging Face; qkv and gate_up are fused at load:
 *   qkv (H*D + 2*Hkv*D, d), gate_up (2*F, d); KV cache per layer (rows, Hkv, max_len, D).
 */
#include "simd.h"
#include "model.h"
#include "linear.h"
#include "sampling.h"
#include "attention.h"

/* a linear of the model: int8 or int4 panels with their scales, or fp32 panels */
static inline void lin(const Model *md, const float *x, int M, int K, const float *P, const float *const *s,
                       int l, const float *bias, int N, float *y, int acc_out) {
    if (s && md->int4) linear_i4(x, M, K, (const uint8_t *)P, s[l], NULL, bias, N, y, acc_out);
    else if (s) linear_i8(x, M, K, (const int8_t *)P, NULL, s[l], bias, N, y, acc_out);
    else linear(x, M, K, P, NULL, NULL, bias, N, y, acc_out);
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

/* rope on q and k (at each input's position), then write k and v into the cache at its
 * slot: its position, or for a token tree (slots given) the row's length plus its index */
static void rope_and_store(const Model *md, const Cache *c, int layer, float *qkv, int M, int T,
                           const int64_t *pos, const int64_t *slots, int row0) {
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
            size_t at = (((size_t)row * Hkv + g) * c->max_len + (slots ? slots[m] : p)) * D;
            for (int i = 0; i < D; i++) { c->k[layer][at + i] = k[g * D + i]; c->v[layer][at + i] = v[g * D + i]; }
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

/* One forward (model.h's Call says what to feed and what to return). Returns 0, or a negative
 * code for an argument the caller should have refused (-1 position or slot out of range, -2
 * token id, -4 a tree slot outside [tree_base, tree_base + MAX_TREE)). */
static int forward(const Model *md, const Cache *c, int B, int T, const int64_t *tokens, const float *embeds,
                   const int64_t *pos, const int64_t *slots, const uint64_t *anc, const int64_t *tree_base,
                   int row0, int layers, int want_logits, float *out, int64_t *argmax, float *scratch,
                   int threads) {
    int M = B * T, d = md->hidden, F = md->inter;
    int H = md->heads, D = md->head_dim, Hkv = md->kv_heads;
    int nq = (H + 2 * Hkv) * D;
    for (int m = 0; m < M; m++) {
        if (pos[m] < 0 || pos[m] >= c->max_len || pos[m] >= md->rope_len) return -1;
        if (!embeds && (tokens[m] < 0 || tokens[m] >= md->vocab)) return -2;
        if (slots && (slots[m] < 0 || slots[m] >= c->max_len)) return -1;
        if (anc && (!slots || !tree_base || slots[m] < tree_base[m / T] || slots[m] >= tree_base[m / T] + MAX_TREE))
            return -4;
    }
    if (md->head_dim > MAX_D) return -3;
    float *x = scratch, *h = x + (size_t)M * d, *qkv = h + (size_t)M * d;
    float *att = qkv + (size_t)M * nq, *gu = att + (size_t)M * H * D, *act = gu + (size_t)M * 2 * F;
    float *scores = act + (size_t)M * F;
    #pragma omp parallel num_threads(threads)
    {
        #pragma omp for schedule(static)
        for (int m = 0; m < M; m++)
            for (int i = 0; i < d; i++)
                x[(size_t)m * d + i] = embeds ? embeds[(size_t)m * d + i] : md->embed[(size_t)tokens[m] * d + i];
        for (int l = 0; l < layers; l++) {
            rmsnorm_rows(x, md->in_norm[l], h, M, d, md->eps);
            lin(md, h, M, d, md->qkv[l], md->qkv_s, l, md->qkv_bias[l], nq, qkv, 0);
            rope_and_store(md, c, l, qkv, M, T, pos, slots, row0);
            attention(md, c, l, qkv, B, T, pos, slots, anc, tree_base, row0, att, scores);
            lin(md, att, M, H * D, md->o[l], md->o_s, l, NULL, d, x, 1);
            rmsnorm_rows(x, md->post_norm[l], h, M, d, md->eps);
            lin(md, h, M, d, md->gate_up[l], md->gate_up_s, l, NULL, 2 * F, gu, 0);
            silu_mul(gu, act, M, F);
            lin(md, act, M, F, md->down[l], md->down_s, l, NULL, d, x, 1);
        }
        rmsnorm_rows(x, md->norm, want_logits ? h : out, M, d, md->eps);
        if (want_logits) lin(md, h, M, d, md->head, md->head_s ? &md->head_s : NULL, 0, NULL, md->vocab, out, 0);
        if (want_logits && argmax) {
            #pragma omp for schedule(static)
            for (int m = 0; m < M; m++) argmax[m] = argmax_row(out + (size_t)m * md->vocab, md->vocab);
        }
    }
    return 0;
}

/* The forward Python calls: one struct of arguments (model.h), so the ctypes side names each
 * field once instead of passing seventeen positional ones. */
int sd_forward(const Model *md, const Cache *c, const Call *a) {
    return forward(md, c, a->B, a->T, a->tokens, a->embeds, a->pos, a->slots, a->anc, a->tree_base, a->row0,
                   a->layers, a->want_logits, a->out, a->argmax, a->scratch, a->threads);
}

/* model.h's layout_of, for the ctypes mirror's check at load. */
int sd_layout(int64_t *out, int n) { return layout_of(out, n); }

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

/* Greedy drafting without returning to Python: `steps` single-token forwards, each feeding
 * the previous step's argmax. tokens (B,) holds the first token to feed (overwritten with
 * the last argmax); rows b feed at positions pos0[b], pos0[b] + 1, ...; out (B, steps)
 * receives the argmaxes (the first maximum, NaN counting as maximal, as torch.argmax).
 * logits: (B, V) scratch. Returns sd_forward's code. */
int sd_draft_argmax(const Model *md, const Cache *c, int B, int64_t *tokens, const int64_t *pos0,
                    int steps, int layers, int64_t *out, float *logits, float *scratch, int threads) {
    int64_t pos[B];
    for (int s = 0; s < steps; s++) {
        for (int b = 0; b < B; b++) pos[b] = pos0[b] + s;
        int rc = forward(md, c, B, 1, tokens, NULL, pos, NULL, NULL, NULL, 0, layers, 1, logits, tokens, scratch, threads);
        if (rc) return rc;
        for (int b = 0; b < B; b++) out[(size_t)b * steps + s] = tokens[b];
    }
    return 0;
}

/* Sampled drafting without returning to Python: as sd_draft_argmax, but each step samples
 * its token from q = softmax(logits / temperature[b]) with the uniform u[b, s], and q is
 * written to q_out (B, steps, V) for verification. The first step feeds T0 tokens per row,
 * feed (B, T0) at pos0[b], pos0[b] + 1, ... (the newest token, or the last draft and the bonus
 * token after a round that accepted every draft) and samples from its last position; later
 * steps feed the previous sample. logits: (B * T0, V) scratch. */
int sd_draft_sample(const Model *md, const Cache *c, int B, int T0, const int64_t *feed, const int64_t *pos0,
                    int steps, int layers, const float *temperature, const float *u, int64_t *out,
                    float *q_out, float *logits, float *scratch, int threads) {
    int64_t pos[B * T0], cur[B];
    int V = md->vocab;
    for (int s = 0; s < steps; s++) {
        int T = s ? 1 : T0;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < T; j++) pos[b * T + j] = pos0[b] + (s ? T0 - 1 + s : j);
        int rc = forward(md, c, B, T, s ? cur : feed, NULL, pos, NULL, NULL, NULL, 0, layers, 1, logits, NULL, scratch, threads);
        if (rc) return rc;
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (int b = 0; b < B; b++) {
            float *q = q_out + ((size_t)b * steps + s) * V;
            out[(size_t)b * steps + s] = cur[b] = sample_row(logits + ((size_t)b * T + T - 1) * V, V, temperature[b],
                                                             u[(size_t)b * steps + s], q);
        }
    }
    return 0;
}

/* Drafting by a feature head (models/feature_head.py) without returning to Python: the head is
 * a one-layer model md whose input is x = tok_part[token] + proj · rmsnorm(f; hnorm) (its
 * eh_proj split into a per-token table and the feature half). Step 0 feeds T0 entries per row,
 * tokens feed (B, T0) with features feats0 (B, T0, d) at pos0[b], pos0[b] + 1, ..., of which row
 * b's first n_feed[b] are real (NULL: all; the rest are padding, written past the row's entries
 * and overwritten by its drafts before any query reads them); each later step feeds the previous
 * step's token, at the position after the row's last, with the head's own normed output at the
 * row's last entry as its feature. A step picks the next token over the head's vocabulary (N = md->vocab):
 * the argmax when temperature is NULL, else sampled from q = softmax(logits / temperature[b]) at
 * u[b, s], q scattered through vocab into q_out (B, steps, V), which the caller zeroed; and
 * maps it through vocab (N,) to a token id. out (B, steps) receives the ids. work: (2 * T0 + 1)
 * * B * d + B * N floats; logits: (B * T0, N). Returns sd_forward's code. */
int sd_head_draft(const Model *md, const Cache *c, int B, int T0, const int64_t *feed, const float *feats0,
                  const int64_t *n_feed, const int64_t *pos0, int steps, const float *tok_part, const float *proj, const float *hnorm,
                  float eps, const int64_t *vocab, const float *temperature, const float *u, int V, float *q_out,
                  int64_t *out, float *logits, float *work, float *scratch, int threads) {
    int d = md->hidden, N = md->vocab;
    int64_t pos[B * T0], best[B * T0], cur[B];
    float *x = work, *hn = x + (size_t)B * T0 * d, *h = hn + (size_t)B * T0 * d, *qs = h + (size_t)B * d;
    #define LAST(b) ((n_feed ? (int)n_feed[b] : T0) - 1)     /* row b's last real entry of the first feed */
    for (int s = 0; s < steps; s++) {
        int T = s ? 1 : T0, M = B * T;
        const int64_t *tk = s ? cur : feed;
        const float *f = s ? h : feats0;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < T; j++) pos[b * T + j] = pos0[b] + (s ? LAST(b) + s : j);
        #pragma omp parallel num_threads(threads)
        {
            #pragma omp for schedule(static)
            for (int m = 0; m < M; m++)
                for (int i = 0; i < d; i++) x[(size_t)m * d + i] = tok_part[(size_t)tk[m] * d + i];
            rmsnorm_rows(f, hnorm, hn, M, d, eps);
            linear(hn, M, d, proj, NULL, NULL, NULL, d, x, 1);
        }
        int rc = forward(md, c, B, T, tk, x, pos, NULL, NULL, NULL, 0, 1, 1, logits,
                            temperature ? NULL : best, scratch, threads);
        if (rc) return rc;
        for (int b = 0; b < B; b++)                       /* the last entry's output: h follows x */
            for (int i = 0; i < d; i++) h[(size_t)b * d + i] = scratch[((size_t)M + b * T + (s ? 0 : LAST(b))) * d + i];
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (int b = 0; b < B; b++) {
            int row = b * T + (s ? 0 : LAST(b));
            int64_t pick = best[row];
            if (temperature) {
                float *q = qs + (size_t)b * N, *qo = q_out + ((size_t)b * steps + s) * V;
                pick = sample_row(logits + (size_t)row * N, N, temperature[b], u[(size_t)b * steps + s], q);
                for (int j = 0; j < N; j++) qo[vocab[j]] = q[j];
            }
            out[(size_t)b * steps + s] = cur[b] = vocab[pick];
        }
    }
    #undef LAST
    return 0;
}
