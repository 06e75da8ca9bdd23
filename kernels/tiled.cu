// The shared-memory tiled GEMM with boundary checks, instantiated for f32 (`sgemm_tiled_*`) and
// f64 (`dgemm_tiled_*`).
//
// Each block computes a TILE x TILE tile of C, one element per thread. The K loop walks over
// TILE-wide panels: the block stages a TILE x TILE tile of op(A) and one of op(B) in shared
// memory (zero outside the matrices, so any M, N, K works), synchronises, and every thread
// takes TILE multiply-adds from shared memory. Each global element is read M/TILE or N/TILE
// times instead of N or M times.
//
// For a transposed operand the thread roles of the load are swapped, so that consecutive
// threads still read consecutive addresses, and that operand's tile is padded by one column so
// that the transposed store into shared memory is free of bank conflicts. A tile stored
// straight is left unpadded and 16-byte aligned: its rows of op(A) are then read four at a
// time (one 128-bit shared load for four multiply-adds).
//
// Launch: block (TILE, TILE); grid (ceil(N / TILE), min(ceil(M / TILE), 65535)); tiles of rows
// past the grid are covered by a grid-stride loop over blockIdx.y (uniform per block, so the
// barriers stay convergent).
#include "common.cuh"

template <typename T, int TILE, bool TA, bool TB>
__device__ __forceinline__ void gemm_tiled(GEMM_PARAMS(T)) {
    __shared__ __align__(16) T As[TILE][TILE + (TA ? 1 : 0)];  // op(A)(row0 + i, k0 + kk)
    __shared__ __align__(16) T Bs[TILE][TILE + (TB ? 1 : 0)];  // op(B)(k0 + kk, col0 + j)
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col0 = blockIdx.x * TILE;
    const int row_tiles = (M + TILE - 1) / TILE;

    for (int tile_row = blockIdx.y; tile_row < row_tiles; tile_row += gridDim.y) {
        const int row0 = tile_row * TILE;
        T acc = 0;
        for (int k0 = 0; k0 < K; k0 += TILE) {
            // op(A) tile: the thread index that moves fastest walks the contiguous direction.
            {
                const int i = TA ? tx : ty, kk = TA ? ty : tx;
                const int r = row0 + i, k = k0 + kk;
                As[i][kk] = (r < M && k < K) ? A[elem_offset<TA>(r, k, lda)] : T(0);
            }
            {
                const int kk = TB ? tx : ty, j = TB ? ty : tx;
                const int k = k0 + kk, c = col0 + j;
                Bs[kk][j] = (k < K && c < N) ? B[elem_offset<TB>(k, c, ldb)] : T(0);
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];
            __syncthreads();
        }
        const int r = row0 + ty, c = col0 + tx;
        if (r < M && c < N) C[(i64)r * ldc + c] = acc;
    }
}

#define TILED_ENTRY(L, T, TILE, SUFFIX, TA, TB)                                  \
    extern "C" __global__ void __launch_bounds__(TILE * TILE)                      \
        L##gemm_tiled_##TILE##_##SUFFIX(GEMM_PARAMS(T)) {                          \
        GD_AFTER_PREVIOUS();                                                      \
        gemm_tiled<T, TILE, TA, TB>(GEMM_ARGS);                                   \
    }
#define TILED_ENTRIES(L, T, TILE)                  \
    TILED_ENTRY(L, T, TILE, nn, false, false)      \
    TILED_ENTRY(L, T, TILE, nt, false, true)       \
    TILED_ENTRY(L, T, TILE, tn, true, false)       \
    TILED_ENTRY(L, T, TILE, tt, true, true)

TILED_ENTRIES(s, float, 16)
TILED_ENTRIES(s, float, 32)
TILED_ENTRIES(d, double, 16)
TILED_ENTRIES(d, double, 32)
