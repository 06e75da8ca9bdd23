// sgemm_tc.cu -- FP32 GEMM on the TF32 tensor cores (sm_80+): 3xTF32 (FP32-accurate) and TF32.
//
// Compiled by NVRTC with `--gpu-architecture=sm_XY --std=c++17`; includes common.cuh and the
// tiled GEMMs' headers: cp.async copies, tile order and split-K, loader, epilogue (all spliced
// in by the crate). The crate compiles this file twice, as two modules:
// with `#define SGT_X3 1` (3xTF32 entries, stem `sgemm_tf32x3_`) and with `#define SGT_X3 0`
// (one TF32 product, stem `sgemm_tf32_`). Everything lives in namespace `sgt` or carries an
// `sgemm_tf32` prefix.
//
// CONTRACT (every entry): C (M x N, row-major, leading dim ldc) = op(A) (M x K) * op(B) (K x N)
//   A, TA=false: A[r*lda + k]    A, TA=true: A[k*lda + r]
//   B, TB=false: B[k*ldb + n]    B, TB=true: B[n*ldb + k]
//   Every element of C is written exactly once; nothing out of bounds is read or written.
//   All offsets are 64-bit. M, N, K >= 1 (split entries also cope with empty K ranges).
//   Suffix letters: first = TA, second = TB ('n' = false / row-major, 't' = true).
//
// ---------------------------------------------------------------------------------------------
// LAUNCH TABLE  (block = blockDim.x, 1-D blocks; smem = dynamic shared memory bytes)
// ---------------------------------------------------------------------------------------------
// @launch sgemm_tf32x3_128x128 tile=128x128 block=256 smem=110592 bk=32 minsm=80
// @launch sgemm_tf32x3_64x64 tile=64x64 block=128 smem=55296 bk=32 minsm=80
// @launch sgemm_tf32_128x128 tile=128x128 block=256 smem=110592 bk=32 minsm=80
// @launch sgemm_tf32_64x64 tile=64x64 block=128 smem=55296 bk=32 minsm=80
//
// {stem}_{nn,nt,tn,tt}[_u]: grid = (ceil(M/BM) * ceil(N/BN), 1, 1), tile index on gridDim.x in a
//      grouped order. smem > 48 KB: the host MUST raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_
//      BYTES on each function first.
// ..._splitk (10th argument `int k_per_split`, a positive multiple of 32): grid = (tiles, 1,
//      splits); blockIdx.z = z computes K range [z*k_per_split, min(K,(z+1)*k_per_split)) and
//      writes the partial product (zeros for an empty range) to C + z*M*ldc: pass C = workspace
//      W (splits*M*N floats) and ldc = N, then launch sgemm_splitk_reduce (sgemm_fast module).
// ..._batched (GD_BATCH_PARAMS): one grid layer per batch item (common.cuh).
//
// ALIGNMENT: entries WITHOUT `_u` require A and B 16-byte aligned and lda % 4 == 0, ldb % 4 == 0.
// `_u` entries need 4-byte aligned A/B, any lda/ldb. C: the epilogue checks C % 8 / ldc % 2 at
// run time and uses 64-bit stores only when legal.
// ---------------------------------------------------------------------------------------------
//
// ARITHMETIC. Each K step multiplies 16x8 tiles with mma.sync.m16n8k8.row.col.f32.tf32.tf32.f32
// (FP32 accumulation). TF32: each operand rounded to TF32 (cvt.rna, 10 mantissa bits),
// accumulated in the tensor cores. 3xTF32: x = big + small with big = tf32(x) and small =
// tf32(x - big) (x - big is exact in FP32), and per k8 step T = a_small*b_big + a_big*b_small
// and U = a_big*b_big, each from zero in the tensor cores, then D += U + T in FP32 with
// round-to-nearest outside them (the tensor cores' own accumulation truncates, and its error
// would grow with K); a_small*b_small, about 2^-22 of the product, is dropped: FP32 accuracy
// from three tensor-core products. An infinite x has
// small = 0 (x - big would be NaN). A finite small part times an infinite operand of the other
// side could still give inf - inf where FP32 gives inf, so a block that meets an infinite
// element in its A or B tiles recomputes its outputs with FP32 FMA (a slow path that only such
// inputs take): Inf and NaN come out as on the FP32 path.
//
// DESIGN. Block tile BM x BN x 32, 3-stage cp.async pipeline in dynamic shared memory, one
// __syncthreads per K tile; the next tile's copies are issued after the first mma row. Warps
// own WTM x WTN warp tiles of 16x8 mma tiles. The operands keep their global orientation in
// shared memory:
//   contiguous along k (A with TA=false, B with TB=true): S[x][k], row stride 36 floats;
//   contiguous along x (A^T, B):                          S[k][x], row stride BX + 8.
// Fragment loads (lane = 4*g + t reads (x = g, k = t) or (k = t, x = g)) hit banks 4g + t or
// 8t + g: conflict-free. Global -> shared: 16-byte cp.async.cg along the contiguous direction
// (aligned entries) or 4-byte cp.async.ca (_u entries); edge tiles zero-fill.
#include "common.cuh"
#include "cp_async.cuh"
#include "tile.cuh"
#include "loader.cuh"
#include "epilogue.cuh"

