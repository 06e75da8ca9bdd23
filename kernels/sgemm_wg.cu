// sgemm_wg.cu -- FP32 GEMM on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a):
// 3xTF32 (FP32-accurate) and TF32.
//
// Compiled by NVRTC with `--gpu-architecture=sm_90a --std=c++17` (wgmma exists only on the
// sm_90a target, which runs on compute capability 9.0 exactly); includes common.cuh and the
// headers of the cp.async copies, the tile order and wgmma (all spliced in by the crate).
// Everything lives in namespace `sgw` or carries an `sgemm_wg` prefix.
//
// The big tiles make a product in two steps on one stream (below); the direct entries
// (sgemm_wg_*_128x64, for thin and small products) read the operands as they are, in one.
//
// A product from panels is two steps on one stream:
//   1. sgemm_wg_pack, once per operand: op(A) (M x K) and op(B)^T (N x K) into K-major panels
//      P[Rp][Kp] (Rp = R rounded up to the tile's extent, Kp = K rounded up to 32, zero
//      padding), any strides on input. 3xTF32 (x3 = 1) writes the big parts, then the
//      small parts at P + Rp*Kp; TF32 (x3 = 0) writes the rounded values only.
//   2. sgemm_wg_tf32x3_128x128 or sgemm_wg_tf32_128x256: C = PA * PB^T from the panels.
//
// ---------------------------------------------------------------------------------------------
// LAUNCH TABLE  (block = blockDim.x, 1-D blocks; smem = dynamic shared memory bytes)
// ---------------------------------------------------------------------------------------------
// @launch sgemm_wg_tf32x3_128x128 tile=128x128 block=256 smem=197632 bk=32 minsm=90
// @launch sgemm_wg_tf32_128x256 tile=128x256 block=256 smem=197632 bk=32 minsm=90
// @launch sgemm_wg_tf32x3_128x64 tile=128x64 block=256 smem=230400 bk=32 minsm=90
// @launch sgemm_wg_tf32_128x64 tile=128x64 block=256 smem=214016 bk=32 minsm=90
//
// sgemm_wg_pack(int R, int K, const float* X, i64 sr, i64 sk, float* P, int Rp, int Kp,
//      int x3): element (r, k) of the R x K operand at X[r*sr + k*sk] (A: sr = lda, sk = 1
//      row-major or sr = 1, sk = lda; B's transpose likewise); block (32, 8), grid (Kp/32, any
//      y <= Rp/32: the kernel loops over the rest). P holds (x3 ? 2 : 1) * Rp * Kp floats.
// sgemm_wg_*(int M, int N, int K, const float* PA, const float* PB, int Kp, float* C, i64 ldc,
//      int kt_per_split): PA and PB the panels of step 1 (Mp = M rounded up to 128, Np = N
//      rounded up to the tile's width BN; both 16-byte aligned); grid (ceil(M/128) *
//      ceil(N/BN), 1, splits), tile index on gridDim.x in a grouped order; blockIdx.z = z
//      takes the K tiles [z*kt_per_split, (z+1)*kt_per_split) (32 wide) and writes its
//      partial product to C + z*M*ldc (zeros for an empty range); one split:
//      kt_per_split >= Kp/32. The host MUST raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_
//      BYTES to the table's smem first. Every element of C (of its layer) is written exactly
//      once; C needs 4-byte alignment (the epilogue uses 8-byte stores only when C % 8 == 0
//      and ldc % 2 == 0).
// sgemm_wg_*_128x64(int M, int N, int K, const float* X, i64 xr, i64 xk, const float* Y,
//      i64 yr, i64 yk, float* C, i64 crs, i64 ccs, i64 layer, int kt_per_split): C = X * Y^T
//      with X's element (r, k) at X[r*xr + k*xk] (r < M), Y's element (n, k) at
//      Y[n*yr + k*yk] (n < N), any strides and alignment (16-byte copies where the layout
//      allows); output (r, c) at C[z*layer + r*crs + c*ccs] for split z = blockIdx.z, which
//      takes K tiles [z*kt_per_split, (z+1)*kt_per_split) (zeros for an empty range). Grid
//      (ceil(M/128) * ceil(N/64), 1, splits); the host MUST raise the dynamic shared memory
//      limit to the table's smem first. Every output of a layer is written exactly once.
// ---------------------------------------------------------------------------------------------
//
// ARITHMETIC. TF32: each element rounded to TF32 (cvt.rna) in the panels, one product, FP32
// accumulation in the tensor cores (as cuBLAS's TF32 mode). 3xTF32: x = big + small with
// big = tf32(x) and small = tf32(x - big) (x - big is exact in FP32; an infinite or NaN x has
// small = 0); the block's products, per 32-wide K tile,
//   U = A_big * B_big                        (from zero in the tensor cores, per K tile)
//   V = A_big * B_small + A_small * B_big    (accumulated in the tensor cores over all of K)
// and D += U in FP32 with round-to-nearest after each K tile: the tensor cores' own additions
// truncate, and a sum carried through all of K in them would drift with K; within one K tile
// the truncation errors are a few units in the last place of that tile's sum, whose signs vary
// from tile to tile. V is about 2^-11 of D, so its truncation is far below FP32's rounding.
// a_small * b_small (about 2^-22 of the product) is dropped. C = D + V where D is finite, else
// C = D: an infinite or NaN input reaches D through the big parts exactly as in FP32 (inf *
// finite, inf - inf, NaN), while V may hold inf * 0 from a zero small part; so Inf and NaN come
// out as on the FP32 path.
//
// DESIGN. Block tile 128 x BN (BN = 128 for 3xTF32, whose three accumulator sets fill the
// registers; 256 for TF32), two warpgroups (rows 0-63 and 64-127), each issuing
// wgmma.m64nBNk8 with both operands in shared memory. Shared memory per stage: one 32-wide
// K tile of each panel (A_big, B_big, and A_small, B_small for 3xTF32), rows of 128 bytes in
// the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), so wgmma's
// descriptors (stride 1024 bytes between 8-row groups, +32 bytes per k8 step) read them and
// the cp.async copies that fill them (8 threads a row, 16 bytes each) are conflict-free.
// 3 stages (3xTF32) or 4 (TF32) of cp.async, fence.proxy.async before the barrier that hands
// a stage to wgmma. 3xTF32 waits for each K tile's wgmma group (U is needed at once); TF32
// keeps one group in flight and refills a stage only once the group before last has finished.
#include "common.cuh"
#include "cp_async.cuh"
#include "tile.cuh"
#include "wgmma.cuh"

