/* Sampling on the host while the logits are in cache: the argmax, the inverse CDF, and
 * a round's rejection-sampling verification for temperature-only rows
 * (verify/rejection.py's rule; the engine uses it where no row needs top-k, top-p or logits
 * processing). */
#pragma once
#include "simd.h"

/* the first maximum of r[0..n), NaN counting as maximal: torch.argmax's answer */
static int64_t argmax_row(const float *r, int n) {
    int best = 0;
    for (int v = 1; v < n; v++)
        if (!(r[best] != r[best]) && (r[v] > r[best] || r[v] != r[v])) best = v;
    return best;
}

/* The inverse CDF of the unnormalised w[0..n) at u, as verify.sampling.sample: the first
 * index whose running sum (in double, as torch's CPU cumsum, read back as float) exceeds u
 * x the total; the argmax where that lands on a zero (the numerical edge of the CDF). */
static int64_t inverse_cdf(const float *w, int n, float u) {
    double total = 0.0, cum = 0.0;
    for (int v = 0; v < n; v++) total += w[v];
    float at = u * (float)total;
    int idx = n - 1;
    for (int v = 0; v < n; v++) {
        cum += w[v];
        if ((float)cum > at) { idx = v; break; }
    }
    return w[idx] > 0.0f ? idx : argmax_row(w, n);
}

/* Sampling one row the way verify/sampling.py does it for temperature-only settings:
 * q = softmax(r / t) into q (expf, the sum in double), then the inverse CDF at u. */
static int64_t sample_row(const float *r, int n, float t, float u, float *q) {
    float mx = -INFINITY;
    for (int v = 0; v < n; v++) mx = r[v] / t > mx ? r[v] / t : mx;
    double total = 0.0;
    for (int v = 0; v < n; v++) total += q[v] = expf(r[v] / t - mx);
    float inv = (float)(1.0 / total);
    for (int v = 0; v < n; v++) q[v] *= inv;
    return inverse_cdf(q, n, u);
}

/* p[0..n) = softmax(r / t), vectorised (the decoder's exp): the target's p in verification */
static void softmax_row(const float *r, int n, float t, float *p) {
    float mx = -INFINITY;
    for (int v = 0; v < n; v++) { p[v] = r[v] / t; mx = p[v] > mx ? p[v] : mx; }
    float inv = 1.0f / exp_shift(p, n, mx);
    for (int v = 0; v < n; v++) p[v] *= inv;
}

/* One round's verification (Leviathan/Chen), rows b in parallel. logits (B, T, V) from the
 * verify forward, T = k + 1; temperature (B,); drafts (B, k); q (B, k, V) the draft's
 * probabilities, or NULL for a one-hot q; num_draft (B,); u (B, T): u[b][j] accepts draft j
 * when u q(x) < p(x), u[b][k] draws the recovered token from norm(max(0, p - q)) at the first
 * rejection (p with the draft token removed, for a one-hot q; p where that is empty) or the
 * bonus token from p. Out: n_acc (B,), next (B,), and beta (B, k) when not NULL, each
 * draft's acceptance probability sum min(p, q) (one-hot q: p(x)). scratch: (B, T + 1, V). */
void sd_verify_sample(const float *logits, int B, int T, int V, const float *temperature,
                      const int64_t *drafts, const float *q, const int64_t *num_draft, const float *u,
                      int64_t *n_acc, int64_t *next, float *beta, float *scratch, int threads) {
    int k = T - 1;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int b = 0; b < B; b++) {
        float *P = scratch + (size_t)b * (T + 1) * V, *res = P + (size_t)T * V;
        const float *qb = q ? q + (size_t)b * k * V : NULL;
        int n = 0, stopped = 0;
        for (int j = 0; j <= k && (!stopped || (beta && j < k)); j++) {
            float *p = P + (size_t)j * V;
            softmax_row(logits + ((size_t)b * T + j) * V, V, temperature[b], p);
            if (j == k) { stopped = 1; break; }
            int64_t x = drafts[(size_t)b * k + j];
            float px = x >= 0 && x < V ? p[x] : 0.0f, qx = qb ? (x >= 0 && x < V ? qb[(size_t)j * V + x] : 0.0f) : 1.0f;
            if (beta) {
                float s = px;
                if (qb) {
                    double m = 0.0;
                    for (int v = 0; v < V; v++) m += p[v] < qb[(size_t)j * V + v] ? p[v] : qb[(size_t)j * V + v];
                    s = m < 0.0 ? 0.0f : m > 1.0 ? 1.0f : (float)m;
                }
                beta[(size_t)b * k + j] = s;
            }
            if (!stopped) {
                if (j < num_draft[b] && u[(size_t)b * T + j] * qx < px) n++;
                else stopped = 1;
            }
        }
        const float *pn = P + (size_t)n * V, *final = pn;
        if (n < num_draft[b]) {                       /* rejected at n: the residual */
            int any = 0;
            for (int v = 0; v < V; v++) {
                float r = qb ? pn[v] - qb[(size_t)n * V + v] : pn[v];
                res[v] = r > 0.0f ? r : 0.0f;
            }
            if (!qb) res[drafts[(size_t)b * k + n]] = 0.0f;
            for (int v = 0; v < V && !any; v++) any = res[v] > 0.0f;
            if (any) final = res;
        }
        n_acc[b] = n;
        next[b] = inverse_cdf(final, V, u[(size_t)b * T + k]);
    }
}
