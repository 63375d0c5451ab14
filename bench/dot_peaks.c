/* Per-core throughput of fp32 FMA vs AVX512-BF16 dot products (12 independent chains each).
 *
 *   gcc -O2 -mavx512f -mavx512bf16 bench/dot_peaks.c -o /tmp/dot_peaks && /tmp/dot_peaks
 *
 * Counts 2 FLOP per fp32 FMA lane and 4 per vdpbf16ps lane (two multiply-adds). The chains
 * start from different values so the compiler cannot merge them. One thread: multiply by the
 * core count for the machine. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define INIT(i) a##i = _mm512_set1_ps((float)i + seed);
#define FMA(i) a##i = _mm512_fmadd_ps(a##i, x, y);
#define DOT(i) a##i = _mm512_dpbf16_ps(a##i, xb, yb);
#define SUM(i) s += a##i[0];

int main(void) {
  volatile float seed_v = 0.5f;
  float seed = seed_v, s;
  __m512 x = _mm512_set1_ps(0.5f), y = _mm512_set1_ps(0.25f);
  __m512bh xb = (__m512bh)_mm512_set1_epi16(0x3f00), yb = xb;
  __m512 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
  const long n = 400000000 / 12;
  for (int round = 0; round < 3; round++) {
    R12(INIT)
    double t = now();
    for (long i = 0; i < n; i++) { R12(FMA) }
    double fma_s = now() - t;
    s = 0; R12(SUM)
    R12(INIT)
    t = now();
    for (long i = 0; i < n; i++) { R12(DOT) }
    double dot_s = now() - t;
    R12(SUM)
    printf("fp32 fma %.1f GFLOP/s   bf16 dot %.1f GFLOP/s   ratio %.2f   (%g)\n",
           n * 12 * 32 / fma_s / 1e9, n * 12 * 64 / dot_s / 1e9, fma_s / dot_s * 2, s);
  }
  return 0;
}
