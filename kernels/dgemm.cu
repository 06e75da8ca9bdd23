// dgemm.cu -- FP64 DGEMM / DGEMV kernels: FP64 tensor cores (DMMA) on sm_80+, SIMT fallback
// everywhere.
//
// Compiled by NVRTC with `--gpu-architecture=sm_XY --std=c++17`; includes common.cuh and the
// tiled GEMMs' headers: cp.async copies, tile order and split-K, loader, epilogue (all spliced
// in by the crate). Everything lives in namespace `dgm` or carries a `dgemm_`/`dgemv_`/`delem_`
// prefix.
//
// CONTRACT (every GEMM/GEMV entry): C (M x N, row-major, leading dim ldc) = op(A) (M x K) *
// op(B) (K x N)
//   A, TA=false: A[r*lda + k]    A, TA=true: A[k*lda + r]
//   B, TB=false: B[k*ldb + n]    B, TB=true: B[n*ldb + k]
//   Every element of C is written exactly once; nothing out of bounds is read or written.
//   All offsets are 64-bit. M, N, K >= 1 (split entries also cope with empty K ranges).
//   Suffix letters: first = TA, second = TB ('n' = false / row-major, 't' = true).
//   Common signature: (int M, int N, int K, const double* A, long long lda, const double* B,
//                      long long ldb, double* C, long long ldc)
//
// ---------------------------------------------------------------------------------------------
// LAUNCH TABLE  (block = blockDim.x, 1-D blocks; smem = dynamic shared memory bytes)
// ---------------------------------------------------------------------------------------------
// @launch dgemm_tc_128x64 tile=128x64 block=128 smem=92160 bk=16 minsm=80
// @launch dgemm_tc_64x64 tile=64x64 block=128 smem=61440 bk=16 minsm=80
// @launch dgemm_simt tile=64x64 block=256 smem=16640 bk=16 minsm=0
//
// dgemm_tc_128x64_{nn,nt,tn,tt}[_u]           (only in modules compiled for sm_80 or newer)
//      block 128, smem 92160 (> 48 KB: host MUST set
//      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES >= 92160 on each function first)
//      grid = (ceil(M/128) * ceil(N/64), 1, 1)   [tile index on gridDim.x, grouped order inside]
//      2 blocks / SM. For large shapes. In modules for sm_90 the unsplit entries hold only the
//      pipelined loop (any K is correct, but K < 128 runs it slowly): run K < 128 through the
//      _splitk entry as one split (gridDim.z = 1, k_per_split >= K, C and ldc the output's),
//      whose loop switches to the classic one for short K. _batched entries keep both loops.
// dgemm_tc_64x64_{nn,nt,tn,tt}[_u]            (only in modules compiled for sm_80 or newer)
//      block 128, smem 61440 (> 48 KB: attribute needed too), grid = (ceil(M/64)*ceil(N/64),1,1)
//      3 blocks / SM. For mid-size shapes (few 128x64 tiles) and the split-K path.
// dgemm_simt_{nn,nt,tn,tt}                    (every arch; the fallback before sm_80)
//      block 256, smem 16640 (no attribute needed), grid = (ceil(M/64) * ceil(N/64), 1, 1)
// ..._splitk variants of all of the above (e.g. dgemm_tc_128x64_nn_splitk,
//      dgemm_tc_64x64_nt_u_splitk, dgemm_simt_tt_splitk): same block / smem, 10th argument
//      `int k_per_split` (> 0, multiple of 16 = the split-K granule), grid = (tiles, 1, splits)
//      with splits = ceil(K / k_per_split) (<= 65535). blockIdx.z = z computes the K range
//      [z*k_per_split, min(K,(z+1)*k_per_split)) and writes the partial product (every element,
//      zeros for an empty range) to C + z*M*ldc with leading dim ldc: pass C = workspace W
//      (splits*M*N doubles) and ldc = N, then launch dgemm_splitk_reduce.
// dgemm_splitk_reduce(int M, int N, int splits, const double* W, double* C, long long ldc)
//      block 256, smem 0, any grid (grid-stride), e.g. grid = min(ceil(M*N/256), 8192).
//      C[i*ldc+j] = sum_{z=0..splits-1} W[z*M*N + i*N + j], summed in increasing z (deterministic).
// dgemm_axpby(int M, int N, double alpha, const double* T, long long ldt, double beta,
//      double* C, long long ldc): C = alpha*T + beta*C (beta == 0: C not read; T null: alpha*T
//      is 0). block 256, smem 0, any grid (grid-stride).
// delem_relu(long long N, double* X): X = fmax(X, 0) (NaN -> 0); delem_relu_backward(long long
//      N, double* G, const double* H): G = H > 0 ? G : 0. block 256, smem 0, any grid.
// delem_complex_{gather,expand,axpby}: elem_complex_*'s (sgemm_fast.cu) over doubles.
// dgemv_m1_{nn,nt,tn,tt}   (M == 1)  block 256, smem 0 (static smem only)
//      TB=false (m1_nn, m1_tn): grid = ceil(N/16)    TB=true (m1_nt, m1_tt): grid = ceil(N/8)
// dgemv_n1_{nn,nt,tn,tt}   (N == 1)  block 256, smem 0 (static smem only)
//      TA=false (n1_nn, n1_nt): grid = ceil(M/8)     TA=true (n1_tn, n1_tt): grid = ceil(M/16)
//      (gemv entries: no alignment requirement; they vectorize at run time when legal)
//
// ALIGNMENT: dgemm_tc entries WITHOUT `_u` require A and B 16-byte aligned and lda % 2 == 0 and
// ldb % 2 == 0. `_u` entries (and dgemm_simt, dgemv) only need 8-byte aligned A/B, any lda/ldb.
// C needs only 8-byte alignment everywhere: the epilogue checks C % 16 / ldc % 2 at run time
// and uses 128-bit stores only when legal.
// ---------------------------------------------------------------------------------------------
//
// DESIGN (tensor-core kernels): block tile BM x BN x 16, STAGES-deep cp.async pipeline in
// dynamic shared memory, one __syncthreads per K tile. Each warp owns a WTM x WTN warp tile
// made of 16x8 mma tiles. Two main loops:
//   classic (64x64 everywhere, 128x64 before sm_90, and in the 128x64 _splitk and _batched
//       entries for K < 8 tiles): after the barrier the
//       warp loads the K tile's fragments and issues one mma.m16n8k16.f64 (sm_90) or eight
//       mma.m8n8k4.f64 (sm_80/86/89) per 16x8 tile;
//   pipelined (128x64 on sm_90, TcPipe): two mma.m16n8k8 per 16x8 tile per K tile, each step's
//       fragments loaded while the previous step issues (A rolling in place, B double-buffered),
//       the refill copies issued after the first mma row, the barrier after two rows of the
//       second step. Interior blocks run the iterations with full refills without guards or
//       branches, so ptxas spreads copies and shared loads over the mma issue slots.
// The operands keep their global orientation in shared memory:
//   operand contiguous along k (A with TA=false, B with TB=true): S[x][k], row stride 20
//       doubles (16 + 4 padding);
//   operand contiguous along x = m / n (A^T, B):                S[k][x], row stride BX + 4.
// Both strides are 4 (mod 16) doubles, so the LDS.64 fragment loads (lane = 4*g + t reads
// (x = g [+8], k = t [+4j])) touch 16 distinct 8-byte bank pairs per half warp: conflict-free.
// Global -> shared: 16-byte cp.async.cg along the contiguous direction (aligned entries) or
// 8-byte cp.async.ca (_u entries); a warp's copies cover whole 128-byte lines and its shared
// stores are conflict-free. Interior tiles (full in M, N and the K tile) use unguarded copies,
// edge tiles zero-filling (src-size) copies.
// Nsight Compute on H200 (4096^3 nn): 0 shared-memory bank conflicts on loads and stores.
// Measured (tools/dgemm-lab, H200): the FP64 tensor ceiling is 66.7 TFLOP/s at 1.98 GHz with 1
// to 4 warps per scheduler (tools/dgemm-lab/dmma_peak.cu), so mma issue is not the limit; the
// loss is cycles in which neither warp of a scheduler has an mma ready. Nsight Compute, 4096^3
// nn, SM busy (tensor pipe): classic 128x64 81%, pipelined 87%, cuBLAS 95% (its kernel:
// sm90 128x64x16, 3 stages, 2x2 warps, m16n8k8, the same pipelined structure, 246 registers).
// 128x64, one lab run: pipelined 52.6 TFLOP/s at 4096^3 (0.89x cuBLAS DGEMM), 51.7 at 8192^3
// (0.92x), 52.6 at 2048^3 (0.93x); the classic loop 49.8 (0.83x), 51.4 (0.91x), 49.9 (0.87x).
// Registers: 243-248 (128x64, sm_90), 0 spills. Tried and slower: 128x128 tiles (1 block / SM),
// BK = 32, LDS.128 fragments with a permuted k order + XOR swizzle, m16n8k8 in the classic loop;
// 128x64 with 256 threads (4x2 warps of 32x32, 128 registers: 0.84x at 4096^3 nn, 0.67x for
// nt/tt, which spill); pipelined m16n8k16 fragments (B cannot be double-buffered in 255
// registers: 0.81-0.91x at 4096^3 from one ptxas schedule to the next); the k8 pipeline with
// the refill right after the barrier (as fast, but spills); the k8 pipeline with guarded copies
// behind a per-tile branch (0.77x at 4096^3: copies and loads not overlapped with the mma); the
// pipelined loop for K < 8 tiles (-13% at 8192 x 64 x 8192). Without the classic fallback
// compiled in (-DDGM_PIPE_MIN_KT=0), ptxas gives the pipelined loop 254 registers: 2-12% faster
// on most shapes of the lab suite (8192^3 0.93x; 4096^3 tt 6% slower), 13% slower at K = 64.
// The unsplit 128x64 entries on sm_90 are now built so (PIPE_ONLY). Alternating rounds of the
// lab on an H100 (`lab rounds:7:...`, medians of per-round ratios to cuBLAS DGEMM): 8192^3 nn
// 0.934 / 0.952 against 0.839 / 0.881 for the same loop with the fallback compiled in (the
// _splitk entry as one split); 4096^3 nn 0.963 / 0.937 against 0.965 / 0.913; 16384^3 0.912
// against 0.832; 8192 x 64 x 8192: 0.933 against 1.057 (hence the one-split route for short
// K). Tried and no faster on the H100: clusters of 2 or 4 consecutive tiles (co-scheduled: DRAM
// reads at 8192^3 26.6 -> 24.5 / 19.8 GB, cuBLAS 19.7 GB, but 0.949 / 0.903), GROUP_M 4 or 16,
// the cp.async L2::128B / L2::256B prefetch hints. Run to run, single timings move by +-5%.
#include "common.cuh"
#include "cp_async.cuh"
#include "tile.cuh"
#include "loader.cuh"
#include "epilogue.cuh"