#define SGW_DEV GD_DEV

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace sgw {

constexpr int BM = 128, BK = 32, NT = 256;
constexpr int PANEL = BM * BK * 4;  // bytes of one 128 x 32 panel tile
// Both entries: 3 stages of four 128-row panels (3xTF32) or 4 stages of a 128-row and a
// 256-row panel (TF32), + alignment slack.
constexpr int SMEM_BYTES = 12 * PANEL + 1024;
static_assert(SMEM_BYTES == 197632, "keep the @launch lines in sync");

struct alignas(8) f2 {
    float x, y;
};

// D(64 x N, this warpgroup's accumulators) (+)= A(64 x 8) * B(8 x N), N = 128 or 256, both
// read from shared memory through the descriptors; D is zeroed first when `accumulate` is 0.
template <int N>
SGW_DEV void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db,
                      int accumulate) {
    static_assert(N == 128 || N == 256, "the block tiles' widths");
    if constexpr (N == 128)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" GD_WG_D64
                     "}, %64, %65, p, 1, 1;\n}\n"
                     : GD_WG_ACC64("+f", d, 0)
                     : "l"(da), "l"(db), "r"(accumulate));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" GD_WG_D128
                     "}, %128, %129, p, 1, 1;\n}\n"
                     : GD_WG_ACC128("+f", d)
                     : "l"(da), "l"(db), "r"(accumulate));
}

