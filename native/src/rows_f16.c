/* Payload rows to f16 with AVX2/F16C (see rows_f16.h). */
#include "rows_f16.h"
#include "quant.h"
#include "simd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* float32 -> f16 as the scalar path rounds (IEEE round-to-nearest-even; quiet NaNs keep their top payload bits in
 * both). Every NaN here is quiet: it comes out of a float32 multiply. */
#define TO_F16(v) _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT)

__attribute__((target("avx2,f16c")))
static void q8_0_to_f16(const uint8_t *src, int64_t n, int scaled, float scale, uint16_t *dst)
{
    const __m256 s = _mm256_set1_ps(scale);
    for (int64_t b = 0; b < n / EPI_QK; b++, src += EPI_Q8_0_BLOCK_BYTES, dst += EPI_QK) {
        const __m256 d = _mm256_set1_ps(epi_fp16_to_fp32((uint16_t)(src[0] | (src[1] << 8))));
        for (int j = 0; j < EPI_QK; j += 8) {
            const __m128i q8 = _mm_loadl_epi64((const __m128i *)(src + 2 + j));
            __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d);
            if (scaled) y = _mm256_mul_ps(y, s);
            _mm_storeu_si128((__m128i *)(dst + j), TO_F16(y));
        }
    }
}

__attribute__((target("avx2,f16c")))
static void q4_0_to_f16(const uint8_t *src, int64_t n, int scaled, float scale, uint16_t *dst)
{
    const __m256 s = _mm256_set1_ps(scale);
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < n / EPI_QK; b++, src += EPI_Q4_0_BLOCK_BYTES, dst += EPI_QK) {
        const __m256 d = _mm256_set1_ps(epi_fp16_to_fp32((uint16_t)(src[0] | (src[1] << 8))));
        const __m128i qs = _mm_loadu_si128((const __m128i *)(src + 2));
        /* values 0..15 are the low nibbles, 16..31 the high ones, each minus 8 (as int8, exact) */
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low), eight);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int j = 0; j < 4; j++) {
            __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[j])), d);
            if (scaled) y = _mm256_mul_ps(y, s);
            _mm_storeu_si128((__m128i *)(dst + 8 * j), TO_F16(y));
        }
    }
}

__attribute__((target("avx2,f16c")))
static void f16_scaled_to_f16(const uint8_t *src, int64_t n, float scale, uint16_t *dst)
{
    const __m256 s = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i)));
        _mm_storeu_si128((__m128i *)(dst + i), TO_F16(_mm256_mul_ps(x, s)));
    }
}

int epi_row_to_f16_fast(epi_row_kind kind, const uint8_t *src, int64_t n, int scaled, float scale, uint8_t *dst)
{
    if (!epi_simd_usable() || n % EPI_QK) return 0;
    uint16_t *out = (uint16_t *)dst;  /* x86 is little-endian and allows unaligned access through these intrinsics */
    if (kind == EPI_ROWS_Q8_0) q8_0_to_f16(src, n, scaled, scale, out);
    else if (kind == EPI_ROWS_Q4_0) q4_0_to_f16(src, n, scaled, scale, out);
    else if (kind == EPI_ROWS_F16 && scaled) f16_scaled_to_f16(src, n, scale, out);
    else return 0;
    return 1;
}
#else
int epi_row_to_f16_fast(epi_row_kind kind, const uint8_t *src, int64_t n, int scaled, float scale, uint8_t *dst)
{
    (void)kind; (void)src; (void)n; (void)scaled; (void)scale; (void)dst;
    return 0;
}
#endif
