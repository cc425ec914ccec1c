/* Vector primitives with one fixed rounding order: the 8-lane type, loads and FMAs, the
 * horizontal sum, exp, and the dot product (decoder.c explains why the order is fixed). */
#pragma once

#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <omp.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif


/* ---- the one dot-product order ------------------------------------------------------- */
#if defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VSET(x) _mm256_set1_ps(x)
#define VBCAST(p) _mm256_broadcast_ss(p)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
/* 8 int8 -> 8 floats (exact: every int8 is a float) */
#define VLOAD_I8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define PREFETCH_L2(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
static inline float hsum8(vec v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}
#else  /* portable: the same 8-lane order, written out (built with -ffp-contract=off) */
typedef struct { float l[8]; } vec;
#define PREFETCH(p) __builtin_prefetch(p)
#define PREFETCH_L2(p) __builtin_prefetch(p, 0, 2)
static inline vec VZERO(void) { vec r = {{0}}; return r; }
static inline vec VLOAD(const float *p) { vec r; for (int i = 0; i < 8; i++) r.l[i] = p[i]; return r; }
static inline vec VLOAD_I8(const int8_t *p) { vec r; for (int i = 0; i < 8; i++) r.l[i] = (float)p[i]; return r; }
#define VOP(name, expr) static inline vec name(vec a, vec b) { for (int i = 0; i < 8; i++) a.l[i] = (expr); return a; }
VOP(VMUL, a.l[i] * b.l[i])
VOP(VADD, a.l[i] + b.l[i])
VOP(VSUB, a.l[i] - b.l[i])
VOP(VMAX, a.l[i] > b.l[i] ? a.l[i] : b.l[i])
static inline vec VSET(float x) { vec r; for (int i = 0; i < 8; i++) r.l[i] = x; return r; }
#define VBCAST(p) VSET(*(p))
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
