/* CPU feature check for the SIMD paths (see simd.h), done once. */
#include "simd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned cpuid1_ecx(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) ? c : 0;
}

static int cpu_has_fma(void) { return (cpuid1_ecx() & bit_FMA) != 0; }

static int cpu_has_avx2_f16c_fma(void)
{
    if (!cpu_has_fma() || !(cpuid1_ecx() & bit_F16C)) return 0;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}
#else
static int cpu_has_fma(void) { return 1; }  /* arm64 always has fused multiply-add */
static int cpu_has_avx2_f16c_fma(void) { return 0; }
#endif

static int cpu = -1, has_fma = -1, enabled = 1;

int epi_simd_usable(void)
{
    if (cpu < 0) cpu = cpu_has_avx2_f16c_fma();
    return cpu && enabled;
}

int epi_cpu_has_fma(void)
{
    if (has_fma < 0) has_fma = cpu_has_fma();
    return has_fma;
}

int epi_simd_enabled(void) { return enabled; }

int epi_simd_set_enabled(int on)
{
    const int before = enabled;
    enabled = on ? 1 : 0;
    return before;
}