// D(64 x 64, this warpgroup's accumulators) (+)= A(64 x 8) * B(8 x 64), A from registers (the
// warpgroup's fragment: thread lane of warp w holds rows 16w + lane/4 (a[0], a[2]) and + 8
// (a[1], a[3]), columns lane % 4 (a[0], a[1]) and + 4 (a[2], a[3])), B read from shared memory
// through its descriptor; D is zeroed first when `accumulate` is 0.
SGW_DEV void wgmma_m64n64k8_rs(float (&d)[32], const unsigned (&a)[4], unsigned long long db,
                               int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {" GD_WG_D32
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : GD_WG_ACC32("+f", d, 0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

// x rounded to TF32 (round to nearest, ties away from zero), as an FP32 value.
SGW_DEV float to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

// Packs an R x K operand (element (r, k) at X[r*sr + k*sk]) into K-major panels, through a
// 32 x 32 shared tile so that both the read (along whichever stride is 1) and the write
// (along k) are coalesced.
SGW_DEV void pack(int R, int K, const float* __restrict__ X, i64 sr, i64 sk, float* __restrict__ P,
                  int Rp, int Kp, int x3) {
    __shared__ float tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int k0 = blockIdx.x * 32;
    const bool along_r = sk != 1 && sr == 1;
    const i64 small_at = (i64)Rp * Kp;
    for (int r0 = blockIdx.y * 32; r0 < Rp; r0 += gridDim.y * 32) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int a = ty + 8 * i;  // the strided index
            const int r = along_r ? tx : a, k = along_r ? a : tx;
            float v = 0.f;
            if (r0 + r < R && k0 + k < K) v = X[(i64)(r0 + r) * sr + (i64)(k0 + k) * sk];
            tile[r][k] = v;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = ty + 8 * i;
            const float v = tile[r][tx];
            const float big = to_tf32(v);
            const i64 at = (i64)(r0 + r) * Kp + k0 + tx;
            P[at] = big;
            if (x3) {
                const bool finite = (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
                P[small_at + at] = finite ? to_tf32(v - big) : 0.f;
            }
        }
        __syncthreads();
    }
}

// The block's C tile (128 x BN) from the panels (see the file header). X3: 3xTF32 (BN = 128),
// else TF32.
template <bool X3, int BN>
SGW_DEV void gemm(int M, int N, int K, const float* __restrict__ PA, const float* __restrict__ PB,
                  int Kp, float* __restrict__ C, i64 ldc, int kt_per_split) {
    static_assert(BN == 128 || (BN == 256 && !X3), "tile shapes");
    constexpr int PANEL_B = BN * BK * 4;
    constexpr int STAGE = X3 ? 2 * (PANEL + PANEL_B) : PANEL + PANEL_B;  // bytes
    constexpr int STAGES = (SMEM_BYTES - 1024) / STAGE;
    static_assert(STAGES * STAGE + 1024 == SMEM_BYTES, "stages fill the shared memory");
    constexpr int LAG = X3 ? 0 : 1;  // wgmma groups left in flight at the end of a K tile
    constexpr int D = STAGES - 1 - LAG;  // tiles loaded ahead
    static_assert(D >= 2, "a pipeline");
    constexpr int NACC = BN / 2;  // accumulators per thread: 64 rows x BN / 128 threads
    extern __shared__ unsigned char sgw_smem[];
    const unsigned base = (gd::smem_u32(sgw_smem) + 1023u) & ~1023u;

    int m0, n0;
    gd::tile_origin<BM, BN>(M, N, m0, n0);
    const int Mp = (M + BM - 1) / BM * BM, Np = (N + BN - 1) / BN * BN;
    const int kt_total = Kp / BK;
    const int kt0 = blockIdx.z * kt_per_split;
    const int kt1 = kt_total < kt0 + kt_per_split ? kt_total : kt0 + kt_per_split;
    const int tiles = kt1 > kt0 ? kt1 - kt0 : 0;

    const int tid = threadIdx.x;
    // Copy map: 16-byte chunk c of rows r, r + 32, r + 64, ... of each panel. Stage layout:
    // A_big, B_big, then (3xTF32) A_small, B_small.
    const int c = tid & 7, r = tid >> 3;
    const unsigned soff = r * 128 + ((c ^ (r & 7)) << 4);
    const float* a_src = PA + (i64)(m0 + r) * Kp + c * 4;
    const float* b_src = PB + (i64)(n0 + r) * Kp + c * 4;
    const i64 a_small = (i64)Mp * Kp, b_small = (i64)Np * Kp;
    auto load = [&](int stage, int kt) {
        const unsigned s = base + stage * STAGE + soff;
        const i64 k = (i64)kt * BK;
#pragma unroll
        for (int j = 0; j < BM / 32; ++j)
            gd::cp_async<16>(s + j * 32 * 128, a_src + (i64)(32 * j) * Kp + k);
#pragma unroll
        for (int j = 0; j < BN / 32; ++j)
            gd::cp_async<16>(s + PANEL + j * 32 * 128, b_src + (i64)(32 * j) * Kp + k);
        if constexpr (X3) {
            const unsigned s2 = s + PANEL + PANEL_B;
#pragma unroll
            for (int j = 0; j < BM / 32; ++j)
                gd::cp_async<16>(s2 + j * 32 * 128, a_src + a_small + (i64)(32 * j) * Kp + k);
#pragma unroll
            for (int j = 0; j < BN / 32; ++j)
                gd::cp_async<16>(s2 + PANEL + j * 32 * 128,
                                 b_src + b_small + (i64)(32 * j) * Kp + k);
        }
    };

    const int wg = tid >> 7;  // rows 64*wg .. 64*wg + 63 of the tile
    float acc[NACC], u[X3 ? NACC : 1], v[X3 ? NACC : 1];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
    if constexpr (X3) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) {
            u[i] = 0.f;
            v[i] = 0.f;
        }
    }

#pragma unroll
    for (int s = 0; s < D; ++s) {
        if (s < tiles) load(s, kt0 + s);
        gd::cp_commit();
    }
    for (int i = 0; i < tiles; ++i) {
        gd::cp_wait<D - 1>();
        gd::fence_proxy_async();
        __syncthreads();
        // Every warpgroup has finished the wgmma groups of tile i - 1 - LAG: its stage is free.
        if (i + D < tiles) load((i + D) % STAGES, kt0 + i + D);
        gd::cp_commit();

        const unsigned st = base + (i % STAGES) * STAGE;
        const unsigned a_big = st + wg * 64 * 128, b_big = st + PANEL;
        gd::wg_fence();
        if constexpr (X3) {
            gd::fence_regs(u);
            gd::fence_regs(v);
            const unsigned a_sm = a_big + PANEL + PANEL_B, b_sm = b_big + PANEL + PANEL_B;
#pragma unroll
            for (int k = 0; k < BK / 8; ++k)
                wgmma_ss<BN>(u, gd::desc(a_big + 32 * k), gd::desc(b_big + 32 * k), k);
#pragma unroll
            for (int k = 0; k < BK / 8; ++k) {
                wgmma_ss<BN>(v, gd::desc(a_big + 32 * k), gd::desc(b_sm + 32 * k), 1);
                wgmma_ss<BN>(v, gd::desc(a_sm + 32 * k), gd::desc(b_big + 32 * k), 1);
            }
            gd::wg_commit();
            gd::wg_wait<0>();
            gd::fence_regs(u);
            gd::fence_regs(v);
#pragma unroll
            for (int j = 0; j < NACC; ++j) acc[j] += u[j];
        } else {
            gd::fence_regs(acc);
#pragma unroll
            for (int k = 0; k < BK / 8; ++k)
                wgmma_ss<BN>(acc, gd::desc(a_big + 32 * k), gd::desc(b_big + 32 * k), 1);
            gd::wg_commit();
            gd::wg_wait<LAG>();
            gd::fence_regs(acc);
        }
    }
    gd::wg_wait<0>();
    gd::fence_regs(acc);
    if constexpr (X3) gd::fence_regs(v);
    gd::cp_wait<0>();

    // Epilogue. Accumulator j of n8 block q: row 16*warp + g (+8 for j % 4 >= 2), column
    // 8*q + 2*t + j % 2, within this warpgroup's 64 rows.
    float* Cz = C + (i64)blockIdx.z * M * ldc;
    const int lane = tid & 31, warp = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const bool pairs = ((reinterpret_cast<unsigned long long>(Cz) & 7) == 0) && (ldc % 2 == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + wg * 64 + warp * 16 + g + 8 * h;
        if (row >= M) continue;
        float* crow = Cz + (i64)row * ldc;
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
            const int col = n0 + 8 * q + 2 * t;
            float x[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float d = acc[4 * q + 2 * h + e];
                if constexpr (X3)
                    x[e] = (__float_as_uint(d) & 0x7f800000u) != 0x7f800000u
                               ? d + v[4 * q + 2 * h + e]
                               : d;
                else
                    x[e] = d;
            }
            if (pairs && col + 1 < N) {
                *reinterpret_cast<f2*>(crow + col) = f2{x[0], x[1]};
            } else {
                if (col < N) crow[col] = x[0];
                if (col + 1 < N) crow[col + 1] = x[1];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Direct kernels: no packs. The row operand X (element (r, k) at X[r*xr + k*xk]) and the
// column operand Y (element (n, k) at Y[n*yr + k*yk]) are copied as they are (cp.async,
// 16 bytes where the layout allows, else 4) into shared memory stages; each thread turns its
// share of X into wgmma's A fragments in registers, and the block turns Y into a K-major tile
// in the 128-byte swizzle for wgmma's B, rounding (TF32) or splitting (3xTF32) as the pack
// does.
// ---------------------------------------------------------------------------------------------

constexpr int DBN = 64;               // columns of the block tile (rows of Y)
constexpr int DX = BM * BK * 4;       // bytes of a raw 128 x 32 tile of X
constexpr int DY = DBN * BK * 4;      // bytes of a raw 64 x 32 tile of Y, or of one converted part
template <bool X3>
__host__ __device__ constexpr int dstages() {
    return 8;
}
// Raw stages, two converted Y tiles (big and small parts for 3xTF32), alignment slack.
template <bool X3>
__host__ __device__ constexpr int dsmem() {
    return dstages<X3>() * (DX + DY) + 2 * (X3 ? 2 : 1) * DY + 1024;
}
static_assert(dsmem<true>() == 230400 && dsmem<false>() == 214016,
              "keep the @launch lines in sync");

// K order. Within a 32-wide K tile, wgmma's K position L (k8 step L / 8, column L % 8) holds
// the operands' k = 8 * (L % 4) + L / 4. Both operands use it, so the product is the same sum
// in another order; with it, thread (g, t) of a warp holds k = 8t .. 8t + 7 of its rows in its
// A fragments, and Y's position L = 4e + c (chunk e, word c of a 128-byte row) is k = 8c + e.
//
// Rows. Fragment row g (and g + 8) of a warp's 16 rows is the warp's row 2g (and 2g + 1), so
// that a thread's two rows are adjacent (8-byte reads of an M-major X; adjacent outputs of a
// transposed C).
//
// Raw layouts. X, modes 0 (element copies) and 1 (K-major, 16-byte copies): row r of 128
// bytes, chunk c at c ^ ((r / 2) % 8); mode 2 (M-major, 16-byte copies): K row k of 512
// bytes, chunk c (rows 4c .. 4c + 3) at c ^ (2 * ((k / 8) % 4)). Y, modes 0 and 2 (K-major):
// row n of 128 bytes; mode 1 (N-major): K row k of 256 bytes. The swizzles keep the fragment
// reads free of bank conflicts.

SGW_DEV int clamp4(long long v) { return v < 0 ? 0 : v > 4 ? 4 : (int)v; }
SGW_DEV void lds128(unsigned a, float (&v)[4]) {
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                 : "r"(a));
}
SGW_DEV void lds64(unsigned a, float& x, float& y) {
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "r"(a));
}
SGW_DEV float lds32(unsigned a) {
    float x;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(a));
    return x;
}
SGW_DEV void sts32(unsigned addr, unsigned v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
SGW_DEV void sts128(unsigned addr, const unsigned (&v)[4]) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
                 : "memory");
}

