/* q8_0 / q4_0 row (de)quantization, a line-by-line port of ggml's quantize_row_q{8,4}_0_ref and
 * dequantize_row_q{8,4}_0 (ggml-quants.c). Bit-exactness with ggml is the contract (tests load libggml-base and
 * compare bytes), so the float operations keep ggml's order and precision; setup.py builds with -std=c99, which
 * keeps GCC from contracting x*id + 8.5f into an FMA that ggml's build does not use. */
#include "quant.h"
#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t epi_fp32_to_fp16(float f)
{
    /* Integer-only so the result does not depend on the FPU's rounding mode or on F16C being present. */
    const uint32_t w = f32_bits(f);
    const uint16_t sign = (uint16_t)((w >> 16) & 0x8000u);
    const uint32_t exp = (w >> 23) & 0xFFu, man = w & 0x7FFFFFu;
    if (exp == 0xFFu) return sign | (man ? 0x7E00u : 0x7C00u);   /* NaN -> quiet NaN (ggml's 0x7E00), inf -> inf */
    const int32_t e = (int32_t)exp - 127 + 15;                    /* rebiased exponent */
    if (e >= 31) return sign | 0x7C00u;                           /* too large even before rounding */
    uint32_t m;                                                   /* 24-bit significand incl. implicit bit */
    int shift;                                                    /* bits dropped from m */
    if (e >= 1) { m = man | 0x800000u; shift = 13; }
    else {                                                        /* fp16 subnormal (or zero) */
        if (e < -10) return sign;                                 /* below half the smallest subnormal */
        m = exp ? (man | 0x800000u) : man;
        shift = 14 - e;
    }
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;             /* round to nearest, ties to even */
    /* For normals q carries the implicit bit: adding (e-1)<<10 yields exponent e, and a mantissa carry out of
     * rounding bumps the exponent (up to 0x7C00 = inf) by itself. Subnormals carry into the smallest normal. */
    return sign | (uint16_t)(e >= 1 ? ((uint32_t)(e - 1) << 10) + q : q);
}

float epi_fp16_to_fp32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1Fu) return f32_from_bits(sign | 0x7F800000u | (man << 13) | (man ? 0x400000u : 0u)); /* NaN made quiet, as ggml */
    if (exp == 0) {
        if (man == 0) return f32_from_bits(sign);
        exp = 1;                                                  /* normalise the subnormal */
        while (!(man & 0x400u)) { man <<= 1; exp--; }
        man &= 0x3FFu;
    }
    return f32_from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}


/* Blocks are byte arrays (not a packed struct) so the layout is the same on every ABI; d is little-endian. */
static void put_d(uint8_t *b, float d) { const uint16_t h = epi_fp32_to_fp16(d); b[0] = (uint8_t)h; b[1] = (uint8_t)(h >> 8); }
static float get_d(const uint8_t *b) { return epi_fp16_to_fp32((uint16_t)(b[0] | (b[1] << 8))); }

/* ggml converts float -> int8 with a plain C cast; values out of int8 range only arise when 1/d overflows
 * (amax below ~1e-37), where the cast is undefined. We pin that case to 0, which is what x86-64 produces. */
static int32_t to_int(float v) { return (v == v && fabsf(v) < 2147483648.0f) ? (int32_t)v : 0; }

void epi_quantize_row_q8_0(const float *x, uint8_t *y, int64_t k)
{
    for (int64_t i = 0; i < k / EPI_QK; i++, x += EPI_QK, y += EPI_Q8_0_BLOCK_BYTES) {
        float amax = 0.0f;
        for (int j = 0; j < EPI_QK; j++) { const float a = fabsf(x[j]); amax = amax > a ? amax : a; }
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        put_d(y, d);
        for (int j = 0; j < EPI_QK; j++) y[2 + j] = (uint8_t)(int8_t)to_int(roundf(x[j] * id));
    }
}

void epi_dequantize_row_q8_0(const uint8_t *x, float *y, int64_t k)
{
    for (int64_t i = 0; i < k / EPI_QK; i++, x += EPI_Q8_0_BLOCK_BYTES, y += EPI_QK) {
        const float d = get_d(x);
        for (int j = 0; j < EPI_QK; j++) y[j] = (float)(int8_t)x[2 + j] * d;
    }
}

void epi_quantize_row_q4_0(const float *x, uint8_t *y, int64_t k)
{
    for (int64_t i = 0; i < k / EPI_QK; i++, x += EPI_QK, y += EPI_Q4_0_BLOCK_BYTES) {
        float amax = 0.0f, max = 0.0f;                            /* max keeps the sign: d < 0 maps it to -8 */
        for (int j = 0; j < EPI_QK; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        put_d(y, d);
        for (int j = 0; j < EPI_QK / 2; j++) {
            const float x0 = x[j] * id, x1 = x[EPI_QK / 2 + j] * id;
            const int32_t q0 = (int8_t)to_int(x0 + 8.5f), q1 = (int8_t)to_int(x1 + 8.5f);
            y[2 + j] = (uint8_t)((q0 < 15 ? q0 : 15) | ((q1 < 15 ? q1 : 15) << 4));
        }
    }
}

void epi_dequantize_row_q4_0(const uint8_t *x, float *y, int64_t k)
{
    for (int64_t i = 0; i < k / EPI_QK; i++, x += EPI_Q4_0_BLOCK_BYTES, y += EPI_QK) {
        const float d = get_d(x);
        for (int j = 0; j < EPI_QK / 2; j++) {
            y[j] = (float)((x[2 + j] & 0x0F) - 8) * d;
            y[EPI_QK / 2 + j] = (float)((x[2 + j] >> 4) - 8) * d;
        }
    }
}
