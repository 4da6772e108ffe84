/* crc32 of block files (see crc32.h). */
#include "crc32.h"

#include "simd.h"

static uint32_t table[256];
static int table_ready = 0;

static void make_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[n] = c;
    }
    table_ready = 1;
}

/* The running (inverted) register over `len` bytes, one byte at a time. */
static uint32_t bytewise(uint32_t c, const unsigned char *buf, size_t len)
{
    if (!table_ready) make_table();
    while (len--) c = table[(c ^ *buf++) & 0xFF] ^ (c >> 8);
    return c;
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

static int cpu_has_pclmul_sse41(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_PCLMUL) && (c & bit_SSE4_1);
}

/* The running (inverted) register `c` over `len` bytes, len >= 64 and a multiple of 16. The constants are the
 * paper's for the bit-reflected CRC-32 polynomial: x^(4*128+-64) and x^(128+-64) mod P for folding 4 lanes and 1,
 * x^64 mod P for the 128 -> 64 bit step, and P with its Barrett constant mu. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t folded(uint32_t c, const unsigned char *buf, size_t len)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1, x2, x3, x4, x5, x6, x7, x8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    buf += 64;
    len -= 64;
    while (len >= 64) {  /* four independent lanes, each folded 512 bits forward */
        x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    /* the four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), x5);
    while (len >= 16) {  /* the remaining 16-byte blocks, one lane */
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11),
                                         _mm_loadu_si128((const __m128i *)buf)), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, low32);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k5k0, 0x00), x2);
    /* Barrett reduction to 32 bits */
    x2 = _mm_and_si128(x1, low32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, low32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#else
static int cpu_has_pclmul_sse41(void) { return 0; }
static uint32_t folded(uint32_t c, const unsigned char *buf, size_t len) { return bytewise(c, buf, len); }
#endif

static int cpu = -1;

void epi_crc32_init(void)
{
    if (!table_ready) make_table();
    if (cpu < 0) cpu = cpu_has_pclmul_sse41();
}

int epi_crc32_folding(void)
{
    if (cpu < 0) cpu = cpu_has_pclmul_sse41();
    return cpu && epi_simd_enabled();
}

uint32_t epi_crc32(uint32_t crc, const unsigned char *buf, size_t len)
{
    uint32_t c = ~crc;
    if (len >= 64 && epi_crc32_folding()) {
        const size_t bulk = len & ~(size_t)15;
        c = folded(c, buf, bulk);
        buf += bulk;
        len -= bulk;
    }
    return ~bytewise(c, buf, len);
}
