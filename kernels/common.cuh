// Shared helpers for the gpu-dot kernels.
//
// NVRTC compiles these sources without any CUDA headers, so nothing here includes one. The Rust
// side splices this file in place of the `#include "common.cuh"` line of each kernel source.
#ifndef GPU_DOT_COMMON_CUH
#define GPU_DOT_COMMON_CUH

typedef long long i64;

// Offset of element (r, c) of a matrix with leading dimension `ld`: row-major when TRANS is
// false, column-major (the transpose of a row-major matrix) when TRANS is true. 64-bit, so a
// matrix may hold more than 2^31 elements.
template <bool TRANS>
__device__ __forceinline__ i64 elem_offset(i64 r, i64 c, i64 ld) {
    return TRANS ? c * ld + r : r * ld + c;
}

// The argument list every SGEMM entry point takes: C (M x N, row-major, leading dimension ldc)
// = op(A) (M x K) * op(B) (K x N).
#define SGEMM_PARAMS                                                                      \
    int M, int N, int K, const float *__restrict__ A, i64 lda, const float *__restrict__ B, \
        i64 ldb, float *__restrict__ C, i64 ldc
#define SGEMM_ARGS M, N, K, A, lda, B, ldb, C, ldc
// The same for any element type T.
#define GEMM_PARAMS(T)                                                                   \
    int M, int N, int K, const T *__restrict__ A, i64 lda, const T *__restrict__ B, i64 ldb, \
        T *__restrict__ C, i64 ldc

#endif  // GPU_DOT_COMMON_CUH