#ifndef SGT_X3
#define SGT_X3 1
#endif

#define SGT_DEV GD_DEV

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

namespace sgt {

struct alignas(16) f4 {
    float x, y, z, w;
};
extern __shared__ f4 sgt_smem[];

// x rounded to TF32 (round to nearest, ties away), as the bits mma reads.
SGT_DEV unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// Splits x into TF32 big and small parts (3xTF32) or rounds it (TF32); `inf` records an
// infinite x.
SGT_DEV void split(float x, unsigned& big, unsigned& small, bool& inf) {
    big = to_tf32(x);
#if SGT_X3
    const bool xi = (__float_as_uint(x) & 0x7fffffffu) == 0x7f800000u;
    inf |= xi;
    small = xi ? 0u : to_tf32(x - __uint_as_float(big));
#else
    (void)small;
    (void)inf;
#endif
}

// D(16x8) += A(16x8) * B(8x8), TF32 in, FP32 accumulate. Fragments (g = lane/4, t = lane%4):
// a[v] = A[g + 8*(v%2)][t + 4*(v/2)], b[v] = B[t + 4*v][g], d[v] = D[g + 8*(v/2)][2*t + v%2].
SGT_DEV void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int MINB_>
struct Cfg {
    static constexpr int BM = BM_, BN = BN_, BK = 32, STAGES = 3;
    static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, MINB = MINB_;
    static constexpr int NT = WARPS_M * WARPS_N * 32;
    static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
    static constexpr int MT = WTM / 16, NTL = WTN / 8;
    static constexpr int SK = BK + 4;                 // S[x][k] row stride: 4 (mod 32)
    static constexpr int SXA = BM + 8, SXB = BN + 8;  // S[k][x] row stride: 8 (mod 32)
    static_assert(SK % 32 == 4 && SXA % 32 == 8 && SXB % 32 == 8, "conflict-free strides");
    static constexpr int A_STAGE = (BM * SK > BK * SXA) ? BM * SK : BK * SXA;  // floats
    static constexpr int B_STAGE = (BN * SK > BK * SXB) ? BN * SK : BK * SXB;
    static constexpr int STAGE = A_STAGE + B_STAGE;
    static constexpr int SMEM_BYTES = STAGES * STAGE * 4;
    static_assert(WTM % 16 == 0 && WTN % 8 == 0, "tile shape");
    static_assert((A_STAGE * 4) % 16 == 0 && (B_STAGE * 4) % 16 == 0, "16-byte stages");
};
// "big": 128x128, 8 warps as 2 (m) x 4 (n), warp tile 64x32, 1 block / SM guaranteed (2 fit).
typedef Cfg<128, 128, 2, 4, 1> Big;
static_assert(Big::NT == 256 && Big::SMEM_BYTES == 110592, "keep the @launch lines in sync");
// "small": 64x64, 4 warps as 2 x 2, warp tile 32x32.
typedef Cfg<64, 64, 2, 2, 2> Small;
static_assert(Small::NT == 128 && Small::SMEM_BYTES == 55296, "keep the @launch lines in sync");

template <class CF, bool TA, bool TB, bool AL, bool SPLIT>
SGT_DEV void body(int M, int N, int K, const float* __restrict__ A, long long lda,
                  const float* __restrict__ B, long long ldb, float* __restrict__ C,
                  long long ldc, int k_per_split) {
    constexpr int BM = CF::BM, BN = CF::BN, BK = CF::BK, NT = CF::NT, ST = CF::STAGES;
    constexpr int MT = CF::MT, NTL = CF::NTL;
    float* smem = reinterpret_cast<float*>(sgt_smem);
    const int tid = threadIdx.x;

    int m0, n0;
    gd::tile_origin<BM, BN>(M, N, m0, n0);

    if constexpr (SPLIT) {
        gd::splitk_range<TA, TB>(K, A, lda, B, ldb, k_per_split);
        C += (long long)blockIdx.z * (long long)M * ldc;
    }

    // Shared memory keeps the operands' orientation, S[k][x] rows padded to 8 (mod 32) floats.
    gd::TileLoader<float, BM, BK, NT, 8, !TA, AL> la(A, lda, M, K, m0, tid);
    gd::TileLoader<float, BN, BK, NT, 8, TB, AL> lb(B, ldb, N, K, n0, tid);

    const unsigned sbase = gd::smem_u32(smem);
    const bool interior = (M - m0 >= BM) && (N - n0 >= BN);
    const int KT = K > 0 ? (K - 1) / BK + 1 : 0;

    // Copies K tile nt (if it exists) into stage `slot`; always commits one group.
    auto copy_tile = [&](int nt, int slot) { GD_COPY_K_TILE(4u, nt, slot); };

#pragma unroll
    for (int s = 0; s < ST - 1; ++s) copy_tile(s, s);

    const int warp = tid >> 5, lane = tid & 31;
    const int wm = warp / CF::WARPS_N, wn = warp % CF::WARPS_N;
    const int g = lane >> 2, t = lane & 3;

    // fragment offsets (floats) inside a stage
    using Frag = gd::MmaFragments<CF, TA, TB>;
    constexpr int A_M8 = Frag::A_M8, A_K4 = Frag::A_K4, B_N8 = Frag::B_N8, B_K4 = Frag::B_K4;
    const int aoff = TA ? t * CF::SXA + wm * CF::WTM + g : (wm * CF::WTM + g) * CF::SK + t;
    const int boff = TB ? (wn * CF::WTN + g) * CF::SK + t : t * CF::SXB + wn * CF::WTN + g;

    float acc[MT][NTL][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;

    bool inf = false;
    int rs = 0, ws = ST - 1;
    for (int kt = 0; kt < KT; ++kt) {
        gd::cp_wait<ST - 2>();
        __syncthreads();
        const float* As = smem + rs * CF::STAGE + aoff;
        const float* Bs = smem + rs * CF::STAGE + CF::A_STAGE + boff;
#pragma unroll
        for (int ks = 0; ks < BK / 8; ++ks) {
            unsigned bb[NTL][2], bs[NTL][2];
#pragma unroll
            for (int j = 0; j < NTL; ++j)
#pragma unroll
                for (int q = 0; q < 2; ++q)
                    split(Bs[2 * ks * B_K4 + j * B_N8 + q * B_K4], bb[j][q], bs[j][q], inf);
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                unsigned ab[4], as[4];
#pragma unroll
                for (int v = 0; v < 4; ++v)
                    split(As[2 * ks * A_K4 + (2 * i + (v & 1)) * A_M8 + (v >> 1) * A_K4], ab[v],
                          as[v], inf);
#pragma unroll
                for (int j = 0; j < NTL; ++j) {
#if SGT_X3
                    // The tensor cores sum inside an mma with truncation: each k8 step's
                    // products start from zero there and are added to the accumulators here,
                    // rounded to nearest (without this the error grows with K, to 25x FP32's
                    // at K = 4096).
                    float tb[4] = {0.f, 0.f, 0.f, 0.f}, ts[4] = {0.f, 0.f, 0.f, 0.f};
                    mma(ts, as, bb[j]);
                    mma(ts, ab, bs[j]);
                    mma(tb, ab, bb[j]);
#pragma unroll
                    for (int v = 0; v < 4; ++v) acc[i][j][v] += tb[v] + ts[v];
#else
                    mma(acc[i][j], ab, bb[j]);
#endif
                }
                if (ks == 0 && i == 0) copy_tile(kt + ST - 1, ws);
            }
        }
        rs = (rs + 1 == ST) ? 0 : rs + 1;
        ws = (ws + 1 == ST) ? 0 : ws + 1;
    }
    gd::cp_wait<0>();

    const int r0 = m0 + wm * CF::WTM + g;
    const int c0 = n0 + wn * CF::WTN + 2 * t;
#if SGT_X3
    // An infinite element anywhere in the block's tiles: FP32 FMA for the block's outputs.
    if (__syncthreads_or(inf)) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NTL; ++j)
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    const int r = r0 + 16 * i + 8 * (v >> 1), c = c0 + 8 * j + (v & 1);
                    float s = 0.f;
                    if (r < M && c < N) {
                        for (int k = 0; k < K; ++k)
                            s = fmaf(A[TA ? (long long)k * lda + r : (long long)r * lda + k],
                                     B[TB ? (long long)c * ldb + k : (long long)k * ldb + c], s);
                    }
                    acc[i][j][v] = s;
                }
    }
