#ifndef EPI_ROWS_F16_H
#define EPI_ROWS_F16_H
#include <stdint.h>
#include "assemble.h"
/* Payload rows (q8_0 / q4_0, or f16 to be scaled) straight to little-endian f16, 8 values at a time with AVX2/F16C:
 * the assembler's hot loop (a q8_0 row took ~1 ns per value scalar: 31 ms for a 5,500-cell pool of the bundled model).
 * Same arithmetic and order as the scalar path (quant.c's dequantize, then * scale in float32, then
 * round-to-nearest-even), so the same bits: tests/test_native_assemble.py compares both against the numpy reference,
 * edge values (subnormal, inf, NaN scales) included. */

/* kind: q8_0, q4_0, or f16 (only when scaled). Returns 1 when done, 0 when the SIMD paths are off (simd.h) or there
 * is nothing to convert (f16 unscaled); nothing is written then, and the caller takes the scalar path. */
int epi_row_to_f16_fast(epi_row_kind kind, const uint8_t *src, int64_t n, int scaled, float scale, uint8_t *dst);
#endif
