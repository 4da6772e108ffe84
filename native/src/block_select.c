#include "block_select.h"

#include <math.h>
#include <stdlib.h>

#include "quant.h"

void epi_block_scores(const float *query, const uint16_t *rep_keys, const int32_t *rep_count, int64_t n_layer,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_blocks, int64_t n_rep,
                      float *scores)
{
    const int64_t group = n_head / n_head_kv, n_embd_k = n_head_kv * head_dim;
    for (int64_t l = 0; l < n_layer; l++) {
        const float *q = query + l * n_head * head_dim;
        for (int64_t b = 0; b < n_blocks; b++) {
            const uint16_t *keys = rep_keys + (b * n_layer + l) * n_rep * n_embd_k;
            double total = 0.0;
            for (int64_t r = 0; r < rep_count[b]; r++) {
                for (int64_t h = 0; h < n_head; h++) {
                    const uint16_t *k = keys + r * n_embd_k + (h / group) * head_dim;
                    const float *qh = q + h * head_dim;
                    double dot = 0.0;
                    for (int64_t i = 0; i < head_dim; i++) dot += (double)qh[i] * (double)epi_fp16_to_fp32(k[i]);
                    total += dot;
                }
            }
            scores[l * n_blocks + b] = rep_count[b] > 0 ? (float)(total / rep_count[b]) : 0.0f;
        }
    }
}

/* qsort has no context argument in C99: the row being sorted is passed through this file-level pointer, which makes
 * epi_select_blocks non-reentrant; the binding holds the GIL while it runs. */
static const float *sort_row;

/* A NaN score (a damaged key) ranks below every number, so the comparison stays a total order. */
static double rank_of(float score) { return score != score ? -HUGE_VAL : (double)score; }

static int by_falling_score(const void *a, const void *b)
{
    const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    const double si = rank_of(sort_row[i]), sj = rank_of(sort_row[j]);
    if (si != sj) return si > sj ? -1 : 1;
    return i < j ? -1 : (i > j);
}

int epi_select_blocks(const float *scores, const int32_t *n_tokens, int64_t n_layer, int64_t n_blocks,
                      int64_t budget, uint8_t *visible)
{
    int64_t *order = malloc((size_t)(n_blocks > 0 ? n_blocks : 1) * sizeof *order);
    if (!order) return -1;
    for (int64_t l = 0; l < n_layer; l++) {
        for (int64_t b = 0; b < n_blocks; b++) { order[b] = b; visible[l * n_blocks + b] = 0; }
        sort_row = scores + l * n_blocks;
        qsort(order, (size_t)n_blocks, sizeof *order, by_falling_score);
        int64_t left = budget;
        for (int64_t i = 0; i < n_blocks; i++) {
            const int64_t b = order[i];
            if (n_tokens[b] <= left) { visible[l * n_blocks + b] = 1; left -= n_tokens[b]; }
        }
    }
    free(order);
    return 0;
}
