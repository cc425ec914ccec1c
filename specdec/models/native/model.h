/* The structs Python hands the decoder (models/native/forward.py mirrors them with ctypes and
 * checks the mirror against sd_layout at load: a field added on one side only fails there,
 * not as a wrong pointer deep in a forward). */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int hidden, heads, kv_heads, head_dim, inter, vocab, layers, rope_len;
    float eps;
    const float *embed, *norm, *head;         /* (V, d), (d,), (V, d) */
    const float *rope_cos, *rope_sin;         /* (rope_len, D/2) */
    const float **in_norm, **qkv, **qkv_bias, **o, **post_norm, **gate_up, **down;
    /* quantized weights: per layer the scales of qkv, o, gate_up, down, and the head's; NULL
     * for fp32 (then the weight pointers above are floats). int8: (N,) scales of int8
     * panels; int4 (int4 = 1): packed group scales of int4 panels (linear.h, sd_pack_i4) */
    const float **qkv_s, **o_s, **gate_up_s, **down_s, *head_s;
    int int4;
} Model;

typedef struct {
    float **k, **v;                            /* per layer: (rows, Hkv, max_len, D) */
    int rows, max_len;
} Cache;

/* One forward's arguments (sd_forward): what to feed, where, and what to return.
 * tokens, pos: (B, T) int64; embeds: NULL, or (B*T, d) floats used instead of the tokens'
 * embeddings (a feature head's input; tokens are then not read). Rows b use cache row
 * row0 + b. slots, anc, tree_base: NULL (a chain: input m writes its K/V at pos[m] and sees
 * keys 0..pos[m]), or a token tree: (B, T) int64 slots where each input's K/V go, (B, T)
 * uint64 ancestor masks over the MAX_TREE slots from tree_base (B,) on (attention.h).
 * out: (B*T, V) logits, or (B*T, d) final hidden states when want_logits is 0. argmax: NULL,
 * or (B*T,) int64 that receives each position's argmax (while its logits are still in
 * cache: a greedy round then needs no tensor op after the forward). */
typedef struct {
    int B, T;
    const int64_t *tokens;
    const float *embeds;
    const int64_t *pos, *slots;
    const uint64_t *anc;
    const int64_t *tree_base;
    int row0, layers, want_logits;
    float *out;
    int64_t *argmax;
    float *scratch;
    int threads;
} Call;

/* The layout of the three structs, for the ctypes mirror's check: sizeof(Model), then each
 * field's offsetof in declaration order; the same for Cache and Call. Writes at most n
 * values to out and returns how many there are. */
static inline int layout_of(int64_t *out, int n) {
#define PUT(x) do { if (i < n) out[i] = (int64_t)(x); i++; } while (0)
    int i = 0;
    PUT(sizeof(Model));
    PUT(offsetof(Model, hidden)); PUT(offsetof(Model, heads)); PUT(offsetof(Model, kv_heads));
    PUT(offsetof(Model, head_dim)); PUT(offsetof(Model, inter)); PUT(offsetof(Model, vocab));
    PUT(offsetof(Model, layers)); PUT(offsetof(Model, rope_len)); PUT(offsetof(Model, eps));
    PUT(offsetof(Model, embed)); PUT(offsetof(Model, norm)); PUT(offsetof(Model, head));
    PUT(offsetof(Model, rope_cos)); PUT(offsetof(Model, rope_sin));
    PUT(offsetof(Model, in_norm)); PUT(offsetof(Model, qkv)); PUT(offsetof(Model, qkv_bias));
    PUT(offsetof(Model, o)); PUT(offsetof(Model, post_norm)); PUT(offsetof(Model, gate_up));
    PUT(offsetof(Model, down)); PUT(offsetof(Model, qkv_s)); PUT(offsetof(Model, o_s));
    PUT(offsetof(Model, gate_up_s)); PUT(offsetof(Model, down_s)); PUT(offsetof(Model, head_s));
    PUT(offsetof(Model, int4));
    PUT(sizeof(Cache));
    PUT(offsetof(Cache, k)); PUT(offsetof(Cache, v)); PUT(offsetof(Cache, rows)); PUT(offsetof(Cache, max_len));
    PUT(sizeof(Call));
    PUT(offsetof(Call, B)); PUT(offsetof(Call, T)); PUT(offsetof(Call, tokens)); PUT(offsetof(Call, embeds));
    PUT(offsetof(Call, pos)); PUT(offsetof(Call, slots)); PUT(offsetof(Call, anc)); PUT(offsetof(Call, tree_base));
    PUT(offsetof(Call, row0)); PUT(offsetof(Call, layers)); PUT(offsetof(Call, want_logits));
    PUT(offsetof(Call, out)); PUT(offsetof(Call, argmax)); PUT(offsetof(Call, scratch));
    PUT(offsetof(Call, threads));
#undef PUT
    return i;
}