// The operands of a direct product and the copy modes their layouts allow.
struct Direct {
    int M, N, K;
    const float* X;
    i64 xr, xk;
    const float* Y;
    i64 yr, yk;
    int xmode, ymode;

    SGW_DEV static bool a16(const float* p) {
        return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
    }
    SGW_DEV void modes() {
        xmode = (xk == 1 && a16(X) && xr % 4 == 0)   ? 1
                : (xr == 1 && a16(X) && xk % 4 == 0) ? 2
                                                     : 0;
        ymode = (yr == 1 && a16(Y) && yk % 4 == 0)   ? 1
                : (yk == 1 && a16(Y) && yr % 4 == 0) ? 2
                                                     : 0;
    }

    // Copies the raw K tile at k0 of rows m0 .. m0 + 127 of X and n0 .. n0 + 63 of Y into the
    // stage at st (Y at st + DX); elements outside the operands are zero.
    SGW_DEV void load(unsigned st, int m0, int n0, int k0, int tid) const {
        if (xmode == 1) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int r = (tid >> 3) + 32 * j, c = tid & 7, k = k0 + 4 * c;
                const int b = m0 + r < M ? 4 * clamp4(K - k) : 0;
                gd::cp_async_z<16>(st + r * 128 + ((c ^ ((r >> 1) & 7)) << 4),
                                   b ? X + (i64)(m0 + r) * xr + k : X, b);
            }
        } else if (xmode == 2) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int kk = (tid >> 5) + 8 * j, c = tid & 31, r = m0 + 4 * c;
                const int b = k0 + kk < K ? 4 * clamp4(M - r) : 0;
                gd::cp_async_z<16>(st + kk * 512 + ((c ^ (2 * ((kk >> 3) & 3))) << 4),
                                   b ? X + r + (i64)(k0 + kk) * xk : X, b);
            }
        } else {
#pragma unroll 4
            for (int j = 0; j < 16; ++j) {
                const int e = tid + 256 * j, r = e >> 5, kk = e & 31;
                const bool ok = m0 + r < M && k0 + kk < K;
                gd::cp_async_z<4>(
                    st + r * 128 + (((kk >> 2) ^ ((r >> 1) & 7)) << 4) + 4 * (kk & 3),
                    ok ? X + (i64)(m0 + r) * xr + (i64)(k0 + kk) * xk : X, ok ? 4 : 0);
            }
        }
        const unsigned sy = st + DX;
        if (ymode == 1) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int kk = (tid >> 4) + 16 * j, c = tid & 15, n = n0 + 4 * c;
                const int b = k0 + kk < K ? 4 * clamp4(N - n) : 0;
                gd::cp_async_z<16>(sy + kk * 256 + c * 16, b ? Y + n + (i64)(k0 + kk) * yk : Y, b);
            }
        } else if (ymode == 2) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int n = (tid >> 3) + 32 * j, c = tid & 7, k = k0 + 4 * c;
                const int b = n0 + n < N ? 4 * clamp4(K - k) : 0;
                gd::cp_async_z<16>(sy + n * 128 + c * 16, b ? Y + (i64)(n0 + n) * yr + k : Y, b);
            }
        } else {
#pragma unroll 4
            for (int j = 0; j < 8; ++j) {
                const int e = tid + 256 * j, n = e >> 5, kk = e & 31;
                const bool ok = n0 + n < N && k0 + kk < K;
                gd::cp_async_z<4>(sy + n * 128 + kk * 4,
                                  ok ? Y + (i64)(n0 + n) * yr + (i64)(k0 + kk) * yk : Y,
                                  ok ? 4 : 0);
            }
        }
    }
};

