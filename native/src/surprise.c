/* Surprise (-log p of the observed next token) straight from llama.cpp's logits buffer.
 * Copying 49k-float logit rows into Python cost a third of ingest throughput; this reads them in place. */
#include <math.h>
#include <stdint.h>
#include "surprise.h"

void epi_surprise_rows(const float *logits, int64_t n_rows, int64_t n_vocab,
                       const int32_t *targets, float *out)
{
    for (int64_t r = 0; r < n_rows; ++r) {
        const float *row = logits + r * n_vocab;
        float max = row[0];
        for (int64_t j = 1; j < n_vocab; ++j) {
            if (row[j] > max) max = row[j];
        }
        /* Accumulate in double: a float sum over 49k terms drifts by more than the tolerance we test. */
        double sum = 0.0;
        for (int64_t j = 0; j < n_vocab; ++j) {
            sum += exp((double)(row[j] - max));
        }
        int32_t t = targets[r];
        if (t < 0 || t >= n_vocab) {
            out[r] = NAN; /* the caller validated targets; NaN makes a bad id visible, not silent */
            continue;
        }
        out[r] = (float)((double)max + log(sum) - (double)row[t]);
    }
}
