#include "block_select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

/* f16 -> float, inline for zeros and normal halves (the keys' common case) so the loop below stays a loop of loads
 * and multiply-adds; subnormals, inf and NaN go through quant.c's exact conversion. */
static inline float half_to_float(uint16_t h)
{
    const uint32_t mag = h & 0x7FFFu;
    if (mag != 0 && (mag < 0x0400u || mag >= 0x7C00u)) return epi_fp16_to_fp32(h);
    const uint32_t w = ((uint32_t)(h & 0x8000u) << 16) | (mag == 0 ? 0u : (mag << 13) + 0x38000000u);
    float f;
    memcpy(&f, &w, 4);
    return f;
}

int epi_block_scores(const float *query, const uint16_t *rep_keys, const int32_t *rep_count, int64_t n_layer,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_blocks, int64_t n_rep,
                      float *scores)
{
    const int64_t group = n_head / n_head_kv, n_embd_k = n_head_kv * head_dim;
    /* The query heads that share a KV head are summed first (as the reference does): q_h . k summed over the group
     * is (sum of q_h) . k, so each key value is read and converted once instead of once per query head. */
    double *q_kv = malloc((size_t)(n_embd_k > 0 ? n_embd_k : 1) * sizeof *q_kv);
    float *k = malloc((size_t)(n_embd_k > 0 ? n_embd_k : 1) * sizeof *k);
    if (!q_kv || !k) {
        free(q_kv); free(k);
        return -1;
    }
    for (int64_t l = 0; l < n_layer; l++) {
        const float *q = query + l * n_head * head_dim;
        for (int64_t i = 0; i < n_embd_k; i++) q_kv[i] = 0.0;
        for (int64_t h = 0; h < n_head; h++)
            for (int64_t i = 0; i < head_dim; i++) q_kv[(h / group) * head_dim + i] += (double)q[h * head_dim + i];
        for (int64_t b = 0; b < n_blocks; b++) {
            const uint16_t *keys = rep_keys + (b * n_layer + l) * n_rep * n_embd_k;
            double total = 0.0;
            for (int64_t r = 0; r < rep_count[b]; r++) {
                for (int64_t i = 0; i < n_embd_k; i++) k[i] = half_to_float(keys[r * n_embd_k + i]);
                double acc[4] = {0.0, 0.0, 0.0, 0.0};  /* four running sums: the loop vectorises */
                int64_t i = 0;
                for (; i + 4 <= n_embd_k; i += 4)
                    for (int j = 0; j < 4; j++) acc[j] += q_kv[i + j] * (double)k[i + j];
                for (; i < n_embd_k; i++) acc[0] += q_kv[i] * (double)k[i];
                total += (acc[0] + acc[1]) + (acc[2] + acc[3]);
            }
            scores[l * n_blocks + b] = rep_count[b] > 0 ? (float)(total / rep_count[b]) : 0.0f;
        }
    }
    free(q_kv);
    free(k);
    return 0;
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