// x's bits rounded to TF32 (to nearest, ties away from zero: cvt.rna's rounding) for a finite
// x, in integer instructions: with 3xTF32's two roundings an element, measured faster than
// the conversion; TF32's one rounding is faster as cvt.rna.
SGW_DEV unsigned rna_bits(unsigned u) { return (u + 0x1000u) & 0xffffe000u; }

// big = tf32(v) and (3xTF32) small = tf32(v - big), as the pack makes them. 3xTF32: an
// infinite v is its own big part, a NaN becomes the canonical NaN (which stays NaN in the
// tensor cores' truncation), and either has small = 0.
template <bool X3>
SGW_DEV void split1(float v, unsigned& big, unsigned& small) {
    if constexpr (X3) {
        const unsigned u = __float_as_uint(v);
        const bool finite = (u & 0x7f800000u) != 0x7f800000u;
        const unsigned b = finite ? rna_bits(u) : (u & 0x007fffffu) ? 0x7fffffffu : u;
        big = b;
        small = finite ? rna_bits(__float_as_uint(v - __uint_as_float(b))) : 0u;
    } else {
        big = __float_as_uint(to_tf32(v));
    }
}

// This thread's A fragments of the four k8 steps of the raw X tile at st: a[s][i] is row
// xrow + i % 2 (r: its offset in the tile), k = 8t + 2s + i / 2.
template <bool X3>
SGW_DEV void x_fragments(unsigned st, int xmode, int r, int t, unsigned (&big)[4][4],
                         unsigned (&small)[4][4]) {
    float x[2][8];
    if (xmode == 2) {
        const unsigned at = st + (((r >> 2) ^ (2 * t)) << 4) + 8 * ((r >> 1) & 1);
#pragma unroll
        for (int j = 0; j < 8; ++j) lds64(at + (8 * t + j) * 512, x[0][j], x[1][j]);
    } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned row = st + (r + h) * 128;
            const int sw = ((r + h) >> 1) & 7;
            float v[4];
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                lds128(row + (((2 * t + b) ^ sw) << 4), v);
#pragma unroll
                for (int i = 0; i < 4; ++i) x[h][4 * b + i] = v[i];
            }
        }
    }
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) split1<X3>(x[i & 1][2 * s + (i >> 1)], big[s][i], small[s][i]);
}

