#ifndef EPI_ROPE_SHIFT_H
#define EPI_ROPE_SHIFT_H
#include <stdint.h>
/* Moving K cells to new positions: K is stored after RoPE, rotated by each cell's position, so a block loaded
 * `delta` positions away must be rotated by delta more. llama.cpp does this inside the next decode (its K-shift:
 * ggml_rope_ext_inplace on the F16 cache with the shift as position); doing it while a block is assembled saves that
 * pass. The arithmetic is ggml's CPU backend's (ops.cpp: ggml_rope_cache_init, rope_yarn without YaRN, rotate_pairs),
 * so the result is what llama.cpp's shift writes there (CUDA and Metal take their angles another way: epi leaves the
 * move to them). Numpy reference: native.reference.rope_shift_k. */

typedef struct {
    int32_t delta;      /* positions move by this much (may be negative) */
    int32_t head_dim;   /* values per KV head in a K row */
    int32_t n_rot;      /* leading dimensions of each head that RoPE rotates (even, <= head_dim, <= EPI_ROPE_MAX_ROT) */
    int32_t neox;       /* NEOX pairs (i, i + n_rot/2); otherwise NORM pairs (2i, 2i + 1) */
    float freq_base;
    float freq_scale;   /* linear position scaling; YaRN and attention factors are not handled */
    int32_t fused;      /* x0*c - x1*s as fmaf(x0, c, -(x1*s)), as a ggml built for a CPU with FMA computes it (GCC and
                         * clang contract the expression there); otherwise two roundings as written */
    const float *freq_factors; /* n_rot / 2 divisors of each pair's angle (Llama 3.1's rope_freqs tensor), or NULL */
} epi_rope_shift;

/* The `fused` a llama.cpp built for this CPU uses: 1 where the CPU has FMA (x86 with FMA, every arm64), else 0. */
int epi_rope_shift_fused_default(void);

#define EPI_ROPE_MAX_ROT 1024

/* The angles for s->delta, once per block: cache[j] = cos and cache[n_rot/2 + j] = sin of pair j's angle, computed as
 * ggml's rope cache computes them (laid out apart, so no row pass has to pick them out again); n_rot floats. */
void epi_rope_shift_cache(const epi_rope_shift *s, float *cache);

/* Rotates one K row of n_values floats (whole heads; values read from the f16 cache, so f16-exact) in place by the
 * cached angles; the caller rounds the row to f16 again, as ggml's rotate_pairs does per value. */
void epi_rope_shift_row(const epi_rope_shift *s, const float *cache, float *row, int64_t n_values);

/* The same rotation done in place on an f16 row with 8-wide AVX2/F16C/FMA, where the CPU has them and s is fused with
 * n_rot a multiple of 16; returns 1, or 0 (nothing done: use f16 -> epi_rope_shift_row -> f16). Same bits either way. */
int epi_rope_shift_row_f16_fast(const epi_rope_shift *s, const float *cache, uint8_t *row, int64_t n_values);

/* 1 when s describes a rotation these functions can do (head_dim > 0 and n_rot even, 0 < n_rot <= min(head_dim,
 * EPI_ROPE_MAX_ROT)), else 0. */
int epi_rope_shift_valid(const epi_rope_shift *s, int64_t n_values);
#endif
