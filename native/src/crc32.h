#ifndef EPI_CRC32_H
#define EPI_CRC32_H
#include <stddef.h>
#include <stdint.h>
/* zlib's crc32(crc, buf, len) (CRC-32/ISO-HDLC, the checksum of every KV block file), bit for bit. On x86 CPUs with
 * PCLMULQDQ and SSE4.1 (and the SIMD switch of simd.h on) the bulk of the buffer is folded 64 bytes at a time with
 * carry-less multiplies, after "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Gopal,
 * Ozturk et al., Intel, 2009); elsewhere, and for the last < 16 bytes, one table lookup per byte. */
uint32_t epi_crc32(uint32_t crc, const unsigned char *buf, size_t len);
/* Builds the byte table and checks the CPU. Call it once before threads may checksum at the same time (the module's
 * init does): the lazy build in the first call is not synchronised. */
void epi_crc32_init(void);
/* Whether the carry-less-multiply path runs now. */
int epi_crc32_folding(void);
#endif
