// Shared helpers for the gpu-dot kernels.
//
// NVRTC compiles these sources without any CUDA headers, so nothing here includes one. The Rust
// side splices this file in place of the `#include "common.cuh"` line of each kernel source, and
// each of the other headers under kernels/ in place of its own `#include` line (src/engine/
// table.rs, `HEADERS`). A family includes common.cuh first, then the headers it uses; the
// headers include nothing themselves.
#ifndef GPU_DOT_COMMON_CUH
#define GPU_DOT_COMMON_CUH

typedef long long i64;

// Every device helper of the headers is inlined into its kernels.
#define GD_DEV __device__ __forceinline__

// The first statement of every entry point, before anything else it does (an early return
// included). On sm_90 on, the host may launch an entry programmatically after the kernel
// before it on its stream (src/engine/enqueue.rs): the entry is then let in as soon as every
// block of that kernel has started, and it waits here until that kernel has finished and its
// writes are visible. Since every entry waits here, each one that passes this point has
// every kernel before it on the stream finished, not only the last. Without a programmatic
// launch (or below sm_90, where it is empty) both instructions do nothing.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GD_AFTER_PREVIOUS() \
    asm volatile("griddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;" ::: "memory")
#else
#define GD_AFTER_PREVIOUS() ((void)0)
#endif

// Offset of element (r, c) of a matrix with leading dimension `ld`: row-major when TRANS is
// false, column-major (the transpose of a row-major matrix) when TRANS is true. 64-bit, so a
// matrix may hold more than 2^31 elements.
template <bool TRANS>
__device__ __forceinline__ i64 elem_offset(i64 r, i64 c, i64 ld) {
    return TRANS ? c * ld + r : r * ld + c;
}

// The argument list every GEMM entry point of element type T takes: C (M x N, row-major,
// leading dimension ldc) = op(A) (M x K) * op(B) (K x N).
#define GEMM_ARGS M, N, K, A, lda, B, ldb, C, ldc
#define GEMM_PARAMS(T)                                                                             \
    int M, int N, int K, const T *__restrict__ A, i64 lda, const T *__restrict__ B, i64 ldb, \
        T *__restrict__ C, i64 ldc

// The trailing arguments of a batched GEMM entry (`{stem}_{ll}[_u]_batched`): item z of the
// batch (blockIdx.z) multiplies A + z * stride_a by B + z * stride_b into C + z * stride_c
// (element offsets; a shared operand has stride 0). The grid is the unbatched entry's in x and
// y, with one layer per item in z; the body must not read blockIdx.z (the unsplit bodies
// do not).
#define GD_BATCH_PARAMS i64 stride_a, i64 stride_b, i64 stride_c
#define GD_BATCH_OFFSETS                     \
    const i64 gd_item_ = (i64)blockIdx.z;    \
    A += gd_item_ * stride_a;                \
    B += gd_item_ * stride_b;                \
    C += gd_item_ * stride_c