// The raw Y tile at sy, rounded or split, into the converted tile at cv (big parts; small
// parts DY bytes on): row n's K position L at byte 4 * (L % 4) of 16-byte chunk L / 4, in the
// 128-byte swizzle.
template <bool X3>
SGW_DEV void y_convert(unsigned cv, unsigned sy, int ymode, int tid) {
    if (ymode == 1) {
        const int n = tid & 63;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int e = (tid >> 6) + 4 * j;
            unsigned big[4], small[4];
#pragma unroll
            for (int c = 0; c < 4; ++c)
                split1<X3>(lds32(sy + (8 * c + e) * 256 + 4 * n), big[c], small[c]);
            const unsigned at = cv + n * 128 + ((e ^ (n & 7)) << 4);
            sts128(at, big);
            if constexpr (X3) sts128(at + DY, small);
        }
    } else {
        const int q = tid & 7, c = q >> 1;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int n = ((tid >> 3) & 3) + 4 * (tid >> 5) + 32 * j;
            float v[4];
            lds128(sy + n * 128 + 16 * q, v);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int e = 4 * (q & 1) + i;
                const unsigned at = cv + n * 128 + ((e ^ (n & 7)) << 4) + 4 * c;
                unsigned big, small;
                split1<X3>(v[i], big, small);
                sts32(at, big);
                if constexpr (X3) sts32(at + DY, small);
            }
        }
    }
}