#define DGM_DEV GD_DEV

namespace dgm {

struct alignas(16) d2 {
    double x, y;
};

extern __shared__ d2 dgm_smem[];

// Special registers read anew (volatile: not merged with earlier reads, so values derived from
// them need not stay live across a main loop).
DGM_DEV unsigned fresh_ctaid_x() {
    unsigned r;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(r));
    return r;
}
DGM_DEV unsigned fresh_ctaid_z() {
    unsigned r;
    asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(r));
    return r;
}
DGM_DEV unsigned fresh_tid_x() {
    unsigned r;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(r));
    return r;
}

}  // namespace dgm

// =============================================================================================
// Tensor-core kernels (sm_80+)
// =============================================================================================
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

namespace dgm {

using gd::cp_commit;
using gd::cp_wait;

// D(8x8) += A(8x4) * B(4x8) in FP64: the thread's two elements of D, one of A and one of B
// (sm_80 / 86 / 89, which lack the m16n8 shapes).
DGM_DEV void mma884(double& d0, double& d1, double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
        : "+d"(d0), "+d"(d1)
        : "d"(a), "d"(b));
}

// D(16x8) += A(16xK) * B(Kx8), K = 16 or 8, fragments in the PTX m16n8k16.f64 layout or its
// k = 0..7 half (g = lane/4, t = lane%4): a[v] = A[g + 8*(v%2)][t + 4*(v/2)], b[v] = B[t +
// 4*v][g], d[v] = D[g + 8*(v/2)][2*t + v%2].
template <int K>
DGM_DEV void mma_f64(double (&d)[4], const double (&a)[K / 2], const double (&b)[K / 4]) {
    static_assert(K == 16 || K == 8, "m16n8k16 or m16n8k8");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (K == 16)
        asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]),
              "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
    else
        asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
            : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#else
    // sm_80 / 86 / 89: K/4 pairs of m8n8k4 (rows g and g+8 separately, k in quarters).
