// The naive SGEMM: one thread per element of C, reading its row of op(A) and column of op(B)
// straight from global memory. The baseline every other kernel is measured against.
//
// Launch: block (16, 16); grid (ceil(N / 16), min(ceil(M / 16), 65535)). Rows past the grid
// are covered by a grid-stride loop over blockIdx.y. (Blocks of 32 × 8 and 32 × 32, a warp
// per row, ran faster at 1024³ but a third slower at 4096³ on an H200: BENCHMARKS.md.)
#include "common.cuh"

template <bool TA, bool TB>
__device__ __forceinline__ void sgemm_naive(SGEMM_PARAMS) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= N) return;
    for (int row = blockIdx.y * blockDim.y + threadIdx.y; row < M; row += gridDim.y * blockDim.y) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[elem_offset<TA>(row, k, lda)] * B[elem_offset<TB>(k, col, ldb)];
        }
        C[(i64)row * ldc + col] = acc;
    }
}

#define NAIVE_ENTRY(SUFFIX, TA, TB) \
    extern "C" __global__ void sgemm_naive_##SUFFIX(SGEMM_PARAMS) { sgemm_naive<TA, TB>(SGEMM_ARGS); }

NAIVE_ENTRY(nn, false, false)
NAIVE_ENTRY(nt, false, true)
NAIVE_ENTRY(tn, true, false)
NAIVE_ENTRY(tt, true, true)
