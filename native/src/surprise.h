#ifndef EPI_SURPRISE_H
#define EPI_SURPRISE_H
#include <stdint.h>
/* out[r] = logsumexp(logits[r, :]) - logits[r, targets[r]], for r in [0, n_rows). Row-major, float32. */
void epi_surprise_rows(const float *logits, int64_t n_rows, int64_t n_vocab,
                       const int32_t *targets, float *out);
#endif
