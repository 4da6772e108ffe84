#ifndef EPI_SCALE_H
#define EPI_SCALE_H
#include <stdint.h>
/* out[r, c] = x[r, c] * factors[r] (float32, row-major); out may alias x. EpMAN weights each event's V rows. */
void epi_scale_rows(const float *x, const float *factors, float *out, int64_t n_rows, int64_t n_cols);
#endif
