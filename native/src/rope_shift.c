/* K re-rotation for a position shift (see rope_shift.h). Every step is ggml's, in float32 and in its order. This file
 * is compiled without floating-point contraction (-std=c99), so the unfused rotation rounds x0*c and x1*s separately,
 * and the fused one says where its single rounding is. */
#include "rope_shift.h"
#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#define EPI_X86 1
#define FUSED_TARGET __attribute__((target("fma")))  /* fmaf becomes one instruction (and vectorises) */
#else
#define FUSED_TARGET
#endif

int epi_rope_shift_fused_default(void)
{
#ifdef EPI_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") ? 1 : 0;
#else
    return 1;
#endif
}

void epi_rope_shift_cache(const epi_rope_shift *s, float *cache)
{
    const float theta_scale = powf(s->freq_base, -2.0f / s->n_rot);
    float theta = (float)s->delta;                  /* ggml: theta_base = the shift, as float */
    for (int32_t i0 = 0; i0 < s->n_rot; i0 += 2) {
        const float angle = s->freq_scale * theta;  /* rope_yarn with ext_factor 0 and mscale 1 */
        cache[i0] = cosf(angle);
        cache[i0 + 1] = sinf(angle);
        theta *= theta_scale;
    }
}

/* One head, rotated in place. NEOX pair j is (x[j], x[j + half]): two contiguous runs, so those loops vectorise; NORM
 * pair j is (x[2j], x[2j + 1]). */
static void rotate_unfused(float *x, int32_t half, int32_t neox, const float *cos_j, const float *sin_j)
{
    if (neox) {
        float *y = x + half;
        for (int32_t j = 0; j < half; j++) {
            const float x0 = x[j], x1 = y[j];
            x[j] = x0 * cos_j[j] - x1 * sin_j[j];
            y[j] = x0 * sin_j[j] + x1 * cos_j[j];
        }
        return;
    }
    for (int32_t j = 0; j < half; j++) {
        const float x0 = x[2 * j], x1 = x[2 * j + 1];
        x[2 * j] = x0 * cos_j[j] - x1 * sin_j[j];
        x[2 * j + 1] = x0 * sin_j[j] + x1 * cos_j[j];
    }
}

FUSED_TARGET static void rotate_fused(float *x, int32_t half, int32_t neox, const float *cos_j, const float *sin_j)
{
    if (neox) {
        float *y = x + half;
        for (int32_t j = 0; j < half; j++) {
            const float x0 = x[j], x1 = y[j];
            x[j] = fmaf(x0, cos_j[j], -(x1 * sin_j[j]));
            y[j] = fmaf(x0, sin_j[j], x1 * cos_j[j]);
        }
        return;
    }
    for (int32_t j = 0; j < half; j++) {
        const float x0 = x[2 * j], x1 = x[2 * j + 1];
        x[2 * j] = fmaf(x0, cos_j[j], -(x1 * sin_j[j]));
        x[2 * j + 1] = fmaf(x0, sin_j[j], x1 * cos_j[j]);
    }
}

void epi_rope_shift_row(const epi_rope_shift *s, const float *cache, float *row, int64_t n_values)
{
    const int32_t half = s->n_rot / 2;
    float cos_j[EPI_ROPE_MAX_ROT / 2], sin_j[EPI_ROPE_MAX_ROT / 2];
    for (int32_t j = 0; j < half; j++) { cos_j[j] = cache[2 * j]; sin_j[j] = cache[2 * j + 1]; }
    for (int64_t h0 = 0; h0 + s->head_dim <= n_values; h0 += s->head_dim) {
        if (s->fused) rotate_fused(row + h0, half, s->neox, cos_j, sin_j);
        else rotate_unfused(row + h0, half, s->neox, cos_j, sin_j);
    }
}

int epi_rope_shift_valid(const epi_rope_shift *s, int64_t n_values)
{
    return s->head_dim > 0 && s->n_rot > 0 && s->n_rot % 2 == 0 && s->n_rot <= s->head_dim &&
           s->n_rot <= EPI_ROPE_MAX_ROT && n_values % s->head_dim == 0;
}