#pragma unroll
    for (int q = 0; q < K / 4; ++q)
#pragma unroll
        for (int h = 0; h < 2; ++h) mma884(d[2 * h], d[2 * h + 1], a[2 * q + h], b[q]);
#endif
}

// ---------------------------------------------------------------------------------------------
// Tile configuration
// ---------------------------------------------------------------------------------------------
// ISSUE_LATE (classic loop): issue the next tile's cp.async after the first 16x8 mma row of a K
// tile instead of right after the barrier (measured: +3..8% for 64x64, -2..3% for the classic
// 128x64 on H200).
// PIPE: the software-pipelined loop (TcPipe, sm_90 only) for K of PIPE_MIN_KT tiles or more;
// shorter K runs the classic loop (measured faster there: 8192 x 64 x 8192).
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, int MINB_,
          bool ISSUE_LATE_, bool PIPE_ = false>
struct TcCfg {
    static constexpr int BM = BM_, BN = BN_, BK = BK_;
    static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_, MINB = MINB_;
    static constexpr bool ISSUE_LATE = ISSUE_LATE_, PIPE = PIPE_;
#ifdef DGM_PIPE_MIN_KT
    static constexpr int PIPE_MIN_KT = DGM_PIPE_MIN_KT;
#else
    static constexpr int PIPE_MIN_KT = 8;
#endif
    static constexpr int NT = WARPS_M * WARPS_N * 32;
    static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // warp tile
    static constexpr int MT = WTM / 16, NTL = WTN / 8;           // mma tiles per warp
    static constexpr int SK = BK + 4;                            // stride of S[x][k] rows
    static constexpr int SXA = BM + 4, SXB = BN + 4;             // stride of S[k][x] rows
    static_assert(SK % 16 == 4 && SXA % 16 == 4 && SXB % 16 == 4, "conflict-free strides");
    static constexpr int A_STAGE = (BM * SK > BK * SXA) ? BM * SK : BK * SXA;  // doubles
    static constexpr int B_STAGE = (BN * SK > BK * SXB) ? BN * SK : BK * SXB;
    static constexpr int STAGE = A_STAGE + B_STAGE;
    static constexpr int SMEM_BYTES = STAGES * STAGE * 8;
    static_assert(BK % 16 == 0 && WTM % 16 == 0 && WTN % 8 == 0, "tile shape");
    static_assert((A_STAGE * 8) % 16 == 0 && (B_STAGE * 8) % 16 == 0, "16-byte stage alignment");
    static_assert(!PIPE || BK == 16, "the pipelined loop takes one k16 tile per stage");
};