// The block's C tile (128 x 64) straight from X and Y; output (r, c) at
// C[z * layer + r * crs + c * ccs] for split z. X3: 3xTF32, else TF32.
//
// Per K tile i: the wgmma groups on tile i's A fragments and converted Y (buffer i % 2); while
// they run, tile i + 1's Y is converted into the other buffer, its A fragments are made, and
// tile i + S - 1's copy is issued into the stage tile i - 1 left.
template <bool X3>
SGW_DEV void direct(int M, int N, int K, const float* __restrict__ X, i64 xr, i64 xk,
                    const float* __restrict__ Y, i64 yr, i64 yk, float* __restrict__ C, i64 crs,
                    i64 ccs, i64 layer, int kt_per_split) {
    constexpr int S = dstages<X3>();
    constexpr int STAGE = DX + DY, CONV = X3 ? 2 * DY : DY;
    static_assert(S >= 3, "tile i + 1 lands while tile i is multiplied");
    extern __shared__ unsigned char sgw_smem[];
    const unsigned base = (gd::smem_u32(sgw_smem) + 1023u) & ~1023u;
    const unsigned conv0 = base + S * STAGE;  // 1024-aligned: STAGE is a multiple of 1024

    Direct op{M, N, K, X, xr, xk, Y, yr, yk, 0, 0};
    op.modes();
    int m0, n0;
    gd::tile_origin<BM, DBN>(M, N, m0, n0);
    const int kt_total = (K + BK - 1) / BK;
    const int kt0 = blockIdx.z * kt_per_split;
    const int kt1 = kt_total < kt0 + kt_per_split ? kt_total : kt0 + kt_per_split;
    const int tiles = kt1 > kt0 ? kt1 - kt0 : 0;

    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, warp = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int xr_local = 64 * wg + 16 * warp + 2 * g;  // this thread's rows in the tile
    const int xrow = m0 + xr_local;
    auto load = [&](int i) {
        if (i < tiles) op.load(base + (i % S) * STAGE, m0, n0, (kt0 + i) * BK, tid);
        gd::cp_commit();
    };

    float acc[32], u[X3 ? 32 : 1], v[X3 ? 32 : 1];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = 0.f;
    if constexpr (X3) {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            u[i] = 0.f;
            v[i] = 0.f;
        }
    }

#pragma unroll
    for (int s = 0; s < S - 1; ++s) load(s);
    gd::cp_wait<S - 2>();
    __syncthreads();
    // Tile i's A fragments in f[i % 2], made while tile i - 1 is multiplied.
    unsigned f0[2][4][4], f1[2][4][4];  // [big, small][k8 step][register]
    if (tiles > 0) {
        y_convert<X3>(conv0, base + DX, op.ymode, tid);
        x_fragments<X3>(base, op.xmode, xr_local, t, f0[0], f0[1]);
    }
    gd::fence_proxy_async();
    __syncthreads();

    auto step = [&](int i, const unsigned (&f)[2][4][4], unsigned (&next)[2][4][4]) {
        const unsigned cv = conv0 + (i & 1) * CONV;
        gd::wg_fence();
        if constexpr (X3) {
            gd::fence_regs(u);
            gd::fence_regs(v);
#pragma unroll
            for (int s = 0; s < 4; ++s) wgmma_m64n64k8_rs(u, f[0][s], gd::desc(cv + 32 * s), s);
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                wgmma_m64n64k8_rs(v, f[0][s], gd::desc(cv + DY + 32 * s), 1);
                wgmma_m64n64k8_rs(v, f[1][s], gd::desc(cv + 32 * s), 1);
            }
        } else {
            gd::fence_regs(acc);
#pragma unroll
            for (int s = 0; s < 4; ++s) wgmma_m64n64k8_rs(acc, f[0][s], gd::desc(cv + 32 * s), 1);
        }
        gd::wg_commit();
        // Tile i + 1 has landed (S - 3 later copies may be in flight), and every thread has
        // finished with tile i - 1's stage.
        gd::cp_wait<S - 3>();
        __syncthreads();
        if (i + 1 < tiles) {
            // The other buffer's readers, tile i - 1's wgmma groups, finished before the last
            // barrier of that tile.
            const unsigned st = base + ((i + 1) % S) * STAGE;
            y_convert<X3>(conv0 + ((i + 1) & 1) * CONV, st + DX, op.ymode, tid);
            gd::fence_proxy_async();
            x_fragments<X3>(st, op.xmode, xr_local, t, next[0], next[1]);
        }
        load(i + S - 1);
        gd::wg_wait<0>();
        if constexpr (X3) {
            gd::fence_regs(u);
            gd::fence_regs(v);
#pragma unroll
            for (int j = 0; j < 32; ++j) acc[j] += u[j];
        } else {
            gd::fence_regs(acc);
        }
        __syncthreads();
    };
    for (int i = 0; i < tiles; i += 2) {
        step(i, f0, f1);
        if (i + 1 < tiles) step(i + 1, f1, f0);
    }
    gd::cp_wait<0>();

    // Epilogue: accumulator 4q + 2h + e is row xrow + h, column n0 + 8q + 2t + e.
    float* Cz = C + (i64)blockIdx.z * layer;
    const unsigned long long ca = reinterpret_cast<unsigned long long>(Cz);
    const bool along_c = ccs == 1 && (ca & 7) == 0 && crs % 2 == 0;
    const bool along_r = !along_c && crs == 1 && (ca & 7) == 0 && ccs % 2 == 0;
