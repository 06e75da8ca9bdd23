// sgemm_fast.cu -- high-throughput FP32 SGEMM / SGEMV kernels for sm_90 (H100 / H200).
//
// Includes common.cuh and the tiled GEMMs' headers: cp.async copies, tile order and split-K,
// loaders (the crate splices them in textually; NVRTC compiles it with
// `--gpu-architecture=sm_90 --std=c++17` and no CUDA header). Pure FP32 FFMA arithmetic (no
// TF32 / tensor cores).
// Everything lives in namespace `sgf` or carries an `sgf`/`sgemm_fast`/`sgemv_` prefix.
//
// CONTRACT (every entry): C (M x N, row-major, leading dim ldc) = op(A) (M x K) * op(B) (K x N)
//   A, TA=false: A[r*lda + k]    A, TA=true: A[k*lda + r]
//   B, TB=false: B[k*ldb + n]    B, TB=true: B[n*ldb + k]
//   Every element of C is written exactly once; nothing out of bounds is read or written.
//   All offsets are 64-bit. M, N >= 1, K >= 1 (split entries also cope with empty K ranges).
//   Suffix letters: first = TA, second = TB ('n' = false / row-major, 't' = true).
//
// ---------------------------------------------------------------------------------------------
// LAUNCH TABLE  (block = blockDim.x, 1-D blocks; smem = dynamic shared memory bytes)
// ---------------------------------------------------------------------------------------------
// sgemm_fast_64x128_{nn,nt,tn,tt}[_u]             block 128, smem 51200 (> 48 KB: host MUST set
//      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES >= 51200 on each function before launch)
//      grid = (ceil(M/64) * ceil(N/128), 1, 1)    [tile index on gridDim.x, grouped order inside]
// sgemm_fast_64x64_{nn,nt,tn,tt}[_u]              block 64, smem 34816 (<= 48 KB, no attribute
//      needed), grid = (ceil(M/64) * ceil(N/64), 1, 1)
// ..._splitk variants of both (e.g. sgemm_fast_64x128_nn_splitk, sgemm_fast_64x64_nt_u_splitk):
//      same block / smem, 10th argument `int k_per_split` (> 0, multiple of 16),
//      grid = (tiles, 1, splits) with splits = ceil(K / k_per_split) (<= 65535).
//      blockIdx.z = z computes K range [z*k_per_split, min(K,(z+1)*k_per_split)) and writes the
//      partial product (every element, zeros for an empty range) to C + z*M*ldc with leading
//      dim ldc: pass C = workspace W (splits*M*N floats) and ldc = N.
// sgemm_splitk_reduce(int M, int N, int splits, const float* W, float* C, long long ldc)
//      block 256, smem 0, any grid (grid-stride), e.g. grid = min(ceil(M*N/256), 8192).
//      C[i*ldc+j] = sum_{z=0..splits-1} W[z*M*N + i*N + j], summed in increasing z (deterministic).
// sgemm_axpby(int M, int N, float alpha, const float* T, long long ldt, float beta, float* C,
//      long long ldc): C = alpha*T + beta*C (beta == 0: C not read; T null: alpha*T is 0).
//      block 256, smem 0, any grid (grid-stride).
// elem_relu(long long N, float* X): X = max(X, 0); elem_relu_backward(long long N, float* G,
//      const float* H): G = H > 0 ? G : 0. block 256, smem 0, any grid (grid-stride).
// elem_complex_gather(long long rows, long long cols, const float* X, long long sr, long long sc,
//      float* Y), elem_complex_expand(long long K, long long N, const float* X, long long sr,
//      long long sc, float* Y), elem_complex_axpby(int M, int N, float ar, float ai,
//      const float* P, float br, float bi, float* C, long long ldc): complex matrices as the
//      reals of a complex product's stacked form (common.cuh). block 256, smem 0, any grid.
// sgemv_m1_{nn,nt,tn,tt}   (M == 1)  block 256, smem 0
//      TB=false ('n' second letter): grid = ceil(N/16)    TB=true: grid = ceil(N/8)
// sgemv_n1_{nn,nt,tn,tt}   (N == 1)  block 256, smem 0
//      TA=false ('n' first letter):  grid = ceil(M/8)     TA=true: grid = ceil(M/16)
//      (gemv entries: no alignment requirement; they vectorize at run time when legal)
//
// ALIGNMENT: entries WITHOUT `_u` require A and B 16-byte aligned and lda % 4 == 0 and
// ldb % 4 == 0. `_u` entries only need 4-byte aligned A/B, any lda/ldb. C needs nothing: the
// epilogue checks C alignment / ldc at run time and uses 128-bit stores only when legal.
// ---------------------------------------------------------------------------------------------
//
// DESIGN (main kernels): block tile BM x BN x 16, STAGES-deep cp.async pipeline in dynamic
// shared memory, one __syncthreads per K tile. Both operands are stored k-major in shared
// memory, As[k][m] and Bs[k][n], rows padded by 4 floats (stride BM+4 / BN+4), so the inner
// loop reads float4 fragments from both. Each thread owns a TM x TN register block made of
// 4x4 sub-blocks spread over the warp tile (conflict-free, broadcast LDS.128).
//   operand contiguous along m/n (A^T, B):   16-byte cp.async.cg (aligned) / 4-byte cp.async.ca (_u)
//   operand contiguous along k   (A, B^T):   4-byte cp.async.ca, transposing on the fly; the thread
//       mapping (8 consecutive k x 4 rows per warp) makes global accesses sector-complete and
//       the shared stores bank-conflict free with the +4 padding.
// Interior tiles (full in M, N and K) use unguarded copies; edge tiles use zero-filling
// (src-size) copies; the choice is a block-uniform branch per K tile.
// Fragments are read with lds128 at 32-bit shared addresses: through a generic pointer NVRTC
// formed 64-bit addresses and its code ran 3-4% slower than nvcc's for the same source
// (H200: 0.90x against 0.92-0.95x cuBLAS at 2048^3-8192^3). The large tile is 64 x 128 with
// 128 threads and four stages, four blocks per multiprocessor: through NVRTC, 8192^3 at
// 0.98x cuBLAS against 0.95x for 128 x 128 with 256 threads, 4096^3 0.96x against 0.92x.