// (DGM_BIG_VARIANT / DGM_SMALL_VARIANT exist only for tuning experiments; leave them undefined:
//  the launch table above describes the defaults. 2: the classic loop on sm_90 too)
#if defined(DGM_BIG_VARIANT) && DGM_BIG_VARIANT == 1
typedef TcCfg<128, 64, 32, 2, 2, 2, 2, false> TcBig;
#else
// "big": 128x64x16, 4 warps as 2 (m) x 2 (n), warp tile 64x32, 3 stages, 2 blocks / SM;
// the pipelined loop on sm_90, the classic loop before.
#if (defined(DGM_BIG_VARIANT) && DGM_BIG_VARIANT == 2) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900)
typedef TcCfg<128, 64, 16, 2, 2, 3, 2, false, false> TcBig;
#else
typedef TcCfg<128, 64, 16, 2, 2, 3, 2, false, true> TcBig;
#endif
static_assert(TcBig::NT == 128 && TcBig::SMEM_BYTES == 92160,
              "keep the @launch dgemm_tc_128x64 line in sync");
#endif
#if defined(DGM_SMALL_VARIANT) && DGM_SMALL_VARIANT == 1
typedef TcCfg<64, 64, 32, 2, 2, 2, 3, true> TcSmall;
#else
// "small": 64x64x16, 4 warps as 2 x 2, warp tile 32x32, 3 stages, 3 blocks / SM, late issue.
typedef TcCfg<64, 64, 16, 2, 2, 3, 3, true> TcSmall;
static_assert(TcSmall::NT == 128 && TcSmall::SMEM_BYTES == 61440,
              "keep the @launch dgemm_tc_64x64 line in sync");
#endif

// ---------------------------------------------------------------------------------------------
// Pipelined main loop (sm_90, BK = 16): each K tile is two m16n8k8 steps (k 0..7, 8..15; the
// halves of the m16n8k16 fragments). A's fragments roll in place: row i of the next step is
// loaded as soon as row i of the current step has issued its mma. B's fragments are
// double-buffered (bf[0]: step 0, bf[1]: step 1). At the top of iteration kt the registers hold
// step 0 of tile kt:
//   step 0 (16 mma), loading step 1 of tile kt; after its first row, the refill: tile kt+ST-1
//       into the stage of tile kt-1 (every warp finished reading it before the last barrier);
//   wait for tile kt+1; PRE rows of step 1; barrier (tile kt+1 visible, tile kt's stage read);
//   the other rows of step 1, loading step 0 of tile kt+1.
// Every shared load has a dozen mma of its warp to hide behind, and the barrier wait overlaps the
// warp's own mma. Interior blocks run the iterations whose refill is a full K tile with
// unguarded copies and no branch: one basic block, in which ptxas spreads the copies and loads
// over the issue slots between the mma (a separate copy block or loads right after the barrier
// leave the tensor pipe idle).
// ---------------------------------------------------------------------------------------------
template <class CF, bool TA, bool TB>
struct TcPipe {
    static constexpr int MT = CF::MT, NTL = CF::NTL, ST = CF::STAGES, BK = CF::BK;
    static constexpr int PRE = 2;  // rows of step 1 issued before the barrier
    // fragment strides (doubles)
    using Frag = gd::MmaFragments<CF, TA, TB>;
    static constexpr int A_M8 = Frag::A_M8, A_K4 = Frag::A_K4;
    static constexpr int B_N8 = Frag::B_N8, B_K4 = Frag::B_K4;

    double (&acc)[MT][NTL][4];
    const double* smem;
    int aoff, boff;  // this thread's fragment base inside a stage
    int rs, ws;      // stage of tile kt; stage refilled in iteration kt
    double af[MT][4], bf[2][NTL][2];

    DGM_DEV TcPipe(double (&acc_)[MT][NTL][4], const double* smem_, int aoff_, int boff_)
        : acc(acc_), smem(smem_), aoff(aoff_), boff(boff_), rs(0), ws(ST - 1) {}

    // row i of A, k half h, from stage st
    DGM_DEV void load_a(int i, int h, int st) {
        const double* As = smem + st * CF::STAGE + aoff;
#pragma unroll
        for (int v = 0; v < 4; ++v)
            af[i][v] = As[(2 * i + (v & 1)) * A_M8 + (2 * h + (v >> 1)) * A_K4];
    }
    // all of B, k half h, from stage st, into buffer b
    DGM_DEV void load_b(int b, int h, int st) {
        const double* Bs = smem + st * CF::STAGE + CF::A_STAGE + boff;
#pragma unroll
        for (int j = 0; j < NTL; ++j)
#pragma unroll
            for (int q = 0; q < 2; ++q) bf[b][j][q] = Bs[j * B_N8 + (2 * h + q) * B_K4];
    }