#pragma unroll
    for (int q = 0; q < DBN / 8; ++q) {
        const int col = n0 + 8 * q + 2 * t;
        float o[2][2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float d = acc[4 * q + 2 * h + e];
                if constexpr (X3)
                    o[h][e] = (__float_as_uint(d) & 0x7f800000u) != 0x7f800000u
                                  ? d + v[4 * q + 2 * h + e]
                                  : d;
                else
                    o[h][e] = d;
            }
        if (along_c && col + 1 < N) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (xrow + h < M)
                    *reinterpret_cast<f2*>(Cz + (i64)(xrow + h) * crs + col) = f2{o[h][0], o[h][1]};
        } else if (along_r && xrow + 1 < M) {
#pragma unroll
            for (int e = 0; e < 2; ++e)
                if (col + e < N)
                    *reinterpret_cast<f2*>(Cz + xrow + (i64)(col + e) * ccs) = f2{o[0][e], o[1][e]};
        } else {
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    if (xrow + h < M && col + e < N)
                        Cz[(i64)(xrow + h) * crs + (i64)(col + e) * ccs] = o[h][e];
        }
    }
}

}  // namespace sgw

extern "C" __global__ void __launch_bounds__(256) sgemm_wg_pack(int R, int K, const float* X,
                                                                i64 sr, i64 sk, float* P, int Rp,
                                                                int Kp, int x3) {
    GD_AFTER_PREVIOUS();
    sgw::pack(R, K, X, sr, sk, P, Rp, Kp, x3);
}

#define SGW_ENTRY(NAME, X3, BN)                                                                \
    extern "C" __global__ void __launch_bounds__(sgw::NT, 1)                                    \
        NAME(int M, int N, int K, const float* __restrict__ PA, const float* __restrict__ PB, \
             int Kp, float* __restrict__ C, i64 ldc, int kt_per_split) {                       \
        GD_AFTER_PREVIOUS();                                                                  \
        sgw::gemm<X3, BN>(M, N, K, PA, PB, Kp, C, ldc, kt_per_split);                         \
    }

SGW_ENTRY(sgemm_wg_tf32x3_128x128, true, 128)
SGW_ENTRY(sgemm_wg_tf32_128x256, false, 256)

#define SGW_DIRECT(NAME, X3, MINB)                                                             \
    extern "C" __global__ void __launch_bounds__(sgw::NT, MINB)                                 \
        NAME(int M, int N, int K, const float* __restrict__ X, i64 xr, i64 xk,                 \
             const float* __restrict__ Y, i64 yr, i64 yk, float* __restrict__ C, i64 crs,       \
             i64 ccs, i64 layer, int kt_per_split) {                                           \
        GD_AFTER_PREVIOUS();                                                                    \
        sgw::direct<X3>(M, N, K, X, xr, xk, Y, yr, yk, C, crs, ccs, layer, kt_per_split);       \
    }

SGW_DIRECT(sgemm_wg_tf32x3_128x64, true, 1)
SGW_DIRECT(sgemm_wg_tf32_128x64, false, 1)

#endif
