// The naive GEMM: one thread per element of C, reading its row of op(A) and column of op(B)
// straight from global memory. The baseline every other kernel is measured against. One
// template, instantiated for f32 (`sgemm_naive_*`) and f64 (`dgemm_naive_*`).
//
// Launch: block (16, 16); grid (ceil(N / 16), min(ceil(M / 16), 65535)). Rows past the grid
// are covered by a grid-stride loop over blockIdx.y. (Blocks of 32 × 8 and 32 × 32, a warp
// per row, ran faster at 1024³ but a third slower at 4096³ on an H200: BENCHMARKS.md.)
#include "common.cuh"

template <typename T, bool TA, bool TB>
__device__ __forceinline__ void gemm_naive(GEMM_PARAMS(T)) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= N) return;
    for (int row = blockIdx.y * blockDim.y + threadIdx.y; row < M; row += gridDim.y * blockDim.y) {
        T acc = 0;
        for (int k = 0; k < K; ++k) {
            acc += A[elem_offset<TA>(row, k, lda)] * B[elem_offset<TB>(k, col, ldb)];
        }
        C[(i64)row * ldc + col] = acc;
    }
}

#define NAIVE_ENTRY(L, T, SUFFIX, TA, TB)                                  \
    extern "C" __global__ void L##gemm_naive_##SUFFIX(GEMM_PARAMS(T)) {    \
        GD_AFTER_PREVIOUS();                                              \
        gemm_naive<T, TA, TB>(GEMM_ARGS);                                 \
    }
#define NAIVE_ENTRIES(L, T)                  \
    NAIVE_ENTRY(L, T, nn, false, false)      \
    NAIVE_ENTRY(L, T, nt, false, true)       \
    NAIVE_ENTRY(L, T, tn, true, false)       \
    NAIVE_ENTRY(L, T, tt, true, true)

NAIVE_ENTRIES(s, float)
NAIVE_ENTRIES(d, double)
