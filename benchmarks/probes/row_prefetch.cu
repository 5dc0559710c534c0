// Probe kernels for row_prefetch.py: LayerNorm over rows of 8192 f32 (the layernorm_large line), each
// thread owning float4s t, t+T, ... of its row (cyclic). Designs, named design_threads_blocks-per-SM[_variant]:
// "plain": one row per block, loaded into registers, two block reductions (mean, then centered squares), as
// v0's kernel. "onepass": one block reduction of the shifted sums (x - x0 and its square). "reread_P": the
// row read again from L2 for each of P passes instead of held in registers. "looped_U": Inductor's looped
// reduction (a Welford state per thread over chunks, U chunks loaded together, one merge, the row reread).
// "prefetch_threads_stages_blocks": a persistent block (grid = SMs x blocks per SM) walks the rows
// blockIdx.x, +gridDim.x, ...; one thread copies each row into one of STAGES shared-memory buffers by
// cp.async.bulk (TMA's 1D copy) onto the buffer's mbarrier, STAGES rows ahead of the row being normalized;
// every thread waits for the buffer's phase and reads its float4s, and the buffer is refilled after the
// first block reduction's barrier (every thread has read it then).
// Built by row_prefetch.py with nvcc -cubin; extern "C" names so pycuda finds them.
#include <cstdint>

constexpr int COLS = 8192, VECS = COLS / 4, ROW_BYTES = COLS * 4;
constexpr float EPS = 1e-5f;

__device__ __forceinline__ uint32_t smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// one reduction per call, scratch alternating between two halves: a half is written again only two
// reductions later, after the next reduction's barrier, so one barrier per reduction suffices
template <int T>
__device__ __forceinline__ float block_sum(float v, float (*scratch)[T / 32], int& turn) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
    float* half = scratch[turn ^= 1];
    if (threadIdx.x % 32 == 0) half[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < T / 32; ++w) s += half[w];
    return s;
}

template <int T, typename F>
__device__ __forceinline__ void normalize(const float4 (&v)[VECS / T], const float4* __restrict__ g,
                                          const float4* __restrict__ b, float4* __restrict__ out,
                                          float (*scratch)[T / 32], int& turn, F after_first) {
    constexpr int V = VECS / T;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < V; ++j) s += v[j].x + v[j].y + v[j].z + v[j].w;
    const float mean = block_sum<T>(s, scratch, turn) * (1.f / COLS);
    after_first();
    float q = 0.f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
        float dx = v[j].x - mean, dy = v[j].y - mean, dz = v[j].z - mean, dw = v[j].w - mean;
        q += dx * dx + dy * dy + dz * dz + dw * dw;
    }
    const float rstd = rsqrtf(block_sum<T>(q, scratch, turn) * (1.f / COLS) + EPS);
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const int c = j * T + threadIdx.x;
        const float4 gg = g[c], bb = b[c];
        out[c] = make_float4((v[j].x - mean) * rstd * gg.x + bb.x, (v[j].y - mean) * rstd * gg.y + bb.y,
                             (v[j].z - mean) * rstd * gg.z + bb.z, (v[j].w - mean) * rstd * gg.w + bb.w);
    }
}

template <int T>
__device__ __forceinline__ float2 block_sum2(float2 v, float2 (*scratch)[T / 32]) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v.x += __shfl_xor_sync(~0u, v.x, o), v.y += __shfl_xor_sync(~0u, v.y, o);
    if (threadIdx.x % 32 == 0) scratch[0][threadIdx.x / 32] = v;
    __syncthreads();
    float2 s = make_float2(0.f, 0.f);
#pragma unroll
    for (int w = 0; w < T / 32; ++w) s.x += scratch[0][w].x, s.y += scratch[0][w].y;
    return s;
}

// one block reduction: shifted sums (K = the row's first element keeps E[(x-K)^2] - E[x-K]^2 from cancelling)
template <int T>
__device__ void onepass(const float4* __restrict__ x, const float4* __restrict__ g, const float4* __restrict__ b,
                        float4* __restrict__ y) {
    constexpr int V = VECS / T;
    __shared__ float2 scratch[1][T / 32];
    const size_t row = (size_t)blockIdx.x * VECS;
    float4 v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = x[row + j * T + threadIdx.x];
    const float k = reinterpret_cast<const float*>(x + row)[0];
    float2 s = make_float2(0.f, 0.f);
#pragma unroll
    for (int j = 0; j < V; ++j) {
        float a = v[j].x - k, bb = v[j].y - k, c = v[j].z - k, d = v[j].w - k;
        s.x += a + bb + c + d;
        s.y += a * a + bb * bb + c * c + d * d;
    }
    s = block_sum2<T>(s, scratch);
    const float shifted = s.x * (1.f / COLS), mean = k + shifted;
    const float rstd = rsqrtf(s.y * (1.f / COLS) - shifted * shifted + EPS);
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const int c = j * T + threadIdx.x;
        const float4 gg = g[c], bb = b[c];
        y[row + c] = make_float4((v[j].x - mean) * rstd * gg.x + bb.x, (v[j].y - mean) * rstd * gg.y + bb.y,
                                 (v[j].z - mean) * rstd * gg.z + bb.z, (v[j].w - mean) * rstd * gg.w + bb.w);
    }
}

