#ifndef EPI_QUANT_H
#define EPI_QUANT_H
#include <stdint.h>
/* ggml-compatible block formats (byte-identical to ggml's block_q8_0 / block_q4_0), so stored KV blocks can be
 * handed to llama.cpp as-is. k (values per row) must be a multiple of EPI_QK. */
#define EPI_QK 32
#define EPI_Q8_0_BLOCK_BYTES (2 + EPI_QK)       /* fp16 d, int8 qs[32] */
#define EPI_Q4_0_BLOCK_BYTES (2 + EPI_QK / 2)   /* fp16 d, uint8 qs[16]: low nibbles = 0..15, high = 16..31 */

uint16_t epi_fp32_to_fp16(float f);   /* round-to-nearest-even, overflow -> inf, NaN -> quiet NaN (as ggml) */
float epi_fp16_to_fp32(uint16_t h);   /* exact; NaNs come out quiet (as ggml) */

void epi_quantize_row_q8_0(const float *x, uint8_t *y, int64_t k);
void epi_dequantize_row_q8_0(const uint8_t *x, float *y, int64_t k);
void epi_quantize_row_q4_0(const float *x, uint8_t *y, int64_t k);
void epi_dequantize_row_q4_0(const uint8_t *x, float *y, int64_t k);
#endif