#endif

    // Epilogue: the thread holds rows g, g+8 of each 16x8 tile, column pairs 2t, 2t+1.
    gd::store_mma_tiles<MT, NTL>(C, ldc, M, N, r0, c0, interior, acc);
}

}  // namespace sgt

#define SGT_ENTRY(NAME, CFG, TA, TB, AL)                                                         \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB) NAME(GEMM_PARAMS(float)) {    \
        GD_AFTER_PREVIOUS();                                                                     \
        sgt::body<CFG, TA, TB, AL, false>(M, N, K, A, lda, B, ldb, C, ldc, 0);                   \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB)                             \
        NAME##_splitk(GEMM_PARAMS(float), int k_per_split) {                                     \
        GD_AFTER_PREVIOUS();                                                                     \
        sgt::body<CFG, TA, TB, AL, true>(M, N, K, A, lda, B, ldb, C, ldc, k_per_split);          \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB)                             \
        NAME##_batched(GEMM_PARAMS(float), GD_BATCH_PARAMS) {                                    \
        GD_AFTER_PREVIOUS();                                                                     \
        GD_BATCH_OFFSETS;                                                                        \
        sgt::body<CFG, TA, TB, AL, false>(M, N, K, A, lda, B, ldb, C, ldc, 0);                   \
    }

#if SGT_X3
GD_LAYOUT_ENTRIES(SGT_ENTRY, sgemm_tf32x3_128x128, sgt::Big)
GD_LAYOUT_ENTRIES(SGT_ENTRY, sgemm_tf32x3_64x64, sgt::Small)
#else
GD_LAYOUT_ENTRIES(SGT_ENTRY, sgemm_tf32_128x128, sgt::Big)
GD_LAYOUT_ENTRIES(SGT_ENTRY, sgemm_tf32_64x64, sgt::Small)
#endif

#endif  // sm_80+
