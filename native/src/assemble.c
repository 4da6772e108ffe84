/* State blob assembly (see assemble.h). Every multi-byte field is written byte by byte as little-endian, so the
 * output is the same on any host and payload/blob offsets need no alignment. */
#include "assemble.h"
#include "quant.h"
#include "rope_shift.h"
#include "rows_f16.h"
#include <stdlib.h>
#include <string.h>

#define IO_MAGIC 0xAF143CD8u
#define GGML_TYPE_F16 1u
#define HEAD_BYTES 16      /* io_magic, src seq_id, n_stream, cell_count */
#define CELL_BYTES 12      /* pos, n_seq_id, seq_id */
#define DATA_HEAD_BYTES 8  /* v_trans, n_layer */
#define LAYER_HEAD_BYTES 12
#define V_TILE_CELLS 16    /* cells converted before each transposed write: 32-byte runs instead of 2-byte ones */

static uint8_t *put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
    return p + 4;
}
static uint8_t *put_u64(uint8_t *p, uint64_t v) { return put_u32(put_u32(p, (uint32_t)v), (uint32_t)(v >> 32)); }

/* numpy's astype(float16), which the reference uses: IEEE round-to-nearest-even as quant.c's epi_fp32_to_fp16, except
 * that NaNs keep their top payload bits (npy_floatbits_to_halfbits) where ggml's conversion makes every NaN 0x7E00. */
static uint16_t f32_to_f16_as_numpy(float f)
{
    uint32_t w;
    memcpy(&w, &f, 4);
    if ((w & 0x7FFFFFFFu) > 0x7F800000u) {
        const uint32_t h = 0x7C00u | ((w & 0x7FFFFFu) >> 13);
        return (uint16_t)(((w >> 16) & 0x8000u) | (h == 0x7C00u ? 0x7C01u : h));  /* payload only in dropped bits */
    }
    return epi_fp32_to_fp16(f);
}

/* n floats -> little-endian halves. The common case (results that are normal halves, or zeros) is branch-free so the
 * compiler vectorises it; the rare rest (subnormal, overflow, inf, NaN) is redone by f32_to_f16_as_numpy. */
static void f32_row_to_f16(const float *x, int64_t n, uint8_t *dst)
{
    uint32_t any_special = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, &x[i], 4);
        const uint32_t a = w & 0x7FFFFFFFu, sign = (w >> 16) & 0x8000u;
        /* rebias the exponent and round half to even in one add (a carry out of the mantissa bumps the exponent) */
        const uint32_t normal = (a + 0xC8000FFFu + ((a >> 13) & 1u)) >> 13;
        const uint32_t h = sign | (a == 0 ? 0u : normal);
        any_special |= (a != 0) & (a - 0x38800000u >= 0x47800000u - 0x38800000u);
        dst[2 * i] = (uint8_t)h;
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
    if (!any_special) return;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, &x[i], 4);
        const uint32_t a = w & 0x7FFFFFFFu;
        if (a != 0 && a - 0x38800000u >= 0x47800000u - 0x38800000u) {
            const uint16_t h = f32_to_f16_as_numpy(x[i]);
            dst[2 * i] = (uint8_t)h;
            dst[2 * i + 1] = (uint8_t)(h >> 8);
        }
    }
}

/* n little-endian halves -> floats, exactly. Branch-free for normal halves and zeros (vectorised); subnormals, inf
 * and NaN are redone by quant.c's epi_fp16_to_fp32, which makes NaNs quiet as the float32 multiply after it would. */
static void f16_row_to_f32(const uint8_t *src, int64_t n, float *y)
{
    uint32_t any_special = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t h = (uint32_t)src[2 * i] | ((uint32_t)src[2 * i + 1] << 8), mag = h & 0x7FFFu;
        const uint32_t w = ((h & 0x8000u) << 16) | (mag == 0 ? 0u : (mag << 13) + 0x38000000u);  /* rebias 15 -> 127 */
        any_special |= (mag != 0) & ((mag < 0x0400u) | (mag >= 0x7C00u));
        memcpy(&y[i], &w, 4);
    }
    if (!any_special) return;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = (uint16_t)(src[2 * i] | (src[2 * i + 1] << 8));
        const uint32_t mag = h & 0x7FFFu;
        if (mag != 0 && (mag < 0x0400u || mag >= 0x7C00u)) y[i] = epi_fp16_to_fp32(h);
    }
}

int64_t epi_payload_row_bytes(epi_row_kind kind, int64_t n_values)
{
    if (n_values < 0) return -1;
    switch (kind) {
    case EPI_ROWS_F16: return 2 * n_values;
    case EPI_ROWS_Q8_0: return n_values % EPI_QK ? -1 : n_values / EPI_QK * EPI_Q8_0_BLOCK_BYTES;
    case EPI_ROWS_Q4_0: return n_values % EPI_QK ? -1 : n_values / EPI_QK * EPI_Q4_0_BLOCK_BYTES;
    }
    return -1;
}

int64_t epi_state_blob_size(int64_t n_layer, int64_t n_cells, int64_t n_embd_k, int64_t n_embd_v)
{
    return HEAD_BYTES + n_cells * CELL_BYTES + DATA_HEAD_BYTES
         + n_layer * (2 * LAYER_HEAD_BYTES + 2 * n_cells * (n_embd_k + n_embd_v));
}

/* One payload row -> n f16 values (little-endian) at dst. Arithmetic as decode_block: dequantize (quant.c, or exact
 * f16 widening), then x * scale in float32 (scale.c's order), then round to f16. f16 rows without scaling are copied,
 * as the reference hands them through untouched (NaN payloads included). */