    template <bool FAST, class Fast, class Guarded>
    DGM_DEV void tile(int kt, int KT, Fast& copy_fast, Guarded& copy_guarded) {
        load_b(1, 1, rs);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
#pragma unroll
            for (int j = 0; j < NTL; ++j) mma_f64<8>(acc[i][j], af[i], bf[0][j]);
            load_a(i, 1, rs);
            if (i == 0) {
                if constexpr (FAST) copy_fast(ws);
                else copy_guarded(kt + ST - 1, ws);
            }
        }
        cp_wait<ST - 2>();
#pragma unroll
        for (int i = 0; i < PRE; ++i)
#pragma unroll
            for (int j = 0; j < NTL; ++j) mma_f64<8>(acc[i][j], af[i], bf[1][j]);
        __syncthreads();
        // next tile's stage; after the last tile the current one (the values are not used)
        const int rn = (kt + 1 == KT) ? rs : ((rs + 1 == ST) ? 0 : rs + 1);
        load_b(0, 0, rn);
#pragma unroll
        for (int i = 0; i < PRE; ++i) load_a(i, 0, rn);
#pragma unroll
        for (int i = PRE; i < MT; ++i) {
#pragma unroll
            for (int j = 0; j < NTL; ++j) mma_f64<8>(acc[i][j], af[i], bf[1][j]);
            load_a(i, 0, rn);
        }
        rs = (rs + 1 == ST) ? 0 : rs + 1;
        ws = (ws + 1 == ST) ? 0 : ws + 1;
    }

    // Tiles 0 .. ST-2 are in flight (one commit group each).
    template <class Fast, class Guarded>
    DGM_DEV void run(int K, int KT, bool interior, Fast& copy_fast, Guarded& copy_guarded) {
        static_assert(PRE <= MT, "rows before the barrier");
        cp_wait<ST - 2>();
        __syncthreads();
        if (KT > 0) {
#pragma unroll
            for (int i = 0; i < MT; ++i) load_a(i, 0, 0);
            load_b(0, 0, 0);
        }
        // iterations whose refill (tile kt+ST-1) is a full K tile of an interior block
        int kfast = interior ? K / BK - (ST - 1) : 0;
        kfast = kfast < 0 ? 0 : kfast;
        int kt = 0;
        for (; kt < kfast; ++kt) tile<true>(kt, KT, copy_fast, copy_guarded);
        for (; kt < KT; ++kt) tile<false>(kt, KT, copy_fast, copy_guarded);
    }
};

