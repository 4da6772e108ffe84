#include "scale.h"

void epi_scale_rows(const float *x, const float *factors, float *out, int64_t n_rows, int64_t n_cols)
{
    for (int64_t r = 0; r < n_rows; r++) {
        const float f = factors[r];
        const float *xr = x + r * n_cols;
        float *yr = out + r * n_cols;
        for (int64_t c = 0; c < n_cols; c++) yr[c] = xr[c] * f;
    }
}