static void row_to_f16(epi_row_kind kind, const uint8_t *src, int64_t n, int scaled, float scale, float *tmp,
                       uint8_t *dst)
{
    if (kind == EPI_ROWS_F16 && !scaled) { memcpy(dst, src, (size_t)(2 * n)); return; }
    if (epi_row_to_f16_fast(kind, src, n, scaled, scale, dst)) return;
    if (kind == EPI_ROWS_F16) f16_row_to_f32(src, n, tmp);
    else if (kind == EPI_ROWS_Q8_0) epi_dequantize_row_q8_0(src, tmp, n);
    else epi_dequantize_row_q4_0(src, tmp, n);
    if (scaled)
        for (int64_t i = 0; i < n; i++) tmp[i] = tmp[i] * scale;
    f32_row_to_f16(tmp, n, dst);
}

int epi_assemble_state_blob(epi_row_kind kind, const uint8_t *positions, const uint8_t *k_rows, const uint8_t *v_rows,
                            int64_t n_layer, int64_t n_cells, int64_t n_embd_k, int64_t n_embd_v, int v_trans,
                            int32_t src_seq, int32_t cell_seq, double v_scale, const epi_rope_shift *shift,
                            uint8_t *out)
{
    const int64_t kb = epi_payload_row_bytes(kind, n_embd_k), vb = epi_payload_row_bytes(kind, n_embd_v);
    const int64_t n_tmp = n_embd_k > n_embd_v ? n_embd_k : n_embd_v;
    /* one allocation: float scratch row, then the V tile (2 bytes x V_TILE_CELLS x n_embd_v) */
    float *tmp = malloc((size_t)(4 * n_tmp + 2 * V_TILE_CELLS * n_embd_v) + 1);
    if (!tmp) return -1;
    uint8_t *tile = (uint8_t *)(tmp + n_tmp);
    const int v_scaled = v_scale != 1.0;
    const float scale = (float)v_scale;
    float angles[EPI_ROPE_MAX_ROT];
    if (shift) epi_rope_shift_cache(shift, angles);
    const int32_t delta = shift ? shift->delta : 0;

    uint8_t *p = put_u32(out, IO_MAGIC);
    p = put_u32(p, (uint32_t)src_seq);
    p = put_u32(p, 1u);                                          /* n_stream: unified cache */
    p = put_u32(p, (uint32_t)n_cells);
    for (int64_t c = 0; c < n_cells; c++) {
        const uint32_t pos = (uint32_t)positions[4 * c] | (uint32_t)positions[4 * c + 1] << 8 |
                             (uint32_t)positions[4 * c + 2] << 16 | (uint32_t)positions[4 * c + 3] << 24;
        p = put_u32(put_u32(put_u32(p, pos + (uint32_t)delta), 1u), (uint32_t)cell_seq);  /* i32 wraps as C's u32 */
    }
    p = put_u32(put_u32(p, v_trans ? 1u : 0u), (uint32_t)n_layer);

    for (int64_t l = 0; l < n_layer; l++) {
        p = put_u64(put_u32(p, GGML_TYPE_F16), (uint64_t)(2 * n_embd_k));
        for (int64_t c = 0; c < n_cells; c++, p += 2 * n_embd_k) {
            row_to_f16(kind, k_rows + (l * n_cells + c) * kb, n_embd_k, 0, 1.0f, tmp, p);
            if (!shift || epi_rope_shift_row_f16_fast(shift, angles, p, n_embd_k)) continue;
            /* as llama.cpp's K-shift: the f16 row read back, rotated in float32, rounded to f16 again */
            f16_row_to_f32(p, n_embd_k, tmp);
            epi_rope_shift_row(shift, angles, tmp, n_embd_k);
            f32_row_to_f16(tmp, n_embd_k, p);
        }
    }

    for (int64_t l = 0; l < n_layer; l++) {
        const uint8_t *src = v_rows + l * n_cells * vb;
        if (!v_trans) {
            p = put_u64(put_u32(p, GGML_TYPE_F16), (uint64_t)(2 * n_embd_v));
            for (int64_t c = 0; c < n_cells; c++, p += 2 * n_embd_v)
                row_to_f16(kind, src + c * vb, n_embd_v, v_scaled, scale, tmp, p);
            continue;
        }
        p = put_u32(put_u32(put_u32(p, GGML_TYPE_F16), 2u), (uint32_t)n_embd_v);
        /* V^T: element (e, c) at p + 2 * (e * n_cells + c) */
        for (int64_t c0 = 0; c0 < n_cells; c0 += V_TILE_CELLS) {
            const int64_t nt = n_cells - c0 < V_TILE_CELLS ? n_cells - c0 : V_TILE_CELLS;
            for (int64_t t = 0; t < nt; t++)
                row_to_f16(kind, src + (c0 + t) * vb, n_embd_v, v_scaled, scale, tmp, tile + t * 2 * n_embd_v);
            for (int64_t e = 0; e < n_embd_v; e++) {
                uint8_t *dst = p + 2 * (e * n_cells + c0);
                for (int64_t t = 0; t < nt; t++) {
                    dst[2 * t] = tile[t * 2 * n_embd_v + 2 * e];
                    dst[2 * t + 1] = tile[t * 2 * n_embd_v + 2 * e + 1];
                }
            }
        }
        p += 2 * n_embd_v * n_cells;
    }
    free(tmp);
    return 0;
}