// ---------------------------------------------------------------------------------------------
// Main GEMM body
// ---------------------------------------------------------------------------------------------
template <class CF, bool TA, bool TB, bool AL, bool SPLIT, bool PIPE_ONLY = false>
DGM_DEV void tc_body(int M, int N, int K, const double* __restrict__ A, long long lda,
                     const double* __restrict__ B, long long ldb, double* __restrict__ C,
                     long long ldc, int k_per_split) {
    constexpr int BM = CF::BM, BN = CF::BN, BK = CF::BK, NT = CF::NT, ST = CF::STAGES;
    constexpr int MT = CF::MT, NTL = CF::NTL;
    double* smem = reinterpret_cast<double*>(dgm_smem);
    const int tid = threadIdx.x;

    int m0, n0;
    gd::tile_origin<BM, BN>(M, N, m0, n0);

    if constexpr (SPLIT) {
        gd::splitk_range<TA, TB>(K, A, lda, B, ldb, k_per_split);
        // (the pipelined loop offsets C to the split's layer after it, see the epilogue)
        if constexpr (!CF::PIPE) C += (long long)blockIdx.z * (long long)M * ldc;
    }

    // Shared memory keeps the operands' orientation, rows padded to 4 (mod 16) doubles.
    gd::TileLoader<double, BM, BK, NT, 4, !TA, AL> la(A, lda, M, K, m0, tid);
    gd::TileLoader<double, BN, BK, NT, 4, TB, AL> lb(B, ldb, N, K, n0, tid);

    const unsigned sbase = gd::smem_u32(smem);
    const bool interior = (M - m0 >= BM) && (N - n0 >= BN);
    const int KT = K > 0 ? (K - 1) / BK + 1 : 0;

    // Copies K tile nt (if it exists) into stage `slot`; always commits one group.
    auto copy_tile = [&](int nt, int slot) { GD_COPY_K_TILE(8u, nt, slot); };

    // ---- prologue: tiles 0 .. ST-2 ----
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) copy_tile(s, s);

    const int warp = tid >> 5, lane = tid & 31;
    const int wm = warp / CF::WARPS_N, wn = warp % CF::WARPS_N;
    const int g = lane >> 2, t = lane & 3;

    // fragment offsets (doubles) inside a stage
    using Frag = gd::MmaFragments<CF, TA, TB>;
    constexpr int A_M8 = Frag::A_M8, A_K4 = Frag::A_K4, B_N8 = Frag::B_N8, B_K4 = Frag::B_K4;
    constexpr int A_K16 = 4 * A_K4, B_K16 = 4 * B_K4;
    // lane (g, t)'s first element: row g and k t of the warp's rows of A (wm), k t and column
    // g of its columns of B (wn)
    const int aoff = TA ? t * CF::SXA + wm * CF::WTM + g : (wm * CF::WTM + g) * CF::SK + t;
    const int boff = TB ? (wn * CF::WTN + g) * CF::SK + t : t * CF::SXB + wn * CF::WTN + g;

    double acc[MT][NTL][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0;

    // ---- classic loop: fragments loaded after the barrier ----
    auto classic = [&]() {
        int rs = 0, ws = ST - 1;
        for (int kt = 0; kt < KT; ++kt) {
            cp_wait<ST - 2>();
            __syncthreads();
            // Prefetch tile kt+ST-1 into the slot every warp finished reading before the barrier.
            if constexpr (!CF::ISSUE_LATE) copy_tile(kt + ST - 1, ws);
            const double* As = smem + rs * CF::STAGE + aoff;
            const double* Bs = smem + rs * CF::STAGE + CF::A_STAGE + boff;
#pragma unroll
            for (int ks = 0; ks < BK / 16; ++ks) {
                double b[NTL][4];
#pragma unroll
                for (int j = 0; j < NTL; ++j) {
#pragma unroll
                    for (int q = 0; q < 4; ++q) b[j][q] = Bs[ks * B_K16 + j * B_N8 + q * B_K4];
                }
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    double a[8];
#pragma unroll
                    for (int v = 0; v < 8; ++v)
                        a[v] = As[ks * A_K16 + (2 * i + (v & 1)) * A_M8 + (v >> 1) * A_K4];
#pragma unroll
                    for (int j = 0; j < NTL; ++j) mma_f64<16>(acc[i][j], a, b[j]);
                    if constexpr (CF::ISSUE_LATE) {
                        if (ks == 0 && i == 0) copy_tile(kt + ST - 1, ws);
                    }
                }
            }
            rs = (rs + 1 == ST) ? 0 : rs + 1;
            ws = (ws + 1 == ST) ? 0 : ws + 1;
        }
    };

    if constexpr (CF::PIPE) {
        if (PIPE_ONLY || KT >= CF::PIPE_MIN_KT) {
            // Interior blocks, full K tile: unguarded copies, no branch.
            auto copy_fast = [&](int slot) {
                const unsigned sa = sbase + (unsigned)(slot * CF::STAGE) * 8u;
                la.template load<false>(sa);
                lb.template load<false>(sa + (unsigned)CF::A_STAGE * 8u);
                cp_commit();
            };
            // Elsewhere guarded copies (no interior test: fewer live registers in the loop).
            auto copy_guarded = [&](int nt, int slot) {
                if (nt < KT) {
                    const unsigned sa = sbase + (unsigned)(slot * CF::STAGE) * 8u;
                    la.template load<true>(sa);
                    lb.template load<true>(sa + (unsigned)CF::A_STAGE * 8u);
                }
                cp_commit();
            };
            TcPipe<CF, TA, TB> pipe(acc, smem, aoff, boff);
            pipe.run(K, KT, interior, copy_fast, copy_guarded);
        } else if constexpr (!PIPE_ONLY) {
            classic();
        }
    } else {
        classic();
    }
    cp_wait<0>();  // nothing may stay in flight at exit (only empty groups can remain)

    // ---- epilogue: thread holds D rows g, g+8 of each 16x8 tile, column pairs 2t, 2t+1 ----
    int r0 = m0 + wm * CF::WTM + g;
    int c0 = n0 + wn * CF::WTN + 2 * t;
    bool full = interior;
    if constexpr (CF::PIPE) {
        // indices computed anew: only the accumulators stay live across the main loop
        int em0, en0;
        gd::tile_origin_of<BM, BN>(fresh_ctaid_x(), M, N, em0, en0);
        const int etid = (int)fresh_tid_x();
        const int ew = etid >> 5, el = etid & 31;
        r0 = em0 + (ew / CF::WARPS_N) * CF::WTM + (el >> 2);
        c0 = en0 + (ew % CF::WARPS_N) * CF::WTN + 2 * (el & 3);
        full = (M - em0 >= BM) && (N - en0 >= BN);
        if constexpr (SPLIT) C += (long long)fresh_ctaid_z() * (long long)M * ldc;
    }
    gd::store_mma_tiles<MT, NTL>(C, ldc, M, N, r0, c0, full, acc);
}

}  // namespace dgm

#endif  // tensor-core kernels

// =============================================================================================
// SIMT fallback (every arch): 64x64x16 tile, 256 threads, 4x4 outputs per thread (rows ty+16i,
// columns tx+16j), register-prefetched single smem buffer, plain 8-byte loads.
// =============================================================================================
namespace dgm {

struct SimtCfg {
    static constexpr int BM = 64, BN = 64, BK = 16, NT = 256;
    static constexpr int S = BM + 1;  // S[k][x] row stride (odd: transposing stores conflict-free)
    static constexpr int SMEM_BYTES = 2 * BK * S * 8;
};
static_assert(SimtCfg::NT == 256 && SimtCfg::SMEM_BYTES == 16640,
              "keep the @launch dgemm_simt line in sync");

// Loads the 64 x 16 tile of operand X starting at (x0, k0) into registers: element e = tid +
// 256*p. KC (x*ld + k contiguous along k): x = e/16, k = e%16; else x = e%64, k = e/64.
template <bool KC>
DGM_DEV void simt_fetch(const double* __restrict__ G, long long ld, int X, int K, int x0, int k0,
                        int tid, double (&r)[4]) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        const int e = tid + 256 * p;
        const int x = KC ? e >> 4 : e & 63;
        const int k = KC ? e & 15 : e >> 6;
        const int gx = x0 + x, gk = k0 + k;
        r[p] = (gx < X && gk < K) ? G[KC ? (long long)gx * ld + gk : (long long)gk * ld + gx]
                                  : 0.0;
    }
}
template <bool KC>
DGM_DEV void simt_store(double* S, int tid, const double (&r)[4]) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        const int e = tid + 256 * p;
        const int x = KC ? e >> 4 : e & 63;
        const int k = KC ? e & 15 : e >> 6;
        S[k * SimtCfg::S + x] = r[p];
    }
}

