// Probe: do cache hints on the global loads and stores move a streaming kernel on the H200? Inductor
// marks the row sum's loads evict_first (ld.global.L1::evict_first / L2 evict-first policy); ours are
// plain ld.global.v4. Kernels as the generated ones are: the row sum of 8192 x 8192 f32 with one block of
// 512 threads per row, each thread's four float4s interleaved across the block; and the elementwise chain
// sigmoid(tanh(2x + 1)) * x with two float4s per thread in blocks of 128. Timed as the measure worker
// times (workers/measure/timing.py): L2 flushed (256 MB written) before each run, CUDA events, median.
//   nvcc -O3 -arch=sm_90a -o /tmp/cache_hints benchmarks/probes/cache_hints.cu && /tmp/cache_hints
#include <cstdio>
#include <cuda_runtime.h>
#include "timing.cuh"

constexpr int ROWS = 8192, COLS = 8192, VECS = COLS / 4, THREADS = 512, RUNS = 50;
constexpr size_t BYTES = (size_t)ROWS * COLS * 4;

enum Hint { PLAIN, STREAMING, NO_L1, EVICT_FIRST, READ_ONLY };
const char* HINTS[] = {"plain ld.global.v4", "ld.global.cs (__ldcs)", "ld.global.L1::no_allocate",
                       "ld.global.L1::evict_first.L2::evict_first", "ld.global.nc (__ldg)"};

template <Hint H>
__device__ float4 load(const float4* p) {
    float4 v;
    if constexpr (H == PLAIN) v = *p;
    else if constexpr (H == STREAMING) v = __ldcs(p);
    else if constexpr (H == READ_ONLY) v = __ldg(p);
    else if constexpr (H == NO_L1)
        asm volatile("ld.global.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    else
        asm volatile("{ .reg .b64 policy; createpolicy.fractional.L2::evict_first.b64 policy, 1.0;\n"
                     "ld.global.L1::evict_first.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], policy; }"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

template <Hint H>
__global__ void __launch_bounds__(THREADS) row_sum(const float4* __restrict__ x, float* __restrict__ y) {
    constexpr int V = VECS / THREADS;
    __shared__ float warps[THREADS / 32];
    const float4* row = x + (size_t)blockIdx.x * VECS;
    float4 v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = load<H>(&row[j * THREADS + threadIdx.x]);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < V; ++j) s += v[j].x + v[j].y + v[j].z + v[j].w;
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < THREADS / 32 ? warps[threadIdx.x] : 0.f;
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
        if (threadIdx.x == 0) y[blockIdx.x] = s;
    }
}

__device__ float chain(float x) { return x / (1.f + __expf(-tanhf(2.f * x + 1.f))); }

template <Hint H, bool STREAM_STORES>
__global__ void __launch_bounds__(128) elementwise(const float4* __restrict__ x, float4* __restrict__ y) {
    size_t base = (size_t)blockIdx.x * 256 + threadIdx.x * 2;
    float4 a = load<H>(&x[base]), b = load<H>(&x[base + 1]);
    float4 r = {chain(a.x), chain(a.y), chain(a.z), chain(a.w)}, s = {chain(b.x), chain(b.y), chain(b.z), chain(b.w)};
    if constexpr (STREAM_STORES) { __stcs(&y[base], r); __stcs(&y[base + 1], s); }
    else { y[base] = r; y[base + 1] = s; }
}

int main() {
    float4 *x, *y, *flush;
    float* sums;
    cudaMalloc(&x, BYTES); cudaMalloc(&y, BYTES); cudaMalloc(&flush, BYTES); cudaMalloc(&sums, ROWS * 4);
    cudaMemset(x, 0, BYTES);
    // L2 left full of dirty lines before each run, as the worker's flush leaves it
    auto flushed = [&](int i) { cudaMemsetAsync(flush, i, BYTES); };
    float copy = median_us([&] { cudaMemcpyAsync(y, x, BYTES, cudaMemcpyDeviceToDevice); }, flushed, RUNS);
    printf("device copy of 256 MB: %.1f us (flushed as below)\n", copy);
    auto report = [&](const char* what, const char* hint, float us, float bytes_copied) {
        printf("%-12s %-44s %7.1f us  %.3fx of copy  (%s)\n", what, hint, us, copy * bytes_copied / us,
               cudaGetErrorString(cudaGetLastError()));
    };
    auto sum = [&](Hint h, auto kernel) {
        report("row sum", HINTS[h], median_us([&] { kernel<<<ROWS, THREADS>>>(x, sums); }, flushed, RUNS), 0.5f);
    };
    for (int round = 0; round < 2; ++round) {  // the second round: are the first's figures steady?
        sum(PLAIN, row_sum<PLAIN>);
        sum(STREAMING, row_sum<STREAMING>);
        sum(NO_L1, row_sum<NO_L1>);
        sum(EVICT_FIRST, row_sum<EVICT_FIRST>);
        sum(READ_ONLY, row_sum<READ_ONLY>);
        const int blocks = (int)(BYTES / 16 / 256);
        report("elementwise", HINTS[PLAIN], median_us([&] { elementwise<PLAIN, false><<<blocks, 128>>>(x, y); }, flushed, RUNS), 1.f);
        report("elementwise", HINTS[STREAMING], median_us([&] { elementwise<STREAMING, false><<<blocks, 128>>>(x, y); }, flushed, RUNS), 1.f);
        report("elementwise", "plain loads, st.global.cs", median_us([&] { elementwise<PLAIN, true><<<blocks, 128>>>(x, y); }, flushed, RUNS), 1.f);
        report("elementwise", "ld.global.cs, st.global.cs", median_us([&] { elementwise<STREAMING, true><<<blocks, 128>>>(x, y); }, flushed, RUNS), 1.f);
    }
    return 0;
}
