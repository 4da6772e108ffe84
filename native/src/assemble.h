#ifndef EPI_ASSEMBLE_H
#define EPI_ASSEMBLE_H
#include <stdint.h>
#include "rope_shift.h"
/* llama.cpp's sequence state blob (layout: episodic_cli/engine/kv_memory.py) written straight from an epi payload's
 * row sections, so loading a stored block needs no numpy intermediates. The numpy reference is
 * kv_memory.build_state_blob(kv_memory.decode_block(payload, v_scale=...)); the output is bit-identical to it. */

typedef enum { EPI_ROWS_F16 = 0, EPI_ROWS_Q8_0 = 1, EPI_ROWS_Q4_0 = 2 } epi_row_kind;

/* Bytes of one payload row of n_values values, or -1 when n_values is not a whole number of the kind's blocks. */
int64_t epi_payload_row_bytes(epi_row_kind kind, int64_t n_values);

/* Exact blob size (the same whether V is transposed or not). */
int64_t epi_state_blob_size(int64_t n_layer, int64_t n_cells, int64_t n_embd_k, int64_t n_embd_v);

/* positions: n_cells little-endian i32; k_rows / v_rows: [n_layer, n_cells, row_bytes] payload rows of `kind`;
 * out: epi_state_blob_size(...) bytes. V rows are multiplied by (float)v_scale when v_scale != 1.0 (compared as a
 * double, as decode_block does); K is never scaled. shift (NULL: none, the reference above) moves every cell by
 * shift->delta positions and rotates K by it as llama.cpp's K-shift would (rope_shift.h; the caller checks it with
 * epi_rope_shift_valid), so the block loads at its new place with no shift left for the next decode.
 * Returns 0, or -1 when scratch memory cannot be allocated. */
int epi_assemble_state_blob(epi_row_kind kind, const uint8_t *positions, const uint8_t *k_rows, const uint8_t *v_rows,
                            int64_t n_layer, int64_t n_cells, int64_t n_embd_k, int64_t n_embd_v, int v_trans,
                            int32_t src_seq, int32_t cell_seq, double v_scale, const epi_rope_shift *shift,
                            uint8_t *out);
#endif