template <bool TA, bool TB, bool SPLIT>
DGM_DEV void simt_body(int M, int N, int K, const double* __restrict__ A, long long lda,
                       const double* __restrict__ B, long long ldb, double* __restrict__ C,
                       long long ldc, int k_per_split) {
    constexpr int BK = SimtCfg::BK, S = SimtCfg::S;
    double* As = reinterpret_cast<double*>(dgm_smem);
    double* Bs = As + BK * S;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int m0, n0;
    gd::tile_origin<SimtCfg::BM, SimtCfg::BN>(M, N, m0, n0);
    if constexpr (SPLIT) {
        gd::splitk_range<TA, TB>(K, A, lda, B, ldb, k_per_split);
        C += (long long)blockIdx.z * (long long)M * ldc;
    }
    double acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0;

    double ra[4], rb[4];
    if (K > 0) {
        simt_fetch<!TA>(A, lda, M, K, m0, 0, tid, ra);
        simt_fetch<TB>(B, ldb, N, K, n0, 0, tid, rb);
    }
    for (int k0 = 0; k0 < K; k0 += BK) {
        __syncthreads();
        simt_store<!TA>(As, tid, ra);
        simt_store<TB>(Bs, tid, rb);
        __syncthreads();
        if (k0 + BK < K) {
            simt_fetch<!TA>(A, lda, M, K, m0, k0 + BK, tid, ra);
            simt_fetch<TB>(B, ldb, N, K, n0, k0 + BK, tid, rb);
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            double a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk * S + ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = Bs[kk * S + tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = m0 + ty + 16 * i;
        if (r < M) {
            double* Cr = C + (long long)r * ldc;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = n0 + tx + 16 * j;
                if (c < N) Cr[c] = acc[i][j];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// GEMV helpers (bandwidth bound)
// ---------------------------------------------------------------------------------------------
DGM_DEV double warp_sum(double s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// out[r*so] = sum_k X[r*ldx + k] * v[k*sv], r < R.  Block 256 = 8 warps, one row per warp,
// grid = ceil(R/8).
DGM_DEV void gemv_rows(int R, int K, const double* __restrict__ X, long long ldx,
                       const double* __restrict__ v, long long sv, double* __restrict__ out,
                       long long so) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * 8 + warp;
    if (r >= R) return;
    const double* x = X + r * ldx;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    const bool xvec = (reinterpret_cast<unsigned long long>(x) & 15ull) == 0;
    const bool vvec = (sv == 1) && (reinterpret_cast<unsigned long long>(v) & 15ull) == 0;
    if (xvec && vvec) {
        const int K2 = K >> 1;
        const d2* x2 = reinterpret_cast<const d2*>(x);
        const d2* v2 = reinterpret_cast<const d2*>(v);
        int i = lane;
        for (; i + 96 < K2; i += 128) {
            const d2 a0 = x2[i], a1 = x2[i + 32], a2 = x2[i + 64], a3 = x2[i + 96];
            const d2 b0 = v2[i], b1 = v2[i + 32], b2 = v2[i + 64], b3 = v2[i + 96];
            s0 = fma(a0.x, b0.x, s0); s0 = fma(a0.y, b0.y, s0);
            s1 = fma(a1.x, b1.x, s1); s1 = fma(a1.y, b1.y, s1);
            s2 = fma(a2.x, b2.x, s2); s2 = fma(a2.y, b2.y, s2);
            s3 = fma(a3.x, b3.x, s3); s3 = fma(a3.y, b3.y, s3);
        }
        for (; i < K2; i += 32) {
            const d2 a0 = x2[i], b0 = v2[i];
            s0 = fma(a0.x, b0.x, s0);
            s1 = fma(a0.y, b0.y, s1);
        }
        if ((K & 1) && lane == 0) s2 = fma(x[K - 1], v[K - 1], s2);
    } else {
        int k = lane;
        for (; k + 96 < K; k += 128) {
            const double a0 = x[k], a1 = x[k + 32], a2 = x[k + 64], a3 = x[k + 96];
            const double b0 = v[k * sv], b1 = v[(k + 32) * sv], b2 = v[(k + 64) * sv],
                         b3 = v[(k + 96) * sv];
            s0 = fma(a0, b0, s0);
            s1 = fma(a1, b1, s1);
            s2 = fma(a2, b2, s2);
            s3 = fma(a3, b3, s3);
        }
        for (; k < K; k += 32) s0 = fma(x[k], v[k * sv], s0);
    }
    const double s = warp_sum((s0 + s1) + (s2 + s3));
    if (lane == 0) out[r * so] = s;
}

// out[c*so] = sum_k v[k*sv] * X[k*ldx + c], c < Cn.  Block 256: tx = tid&7 owns 2 consecutive
// columns (16 per block), ty = tid>>3 (32 k lanes) strides over k; fixed-order smem reduction.
// grid = ceil(Cn/16).
DGM_DEV void gemv_cols(int Cn, int K, const double* __restrict__ X, long long ldx,
                       const double* __restrict__ v, long long sv, double* __restrict__ out,
                       long long so) {
    __shared__ double red[32][17];
    const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;
    const long long c = (long long)blockIdx.x * 16 + 2 * tx;
    const long long crem = (long long)Cn - c;  // valid columns from c
    double s[2] = {0.0, 0.0};
    if (crem > 0) {
        const double* xc = X + c;
        const bool vec = crem >= 2 && (ldx & 1) == 0 &&
                         ((reinterpret_cast<unsigned long long>(xc) & 15ull) == 0);
        if (vec) {
            double t[2] = {0.0, 0.0};
            int k = ty;
            for (; k + 224 < K; k += 256) {
                d2 a[8];
                double b[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    a[u] = *reinterpret_cast<const d2*>(xc + (long long)(k + 32 * u) * ldx);
                    b[u] = v[(long long)(k + 32 * u) * sv];
                }
#pragma unroll
                for (int u = 0; u < 8; u += 2) {
                    s[0] = fma(a[u].x, b[u], s[0]);
                    s[1] = fma(a[u].y, b[u], s[1]);
                    t[0] = fma(a[u + 1].x, b[u + 1], t[0]);
                    t[1] = fma(a[u + 1].y, b[u + 1], t[1]);
                }
            }
            for (; k < K; k += 32) {
                const d2 a0 = *reinterpret_cast<const d2*>(xc + (long long)k * ldx);
                const double b0 = v[(long long)k * sv];
                s[0] = fma(a0.x, b0, s[0]);
                s[1] = fma(a0.y, b0, s[1]);
            }
            s[0] += t[0];
            s[1] += t[1];
        } else {
            const int nc = crem < 2 ? (int)crem : 2;
            for (int k = ty; k < K; k += 32) {
                const double* xr = xc + (long long)k * ldx;
                const double b = v[(long long)k * sv];
#pragma unroll
                for (int q = 0; q < 2; ++q)
                    if (q < nc) s[q] = fma(xr[q], b, s[q]);
            }
        }
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) red[ty][2 * tx + q] = s[q];
    __syncthreads();
    if (threadIdx.x < 16) {
        const long long cc = (long long)blockIdx.x * 16 + threadIdx.x;
        if (cc < Cn) {
            double u = 0.0;
#pragma unroll 8
            for (int y = 0; y < 32; ++y) u += red[y][threadIdx.x];
            out[cc * so] = u;
        }
    }
}

}  // namespace dgm

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define DGM_TC_ENTRY(NAME, CFG, TA, TB, AL)                                                  \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB) NAME(GEMM_PARAMS(double)) {   \
        GD_AFTER_PREVIOUS();                                                                 \
        dgm::tc_body<CFG, TA, TB, AL, false, CFG::PIPE>(M, N, K, A, lda, B, ldb, C, ldc, 0); \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB)                         \
        NAME##_splitk(GEMM_PARAMS(double), int k_per_split) {                                      \
        GD_AFTER_PREVIOUS();                                                                 \
        dgm::tc_body<CFG, TA, TB, AL, true>(M, N, K, A, lda, B, ldb, C, ldc, k_per_split);   \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB)                         \
        NAME##_batched(GEMM_PARAMS(double), GD_BATCH_PARAMS) {                               \
        GD_AFTER_PREVIOUS();                                                                 \
        GD_BATCH_OFFSETS;                                                                    \
        dgm::tc_body<CFG, TA, TB, AL, false>(M, N, K, A, lda, B, ldb, C, ldc, 0);            \
    }

GD_LAYOUT_ENTRIES(DGM_TC_ENTRY, dgemm_tc_128x64, dgm::TcBig)
GD_LAYOUT_ENTRIES(DGM_TC_ENTRY, dgemm_tc_64x64, dgm::TcSmall)
#endif

#define DGM_SIMT_ENTRY(NAME, TA, TB)                                                         \
    extern "C" __global__ void __launch_bounds__(256) NAME(GEMM_PARAMS(double)) {                  \
        GD_AFTER_PREVIOUS();                                                                 \
        dgm::simt_body<TA, TB, false>(M, N, K, A, lda, B, ldb, C, ldc, 0);                   \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                        \
        NAME##_splitk(GEMM_PARAMS(double), int k_per_split) {                                      \
        GD_AFTER_PREVIOUS();                                                                 \
        dgm::simt_body<TA, TB, true>(M, N, K, A, lda, B, ldb, C, ldc, k_per_split);          \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                        \
        NAME##_batched(GEMM_PARAMS(double), GD_BATCH_PARAMS) {                               \
        GD_AFTER_PREVIOUS();                                                                 \
        GD_BATCH_OFFSETS;                                                                    \
        dgm::simt_body<TA, TB, false>(M, N, K, A, lda, B, ldb, C, ldc, 0);                   \
    }
DGM_SIMT_ENTRY(dgemm_simt_nn, false, false)
DGM_SIMT_ENTRY(dgemm_simt_nt, false, true)
DGM_SIMT_ENTRY(dgemm_simt_tn, true, false)
DGM_SIMT_ENTRY(dgemm_simt_tt, true, true)

GD_AUX_ENTRIES(double, dgemm_splitk_reduce, dgemm_axpby, delem_relu, delem_relu_backward)
GD_COMPLEX_ENTRIES(double, delem_complex_gather, delem_complex_expand, delem_complex_axpby)
GD_GEMV_ENTRIES(double, dgm, dgemv)
