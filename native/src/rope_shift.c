/* K re-rotation for a position shift (see rope_shift.h). Every step is ggml's, in float32 and in its order. This file
 * is compiled without floating-point contraction (-ffp-contract=off in setup.py, for GCC and clang alike), so the
 * unfused rotation rounds x0*c and x1*s separately, and the fused one says where its single rounding is. */
#include "rope_shift.h"
#include "simd.h"
#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#define EPI_X86 1
#include <immintrin.h>
#define FUSED_TARGET __attribute__((target("fma")))  /* fmaf becomes one instruction (and vectorises) */
#else
#define FUSED_TARGET
#endif

int epi_rope_shift_fused_default(void) { return epi_cpu_has_fma(); }

void epi_rope_shift_cache(const epi_rope_shift *s, float *cache)
{
    const int32_t half = s->n_rot / 2;
    const float theta_scale = powf(s->freq_base, -2.0f / s->n_rot);
    float theta = (float)s->delta;                  /* ggml: theta_base = the shift, as float */
    for (int32_t j = 0; j < half; j++) {
        /* ggml_rope_cache_init: rope_yarn(theta / ff, ...), with ext_factor 0 and mscale 1 */
        const float ff = s->freq_factors ? s->freq_factors[j] : 1.0f;
        const float angle = s->freq_scale * (theta / ff);
        cache[j] = cosf(angle);
        cache[half + j] = sinf(angle);
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

/* The fused rotation, inlined twice: into a function built for FMA (one instruction per fmaf, vectorised) where the
 * CPU has it, and into a plain one that calls C's fmaf (exact, slower) elsewhere, so that no FMA instruction runs on
 * a CPU without it. */
static inline __attribute__((always_inline)) void rotate_fused(float *x, int32_t half, int32_t neox,
                                                               const float *cos_j, const float *sin_j)
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

FUSED_TARGET static void rotate_fused_fma(float *x, int32_t half, int32_t neox, const float *cos_j, const float *sin_j)
{
    rotate_fused(x, half, neox, cos_j, sin_j);
}

static void rotate_fused_libm(float *x, int32_t half, int32_t neox, const float *cos_j, const float *sin_j)
{
    rotate_fused(x, half, neox, cos_j, sin_j);
}

#ifdef EPI_X86
/* AVX2 + F16C + FMA: 8 halves at a time, straight from and back to the f16 row (hardware round-to-nearest-even, the
 * conversion llama.cpp's own shift uses), the fused rotation in the same two roundings as the scalar one:
 * out0 = fma(x0, c, -(x1*s)), out1 = fma(x0, s, x1*c). For NORM, a vector holds 4 pairs (x0, x1) interleaved. */
__attribute__((target("avx2,f16c,fma")))
static void rotate_row_f16_avx2(const epi_rope_shift *s, const float *cache, uint8_t *row, int64_t n_values)
{
    const int32_t half = s->n_rot / 2;
    const float *cos_j = cache, *sin_j = cache + half;
    const __m256 neg = _mm256_set1_ps(-0.0f);  /* negation flips the sign bit only: -(+0) is -0, as in C */
    const __m256i pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);  /* 4 angles, each for both values of its pair */
    for (int64_t h0 = 0; h0 + s->head_dim <= n_values; h0 += s->head_dim) {
        uint16_t *x = (uint16_t *)(row + 2 * h0);
        if (s->neox) {
            for (int32_t j = 0; j < half; j += 8) {
                const __m256 c = _mm256_loadu_ps(cos_j + j), sn = _mm256_loadu_ps(sin_j + j);
                const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + j)));
                const __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + j + half)));
                const __m256 o0 = _mm256_fmadd_ps(x0, c, _mm256_xor_ps(_mm256_mul_ps(x1, sn), neg));
                const __m256 o1 = _mm256_fmadd_ps(x0, sn, _mm256_mul_ps(x1, c));
                _mm_storeu_si128((__m128i *)(x + j), _mm256_cvtps_ph(o0, _MM_FROUND_TO_NEAREST_INT));
                _mm_storeu_si128((__m128i *)(x + j + half), _mm256_cvtps_ph(o1, _MM_FROUND_TO_NEAREST_INT));
            }
            continue;
        }
        for (int32_t i = 0; i < s->n_rot; i += 8) {  /* lanes: x0 x1 x0 x1 ... of pairs i/2 .. i/2 + 3 */
            const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cos_j + i / 2)), pairs);
            const __m256 sn = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sin_j + i / 2)), pairs);
            const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
            const __m256 xs = _mm256_permute_ps(xv, 0xB1);              /* x1 x0 x1 x0 ... */
            const __m256 p = _mm256_mul_ps(xv, c), q = _mm256_mul_ps(xs, sn);  /* even: x0*c, x1*s; odd: x1*c, x0*s */
            const __m256 even = _mm256_fmadd_ps(xv, c, _mm256_xor_ps(q, neg));
            const __m256 odd = _mm256_fmadd_ps(xs, sn, p);
            _mm_storeu_si128((__m128i *)(x + i), _mm256_cvtps_ph(_mm256_blend_ps(even, odd, 0xAA),
                                                                 _MM_FROUND_TO_NEAREST_INT));
        }
    }
}
#endif

int epi_rope_shift_row_f16_fast(const epi_rope_shift *s, const float *cache, uint8_t *row, int64_t n_values)
{
#ifdef EPI_X86
    if (epi_simd_usable() && s->fused && s->n_rot % 16 == 0) {
        rotate_row_f16_avx2(s, cache, row, n_values);
        return 1;
    }
#else
    (void)s; (void)cache; (void)row; (void)n_values;
#endif
    return 0;
}

void epi_rope_shift_row(const epi_rope_shift *s, const float *cache, float *row, int64_t n_values)
{
    const int32_t half = s->n_rot / 2;
    const float *cos_j = cache, *sin_j = cache + half;
    for (int64_t h0 = 0; h0 + s->head_dim <= n_values; h0 += s->head_dim) {
        if (!s->fused) rotate_unfused(row + h0, half, s->neox, cos_j, sin_j);
        else if (epi_cpu_has_fma()) rotate_fused_fma(row + h0, half, s->neox, cos_j, sin_j);
        else rotate_fused_libm(row + h0, half, s->neox, cos_j, sin_j);
    }
}

int epi_rope_shift_valid(const epi_rope_shift *s, int64_t n_values)
{
    return s->head_dim > 0 && s->n_rot > 0 && s->n_rot % 2 == 0 && s->n_rot <= s->head_dim &&
           s->n_rot <= EPI_ROPE_MAX_ROT && n_values % s->head_dim == 0;
}
