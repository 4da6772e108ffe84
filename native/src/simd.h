#ifndef EPI_SIMD_H
#define EPI_SIMD_H
/* CPU features, checked once. Whether the x86 AVX2 / F16C / FMA paths (rope_shift.c, rows_f16.c) run: the CPU has all three and nobody turned
 * them off. Every such path computes the same bits as its scalar twin; the switch exists so that tests compare the
 * two directly and benchmarks time them side by side. */
int epi_simd_usable(void);
/* Whether the CPU has fused multiply-add (x86 with FMA, every arm64): then a llama.cpp built for it contracts RoPE's
 * multiply-adds, and rope_shift.c may run FMA instructions. Not affected by the switch below. */
int epi_cpu_has_fma(void);
/* Whether the switch below is on (each path still checks its own CPU features: crc32.c's PCLMULQDQ). */
int epi_simd_enabled(void);
/* Turn the paths off (0) or back on (1, where the CPU allows), crc32.c's PCLMULQDQ folding with them; returns the
 * previous setting. */
int epi_simd_set_enabled(int enabled);
#endif