#include "common.cuh"
#include "cp_async.cuh"
#include "tile.cuh"
#include "loader.cuh"

#define SGF_DEV GD_DEV

namespace sgf {

struct alignas(16) f4 {
    float x, y, z, w;
};

// 16-byte shared load at a 32-bit shared-window address (the same instruction whichever way
// the compiler would have formed a generic pointer's address).
SGF_DEV f4 lds128(unsigned addr) {
    f4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr));
    return v;
}

// ---------------------------------------------------------------------------------------------
// Tile configuration
// ---------------------------------------------------------------------------------------------
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int TM_, int TN_, int STAGES_, int MINB_,
          int BK_ = 16>
struct Cfg {
    static constexpr int BM = BM_, BN = BN_, BK = BK_;
    static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int TM = TM_, TN = TN_, STAGES = STAGES_, MINB = MINB_;
    static constexpr int NT = WARPS_M * WARPS_N * 32;
    static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // warp tile
    static constexpr int LM = WTM / TM, LN = WTN / TN;            // lanes along m / n
    static constexpr int PA = BM + 4, PB = BN + 4;                // padded smem row strides
    static constexpr int A_STAGE = BK * PA, B_STAGE = BK * PB;    // floats
    static constexpr int STAGE = A_STAGE + B_STAGE;
    static constexpr int SMEM_BYTES = STAGES * STAGE * 4;
    static_assert(LM * LN == 32, "lanes");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "4x4 sub-blocks");
};
// (SGF_BIG_VARIANT / SGF_SMALL_VARIANT / SGF_GROUP_M exist only for tuning experiments;
//  leave them undefined: the launch table above describes the defaults)
#if defined(SGF_BIG_VARIANT) && SGF_BIG_VARIANT == 1
#define SGF_BIG_CFG Cfg<128, 128, 2, 4, 8, 8, 3, 2>
#elif defined(SGF_BIG_VARIANT) && SGF_BIG_VARIANT == 2
#define SGF_BIG_CFG Cfg<64, 128, 2, 2, 8, 8, 3, 4>
#elif defined(SGF_BIG_VARIANT) && SGF_BIG_VARIANT == 3
#define SGF_BIG_CFG Cfg<128, 128, 2, 4, 8, 8, 3, 2, 32>
#else
#define SGF_BIG_CFG Cfg<64, 128, 2, 2, 8, 8, 4, 4>  // 128 threads, 8x8 per thread, 51200 B smem
#endif
#if defined(SGF_SMALL_VARIANT) && SGF_SMALL_VARIANT == 1
#define SGF_SMALL_CFG Cfg<64, 64, 2, 2, 8, 4, 4, 4>
#elif defined(SGF_SMALL_VARIANT) && SGF_SMALL_VARIANT == 2
#define SGF_SMALL_CFG Cfg<64, 64, 2, 2, 4, 8, 4, 4>
#else
#define SGF_SMALL_CFG Cfg<64, 64, 1, 2, 8, 8, 4, 6>  // 64 threads, 8x8 per thread, 34816 B smem
#endif
#ifndef SGF_GROUP_M
#define SGF_GROUP_M 8
#endif
typedef SGF_BIG_CFG CfgBig;
typedef SGF_SMALL_CFG CfgSmall;
// The crate's kernel table (src/engine/table.rs) holds these figures; a unit test checks the
// table against the @launch lines, and the asserts below tie the lines to the code.
// @launch sgemm_fast_64x128 tile=64x128 block=128 smem=51200 bk=16 minsm=0
// @launch sgemm_fast_64x64 tile=64x64 block=64 smem=34816 bk=16 minsm=0
#if !defined(SGF_BIG_VARIANT) && !defined(SGF_SMALL_VARIANT)
static_assert(CfgBig::BM == 64 && CfgBig::BN == 128 && CfgBig::NT == 128 &&
                  CfgBig::SMEM_BYTES == 51200 && CfgBig::BK == 16,
              "@launch sgemm_fast_64x128");
