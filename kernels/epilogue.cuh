// epilogue.cuh -- the epilogue stores of the mma.sync GEMMs: a thread's accumulators of 16x8
// mma tiles into the row-major output C.
//
// Included after common.cuh (it gives GD_DEV and i64); the crate splices it in as it does
// common.cuh.
#ifndef GPU_DOT_EPILOGUE_CUH
#define GPU_DOT_EPILOGUE_CUH

namespace gd {

// Two adjacent elements of C, stored as one access.
template <typename T>
struct alignas(2 * sizeof(T)) Pair {
    T x, y;
};

// The thread's accumulators of MT x NTL 16x8 tiles (mma's D fragment: acc[i][j][v] is row
// r0 + 16i + 8(v/2), column c0 + 8j + v%2) into C (leading dimension ldc): each row's column
// pair as one store where C and ldc keep pairs aligned, else element by element. `full`: the
// tiles lie inside the M x N output (no bounds test).
template <int MT, int NTL, typename T>
GD_DEV void store_mma_tiles(T* C, i64 ldc, int M, int N, int r0, int c0, bool full,
                            const T (&acc)[MT][NTL][4]) {
    const bool cvec = ((ldc & 1) == 0) &&
                      ((reinterpret_cast<unsigned long long>(C) & (2 * sizeof(T) - 1)) == 0);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = r0 + 16 * i + 8 * h;
            if (full || r < M) {
                T* Cr = C + (long long)r * ldc;
#pragma unroll
                for (int j = 0; j < NTL; ++j) {
                    const int c = c0 + 8 * j;
                    const T v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                    if (full || c + 1 < N) {
                        if (cvec) {
                            Pair<T> v;
                            v.x = v0;
                            v.y = v1;
                            *reinterpret_cast<Pair<T>*>(Cr + c) = v;
                        } else {
                            Cr[c] = v0;
                            Cr[c + 1] = v1;
                        }
                    } else if (c < N) {
                        Cr[c] = v0;
                    }
                }
            }
        }
    }
}

}  // namespace gd

#endif  // GPU_DOT_EPILOGUE_CUH
