#ifndef EPI_BLOCK_SELECT_H
#define EPI_BLOCK_SELECT_H
#include <stdint.h>
/* Per-layer block selection (EM-LLM 3.4, InfLLM): every layer ranks the candidate blocks by how well the question's
 * mean query matches each block's representative keys, and sees only the best blocks that fit its token budget. */

/* scores[l, b] = mean over the block's rep_count[b] representative keys r of
 *                sum over query heads h of  query[l, h, :] . rep_keys[b, l, r, g(h) * head_dim : (g(h) + 1) * head_dim]
 * with g(h) = h / (n_head / n_head_kv) (grouped-query attention: a KV head serves n_head / n_head_kv query heads).
 * query: float32 [n_layer, n_head, head_dim] (unrotated); rep_keys: float16 bits [n_blocks, n_layer, n_rep,
 * n_head_kv * head_dim] (unrotated; rows past rep_count[b] are padding and never read). Accumulates in double,
 * the query heads of a KV head summed first. Returns 0, or -1 when scratch memory cannot be allocated. */
int epi_block_scores(const float *query, const uint16_t *rep_keys, const int32_t *rep_count, int64_t n_layer,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_blocks, int64_t n_rep,
                      float *scores);

/* visible[l, b] = 1 for the blocks layer l sees: in order of falling score (ties: lower index first; NaN last), each
 * block whose n_tokens[b] still fits in what is left of `budget` tokens; 0 for the others. Returns -1 when out of
 * memory (visible is then unspecified), else 0. */
int epi_select_blocks(const float *scores, const int32_t *n_tokens, int64_t n_layer, int64_t n_blocks,
                      int64_t budget, uint8_t *visible);
#endif
