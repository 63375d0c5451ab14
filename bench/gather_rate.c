// How many elements a vector gather loads per cycle on this core: the port arms
// (tvm_ext/facts/machine_blocks.py) count a gather's elements against the load limit
// (tvm_ext/facts/isa.py: at most LOADS_PER_CYCLE loads a cycle), which is a bound only if no
// core gathers faster than that. Cycles are counted with a dependent scalar FMA chain
// (MIN_FMA_LATENCY_CYCLES = 4 cycles a step on the cores the tables name).
//
//   gcc -O2 -march=x86-64-v4 -o /tmp/gather_rate bench/gather_rate.c && /tmp/gather_rate
//
// (x86-64-v4: AVX-512; the 256-bit AVX2 gather is measured too.) Eight independent gathers of
// L1-resident data under an all-ones mask per iteration; the index registers pass through an
// empty asm statement each iteration so the compiler cannot hoist the gathers.
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float table[1024] __attribute__((aligned(64)));

#define BEST_OF 5

int main(void) {
    for (int i = 0; i < 1024; i++) table[i] = i * 0.5f;
    const long fma_steps = 20000000, iterations = 2000000;
    double best = 1e9;
    for (int r = 0; r < BEST_OF; r++) {
        __m128 a = _mm_set1_ps(1.0f), b = _mm_set1_ps(0.999999f), c = _mm_set1_ps(1e-7f);
        double t0 = now();
        for (long i = 0; i < fma_steps; i++) {
            a = _mm_fmadd_ss(a, b, c);
            __asm__ volatile("" : "+x"(a));
        }
        double t = now() - t0;
        if (t < best) best = t;
        if (_mm_cvtss_f32(a) == 12345.f) printf(" ");
    }
    const double cycle = best / fma_steps / 4.0;
    printf("dependent FMA: %.3f ns a step, %.2f GHz at 4 cycles a step\n",
           best / fma_steps * 1e9, 1e-9 / cycle);

    __m512i z[8];
    for (int k = 0; k < 8; k++)
        z[k] = _mm512_set_epi32(k, 37, 74, 111, 148, 185, 222, 259, 296, 333, 370, 407, 444,
                                481, 518, 555 + k);
    __m512 zsum = _mm512_setzero_ps();
    best = 1e9;
    for (int r = 0; r < BEST_OF; r++) {
        double t0 = now();
        for (long i = 0; i < iterations; i++) {
            __asm__ volatile("" : "+v"(z[0]), "+v"(z[1]), "+v"(z[2]), "+v"(z[3]), "+v"(z[4]),
                             "+v"(z[5]), "+v"(z[6]), "+v"(z[7]));
            __m512 g[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) g[k] = _mm512_i32gather_ps(z[k], table, 4);
            __asm__ volatile("" ::"v"(g[0]), "v"(g[1]), "v"(g[2]), "v"(g[3]), "v"(g[4]),
                             "v"(g[5]), "v"(g[6]), "v"(g[7]));
            zsum = _mm512_add_ps(zsum, g[0]);
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    double cycles = best / cycle / (iterations * 8.0);
    printf("512-bit gather (16 x fp32): %.2f cycles each, %.2f elements a cycle (%g)\n", cycles,
           16.0 / cycles, _mm512_reduce_add_ps(zsum));

    __m256i y[8];
    for (int k = 0; k < 8; k++) y[k] = _mm256_set_epi32(k, 41, 82, 123, 164, 205, 246, 287 + k);
    __m256 ysum = _mm256_setzero_ps();
    best = 1e9;
    for (int r = 0; r < BEST_OF; r++) {
        double t0 = now();
        for (long i = 0; i < iterations; i++) {
            __asm__ volatile("" : "+x"(y[0]), "+x"(y[1]), "+x"(y[2]), "+x"(y[3]), "+x"(y[4]),
                             "+x"(y[5]), "+x"(y[6]), "+x"(y[7]));
            __m256 g[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) g[k] = _mm256_i32gather_ps(table, y[k], 4);
            __asm__ volatile("" ::"x"(g[0]), "x"(g[1]), "x"(g[2]), "x"(g[3]), "x"(g[4]),
                             "x"(g[5]), "x"(g[6]), "x"(g[7]));
            ysum = _mm256_add_ps(ysum, g[0]);
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    cycles = best / cycle / (iterations * 8.0);
    float out[8];
    _mm256_storeu_ps(out, ysum);
    printf("256-bit gather (8 x fp32): %.2f cycles each, %.2f elements a cycle (%g)\n", cycles,
           8.0 / cycles, out[0]);
    return 0;
}