struct Welford {
    float mean, m2, n;
    __device__ __forceinline__ void add(float v) {
        n += 1.f;
        const float d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
    }
    __device__ __forceinline__ void merge(Welford o) {
        const float total = n + o.n, d = o.mean - mean, w = total > 0.f ? o.n / total : 0.f;
        mean += d * w;
        m2 += o.m2 + d * d * n * w;
        n = total;
    }
};

// Inductor's looped reduction (torch.compile's triton_red_fused_native_layer_norm): pass 1 reads the row in
// chunks of one float4 per thread into a Welford state, one block reduction merges the states, pass 2
// rereads the row (from L2) and normalizes it; UNROLL: chunks loaded together
template <int T, int UNROLL>
__device__ void looped(const float4* __restrict__ x, const float4* __restrict__ g, const float4* __restrict__ b,
                       float4* __restrict__ y) {
    constexpr int V = VECS / T;
    __shared__ Welford scratch[T / 32];
    const size_t row = (size_t)blockIdx.x * VECS;
    Welford w{0.f, 0.f, 0.f};
#pragma unroll UNROLL
    for (int j = 0; j < V; ++j) {
        const float4 v = x[row + j * T + threadIdx.x];
        w.add(v.x), w.add(v.y), w.add(v.z), w.add(v.w);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1)
        w.merge({__shfl_xor_sync(~0u, w.mean, o), __shfl_xor_sync(~0u, w.m2, o), __shfl_xor_sync(~0u, w.n, o)});
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = w;
    __syncthreads();
    Welford all = scratch[0];
#pragma unroll
    for (int k = 1; k < T / 32; ++k) all.merge(scratch[k]);
    const float mean = all.mean, rstd = rsqrtf(all.m2 * (1.f / COLS) + EPS);
#pragma unroll UNROLL
    for (int j = 0; j < V; ++j) {
        const int c = j * T + threadIdx.x;
        const float4 v = x[row + c], gg = g[c], bb = b[c];
        y[row + c] = make_float4((v.x - mean) * rstd * gg.x + bb.x, (v.y - mean) * rstd * gg.y + bb.y,
                                 (v.z - mean) * rstd * gg.z + bb.z, (v.w - mean) * rstd * gg.w + bb.w);
    }
}

// the row read again (from L2) for each pass instead of held in registers: PASSES 2, the shifted sums of
// onepass then normalize; PASSES 3, the mean, then the centered squares, then normalize (as v0's reductions)
template <int T, int PASSES>
__device__ void reread(const float4* __restrict__ x, const float4* __restrict__ g, const float4* __restrict__ b,
                       float4* __restrict__ y) {
    constexpr int V = VECS / T;
    __shared__ float2 scratch2[1][T / 32];
    __shared__ float scratch[2][T / 32];
    int turn = 0;
    const size_t row = (size_t)blockIdx.x * VECS;
    float mean, rstd;
    if constexpr (PASSES == 2) {
        const float k = reinterpret_cast<const float*>(x + row)[0];
        float2 s = make_float2(0.f, 0.f);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float4 v = x[row + j * T + threadIdx.x];
            float a = v.x - k, bb = v.y - k, c = v.z - k, d = v.w - k;
            s.x += a + bb + c + d;
            s.y += a * a + bb * bb + c * c + d * d;
        }
        s = block_sum2<T>(s, scratch2);
        const float shifted = s.x * (1.f / COLS);
        mean = k + shifted;
        rstd = rsqrtf(s.y * (1.f / COLS) - shifted * shifted + EPS);
    } else {
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float4 v = x[row + j * T + threadIdx.x];
            s += v.x + v.y + v.z + v.w;
        }
        mean = block_sum<T>(s, scratch, turn) * (1.f / COLS);
        float q = 0.f;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float4 v = x[row + j * T + threadIdx.x];
            float dx = v.x - mean, dy = v.y - mean, dz = v.z - mean, dw = v.w - mean;
            q += dx * dx + dy * dy + dz * dz + dw * dw;
        }
        rstd = rsqrtf(block_sum<T>(q, scratch, turn) * (1.f / COLS) + EPS);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const int c = j * T + threadIdx.x;
        const float4 v = x[row + c], gg = g[c], bb = b[c];
        y[row + c] = make_float4((v.x - mean) * rstd * gg.x + bb.x, (v.y - mean) * rstd * gg.y + bb.y,
                                 (v.z - mean) * rstd * gg.z + bb.z, (v.w - mean) * rstd * gg.w + bb.w);
    }
}

