// Probe: which thread-to-column layout lets a one-row-per-block LayerNorm (8192 x 8192 f32, the
// layernorm_large line) stream at copy bandwidth. "blocked": thread t owns float4s [t*V, t*V+V) of its
// row (what tile_using_forall gives: v0's layout); "cyclic": thread t owns float4s t, t+T, t+2T, ...
// (each warp-wide load reads 512 contiguous bytes); "staged": cyclic, the row copied into shared memory
// by cp.async (in flight without holding registers) and read from there. MINB: the blocks per SM that
// __launch_bounds__ asks for (2048 / T caps registers at 32). Build and run on the GPU node:
//   nvcc -O3 -arch=sm_90a -o /tmp/row_layout benchmarks/probes/row_layout.cu && /tmp/row_layout
#include <cstdio>
#include <cuda_runtime.h>
#include <cuda_pipeline.h>
#include "timing.cuh"

constexpr int ROWS = 8192, COLS = 8192, VECS = COLS / 4, RUNS = 20;
const auto UNFLUSHED = [](int) {};  // each run after the last: L2 holds what it left

template <int T>
__device__ float block_sum(float v, float* scratch) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.f;
    for (int w = 0; w < T / 32; ++w) s += scratch[w];
    __syncthreads();
    asm volatile("" ::: "memory");  // staged: the row is read from shared memory again after a merge
    return s;
}

template <int T, int MINB, bool CYCLIC, bool STAGED>
__global__ void __launch_bounds__(T, MINB)
layernorm(const float4* __restrict__ x, const float4* __restrict__ g, const float4* __restrict__ b, float4* __restrict__ y) {
    constexpr int V = VECS / T;
    __shared__ float scratch[T / 32];
    extern __shared__ float4 staged[];
    const float4* row = x + (size_t)blockIdx.x * VECS;
    float4 v[V];
    auto col = [](int j) { return CYCLIC ? j * T + (int)threadIdx.x : (int)threadIdx.x * V + j; };
    if constexpr (STAGED) {
#pragma unroll
        for (int j = 0; j < V; ++j) __pipeline_memcpy_async(&staged[col(j)], &row[col(j)], 16);
        __pipeline_commit();
        __pipeline_wait_prior(0);  // a thread reads back only what it copied: no barrier
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = row[col(j)];
    }
    // staged: every phase reads the row from shared memory again instead of holding it in registers
    auto at = [&](int j) {
        if constexpr (STAGED) return staged[col(j)];
        else return v[j];
    };
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < V; ++j) { float4 e = at(j); s += e.x + e.y + e.z + e.w; }
    const float mean = block_sum<T>(s, scratch) / COLS;
    float q = 0.f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
        float4 e = at(j);
        float a = e.x - mean, c = e.y - mean, d = e.z - mean, f = e.w - mean;
        q += a * a + c * c + d * d + f * f;
    }
    const float rstd = rsqrtf(block_sum<T>(q, scratch) / COLS + 1e-5f);
#pragma unroll
    for (int j = 0; j < V; ++j) {
        float4 e = at(j), w = g[col(j)], o = b[col(j)], r;
        r.x = (e.x - mean) * rstd * w.x + o.x; r.y = (e.y - mean) * rstd * w.y + o.y;
        r.z = (e.z - mean) * rstd * w.z + o.z; r.w = (e.w - mean) * rstd * w.w + o.w;
        y[(size_t)blockIdx.x * VECS + col(j)] = r;
    }
}

int main() {
    size_t bytes = (size_t)ROWS * COLS * 4;
    float4 *x, *y, *g, *b;
    cudaMalloc(&x, bytes); cudaMalloc(&y, bytes); cudaMalloc(&g, COLS * 4); cudaMalloc(&b, COLS * 4);
    cudaMemset(x, 0, bytes); cudaMemset(g, 0, COLS * 4); cudaMemset(b, 0, COLS * 4);
    float copy = median_us([&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); }, UNFLUSHED, RUNS);
    printf("device copy of 256 MB: %.1f us\n", copy);
    auto run = [&](const char* name, auto kernel, int threads, int smem = 0) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        int blocks = 0;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem);
        float us = median_us([&] { kernel<<<ROWS, threads, smem>>>(x, g, b, y); }, UNFLUSHED, RUNS);
        printf("%-40s %d blocks/SM %7.1f us  %.3fx of copy  (%s)\n", name, blocks, us, copy / us,
               cudaGetErrorString(cudaGetLastError()));
        };
    const int row = COLS * 4;
    run("1024 threads, blocked", layernorm<1024, 2, false, false>, 1024);
    run("1024 threads, cyclic", layernorm<1024, 2, true, false>, 1024);
    run("1024 threads, staged", layernorm<1024, 2, true, true>, 1024, row);
    run("512 threads, blocked, 32 regs", layernorm<512, 4, false, false>, 512);
    run("512 threads, cyclic, 32 regs", layernorm<512, 4, true, false>, 512);
    run("512 threads, blocked", layernorm<512, 1, false, false>, 512);
    run("512 threads, cyclic", layernorm<512, 1, true, false>, 512);
    run("512 threads, staged, 3 blocks", layernorm<512, 3, true, true>, 512, row);
    run("256 threads, blocked", layernorm<256, 1, false, false>, 256);
    run("256 threads, cyclic", layernorm<256, 1, true, false>, 256);
    run("256 threads, staged, 6 blocks", layernorm<256, 6, true, true>, 256, row);
    return 0;
}