static_assert(CfgSmall::BM == 64 && CfgSmall::BN == 64 && CfgSmall::NT == 64 &&
                  CfgSmall::SMEM_BYTES == 34816 && CfgSmall::BK == 16,
              "@launch sgemm_fast_64x64");
#endif

// Outputs row[4j .. 4j + 3] as one 16-byte store at p.
template <int TN>
SGF_DEV void store4(float* p, const float (&row)[TN], int j) {
    f4 v;
    v.x = row[4 * j + 0];
    v.y = row[4 * j + 1];
    v.z = row[4 * j + 2];
    v.w = row[4 * j + 3];
    *reinterpret_cast<f4*>(p) = v;
}

// ---------------------------------------------------------------------------------------------
// Main GEMM body
// ---------------------------------------------------------------------------------------------
template <class CF, bool TA, bool TB, bool AL, bool SPLIT>
SGF_DEV void gemm_body(int M, int N, int K, const float* __restrict__ A, long long lda,
                       const float* __restrict__ B, long long ldb, float* __restrict__ C,
                       long long ldc, int k_per_split) {
    constexpr int BM = CF::BM, BN = CF::BN, BK = CF::BK, NT = CF::NT;
    constexpr int TM = CF::TM, TN = CF::TN, LM = CF::LM, LN = CF::LN, ST = CF::STAGES;
    constexpr int PA = CF::PA, PB = CF::PB;
    extern __shared__ f4 sgf_smem4[];
    float* smem = reinterpret_cast<float*>(sgf_smem4);

    const int tid = threadIdx.x;

    // ---- grouped tile order (GROUP_M tile-rows share B panels in L2) ----
    int m0, n0;
    gd::tile_origin<BM, BN, SGF_GROUP_M>(M, N, m0, n0);

    if constexpr (SPLIT) {
        gd::splitk_range<TA, TB>(K, A, lda, B, ldb, k_per_split);
        C += (long long)blockIdx.z * (long long)M * ldc;
    }

    gd::KMajorLoader<BM, BK, NT, PA, !TA, AL> la(A, lda, M, K, m0, tid);
    gd::KMajorLoader<BN, BK, NT, PB, TB, AL> lb(B, ldb, N, K, n0, tid);

    const unsigned sbase = gd::smem_u32(smem);
    const bool interior = (M - m0 >= BM) && (N - n0 >= BN);
    const int KT = K > 0 ? (K - 1) / BK + 1 : 0;

    // ---- prologue: tiles 0 .. ST-2 ----
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) GD_COPY_K_TILE(4u, s, s);

    const int warp = tid >> 5, lane = tid & 31;
    const int warp_m = warp / CF::WARPS_N, warp_n = warp % CF::WARPS_N;
    const int lm = lane / LN, ln = lane % LN;
    const int a_off = warp_m * CF::WTM + lm * 4;
    const int b_off = warp_n * CF::WTN + ln * 4;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    int rs = 0, ws = ST - 1;
    for (int kt = 0; kt < KT; ++kt) {
        gd::cp_wait<ST - 2>();
        __syncthreads();
        {
            const int nt = kt + ST - 1;
            GD_COPY_K_TILE(4u, nt, ws);
        }
        const unsigned As = sbase + (unsigned)(rs * CF::STAGE + a_off) * 4u;
        const unsigned Bs = sbase + (unsigned)(rs * CF::STAGE + CF::A_STAGE + b_off) * 4u;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM / 4; ++i) {
                const f4 v = lds128(As + (unsigned)(kk * PA + i * LM * 4) * 4u);
                a[4 * i + 0] = v.x;
                a[4 * i + 1] = v.y;
                a[4 * i + 2] = v.z;
                a[4 * i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN / 4; ++j) {
                const f4 v = lds128(Bs + (unsigned)(kk * PB + j * LN * 4) * 4u);
                b[4 * j + 0] = v.x;
                b[4 * j + 1] = v.y;
                b[4 * j + 2] = v.z;
                b[4 * j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
        }
        rs = (rs + 1 == ST) ? 0 : rs + 1;
        ws = (ws + 1 == ST) ? 0 : ws + 1;
    }

    // ---- epilogue ----
    const bool cvec = ((ldc & 3) == 0) && ((reinterpret_cast<unsigned long long>(C) & 15ull) == 0);
    const int mrem = M - m0 - a_off;  // rows valid from this thread's first row
    const int nrem = N - n0 - b_off;  // cols valid from this thread's first col
    float* Cb = C + (long long)(m0 + a_off) * ldc + (n0 + b_off);
    if (interior && cvec) {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int r = (i / 4) * LM * 4 + (i % 4);
            float* Cr = Cb + (long long)r * ldc;
#pragma unroll
            for (int j = 0; j < TN / 4; ++j) store4(Cr + j * LN * 4, acc[i], j);
        }
    } else {
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int r = (i / 4) * LM * 4 + (i % 4);
            if (r < mrem) {
                float* Cr = Cb + (long long)r * ldc;
#pragma unroll
                for (int j = 0; j < TN / 4; ++j) {
                    const int c = j * LN * 4;
                    if (cvec && c + 3 < nrem) {
                        store4(Cr + c, acc[i], j);
                    } else {
#pragma unroll
                        for (int q = 0; q < 4; ++q)
                            if (c + q < nrem) Cr[c + q] = acc[i][4 * j + q];
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// GEMV helpers (bandwidth bound)
// ---------------------------------------------------------------------------------------------
SGF_DEV float warp_sum(float s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// out[r*so] = sum_k X[r*ldx + k] * v[k*sv], r < R.  Block 256 = 8 warps, one row per warp,
// grid = ceil(R/8).
SGF_DEV void gemv_rows(int R, int K, const float* __restrict__ X, long long ldx,
                       const float* __restrict__ v, long long sv, float* __restrict__ out,
                       long long so) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * 8 + warp;
    if (r >= R) return;
    const float* x = X + r * ldx;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    const bool xvec = (reinterpret_cast<unsigned long long>(x) & 15ull) == 0;
    const bool vvec = (sv == 1) && (reinterpret_cast<unsigned long long>(v) & 15ull) == 0;
    if (xvec && vvec) {
        const int K4 = K >> 2;
        const f4* x4 = reinterpret_cast<const f4*>(x);
        int i = lane;
        if (vvec) {
            const f4* v4 = reinterpret_cast<const f4*>(v);
            for (; i + 96 < K4; i += 128) {
                const f4 a0 = x4[i], a1 = x4[i + 32], a2 = x4[i + 64], a3 = x4[i + 96];
                const f4 b0 = v4[i], b1 = v4[i + 32], b2 = v4[i + 64], b3 = v4[i + 96];
                s0 = __fmaf_rn(a0.x, b0.x, s0); s0 = __fmaf_rn(a0.y, b0.y, s0);
                s0 = __fmaf_rn(a0.z, b0.z, s0); s0 = __fmaf_rn(a0.w, b0.w, s0);
                s1 = __fmaf_rn(a1.x, b1.x, s1); s1 = __fmaf_rn(a1.y, b1.y, s1);
                s1 = __fmaf_rn(a1.z, b1.z, s1); s1 = __fmaf_rn(a1.w, b1.w, s1);
                s2 = __fmaf_rn(a2.x, b2.x, s2); s2 = __fmaf_rn(a2.y, b2.y, s2);
                s2 = __fmaf_rn(a2.z, b2.z, s2); s2 = __fmaf_rn(a2.w, b2.w, s2);
                s3 = __fmaf_rn(a3.x, b3.x, s3); s3 = __fmaf_rn(a3.y, b3.y, s3);
                s3 = __fmaf_rn(a3.z, b3.z, s3); s3 = __fmaf_rn(a3.w, b3.w, s3);
            }
        }
        for (; i < K4; i += 32) {
            const f4 a0 = x4[i];
            const float* vb = v + (long long)(4 * i) * sv;
            s0 = __fmaf_rn(a0.x, vb[0], s0);
            s1 = __fmaf_rn(a0.y, vb[sv], s1);
            s2 = __fmaf_rn(a0.z, vb[2 * sv], s2);
            s3 = __fmaf_rn(a0.w, vb[3 * sv], s3);
        }
        for (int k = 4 * K4 + lane; k < K; k += 32) s1 = __fmaf_rn(x[k], v[k * sv], s1);
    } else {
        int k = lane;
        for (; k + 96 < K; k += 128) {
            const float a0 = x[k], a1 = x[k + 32], a2 = x[k + 64], a3 = x[k + 96];
            const float b0 = v[k * sv], b1 = v[(k + 32) * sv], b2 = v[(k + 64) * sv],
                        b3 = v[(k + 96) * sv];
            s0 = __fmaf_rn(a0, b0, s0);
            s1 = __fmaf_rn(a1, b1, s1);
            s2 = __fmaf_rn(a2, b2, s2);
            s3 = __fmaf_rn(a3, b3, s3);
        }
        for (; k < K; k += 32) s0 = __fmaf_rn(x[k], v[k * sv], s0);
    }
    const float s = warp_sum((s0 + s1) + (s2 + s3));
    if (lane == 0) out[r * so] = s;
}

// out[c*so] = sum_k v[k*sv] * X[k*ldx + c], c < Cn.  Block 256: tx = tid&3 owns 4 consecutive
// columns (16 per block), ty = tid>>2 (64 k lanes) strides over k; fixed-order smem reduction.
// grid = ceil(Cn/16).
SGF_DEV void gemv_cols(int Cn, int K, const float* __restrict__ X, long long ldx,
                       const float* __restrict__ v, long long sv, float* __restrict__ out,
                       long long so) {
    __shared__ float red[64][17];
    const int tx = threadIdx.x & 3, ty = threadIdx.x >> 2;
    const long long c = (long long)blockIdx.x * 16 + 4 * tx;
    const long long crem = (long long)Cn - c;  // valid columns from c
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    if (crem > 0) {
        const float* xc = X + c;
        const bool vec = crem >= 4 && (ldx & 3) == 0 &&
                         ((reinterpret_cast<unsigned long long>(xc) & 15ull) == 0);
        if (vec) {
            float t[4] = {0.f, 0.f, 0.f, 0.f};
            int k = ty;
            for (; k + 448 < K; k += 512) {
                f4 a[8];
                float b[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    a[u] = *reinterpret_cast<const f4*>(xc + (long long)(k + 64 * u) * ldx);
                    b[u] = v[(k + 64 * u) * sv];
                }
#pragma unroll
                for (int u = 0; u < 8; u += 2) {
                    s[0] = __fmaf_rn(a[u].x, b[u], s[0]); s[1] = __fmaf_rn(a[u].y, b[u], s[1]);
                    s[2] = __fmaf_rn(a[u].z, b[u], s[2]); s[3] = __fmaf_rn(a[u].w, b[u], s[3]);
                    t[0] = __fmaf_rn(a[u + 1].x, b[u + 1], t[0]);
                    t[1] = __fmaf_rn(a[u + 1].y, b[u + 1], t[1]);
                    t[2] = __fmaf_rn(a[u + 1].z, b[u + 1], t[2]);
                    t[3] = __fmaf_rn(a[u + 1].w, b[u + 1], t[3]);
                }
            }
            for (; k < K; k += 64) {
                const f4 a0 = *reinterpret_cast<const f4*>(xc + (long long)k * ldx);
                const float b0 = v[k * sv];
                s[0] = __fmaf_rn(a0.x, b0, s[0]); s[1] = __fmaf_rn(a0.y, b0, s[1]);
                s[2] = __fmaf_rn(a0.z, b0, s[2]); s[3] = __fmaf_rn(a0.w, b0, s[3]);
            }
#pragma unroll
            for (int q = 0; q < 4; ++q) s[q] += t[q];
        } else {
            const int nc = crem < 4 ? (int)crem : 4;
            for (int k = ty; k < K; k += 64) {
                const float* xr = xc + (long long)k * ldx;
                const float b = v[k * sv];
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (q < nc) s[q] = __fmaf_rn(xr[q], b, s[q]);
            }
        }
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) red[ty][4 * tx + q] = s[q];
    __syncthreads();
    if (threadIdx.x < 16) {
        const long long cc = (long long)blockIdx.x * 16 + threadIdx.x;
        if (cc < Cn) {
            float t = 0.f;
#pragma unroll 8
            for (int y = 0; y < 64; ++y) t += red[y][threadIdx.x];
            out[cc * so] = t;
        }
    }
}

}  // namespace sgf

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------
#define SGF_GEMM_ENTRY(NAME, CFG, TA, TB, AL)                                               \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB) NAME(GEMM_PARAMS(float)) {    \
        GD_AFTER_PREVIOUS();                                                                \
        sgf::gemm_body<CFG, TA, TB, AL, false>(M, N, K, A, lda, B, ldb, C, ldc, 0);         \
    }                                                                                       \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB)                        \
        NAME##_splitk(GEMM_PARAMS(float), int k_per_split) {                                       \
        GD_AFTER_PREVIOUS();                                                                 \
        sgf::gemm_body<CFG, TA, TB, AL, true>(M, N, K, A, lda, B, ldb, C, ldc, k_per_split); \
    }                                                                                       \
    extern "C" __global__ void __launch_bounds__(CFG::NT, CFG::MINB)                        \
        NAME##_batched(GEMM_PARAMS(float), GD_BATCH_PARAMS) {                               \
        GD_AFTER_PREVIOUS();                                                                \
        GD_BATCH_OFFSETS;                                                                   \
        sgf::gemm_body<CFG, TA, TB, AL, false>(M, N, K, A, lda, B, ldb, C, ldc, 0);         \
    }

GD_LAYOUT_ENTRIES(SGF_GEMM_ENTRY, sgemm_fast_64x128, sgf::CfgBig)
GD_LAYOUT_ENTRIES(SGF_GEMM_ENTRY, sgemm_fast_64x64, sgf::CfgSmall)

GD_AUX_ENTRIES(float, sgemm_splitk_reduce, sgemm_axpby, elem_relu, elem_relu_backward)
GD_COMPLEX_ENTRIES(float, elem_complex_gather, elem_complex_expand, elem_complex_axpby)
GD_GEMV_ENTRIES(float, sgf, sgemv)