template <int T>
__device__ void plain(const float4* __restrict__ x, const float4* __restrict__ g, const float4* __restrict__ b,
                      float4* __restrict__ y) {
    constexpr int V = VECS / T;
    __shared__ float scratch[2][T / 32];
    int turn = 0;
    const size_t row = (size_t)blockIdx.x * VECS;
    float4 v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = x[row + j * T + threadIdx.x];
    normalize<T>(v, g, b, y + row, scratch, turn, [] {});
}

__device__ __forceinline__ void copy_row(uint64_t* bar, uint32_t dst, const void* src) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(bar)), "r"(ROW_BYTES) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(ROW_BYTES), "r"(smem(bar)) : "memory");
}

__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t phase) {
    asm volatile(
        "{\n .reg .pred done;\n"
        "WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @!done bra WAIT;\n}" ::"r"(smem(bar)), "r"(phase) : "memory");
}

template <int T, int STAGES>
__device__ void prefetch(const float4* __restrict__ x, const float4* __restrict__ g, const float4* __restrict__ b,
                         float4* __restrict__ y, int rows) {
    constexpr int V = VECS / T;
    extern __shared__ __align__(128) float4 buffers[];  // STAGES rows
    __shared__ __align__(8) uint64_t full[STAGES];
    __shared__ float scratch[2][T / 32];
    int turn = 0;
    const int mine = (rows - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    auto row_of = [&](int i) { return (size_t)(blockIdx.x + (size_t)i * gridDim.x) * VECS; };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&full[s])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int s = 0; s < STAGES && s < mine; ++s) copy_row(&full[s], smem(buffers + s * VECS), x + row_of(s));
    }
    __syncthreads();
    for (int i = 0; i < mine; ++i) {
        const int s = i % STAGES;
        wait_phase(&full[s], (i / STAGES) & 1);
        float4 v[V];
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = buffers[s * VECS + j * T + threadIdx.x];
        normalize<T>(v, g, b, y + row_of(i), scratch, turn, [&] {
            if (threadIdx.x == 0 && i + STAGES < mine) copy_row(&full[s], smem(buffers + s * VECS), x + row_of(i + STAGES));
        });
    }
}

#define PLAIN(T, MINB)                                                                                          \
    extern "C" __global__ void __launch_bounds__(T, MINB)                                                     \
        plain_##T##_##MINB(const float4* x, const float4* g, const float4* b, float4* y, int) { plain<T>(x, g, b, y); }
#define ONEPASS(T, MINB)                                                                                        \
    extern "C" __global__ void __launch_bounds__(T, MINB)                                                     \
        onepass_##T##_##MINB(const float4* x, const float4* g, const float4* b, float4* y, int) { onepass<T>(x, g, b, y); }
#define LOOPED(T, MINB, UNROLL)                                                                                 \
    extern "C" __global__ void __launch_bounds__(T, MINB) looped_##T##_##MINB##_##UNROLL(                      \
        const float4* x, const float4* g, const float4* b, float4* y, int) { looped<T, UNROLL>(x, g, b, y); }
#define REREAD(T, MINB, PASSES)                                                                                 \
    extern "C" __global__ void __launch_bounds__(T, MINB) reread_##T##_##MINB##_##PASSES(                      \
        const float4* x, const float4* g, const float4* b, float4* y, int) { reread<T, PASSES>(x, g, b, y); }
#define PREFETCH(T, STAGES, MINB)                                                                               \
    extern "C" __global__ void __launch_bounds__(T, MINB) prefetch_##T##_##STAGES##_##MINB(                     \
        const float4* x, const float4* g, const float4* b, float4* y, int rows) {                               \
        prefetch<T, STAGES>(x, g, b, y, rows);                                                                \
    }

PLAIN(512, 2)
PLAIN(512, 3)
PLAIN(256, 4)
PLAIN(1024, 2)
ONEPASS(512, 2)
ONEPASS(512, 3)
ONEPASS(256, 4)
ONEPASS(1024, 2)
REREAD(512, 2, 2)
REREAD(512, 4, 2)
REREAD(256, 8, 2)
REREAD(1024, 2, 2)
REREAD(512, 2, 3)
REREAD(512, 4, 3)
LOOPED(512, 2, 1)
LOOPED(512, 2, 4)
LOOPED(512, 4, 1)
LOOPED(512, 4, 4)
LOOPED(1024, 2, 1)
PREFETCH(512, 2, 1)
PREFETCH(512, 3, 1)
PREFETCH(512, 4, 1)
PREFETCH(512, 6, 1)
PREFETCH(512, 2, 2)
PREFETCH(512, 3, 2)
PREFETCH(256, 3, 2)
PREFETCH(256, 2, 3)
PREFETCH(1024, 3, 1)
PREFETCH(1024, 4, 1)