// A tiled GEMM's entry points for tile configuration CFG in every layout: ENTRY(NAME, CFG, TA,
// TB, AL), the family's macro that declares those of one layout, for PREFIX_ll (aligned
// operands, see the family's ALIGNMENT) and PREFIX_ll_u (any alignment), `ll` each of nn, nt,
// tn and tt.
#define GD_LAYOUT_ENTRIES(ENTRY, PREFIX, CFG)      \
    ENTRY(PREFIX##_nn, CFG, false, false, true)    \
    ENTRY(PREFIX##_nt, CFG, false, true, true)     \
    ENTRY(PREFIX##_tn, CFG, true, false, true)     \
    ENTRY(PREFIX##_tt, CFG, true, true, true)      \
    ENTRY(PREFIX##_nn_u, CFG, false, false, false) \
    ENTRY(PREFIX##_nt_u, CFG, false, true, false)  \
    ENTRY(PREFIX##_tn_u, CFG, true, false, false)  \
    ENTRY(PREFIX##_tt_u, CFG, true, true, false)

// Per-type spellings of the few math functions the element-wise kernels use (NVRTC has no
// overloaded host math headers).
__device__ __forceinline__ float gd_fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double gd_fma(double a, double b, double c) { return fma(a, b, c); }
__device__ __forceinline__ float gd_relu(float x) { return fmaxf(x, 0.f); }
__device__ __forceinline__ double gd_relu(double x) { return fmax(x, 0.0); }

// Grid-stride loop over [0, n): every element-wise kernel below runs with block 256, no shared
// memory, and any grid.
#define GD_GRID_STRIDE(i, n)                                                  \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x,                  \
             gd_stride_ = (i64)gridDim.x * blockDim.x;                        \
         i < (n); i += gd_stride_)

namespace gd {

// C = the sum of the `splits` partial products W[z] (each M x N, row-major, packed): the
// second pass of a split-K product.
template <typename T>
__device__ __forceinline__ void splitk_reduce(int M, int N, int splits, const T* __restrict__ W,
                                              T* __restrict__ C, i64 ldc) {
    const i64 MN = (i64)M * N;
    GD_GRID_STRIDE(idx, MN) {
        T s = T(0);
        for (int z = 0; z < splits; ++z) s += W[(i64)z * MN + idx];
        const i64 i = idx / N, j = idx - i * N;
        C[i * ldc + j] = s;
    }
}

// C = alpha * T + beta * C over an M x N block (both row-major), the `C = alpha*A*B + beta*C`
// epilogue of the general form. beta == 0 never reads C (NaN or Inf there is overwritten, as
// BLAS does); X == nullptr means alpha * A * B is zero (alpha == 0 or K == 0): C = beta * C.
template <typename T>
__device__ __forceinline__ void axpby(int M, int N, T alpha, const T* __restrict__ X, i64 ldx,
                                      T beta, T* __restrict__ C, i64 ldc) {
    const i64 MN = (i64)M * N;
    GD_GRID_STRIDE(idx, MN) {
        const i64 i = idx / N, j = idx - i * N;
        const T t = X ? alpha * X[i * ldx + j] : T(0);
        T* c = C + i * ldc + j;
        *c = beta == T(0) ? t : gd_fma(beta, *c, t);
    }
}

// The ReLU of a training loop's hidden layer, in place over N elements: X = max(X, 0), a NaN
// becoming 0 (as `x.max(0.0)` on the host).
template <typename T>
__device__ __forceinline__ void relu(i64 N, T* __restrict__ X) {
    GD_GRID_STRIDE(i, N) X[i] = gd_relu(X[i]);
}

// The gradient through that ReLU, in place: G = H > 0 ? G : 0, H the layer's output (a NaN in
// H passes nothing).
template <typename T>
__device__ __forceinline__ void relu_backward(i64 N, T* __restrict__ G, const T* __restrict__ H) {
    GD_GRID_STRIDE(i, N) G[i] = H[i] > T(0) ? G[i] : T(0);
}

// Complex matrices on the device as the real matrices of a complex product's stacked form
// (src/complex/device.rs). A complex element (r, c) of X (a `Complex<T>`: its real part, then
// its imaginary part) sits at reals X[2 * (r * sr + c * sc)] and the one after: strides in
// complex elements, any layout a device matrix or its transpose has.

// Y (rows x 2*cols reals, row-major) = X, each row's parts interleaved: the left operand read
// as reals where its own layout does not allow it (a transposed view).
template <typename T>
__device__ __forceinline__ void complex_gather(i64 rows, i64 cols, const T* __restrict__ X,
                                               i64 sr, i64 sc, T* __restrict__ Y) {
    GD_GRID_STRIDE(idx, rows * cols) {
        const i64 r = idx / cols, c = idx - r * cols;
        const T* x = X + 2 * (r * sr + c * sc);
        Y[2 * idx] = x[0];
        Y[2 * idx + 1] = x[1];
    }
}

// Y (2K x 2N reals, row-major) = the expansion of X (K x N): each element x + iy becomes the
// block [[x, y], [-y, x]] at rows 2q, 2q + 1 and columns 2j, 2j + 1, so that row 2q is row q
// of X read as reals and row 2q + 1 is row q of iX.
template <typename T>
__device__ __forceinline__ void complex_expand(i64 K, i64 N, const T* __restrict__ X, i64 sr,
                                               i64 sc, T* __restrict__ Y) {
    GD_GRID_STRIDE(idx, K * N) {
        const i64 q = idx / N, j = idx - q * N;
        const T* x = X + 2 * (q * sr + j * sc);
        const T re = x[0], im = x[1];
        T* even = Y + 2 * q * 2 * N + 2 * j;
        T* odd = even + 2 * N;
        even[0] = re;
        even[1] = im;
        odd[0] = -im;
        odd[1] = re;
    }
}

// C = alpha * P + beta * C over M x N complex elements: P row-major (N complex a row, parts
// interleaved), C with leading dimension ldc (complex elements). beta == 0 never reads C;
// P == nullptr means alpha * P is zero (K == 0).
template <typename T>
__device__ __forceinline__ void complex_axpby(int M, int N, T ar, T ai, const T* __restrict__ P,
                                              T br, T bi, T* __restrict__ C, i64 ldc) {
    GD_GRID_STRIDE(idx, (i64)M * N) {
        const i64 i = idx / N, j = idx - i * N;
        T re = T(0), im = T(0);
        if (P) {
            const T pr = P[2 * idx], pi = P[2 * idx + 1];
            re = ar * pr - ai * pi;
            im = ar * pi + ai * pr;
        }
        T* c = C + 2 * (i * ldc + j);
        if (br != T(0) || bi != T(0)) {
            const T cr = c[0], ci = c[1];
            re += br * cr - bi * ci;
            im += br * ci + bi * cr;
        }
        c[0] = re;
        c[1] = im;
    }
}

}  // namespace gd

// The complex entry points of a GEMM family for real type T, under the names the kernel
// table gives them (src/engine/table.rs, `Aux`).
#define GD_COMPLEX_ENTRIES(T, GATHER, EXPAND, AXPBY)                                             \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        GATHER(i64 rows, i64 cols, const T* __restrict__ X, i64 sr, i64 sc, T* __restrict__ Y) {\
        GD_AFTER_PREVIOUS();                                                                    \
        gd::complex_gather<T>(rows, cols, X, sr, sc, Y);                                        \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        EXPAND(i64 K, i64 N, const T* __restrict__ X, i64 sr, i64 sc, T* __restrict__ Y) {      \
        GD_AFTER_PREVIOUS();                                                                    \
        gd::complex_expand<T>(K, N, X, sr, sc, Y);                                              \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        AXPBY(int M, int N, T ar, T ai, const T* __restrict__ P, T br, T bi, T* __restrict__ C, \
              i64 ldc) {                                                                        \
        GD_AFTER_PREVIOUS();                                                                    \
        gd::complex_axpby<T>(M, N, ar, ai, P, br, bi, C, ldc);                                  \
    }

// The element-wise entry points of a GEMM family for element type T, under the names the
// kernel table gives them (src/engine/table.rs, `Aux`).
#define GD_AUX_ENTRIES(T, REDUCE, AXPBY, RELU, RELU_BACKWARD)                                    \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        REDUCE(int M, int N, int splits, const T* __restrict__ W, T* __restrict__ C, i64 ldc) { \
        GD_AFTER_PREVIOUS();                                                                    \
        gd::splitk_reduce<T>(M, N, splits, W, C, ldc);                                          \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) AXPBY(                                    \
        int M, int N, T alpha, const T* __restrict__ X, i64 ldx, T beta, T* __restrict__ C,     \
        i64 ldc) {                                                                              \
        GD_AFTER_PREVIOUS();                                                                    \
        gd::axpby<T>(M, N, alpha, X, ldx, beta, C, ldc);                                        \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) RELU(i64 N, T* __restrict__ X) {         \
        GD_AFTER_PREVIOUS();                                                                    \
        gd::relu<T>(N, X);                                                                      \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        RELU_BACKWARD(i64 N, T* __restrict__ G, const T* __restrict__ H) {                      \
        GD_AFTER_PREVIOUS();                                                                    \
        gd::relu_backward<T>(N, G, H);                                                          \
    }

// The eight GEMV entry points `PREFIX_{m1,n1}_{nn,nt,tn,tt}` of element type T over a
// family's `NS::gemv_rows` (dot products along contiguous rows of X) and `NS::gemv_cols`
// (along columns). M == 1: C[0][n] = sum_k a[k] * op(B)[k][n], a[k] = A[k] (TA false) or
// A[k*lda] (TA true). N == 1: C[m][0] = sum_k op(A)[m][k] * b[k], b[k] = B[k*ldb] (TB false)
// or B[k] (TB true).
#define GD_GEMV_M1(T, NS, NAME, TA, TB)                                                 \
    extern "C" __global__ void __launch_bounds__(256) NAME(GEMM_PARAMS(T)) {                       \
        GD_AFTER_PREVIOUS();                                                            \
        (void)M;                                                                        \
        (void)ldc;                                                                      \
        const i64 sa = TA ? lda : 1;                                                    \
        if (TB)                                                                         \
            NS::gemv_rows(N, K, B, ldb, A, sa, C, 1);                                   \
        else                                                                            \
            NS::gemv_cols(N, K, B, ldb, A, sa, C, 1);                                   \
    }
#define GD_GEMV_N1(T, NS, NAME, TA, TB)                                                 \
    extern "C" __global__ void __launch_bounds__(256) NAME(GEMM_PARAMS(T)) {                       \
        GD_AFTER_PREVIOUS();                                                            \
        (void)N;                                                                        \
        const i64 sb = TB ? 1 : ldb;                                                    \
        if (TA)                                                                         \
            NS::gemv_cols(M, K, A, lda, B, sb, C, ldc);                                 \
        else                                                                            \
            NS::gemv_rows(M, K, A, lda, B, sb, C, ldc);                                 \
    }
#define GD_GEMV_ENTRIES(T, NS, PREFIX)                \
    GD_GEMV_M1(T, NS, PREFIX##_m1_nn, false, false)   \
    GD_GEMV_M1(T, NS, PREFIX##_m1_nt, false, true)    \
    GD_GEMV_M1(T, NS, PREFIX##_m1_tn, true, false)    \
    GD_GEMV_M1(T, NS, PREFIX##_m1_tt, true, true)     \
    GD_GEMV_N1(T, NS, PREFIX##_n1_nn, false, false)   \
    GD_GEMV_N1(T, NS, PREFIX##_n1_nt, false, true)    \
    GD_GEMV_N1(T, NS, PREFIX##_n1_tn, true, false)    \
    GD_GEMV_N1(T, NS, PREFIX##_n1_tt, true, true)

#endif  // GPU_DOT_COMMON_CUH
