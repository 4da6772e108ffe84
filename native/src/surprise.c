/* Surprise (-log p of the observed next token) straight from llama.cpp's logits buffer.
 * Copying 49k-float logit rows into Python cost a third of ingest throughput; this reads them in place.
 * Both passes over a row are written so that GCC vectorises them at -O3 without -ffast-math (setup.py adds only
 * -fno-trapping-math, which changes no result): libm's exp in double was 6% of ingest time, this is ~5x faster. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "surprise.h"

/* One build runs on every x86-64; GCC adds an AVX2 copy of the hot loops and picks it at load time. Both copies
 * give identical results: the same float operations per element (no FMA contraction under -std=c99) and the same
 * accumulation lanes. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define EPI_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define EPI_VECTOR_CLONES
#endif

#define LANES 16

/* Floats order like sign-magnitude integers; flipping the magnitude bits of negatives turns that into plain
 * two's-complement order (an involution), whose max reduction vectorises where a float max reduction does not. */
static inline int32_t float_order(int32_t bits) { return bits ^ ((bits >> 31) & 0x7fffffff); }

EPI_VECTOR_CLONES static float row_max(const float *row, int64_t n)
{
    int32_t m, bits;
    memcpy(&m, row, sizeof m);
    m = float_order(m);
    for (int64_t j = 1; j < n; ++j) {
        memcpy(&bits, row + j, sizeof bits);
        bits = float_order(bits);
        m = bits > m ? bits : m;
    }
    m = float_order(m);
    float out;
    memcpy(&out, &m, sizeof out);
    return out;
}

/* exp(x) for x <= 0 in float, without a call or a branch: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, two-part
 * ln2), a degree-7 Taylor polynomial in r (truncation < 6e-9 relative), 2^n written into the exponent bits.
 * Below -87 it returns exp(-87) ~ 1.6e-38: in a sum whose largest term is 1 that changes nothing. */
static inline float exp_nonpositive(float x)
{
    x = -87.0f > x ? -87.0f : x;
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln2), |x / ln2| < 2^22 */
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* sum_j exp(row[j] - max), accumulated in double over fixed lanes (a float sum over 49k terms drifts by more than
 * the tolerance we test; the lanes are what lets the loop vectorise without reassociating anything). */
EPI_VECTOR_CLONES static double row_sum_exp(const float *row, int64_t n, float max)
{
    double lane[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; ++l) lane[l] += (double)exp_nonpositive(row[j + l] - max);
    double sum = 0.0;
    for (int l = 0; l < LANES; ++l) sum += lane[l];
    for (; j < n; ++j) sum += (double)exp_nonpositive(row[j] - max);
    return sum;
}

void epi_surprise_rows(const float *logits, int64_t n_rows, int64_t n_vocab,
                       const int32_t *targets, float *out)
{
    for (int64_t r = 0; r < n_rows; ++r) {
        const float *row = logits + r * n_vocab;
        int32_t t = targets[r];
        if (t < 0 || t >= n_vocab) {
            out[r] = NAN; /* the caller validated targets; NaN makes a bad id visible, not silent */
            continue;
        }
        const float max = row_max(row, n_vocab);
        out[r] = (float)((double)max + log(row_sum_exp(row, n_vocab, max)) - (double)row[t]);
    }
}
