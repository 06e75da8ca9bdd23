// tile.cuh -- which part of the product a block of a tiled GEMM computes: its output tile, in
// the grouped order that keeps operand panels in L2, and (split-K) its range of K.
//
// Included after common.cuh (it gives GD_DEV and i64); the crate splices it in as it does
// common.cuh.
#ifndef GPU_DOT_TILE_CUH
#define GPU_DOT_TILE_CUH

namespace gd {

// Grouped tile order: the BM x BN tiles of an M x N output taken GROUP_M tile rows at a time,
// down a group's rows and then across its columns, so that the tiles running together share
// the panels of B in L2. tile_origin_in gives tile `id`'s origin (m0, n0) among tiles_m x
// tiles_n tiles.
template <int BM, int BN, int GROUP_M>
GD_DEV void tile_origin_in(long long id, long long tiles_m, long long tiles_n, int& m0,
                           int& n0) {
    const long long group_size = GROUP_M * tiles_n;
    const long long first_m = (id / group_size) * GROUP_M;
    const long long gm = (tiles_m - first_m) < GROUP_M ? (tiles_m - first_m) : GROUP_M;
    const long long in_group = id % group_size;
    m0 = (int)((first_m + in_group % gm) * BM);
    n0 = (int)((in_group / gm) * BN);
}
// Tile `id`'s origin.
template <int BM, int BN, int GROUP_M = 8>
GD_DEV void tile_origin_of(long long id, int M, int N, int& m0, int& n0) {
    const long long tiles_m = (M - 1) / BM + 1;
    const long long tiles_n = (N - 1) / BN + 1;
    tile_origin_in<BM, BN, GROUP_M>(id, tiles_m, tiles_n, m0, n0);
}
// This block's tile (tile blockIdx.x)'s origin.
template <int BM, int BN, int GROUP_M = 8>
GD_DEV void tile_origin(int M, int N, int& m0, int& n0) {
    const long long tiles_m = (M - 1) / BM + 1;
    const long long tiles_n = (N - 1) / BN + 1;
    tile_origin_in<BM, BN, GROUP_M>(blockIdx.x, tiles_m, tiles_n, m0, n0);
}

// Split-K: split z = blockIdx.z of a product takes the K range [z * k_per_split,
// min(K, (z + 1) * k_per_split)). A and B (op(A) M x K and op(B) K x N, read transposed where
// TA, TB) advance to its start, and K becomes its length (0 for an empty range, when A and B
// stay). The split's output is the caller's.
template <bool TA, bool TB, class P>
GD_DEV void splitk_range(int& K, P& A, i64 lda, P& B, i64 ldb, int k_per_split) {
    const long long kb = (long long)blockIdx.z * k_per_split;
    long long ke = kb + k_per_split;
    if (ke > K) ke = K;
    const int kc = ke > kb ? (int)(ke - kb) : 0;
    if (kc > 0) {
        A += TA ? kb * lda : kb;
        B += TB ? kb : kb * ldb;
    }
    K = kc;
}

}  // namespace gd

#endif  // GPU_DOT_TILE_CUH
