// The probes' timing: CUDA events around one launch, the median of `runs` after `warmup` untimed ones;
// `before` runs ahead of each launch, outside the timed span (an L2 flush, or nothing).
#pragma once
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

template <typename F, typename B>
float median_us(F launch, B before, int runs, int warmup = 5) {
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    std::vector<float> t;
    for (int i = 0; i < warmup + runs; ++i) {
        before(i);
        cudaEventRecord(a); launch(); cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b);
        if (i >= warmup) t.push_back(ms * 1000.f);
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(a); cudaEventDestroy(b);
    return t[t.size() / 2];
}
