// ozaki.cu -- f64 and f32 products on Hopper's INT8 tensor cores (Ozaki scheme II, sm_90a):
// exact integer products of scaled operands, modulo a set of small coprime moduli, rebuilt by
// the Chinese remainder theorem.
//
// Compiled by NVRTC with `--gpu-architecture=sm_90a --std=c++17`; includes common.cuh and the
// headers of the cp.async copies, wgmma and the TMA bulk copies (all spliced in by the crate).
// Everything lives in namespace `oz` or carries an `ozaki_` prefix.
//
// THE SCHEME. For C = op(A) (M x K) * op(B) (K x N), with X = op(A) and Y = op(B)^T (N x K):
//   1. ozaki_scale_*: per row i of X a power of two 2^s_i, per row j of Y 2^t_j: the larger
//      of the shift that puts the row's largest magnitude in [2^(bits-1), 2^bits) (bits_a
//      for X, bits_b for Y, with K * 2^(bits_a + bits_b) <= M / 4) and the largest that keeps
//      the row's squared 2-norm within the host's bound (which leaves room for rounding to
//      integers), capped below 2^61 per element; a zero row gets 0, a row holding Inf or NaN
//      FLAG. Either way every integer row has 2-norm at most sqrt(M/4) (by its largest
//      magnitude: sqrt(K) * 2^bits, which needs K * 4^max(bits_a, bits_b) <= M/4; the host
//      keeps bits_a = bits_b), so by Cauchy-Schwarz |X'Y'^T| <= M/4. A row whose elements span many binades keeps many more bits by its
//      norm than by its largest element.
//   2. ozaki_split_*: X' = rint(X * 2^s) and Y' = rint(Y * 2^t), integers of magnitude at most
//      2^61, written as their balanced residues (in [-m/2, m/2)) modulo each modulus m_l into
//      K-major int8 panels P[l] of Rp x Kp bytes in the GEMM's tiles (see PANELS; zero
//      padding; FLAG rows are zero).
//   3. ozaki_gemm: for every modulus l, the exact int32 product of the residue
//      panels (|sum| <= K * 2^14 <= 2^30 for K <= 65536), reduced modulo m_l into the byte
//      matrix R[l][M][N] (row-major, residues in [0, m_l)).
//   4. ozaki_rebuild_*: C'_ij = the integer congruent to the residues R[l]_ij modulo
//      M = prod m_l that lies in (-M/2, M/2) (from the residues of pairs of moduli, see
//      Consts), which is X'Y'^T exactly because |X'Y'^T| <= M / 4 (step 1); then
//      C_ij = C'_ij * 2^-(s_i + t_j),
//      rounded once (to nearest, ties to even) to the output type. An output whose row of X or
//      row of Y is FLAG is the plain dot product of the inputs instead (so Inf and NaN give
//      the pattern of the native product).
//
// ACCURACY. The only errors are the rounding of X' and Y' to integers (at most 2^-bits of
// the row's largest magnitude per element, and about 2^-(log2(M/4)/2) of the row's 2-norm
// where that is finer, but never finer than 2^-60 of the largest magnitude: the cap, which
// binds from about 16 moduli) and the final rounding; more moduli, more bits.
// A result in the subnormal range may be rounded twice (the integer rounding, then ldexp).
//
// ---------------------------------------------------------------------------------------------
// LAUNCH TABLE  (block = blockDim, smem = dynamic shared memory bytes)
// ---------------------------------------------------------------------------------------------
// @launch ozaki_gemm tile=192x256 block=384 smem=230464 bk=128 minsm=90
// @launch ozaki_gemm_mma tile=128x128 block=256 smem=98432 bk=128 minsm=80
//
// ozaki_scale_{d,s}(int R, int K, const T* X, i64 sr, i64 sk, int bits, double bound,
//      int* E): element (r, k) of the R x K operand at X[r*sr + k*sk]; when sr == 1 and
//      sk != 1 (rows along the contiguous index) block (x', y') with x' <= 32 rows a block
//      and y' <= 32 (which sets the order of a row's sums), grid (ceil(R/x'), 1), else block
//      (32, 8) and grid (ceil(R/32), y) with y from 1 to 4; writes E[r] for r < R.
// ozaki_split_{d,s}(int R, int K, const T* X, i64 sr, i64 sk, const int* E, signed char* P,
//      int Rp, int Kp, int TM, Consts c): block (32, 8), grid (Kp/64, any y <= Rp/32: the
//      kernel loops over the rest); P holds c.count * Rp * Kp bytes and is written whole (Rp a
//      multiple of TM, TM of 32: 192 for X and 256 for Y for ozaki_gemm, 128 for both for
//      ozaki_gemm_mma; Kp of 128), in the GEMM's tiles (see PANELS). The residues come from
//      double arithmetic; ozaki_split_int_{d,s}, with the same arguments and the same bytes,
//      make them in 32-bit integers, for devices whose FP64 is slow.
// ozaki_gemm(int M, int N, const signed char* PA, const signed char* PB, int Mp, int Np,
//      int Kp, unsigned char* R, Consts c, int pair_m, int group, int z0, const int* gate,
//      int lo, int hi): layers z0 .. c.count - 1 (0 <= z0 < c.count), and nothing where
//      gate is not null and the guard's flags there do not hold (see `gate_holds`); PA, PB
//      the panels of step 2 for X (Mp x Kp, TM = 192) and Y (Np x Kp, TM = 256) (Kp a
//      positive multiple of 128, 16-byte aligned);
//      clusters of two blocks (compiled in): pair_m != 0 pairs tile rows (Mp a multiple of
//      384 and Np of 256), else tile columns (Mp a multiple of 192 and Np of 512); group
//      tile rows (a positive even count where pair_m) take their tiles together, column by
//      column (the grouped order: they share Y's panels in L2); the units of work are the
//      pairs of tiles of every layer, (Mp/192) * (Np/256) / 2 * (c.count - z0); grid
//      (2 * clusters, 1, 1), any number of clusters (each loops over every clusters-th unit;
//      one more than can be resident at once leaves it idle until one finishes); writes
//      R[l][M][N] whole for each of its layers l. The host MUST raise the dynamic shared
//      memory limit to the table's smem first.
// ozaki_gemm_mma(int M, int N, const signed char* PA, const signed char* PB, int Mp, int Np,
//      int Kp, unsigned char* R, Consts c, int z0, const int* gate, int lo, int hi): the INT8
//      GEMM on mma.sync (sm_80 on), from panels in tiles of 128 rows (TM = 128 for X and Y;
//      Mp, Np multiples of 128), layers and gate as ozaki_gemm's; grid ((Mp/128) * (Np/128),
//      1, c.count - z0), one block per tile and layer; writes R[l][M][N] whole for each of
//      its layers l. The host MUST raise the dynamic shared memory limit to the table's smem
//      first.
// ozaki_rebuild{8,16,18}_{d,s}(int M, int N, int K, const unsigned char* R, const int* EA,
//      const int* EB, T* C, i64 ldc, const T* A, i64 asr, i64 ask, const T* B, i64 bsr,
//      i64 bsk, Consts c): C (M x N at ldc) from step 3 (the entry of the fewest moduli
//      that is at least c.count); X's element (i, k) at
//      A[i*asr + k*ask], Y's element (j, k) at B[j*bsr + k*bsk] (read only for FLAG rows);
//      any grid (rows on y, quads of columns on x, each looping over the rest).
// The Karatsuba form of a complex product's (see THE KARATSUBA FORM below):
// ozaki_pair_shifts(int Nc, int layers, int* E, int ldE): after the scaling of Y, the shifts of
//      rows 2j and 2j + 1 (j < Nc) of each of `layers` layers made the smaller of the two.
// ozaki_ksplit_{d,s}(int R, int K, const T* X, i64 sr, i64 sq, i64 sd, const int* E, int es,
//      signed char* P, int Rp, int Kp, int TM, Consts c): the panels of the real parts, the
//      imaginary parts and their sums of R x K complex elements, block (32, 8), grid (Kp/32,
//      any y <= Rp/32); P holds 3 * c.count * Rp * Kp bytes, written whole.
// ozaki_krebuild{8,16,18}_{d,s}: as ozaki_rebuild*, with N = 2 Nc, from R holding the three
//      products' residues (each c.count layers of M x Nc).
// The guard's (see THE GUARD below):
// ozaki_guard_scale_{d,s}(int R, int K, const T* X, i64 sr, i64 sk, GuardScale g, int* E,
//      int ldE, int* S, double* L): as ozaki_scale_*, writing E[c * ldE + r] for each
//      candidate c < g.n, S[r] (sigma, or FLAG) and L[r] for r < R.
// ozaki_guard_rows_{d,s}(int R, int K, const T* X, i64 sr, GuardScale g, int* E, int ldE,
//      int* S, double* L, signed char* P, int Kg, int Kgp, int TM, signed char* RP, int Rp,
//      int Kp, Consts c, Consts c1, const int* refused): the two passes below at once, for rows along
//      K's contiguous index (element (r, k) at X[r*sr + k]): one block of ROWS_NT = 256
//      threads per row of Rp (grid (Rp, 1, 1)), with round_up(K * sizeof(T), 16) + Kgp bytes
//      of dynamic shared memory (the host raises the limit); writes what ozaki_guard_scale_*
//      writes and the layer of magnitudes that ozaki_magnitudes_* writes, P in the GEMM's
//      tiles of TM rows (Rp x Kgp bytes); where RP is not null (refused then is not), also
//      the residues that ozaki_split_* writes for the early refusal's lead (see
//      `settle_lead`) into RP: for c (the first candidate, E's first layer), or c1 (the next,
//      E's second) where the lead is a later one; nothing where refused is not null and
//      *refused.
// ozaki_magnitudes_{d,s}(int R, int K, const T* X, i64 sr, i64 sk, const int* S,
//      signed char* PM, int Kg, int Kgp, const int* E, signed char* P, int Rp, int Kp,
//      int TM, const int* refused, Consts c, Consts c1): the guard's layer of magnitudes of the first Kg
//      elements of k into PM (Rp x Kgp bytes, laid out as ozaki_split_* lays a layer out);
//      where P is not null, from the same read of X, also the residues ozaki_split_* writes
//      for the early refusal's lead (with E's first layer and c, or its second and c1) into P
//      (Rp x Kp a layer). The grid is the split's for Kgp where P is null, for Kp where not.
//      Nothing where *refused.
// ozaki_guard_refuse_{d,s}(int M, int N, int Kg, const T* X, i64 xsr, i64 xsk, const T* Y,
//      i64 ysr, i64 ysk, Guard g, int* refused): blocks of up to 1024 threads, each testing one
//      element (see `refuse`); sets *refused to 1 where one fails at every candidate, and
//      else, in the flags that follow it (FLAG_INTS, which the host zeroes), the lead (see
//      `settle_lead`), after the scaling of both operands.
// ozaki_guard_refuse_rows_{d,s}(int M, int N, int K, int Kg, const T* X, i64 xsr, i64 xsk,
//      const T* Y, i64 ysr, i64 ysk, int x_rows, int y_rows, Guard g, GuardScale gs, int*
//      refused): the same, before the one-pass scaling of X (x_rows) or Y (y_rows), whose
//      rows it gathers itself (see `refuse_rows`); blocks of ROWS_NT threads with
//      round_up(K * sizeof(T), 16) + Kgp bytes of dynamic shared memory (the host raises the
//      limit), after the scaling of any operand not gathered.
// ozaki_guard_gemm(int M, int N, const signed char* PA, const signed char* PB, int Mp, int Np,
//      int Kp, int pair_m, int group, int* S, const int* refused) and
//      ozaki_guard_gemm_mma(int M, int N, const signed char* PA, const signed char* PB, int Mp,
//      int Np, int Kp, int* S, const int* refused): as the two GEMMs for one layer (units and
//      grid for c.count = 1), writing the int32 product into S (M x N, row-major) instead of
//      residues; nothing where *refused.
// ozaki_guard_keys(Guard g, int M, int Mp, int N, int Np, Key* KX, Key* KY, const int* refused):
//      one thread per row of X (Mp, padding included) and of Y (Np): KX[i], KY[j] for the
//      candidate refused[F_LEAD], the early refusal's lead (see `keys`); nothing where
//      *refused.
// ozaki_guard_sure_gemm(int M, int N, const signed char* PA, const signed char* PB, int Mp,
//      int Np, int Kp, int pair_m, int group, const Key* KX, const Key* KY, int* unsure,
//      const int* refused) and ozaki_guard_sure_gemm_mma(int M, int N, const signed char*
//      PA, const signed char* PB, int Mp, int Np, int Kp, const Key* KX, const Key* KY, int*
//      unsure, const int* refused): as the guard's GEMMs, but in place of S, *unsure = 1
//      where some element is not surely within the lead candidate's bound by its keys (see
//      `keys`); else *unsure is left as it is (the host zeroes it); nothing where *refused.
// ozaki_guard_judge(int M, int N, const int* S, int tm, int tn, Guard g, const int* refused):
//      one block of 256 threads per strip of rows of a tm x tn tile of the GEMM's (grid:
//      tiles x strips, tile = row * g.tiles_n + col); writes g.need[tile * strips + strip] for
//      every strip; nothing where *refused.
// ---------------------------------------------------------------------------------------------
//
// PANELS. The residues of modulus l are panel l of P, Rp x Kp bytes in tiles of TM rows x 128
// k, tile (tr, kt) at ((tr * Kp/128) + kt) * TM * 128: row rr of a tile at rr * 128, its 16-byte
// chunk j at (j ^ (rr % 8)) * 16. A tile is thus one contiguous block, already in the 128-byte
// swizzle the GEMM's shared-memory descriptors read, and one bulk copy moves it.
//
// DESIGN of ozaki_gemm: block tile 192 x 256, three warpgroups (rows 0-63, 64-127, 128-191),
// each issuing wgmma.m64n256k32 (s8 inputs, s32 accumulators) with both operands in shared
// memory; a 128-wide K tile is 128 bytes a row, four k32 steps of 32 bytes. Operand tiles
// come by bulk copy (cp.async.bulk, the TMA unit) into 4 stages, each stage with a "full"
// mbarrier (the copies' bytes) and an "empty" one (every consumer warp of the cluster done
// with it). The two blocks of a cluster share one operand tile, Y's when they hold adjacent
// tile rows (pair_m) or X's when adjacent tile columns: each block copies half of it to both
// blocks' shared memory at once (multicast), so the pair reads it from L2 once; this takes a
// quarter off the L2 traffic, which the INT8 tensor cores otherwise outrun. Warp 0 issues
// the copies, refilling a stage as soon as both blocks have released it. The grid is
// persistent (as many clusters as fit at once): each cluster loops over pairs of tiles of
// every layer, and the copies run ahead across them, so a tile's epilogue overlaps the next
// one's first copies, and no block waits to be launched.
#include "common.cuh"
#include "cp_async.cuh"
#include "wgmma.cuh"
#include "tma.cuh"

#define OZ_DEV GD_DEV


namespace oz {

constexpr int MAX_MODULI = 18, PAIRS = MAX_MODULI / 2, LIMBS = 5;
constexpr int BK = 128;  // the panels' K tile: int8 elements = bytes
constexpr int FLAG = -2147483647 - 1;  // a row holding Inf or NaN
constexpr double ROUND = 0x1.8p52;     // adding it rounds |z| < 2^51 to an integer (see panels)

// The moduli and the constants of the split and the reconstruction, made by the host
// (src/engine/ozaki/scheme.rs, whose #[repr(C)] twin must match this layout: 1008 bytes).
struct Consts {
    int count;   // moduli in use, 2 .. MAX_MODULI
    int unused;
    unsigned moduli[MAX_MODULI];               // pairwise coprime, 173 .. 256
    unsigned p21[MAX_MODULI];                  // 2^21 mod m
    unsigned p42[MAX_MODULI];                  // 2^42 mod m
    unsigned off[MAX_MODULI];                  // the multiple of m in (2^27, 2^27 + m]
    double p32[MAX_MODULI];                    // 2^32 mod m
    double recip[MAX_MODULI];                  // 1 / m, rounded
    unsigned long long magic[MAX_MODULI];      // ceil(2^40 / m)
    // The moduli in pairs (m_2p, m_2p+1) (the last alone, with e = 0 and m_2p+1 = 1, when
    // count is odd): T = r_2p * e[p][0] + r_2p+1 * e[p][1] < 2^25 is congruent to the pair's
    // residue modulo m_2p * m_2p+1, and W_p = (M/mm) * ((M/mm)^-1 mod mm), mm the pair's
    // product, in 32-bit limbs: then sum_p T_p * W_p is congruent to C' modulo M.
    unsigned e[PAIRS][2];
    unsigned w[PAIRS][LIMBS];
    unsigned nm[LIMBS];  // 2^(32 n) - M in n limbs, n = 2 up to 8 moduli, 4 up to 16, else 5
    double inv_m;                              // 1 / M, rounded
};
static_assert(sizeof(Consts) == 1008, "the host's layout");

// THE GUARD (the default precision's; src/engine/ozaki/guard.rs states and models it). With x =
// a_i * 2^s and y = b_j * 2^t rounded to integers (errors at most 1/2, zero where the element
// is), |2^-(s+t) sum x'y' - sum ab| <= E_ij = 2^-t |a_i|_1 / 2 + 2^-s |b_j|_1 / 2 + K 2^-(s+t) / 4.
// A lower bound of native's sum |a||b| is the exact product of the magnitudes truncated to 7
// bits below each row's largest, floor(|x| * 2^sigma) <= 127: an element passes at a count when
// E_ij * 2^(sigma_i + tau_j) <= gu * sum_k mag_a * mag_b (gu = GUARD * u). ozaki_guard_scale_*
// gives each row its shift for each candidate count, sigma and |row|_1 * 2^sigma (rounded up),
// ozaki_magnitudes_* the magnitude panels (ozaki_guard_rows_* both at once, for rows along
// the contiguous index), ozaki_guard_refuse_* an early verdict from a few elements' exact sums
// where one of them fails at every count (see `refuse`), and else the lead: the latest of the
// candidates they first pass at, or a later one where their spread says the product needs it
// (`settle_lead`),
// ozaki_guard_gemm* the magnitudes' exact product S (int32), and ozaki_guard_judge each tile's
// int in `need`: the largest, over its elements, index of the first candidate each passes at
// (n: none). Before those two, ozaki_guard_sure_gemm* runs the same product and, in its
// epilogue, tests each element against a sufficient condition of passing at the lead
// candidate made of one key per row (`keys`): where every element meets it, every verdict is
// the lead, and the host runs neither the guard's GEMM nor its judge. The passes that split
// early split for the lead (or the next candidate, where the lead is later still).
constexpr int MAX_CANDIDATES = 4;
// The host's src/engine/ozaki/launch.rs `GuardScale` (56 bytes).
struct GuardScale {
    int n;                        // candidate counts, 1 .. MAX_CANDIDATES
    int bits[MAX_CANDIDATES];     // each one's scaling bits
    int unused;
    double bound[MAX_CANDIDATES]; // and norm bound
};
static_assert(sizeof(GuardScale) == 56, "the host's layout");
// The host's `GuardArgs` (88 bytes).
struct Guard {
    const int* ea;     // ea[c * lde_a + i]: row i of X's shift for candidate c
    const int* eb;
    const int* sa;     // sigma of row i of X, FLAG for a zero row or one holding Inf or NaN
    const int* sb;
    const double* la;  // |row i of X|_1 * 2^sigma, rounded up
    const double* lb;
    int* need;         // need[tile_row * tiles_n + tile_col], one int per tile
    int lde_a, lde_b, tiles_n, k, n, unused;
    double gu;         // GUARD * u
};
static_assert(sizeof(Guard) == 88, "the host's layout");
// A row's key for the guard's sure test (see `keys`).
struct Key {
    float w, p;
};

// The guard's ints (the host's FLAGS section, zeroed before the early refusal): the early
// refusal's verdict, the sure test's, the lead (see `settle_lead`), the early refusal's
// blocks done, and for each candidate the largest of its elements' ratios (see
// `record_sample`; float bits) and 0x7fffffff minus the bits of the smallest (0: none).
constexpr int F_REFUSED = 0, F_UNSURE = 1, F_LEAD = 2, F_DONE = 3, F_HI = 4;
constexpr int F_LO = F_HI + MAX_CANDIDATES, FLAG_INTS = F_LO + MAX_CANDIDATES;

// The candidate the early split splits for: the first, or the next where the lead is a later
// one (the host passes the constants of those two).
OZ_DEV int lead_of(const int* flags) { return min(flags[F_LEAD], 1); }

// Whether a GEMM the host enqueued before reading the guard's verdict computes what the
// verdict asks for (see ozaki_gemm's gate): nothing refused, every element surely within the
// lead's bound, and the lead within [lo, hi], the leads whose residues the panels hold.
OZ_DEV bool gate_holds(const int* flags, int lo, int hi) {
    const int lead = flags[F_LEAD];
    return flags[F_REFUSED] == 0 && flags[F_UNSURE] == 0 && lo <= lead && lead <= hi;
}

// x mod m for x < 2^31 + 2^10 and 173 <= m <= 256: q = floor(x * magic / 2^40) is floor(x / m)
// (magic = 2^40/m + e, 0 <= e < 1: the excess x*e/2^40 < 2^-8.99 is below 1/m minus the
// largest fraction (m-1)/m of x/m for m <= 255; m = 256 has magic = 2^32 exactly). As
// magic = 2^32 + lo (lo < 0.49 * 2^32), x * magic / 2^40 = (x + x*lo/2^32) / 2^8, and the
// nested floors give the same q: one multiply-high, an add and a shift (x + umulhi < 2^32).
OZ_DEV unsigned umod(unsigned x, unsigned m, unsigned long long magic) {
    const unsigned q = (x + __umulhi(x, (unsigned)magic)) >> 8;
    return x - q * m;
}

OZ_DEV double to_t(unsigned long long top, double) { return __ull2double_rn(top); }
OZ_DEV float to_t(unsigned long long top, float) { return __ull2float_rn(top); }
// ldexp(x, e): where 2^e is a normal number, x * 2^e is the same single rounding of the
// exact value (it rounds only below the normal range or overflows, as ldexp does).
OZ_DEV double scale_t(double x, int e) {
    return (e >= -1022 && e <= 1023) ? x * __longlong_as_double((long long)(e + 1023) << 52)
                                     : ldexp(x, e);
}
OZ_DEV float scale_t(float x, int e) {
    return (e >= -126 && e <= 127) ? x * __int_as_float((e + 127) << 23) : ldexpf(x, e);
}

OZ_DEV bool finite(double v) {
    return (__double_as_longlong(v) & 0x7ff0000000000000ll) != 0x7ff0000000000000ll;
}

// A row's size, gathered one element at a time: its largest magnitude mx, whether it holds
// Inf or NaN, and its squared 2-norm as s * 4^anchor, s the sum of (|x| * 2^-anchor)^2 with
// anchor = max(-1000, ilogb of the largest |x| so far) (each term below 4; a larger binade
// rescales s by a power of four, exactly or down to nothing).
struct RowSize {
    double mx = 0.0, s = 0.0;
    double inv = 0x1p1000, cap = 0x1p-999;  // 2^-anchor and 2^(anchor + 1)
    int anchor = -1000, bad = 0;

    OZ_DEV void add(double v) {
        const double x = fabs(v);
        bad |= !(x <= 0x1.fffffffffffffp1023);  // Inf or NaN
        mx = fmax(mx, x);
        if (x >= cap && x <= 0x1.fffffffffffffp1023) grow(x);
        const double r = x * inv;
        s = fma(r, r, s);
    }
    // A larger binade: s rescaled to it.
    OZ_DEV void grow(double x) {
        const int e = ilogb(x);
        s = scale_t(s, 2 * (anchor - e));
        anchor = e;
        inv = scale_t(1.0, -e);
        cap = scale_t(1.0, e + 1);
    }
    static constexpr bool L1 = false;  // no 1-norm beside (GuardSize has one)
    // Elements k0, k0 + step, ... below K of the row at x (k-stride sk), eight loads at a time,
    // each given to f.
    template <typename T, typename F>
    static OZ_DEV void each(const T* __restrict__ x, i64 sk, int k0, int step, int K, F&& f) {
        int k = k0;
        for (; k + 7 * step < K; k += 8 * step) {
            double v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = (double)x[(i64)(k + j * step) * sk];
#pragma unroll
            for (int j = 0; j < 8; ++j) f(v[j]);
        }
        for (; k < K; k += step) f((double)x[(i64)k * sk]);
    }
    template <typename T>
    OZ_DEV void add_row(const T* __restrict__ x, i64 sk, int k0, int step, int K) {
        each(x, sk, k0, step, K, [&](double v) { add(v); });
    }
    // Takes in another part of the same row (s, anchor, mx and bad only: add no elements
    // after a merge, inv and cap are left as they were).
    OZ_DEV void merge(double omx, double os, int oanchor, int obad) {
        const int a = max(anchor, oanchor);
        s = scale_t(s, 2 * (anchor - a)) + scale_t(os, 2 * (oanchor - a));
        anchor = a;
        mx = fmax(mx, omx);
        bad |= obad;
    }
    OZ_DEV void merge_lane(int o) {
        const double omx = __shfl_xor_sync(0xffffffffu, mx, o);
        const double os = __shfl_xor_sync(0xffffffffu, s, o);
        const int oa = __shfl_xor_sync(0xffffffffu, anchor, o);
        const int ob = __shfl_xor_sync(0xffffffffu, bad, o);
        merge(omx, os, oa, ob);
    }

    // The row's shift: the larger of two that keep every product of the scaled operands'
    // integer rows below M/4 (the other operand's rows scaled by either), capped so that
    // |x| * 2^shift < 2^61:
    //  - by its largest magnitude: mx * 2^shift in [2^(bits-1), 2^bits), with
    //    K * 4^bits <= M/4 (so |row| <= sqrt(K) * 2^bits <= sqrt(M/4));
    //  - by its 2-norm, where bound > 0: the largest shift with |row * 2^shift|^2 <= bound,
    //    where the host made (sqrt(bound) + sqrt(K)/2)^2 < M/4 with room for the rounding of
    //    s (rounding the row to integers adds at most sqrt(K)/2 to its norm).
    // Then |C'_ij| <= |row_i| |row_j| <= M/4 (Cauchy-Schwarz) for every pair of rows.
    OZ_DEV int shift(int bits, double bound) const {
        if (bad) return FLAG;
        if (mx == 0.0) return 0;
        const int e = ilogb(mx);
        const int by_max = bits - 1 - e;
        if (!(bound > 0.0)) return by_max;
        // The largest t with s * 4^(anchor + t) <= bound, from a guess within one.
        int t = ((ilogb(bound) - ilogb(s)) >> 1) - anchor;
        while (scale_t(s, 2 * (anchor + t + 1)) <= bound) ++t;
        while (scale_t(s, 2 * (anchor + t)) > bound) --t;
        return max(by_max, min(t, 60 - e));
    }
};

// A row's size with its 1-norm beside, for the guard: l1 = sum |x| * 2^-anchor, rescaled
// with s when the anchor grows (exactly, or down to nothing below 2^-1074 of the anchor).
struct GuardSize : RowSize {
    static constexpr bool L1 = true;
    double l1 = 0.0;
    OZ_DEV void add(double v) {
        const int a = anchor;
        RowSize::add(v);
        if (anchor != a) l1 = scale_t(l1, a - anchor);
        l1 += fabs(v) * inv;
    }
    // Eight elements at once: RowSize's arithmetic with the anchor raised once to their
    // largest binade, and their terms summed in two chains of four (a shorter chain of
    // dependent operations than eight `add`s).
    OZ_DEV void add8(const double (&v)[8]) {
        double x[8];
        bool b = false;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            x[j] = fabs(v[j]);
            b |= !(x[j] <= 0x1.fffffffffffffp1023);  // Inf or NaN
        }
        if (b) {
            bad = 1;  // the row is FLAG whatever else it holds
            return;
        }
        const double m = fmax(fmax(fmax(x[0], x[1]), fmax(x[2], x[3])),
                              fmax(fmax(x[4], x[5]), fmax(x[6], x[7])));
        mx = fmax(mx, m);
        if (m >= cap) {
            const int a = anchor;
            grow(m);
            l1 = scale_t(l1, a - anchor);
        }
        double s0 = 0.0, s1 = 0.0, l0 = 0.0, l2 = 0.0;
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
            const double y0 = x[j] * inv, y1 = x[j + 1] * inv;
            s0 = fma(y0, y0, s0);
            s1 = fma(y1, y1, s1);
            l0 += y0;
            l2 += y1;
        }
        s += s0 + s1;
        l1 += l0 + l2;
    }
    template <typename T>
    OZ_DEV void add_row(const T* __restrict__ x, i64 sk, int k0, int step, int K) {
        int k = k0;
        for (; k + 7 * step < K; k += 8 * step) {
            double v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = (double)x[(i64)(k + j * step) * sk];
            add8(v);
        }
        for (; k < K; k += step) add((double)x[(i64)k * sk]);
    }
    OZ_DEV void merge(double omx, double os, int oanchor, int obad, double ol1) {
        const int a = max(anchor, oanchor);
        l1 = scale_t(l1, anchor - a) + scale_t(ol1, oanchor - a);
        RowSize::merge(omx, os, oanchor, obad);
    }
    OZ_DEV void merge_lane(int o) {
        const double ol1 = __shfl_xor_sync(0xffffffffu, l1, o);
        const double omx = __shfl_xor_sync(0xffffffffu, mx, o);
        const double os = __shfl_xor_sync(0xffffffffu, s, o);
        const int oa = __shfl_xor_sync(0xffffffffu, anchor, o);
        const int ob = __shfl_xor_sync(0xffffffffu, bad, o);
        merge(omx, os, oa, ob, ol1);
    }
};

// What the scaling writes of a row: its shift (ozaki_scale_*) ...
struct ShiftOut {
    int* E;
    int bits;
    double bound;
    static constexpr int PARTS = 1;  // one part: see GuardOut
    OZ_DEV int part(int, int r, const RowSize& z) const { return E[r] = z.shift(bits, bound); }
};
// The guard's magnitude shift of a row: its largest magnitude times 2^sigma in [2^6, 2^7);
// FLAG for a zero row or one holding Inf or NaN.
OZ_DEV int sigma_of(const RowSize& z) { return z.bad || z.mx == 0.0 ? FLAG : 6 - ilogb(z.mx); }
// ... or, for the guard, its shift for each candidate count, its sigma and |row|_1 * 2^sigma,
// rounded upwards (0 for a row without sigma).
OZ_DEV double scaled_norm(const GuardSize& z, int sigma) {
    if (sigma == FLAG) return 0.0;
    // The sum's rounding (at most K * 2^-53 of it) and the terms lost below 2^-1074 of the
    // anchor are within the margins.
    return fma(scale_t(z.l1, z.anchor + sigma), 1.0 + 0x1p-30, 0x1p-30);
}
// A row's shift for candidate count c < MAX_CANDIDATES, its bits and bound picked by selects
// rather than by indexing with c, so that threads of a warp holding the same row, each with
// its own c, compute their shifts at once rather than one after another.
OZ_DEV int candidate_shift(const GuardSize& z, const GuardScale& g, int c) {
    int bits = g.bits[0];
    double bound = g.bound[0];
#pragma unroll
    for (int i = 1; i < MAX_CANDIDATES; ++i)
        if (c == i) {
            bits = g.bits[i];
            bound = g.bound[i];
        }
    return z.shift(bits, bound);
}
struct GuardOut {
    int* E;
    int ldE;
    int* S;
    double* L;
    const GuardScale& g;
    // What is written of a row comes in PARTS parts, which threads holding the same z share
    // (`part`): part c < MAX_CANDIDATES is candidate c's shift (written where c < g.n,
    // returned either way), part MAX_CANDIDATES the row's sigma and norm, and any other
    // part nothing.
    static constexpr int PARTS = MAX_CANDIDATES + 1;
    OZ_DEV int part(int p, int r, const GuardSize& z) const {
        if (p < MAX_CANDIDATES) {
            const int e = candidate_shift(z, g, p);
            if (p < g.n) E[(i64)p * ldE + r] = e;
            return e;
        }
        if (p == MAX_CANDIDATES) {
            const int sigma = sigma_of(z);
            S[r] = sigma;
            L[r] = scaled_norm(z, sigma);
        }
        return 0;
    }
};

template <typename Z, typename T, typename Out>
OZ_DEV void scale(int R, int K, const T* __restrict__ X, i64 sr, i64 sk, const Out& out) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    if (sk != 1 && sr == 1) {
        // Rows along the contiguous index: thread column tx is row r0 + tx (blockDim.x rows a
        // block), the block's blockDim.y (at most 32) rows of threads take every
        // blockDim.y-th k.
        __shared__ double part_mx[32][33], part_s[32][33];
        __shared__ int part_a[32][33], part_bad[32][33];
        __shared__ double part_l1[Z::L1 ? 32 : 1][33];
        const int r = blockIdx.x * blockDim.x + tx, ny = blockDim.y;
        Z z;
        if (r < R) z.add_row(X + (i64)r * sr, sk, ty, ny, K);
        part_mx[ty][tx] = z.mx;
        part_s[ty][tx] = z.s;
        part_a[ty][tx] = z.anchor;
        part_bad[ty][tx] = z.bad;
        if constexpr (Z::L1) part_l1[ty][tx] = z.l1;
        __syncthreads();
        if (ty == 0 && r < R) {
            for (int i = 1; i < ny; ++i) {
                if constexpr (Z::L1)
                    z.merge(part_mx[i][tx], part_s[i][tx], part_a[i][tx], part_bad[i][tx], part_l1[i][tx]);
                else
                    z.merge(part_mx[i][tx], part_s[i][tx], part_a[i][tx], part_bad[i][tx]);
            }
            if constexpr (Out::PARTS == 1) out.part(0, r, z);
        }
        if constexpr (Out::PARTS > 1) {
            // The row's size back to row 0 of the parts, and its parts shared among the
            // threads of its column (ty), which read it from there. Only the column's thread
            // ty = 0 reads or writes its slots between the barrier above and the one below,
            // so row 0 is free to take the merged size.
            if (ty == 0) {
                part_mx[0][tx] = z.mx;
                part_s[0][tx] = z.s;
                part_a[0][tx] = z.anchor;
                part_bad[0][tx] = z.bad;
                if constexpr (Z::L1) part_l1[0][tx] = z.l1;
            }
            __syncthreads();
            if (r < R && ty < Out::PARTS) {
                Z w;
                w.mx = part_mx[0][tx];
                w.s = part_s[0][tx];
                w.anchor = part_a[0][tx];
                w.bad = part_bad[0][tx];
                if constexpr (Z::L1) w.l1 = part_l1[0][tx];
                for (int p = ty; p < Out::PARTS; p += ny) out.part(p, r, w);
            }
        }
    } else {
        // K along the contiguous index (or neither): a warp per row, the block's 32 rows
        // shared among gridDim.y blocks. Every lane ends with the same z (the merges are
        // symmetric), so lanes share the row's parts.
        const int r0 = blockIdx.x * 32;
#pragma unroll 1
        for (int i = blockIdx.y; i < 4; i += gridDim.y) {
            const int r = r0 + ty + 8 * i;
            Z z;
            if (r < R) z.add_row(X + (i64)r * sr, sk, tx, 32, K);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) z.merge_lane(o);
            if (tx < Out::PARTS && r < R) out.part(tx, r, z);
        }
    }
}

// The low bytes of eight words as one 8-byte word.
OZ_DEV uint2 pack8(const unsigned (&b)[8]) {
    const unsigned w0 = __byte_perm(__byte_perm(b[0], b[1], 0x0040),
                                    __byte_perm(b[2], b[3], 0x0040), 0x5410);
    const unsigned w1 = __byte_perm(__byte_perm(b[4], b[5], 0x0040),
                                    __byte_perm(b[6], b[7], 0x0040), 0x5410);
    return make_uint2(w0, w1);
}

// The residues of eight elements: layer l's 8 bytes of rint(x * 2^s) for every modulus l,
// in double arithmetic (see panels below), for devices whose FP64 runs at half the FP32
// rate (s = 0 and zeros for rows past R) ...
OZ_DEV void residues8(int s, const double* v8, signed char* p, i64 layer, const Consts& c) {
    double a[8], bm[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const double x = s == FLAG ? 0.0 : scale_t(v8[e], s);
        a[e] = fma(x, 0x1p-32, ROUND) - ROUND;
        bm[e] = fma(-a[e], 0x1p32, x) + ROUND;
    }
    // Layer l's bytes, l = 0, 1, ...
#pragma unroll
    for (int l = 0; l < MAX_MODULI; ++l, p += layer) {
        if (l < c.count) {
            const unsigned m = c.moduli[l];
            const double p32 = c.p32[l], recip = c.recip[l];
            unsigned r[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const double tm = fma(a[e], p32, bm[e]);
                const unsigned q = (unsigned)__double2loint(fma(tm - ROUND, recip, ROUND));
                r[e] = (unsigned)__double2loint(tm) - q * m;
            }
            *reinterpret_cast<uint2*>(p) = pack8(r);
        }
    }
}
struct SplitResidues {
    const int* __restrict__ E;
    const Consts& c;
    OZ_DEV void operator()(int row, const double* v8, signed char* p, i64 layer, int, int) const {
        residues8(row >= 0 ? E[row] : 0, v8, p, layer, c);
    }
};
// ... and in 32-bit integer arithmetic, for the others (see panels below).
struct SplitResiduesInt {
    const int* __restrict__ E;
    const Consts& c;
    OZ_DEV void operator()(int row, const double* v8, signed char* p, i64 layer, int, int) const {
        const int s = row >= 0 ? E[row] : 0;
        unsigned c0[8], c1[8];
        int c2[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const long long v = s == FLAG ? 0 : __double2ll_rn(scale_t(v8[e], s));
            c0[e] = (unsigned)v & 0x1fffffu;
            c1[e] = (unsigned)(v >> 21) & 0x1fffffu;
            c2[e] = (int)(v >> 42);
        }
        // Layer l's bytes, l = 0, 1, ...
#pragma unroll
        for (int l = 0; l < MAX_MODULI; ++l, p += layer) {
            if (l < c.count) {
                const unsigned m = c.moduli[l], half = (m - 1) / 2;
                const unsigned lo = (unsigned)c.magic[l];
                const unsigned p21 = c.p21[l], p42 = c.p42[l], off = c.off[l];
                unsigned b[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const unsigned y = (unsigned)c2[e] * p42 + c1[e] * p21 + c0[e] + off;
                    const unsigned x = y + half;
                    const unsigned q = (x + __umulhi(x, lo)) >> 8;
                    b[e] = y - q * m;
                }
                *reinterpret_cast<uint2*>(p) = pack8(b);
            }
        }
    }
};
// The guard's magnitude of x: floor(|x| * 2^sigma), 0 to 127 for a row's elements (0 for a
// row without sigma).
OZ_DEV unsigned magnitude(double x, int sigma) {
    return sigma == FLAG ? 0u : __double2uint_rz(scale_t(fabs(x), sigma));
}
// The guard's writer: one layer of magnitudes.
struct SplitMagnitudes {
    const int* __restrict__ S;
    OZ_DEV void operator()(int row, const double* v8, signed char* p, i64, int, int) const {
        const int sg = row >= 0 ? S[row] : FLAG;
        unsigned b[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) b[e] = magnitude(v8[e], sg);
        *reinterpret_cast<uint2*>(p) = pack8(b);
    }
};

// Byte kk (a multiple of 4) of row `row` of a panel layer (Kp wide, in tiles of TM rows), in
// the tiled and swizzled layout (see PANELS): the bytes from kk to the next multiple of 8 (8
// of them where kk is a multiple of 8, as the real split writes, 4 otherwise, as the
// Karatsuba split writes) stay together within one 16-byte chunk.
OZ_DEV signed char* panel_at(signed char* P, int row, int kk, int Kp, int TM) {
    const int tr = row / TM;
    return P + ((i64)tr * (Kp >> 7) + (kk >> 7)) * TM * 128 + (row - tr * TM) * 128 +
           ((((kk & 127) >> 4) ^ (row & 7)) << 4) + (kk & 15);
}

// The guard's magnitudes (the first Kg elements of k, in a panel Kgp wide: zero from Kg on)
// and the lead candidate count's residues (shifts E), from one read of the operand: for
// operands the one pass (guard_rows) does not take (ozaki_magnitudes_* with residue panels),
// so that a product the guard runs at that count needs no split after it.
struct SplitEarly {
    const int* __restrict__ S;
    signed char* __restrict__ PM;
    int Kg, Kgp, TM;
    const int* __restrict__ E;
    const Consts& c;
    OZ_DEV void operator()(int row, const double* v8, signed char* p, i64 layer, int prow,
                           int kk) const {
        if (kk < Kgp) {
            const int sg = row >= 0 ? S[row] : FLAG;
            unsigned b[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) b[e] = kk + e < Kg ? magnitude(v8[e], sg) : 0u;
            *reinterpret_cast<uint2*>(panel_at(PM, prow, kk, Kgp, TM)) = pack8(b);
        }
        residues8(row >= 0 ? E[row] : 0, v8, p, layer, c);
    }
};

// Eight consecutive elements of a row in shared memory from k, as doubles (zero from K on):
// 16-byte loads where all eight lie below K (the row 16-byte aligned, k a multiple of 8).
template <typename T>
OZ_DEV void load8(const T* row, int k, int K, double (&v)[8]) {
    if (k + 8 <= K) {
        if constexpr (sizeof(T) == 4) {
            const float4 a = *reinterpret_cast<const float4*>(row + k);
            const float4 b = *reinterpret_cast<const float4*>(row + k + 4);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
            v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
#pragma unroll
            for (int e = 0; e < 8; e += 2) {
                const double2 a = *reinterpret_cast<const double2*>(row + k + e);
                v[e] = a.x, v[e + 1] = a.y;
            }
        }
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = k + e < K ? (double)row[k + e] : 0.0;
    }
}

// Balanced residues of rint(x * 2^s) for every modulus, through a 32 x 64 shared tile so that
// both the read (along whichever stride is 1) and the write (along k) are coalesced; each
// thread then makes the residues of 8 consecutive k of one row, one 8-byte store a modulus.
// The writer W gets the row (-1 past R), the 8 values, their place in P and the layer's
// stride, and the row's index in Rp and the first k (for writers with panels of their own).
//
// The residue of v = rint(x * 2^s) (|x * 2^s| <= 2^61) modulo m, in doubles, with
// ROUND = 1.5 * 2^52 (z + ROUND, for |z| < 2^51, is rint(z) + ROUND exactly, and its low
// word holds rint(z) in two's complement):
//   a = rint(x 2^s / 2^32), |a| <= 2^29, and b = rint(x 2^s - a 2^32), |b| <= 2^31, so that
//   v = a 2^32 + b (the subtraction is exact, and rint(b) is even with v, a 2^32 being even);
//   t + ROUND = a (2^32 mod m) + (b + ROUND), exact (|t| < 2^38), with t congruent to v;
//   q = rint(t (1/m)): 1/m rounded is off by 2^-53 relatively, so the product is within
//   2^-22 of t/m, which for odd m lies at least 1/(2m) > 2^-9 from a half-integer: q is the
//   integer nearest t/m and t - q m the balanced residue, in [-(m-1)/2, (m-1)/2]; for m = 256
//   (1/m exact) it is in [-128, 128], the same byte either way.
// The byte is then the low byte of (t mod 2^32) - (q mod 2^32) m, both words the low words of
// roundings, congruent to t - q m modulo 2^32: per modulus three double operations and one
// multiply-add of words.
//
// In integers (SplitResiduesInt, about eight operations a modulus), from three chunks
// v = c2 * 2^42 + c1 * 2^21 + c0 (c0, c1 in [0, 2^21), c2 signed, |c2| <= 2^19):
// y = c2 * (2^42 mod m) + c1 * (2^21 mod m) + c0 + off, with off the multiple of m just above
// 2^27, lies in (0, 2^30) and is congruent to v; one umod of y + (m - 1) / 2 then gives the
// balanced residue as y - q * m, whose low byte is stored (for m = 256 a residue of 128 is
// stored as -128, the same residue).
template <typename T, typename W>
OZ_DEV void panels(int R, int K, const T* __restrict__ X, i64 sr, i64 sk,
                   signed char* __restrict__ P, int Rp, int Kp, int TM, const W& w) {
    constexpr int TK = 64;  // k of a tile: each thread makes 8 consecutive k of one row
    __shared__ double tile[32][TK + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * 32 + tx;
    const int k0 = blockIdx.x * TK;
    const bool along_r = sk != 1 && sr == 1;
    const i64 layer = (i64)Rp * Kp;
    const int r = tid >> 3, q8 = (tid & 7) * 8;  // this thread's row and first k of the tile
    for (int r0 = blockIdx.y * 32; r0 < Rp; r0 += gridDim.y * 32) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            // Along the contiguous index: rows (tx) for along_r, else k (tx, tx + 32).
            const int rr = along_r ? tx : ty + 8 * (i & 3);
            const int k = along_r ? ty + 8 * i : tx + 32 * (i >> 2);
            double v = 0.0;
            if (r0 + rr < R && k0 + k < K)
                v = (double)X[(i64)(r0 + rr) * sr + (i64)(k0 + k) * sk];
            tile[rr][k] = v;
        }
        __syncthreads();
        const int row = r0 + r;
        w(row < R ? row : -1, &tile[r][q8], panel_at(P, row, k0 + q8, Kp, TM), layer, row,
          k0 + q8);
        __syncthreads();
    }
}

// THE KARATSUBA FORM of a complex product (ozaki_ksplit_*, ozaki_pair_shifts, ozaki_krebuild*):
// the stacked real problem, X = A as M x 2K reals (each row's parts interleaved) times
// op(B) = [[br, bi], [-bi, br]] (2K x 2N), is scaled as any real product, but with the shifts
// of Y's rows 2j and 2j+1 (Y = op(B)^T, as everywhere in this file: the two columns of a
// complex column of B, whose elements are the same magnitudes) made one, the smaller
// (ozaki_pair_shifts). The scaled parts Ar', Ai', Br', Bi' are then
// integers, and per modulus three INT8 products of M x K by K x N give
//   T1 = Ar' Br',  T2 = Ai' Bi',  T3 = (Ar' + Ai') (Br' + Bi')
// (the sums formed in residues, so every operand stays one byte), and
//   Cr' = T1 - T2,  Ci' = T3 - T1 - T2  (mod m),
// exactly the stacked product's integers: the same rebuild then gives the same bits, from
// three INT8 GEMMs a modulus where the stacked form runs the work of four.

// The balanced residue of rint(x * 2^s) (|x * 2^s| <= 2^61) modulo modulus l, as
// SplitResiduesInt makes it, from its three chunks: in [-(m-1)/2, (m-1)/2] ([-127, 128] for
// m = 256).
OZ_DEV int residue_of(unsigned c0, unsigned c1, int c2, int l, const Consts& c) {
    const unsigned m = c.moduli[l], half = (m - 1) / 2;
    const unsigned y = (unsigned)c2 * c.p42[l] + c1 * c.p21[l] + c0 + c.off[l];
    const unsigned x = y + half;
    const unsigned q = (x + __umulhi(x, (unsigned)c.magic[l])) >> 8;
    return (int)(y - q * m);
}

// (a + b) mod m, balanced as residue_of's, from two such residues.
OZ_DEV int residue_sum(int a, int b, unsigned m) {
    const int half = (int)(m - 1) / 2;
    int s = a + b;
    if (s > (int)m - 1 - half) s -= (int)m;
    if (s < -half) s += (int)m;
    return s;
}

// Four bytes as one word, the first lowest.
OZ_DEV unsigned pack4(int b0, int b1, int b2, int b3) {
    return __byte_perm(__byte_perm((unsigned)b0, (unsigned)b1, 0x0040),
                       __byte_perm((unsigned)b2, (unsigned)b3, 0x0040), 0x5410);
}

// The Karatsuba panels of a complex operand: element (r, q) of its R x K complex elements has
// its real part at X[r * sr + q * sq] and its imaginary part sd further (A's rows: sr, sq = 2 *
// sk, sd = sk of the stacked reals; Y's: sr = 2 * its row stride, sq = 2 * its k stride, sd its
// row stride), its shift at E[r * es]. Writes the panels of the three parts, the real, the
// imaginary and their sum, each count layers of Rp x Kp bytes in the GEMM's tiles (PANELS), part
// p's layer l at P + (p * count + l) * Rp * Kp, whole (zeros past R and K, and for FLAG rows).
// Block (32, 8); grid (Kp / 32, any y <= Rp / 32: the block loops over the rest); each tile is
// 32 rows by 32 complex elements (64 reals, staged in shared memory so that the reads go along
// whichever index is contiguous), and each thread makes 4 consecutive elements of one row.
template <typename T>
OZ_DEV void karatsuba_panels(int R, int K, const T* __restrict__ X, i64 sr, i64 sq, i64 sd,
                             const int* __restrict__ E, int es, signed char* __restrict__ P,
                             int Rp, int Kp, int TM, const Consts& c) {
    constexpr int TQ = 32;  // complex elements of a tile
    __shared__ double tile[32][2 * TQ + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * 32 + tx;
    const int q0 = blockIdx.x * TQ;
    // Reads along the reals of a row where they are the closer, else along the rows.
    const bool along_r = (sq < 0 ? -sq : sq) > (sr < 0 ? -sr : sr);
    const i64 layer = (i64)Rp * Kp;
    const i64 part = (i64)c.count * layer;
    const int r = tid >> 3, q4 = (tid & 7) * 4;  // this thread's row and first element
    for (int r0 = blockIdx.y * 32; r0 < Rp; r0 += gridDim.y * 32) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int rr = along_r ? tx : ty + 8 * (i & 3);
            const int v = along_r ? ty + 8 * i : tx + 32 * (i >> 2);  // real v of the tile
            const int q = q0 + (v >> 1);
            double x = 0.0;
            if (r0 + rr < R && q < K) x = (double)X[(i64)(r0 + rr) * sr + (i64)q * sq + (v & 1) * sd];
            tile[rr][v] = x;
        }
        __syncthreads();
        const int row = r0 + r;
        const int s = row < R ? E[(i64)row * es] : 0;
        unsigned c0[8], c1[8];
        int c2[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const long long v = s == FLAG ? 0 : __double2ll_rn(scale_t(tile[r][2 * q4 + e], s));
            c0[e] = (unsigned)v & 0x1fffffu;
            c1[e] = (unsigned)(v >> 21) & 0x1fffffu;
            c2[e] = (int)(v >> 42);
        }
        signed char* p = panel_at(P, row, q0 + q4, Kp, TM);
#pragma unroll 1
        for (int l = 0; l < c.count; ++l, p += layer) {
            int re[4], im[4], sum[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                re[e] = residue_of(c0[2 * e], c1[2 * e], c2[2 * e], l, c);
                im[e] = residue_of(c0[2 * e + 1], c1[2 * e + 1], c2[2 * e + 1], l, c);
                sum[e] = residue_sum(re[e], im[e], c.moduli[l]);
            }
            *reinterpret_cast<unsigned*>(p) = pack4(re[0], re[1], re[2], re[3]);
            *reinterpret_cast<unsigned*>(p + part) = pack4(im[0], im[1], im[2], im[3]);
            *reinterpret_cast<unsigned*>(p + 2 * part) = pack4(sum[0], sum[1], sum[2], sum[3]);
        }
        __syncthreads();
    }
}

// ozaki_magnitudes_*: the guard's magnitudes (SplitMagnitudes, k < Kg into PM), or where P is
// given, those and the lead candidate count's residues into P from one read (SplitEarly: with
// c and E's first layer, or c1 and its second where the early refusal's lead is the next).
template <typename T>
OZ_DEV void magnitudes(int R, int K, const T* __restrict__ X, i64 sr, i64 sk, const int* S,
                       signed char* PM, int Kg, int Kgp, const int* E, signed char* P, int Rp,
                       int Kp, int TM, const int* refused, const Consts& c, const Consts& c1) {
    if (*refused) return;
    if (P == nullptr)
        panels(R, Kg, X, sr, sk, PM, Rp, Kgp, TM, SplitMagnitudes{S});
    else if (lead_of(refused))
        panels(R, K, X, sr, sk, P, Rp, Kp, TM, SplitEarly{S, PM, Kg, Kgp, TM, E + Rp, c1});
    else
        panels(R, K, X, sr, sk, P, Rp, Kp, TM, SplitEarly{S, PM, Kg, Kgp, TM, E, c});
}

constexpr int ROWS_NT = 256;
constexpr int ROWS_WARPS = ROWS_NT / 32;

// Row x's K elements into shared memory at `row` by cp.async, waited for by the block.
template <typename T>
OZ_DEV void load_row(T* row, const T* __restrict__ x, int K) {
    const int tid = threadIdx.x;
    const unsigned base = gd::smem_u32(row);
    constexpr int V = 16 / sizeof(T);
    // 16-byte copies where the row is aligned to them, the rest one element at a time.
    const int kv = (reinterpret_cast<unsigned long long>(x) & 15) == 0 ? K / V : 0;
    for (int c = tid; c < kv; c += ROWS_NT) gd::cp_async<16>(base + 16 * c, x + V * c);
    for (int k = kv * V + tid; k < K; k += ROWS_NT)
        gd::cp_async<sizeof(T)>(base + (int)sizeof(T) * k, x + k);
    gd::cp_commit();
    gd::cp_wait<0>();
    __syncthreads();
}

// The guard's size of a row of K elements in shared memory, gathered by a block of ROWS_NT
// threads (every one of them calls it; see guard_rows for the order of the sums): valid in
// warp 0, the same in each of its lanes.
template <typename T>
OZ_DEV GuardSize row_guard_size(const T* row, int K) {
    constexpr int WARPS = ROWS_WARPS;
    __shared__ double part_a[WARPS], part_b[WARPS];
    __shared__ int part_bad[WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // The largest magnitude, and Inf or NaN.
    double m0 = 0.0, m1 = 0.0;
    bool bad = false;
    int k = tid;
    for (; k + ROWS_NT < K; k += 2 * ROWS_NT) {
        const double x0 = fabs((double)row[k]), x1 = fabs((double)row[k + ROWS_NT]);
        bad |= !(x0 <= 0x1.fffffffffffffp1023) | !(x1 <= 0x1.fffffffffffffp1023);
        m0 = fmax(m0, x0);
        m1 = fmax(m1, x1);
    }
    if (k < K) {
        const double x0 = fabs((double)row[k]);
        bad |= !(x0 <= 0x1.fffffffffffffp1023);
        m0 = fmax(m0, x0);
    }
    double mx = fmax(m0, m1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) {
        part_a[warp] = mx;
        part_bad[warp] = bad;
    }
    __syncthreads();
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
        mx = fmax(mx, part_a[w]);
        bad |= part_bad[w] != 0;
    }
    // Its sum of squares and 1-norm at the anchor (a finite row's; a bad one is FLAG).
    const int anchor = bad || mx < 0x1p-999 ? -1000 : ilogb(mx);
    const double inv = bad ? 0.0 : scale_t(1.0, -anchor);
    double s0 = 0.0, s1 = 0.0, l0 = 0.0, l1 = 0.0;
    for (k = tid; k + ROWS_NT < K; k += 2 * ROWS_NT) {
        const double y0 = fabs((double)row[k]) * inv, y1 = fabs((double)row[k + ROWS_NT]) * inv;
        s0 = fma(y0, y0, s0);
        s1 = fma(y1, y1, s1);
        l0 += y0;
        l1 += y1;
    }
    if (k < K) {
        const double y0 = fabs((double)row[k]) * inv;
        s0 = fma(y0, y0, s0);
        l0 += y0;
    }
    double s = s0 + s1, l = l0 + l1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        l += __shfl_xor_sync(0xffffffffu, l, o);
    }
    __syncthreads();  // every thread has read part_a
    if (lane == 0) {
        part_a[warp] = s;
        part_b[warp] = l;
    }
    __syncthreads();
    GuardSize z;
    z.mx = mx;
    z.bad = bad;
    z.anchor = anchor;
    z.s = 0.0;
    z.l1 = 0.0;
    if (warp == 0) {
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            z.s += part_a[w];
            z.l1 += part_b[w];
        }
    }
    __syncthreads();  // every thread of warp 0 has read part_a and part_b
    return z;
}

// The guard's scaling and magnitudes in one pass, for rows along K's contiguous index
// (sk = 1): one block of ROWS_NT threads per row r of Rp, the row in dynamic shared memory
// (K elements, then Kgp bytes of magnitudes). Its size is gathered from there in two sweeps
// (row_guard_size): its largest magnitude (and whether it holds Inf or NaN), then, with the
// anchor that gives (RowSize's last: max(-1000, ilogb(mx))), its sum of squares and 1-norm,
// each thread with two partial sums. That is RowSize's arithmetic but for the order of its
// sums (and no rescaling on the way), without its per-element branches. One warp writes the
// shifts, sigma and norm as ozaki_guard_scale_* does (a lane a count), while the block,
// every thread with sigma from the row's largest magnitude, makes the row's layer of
// magnitudes (Kgp bytes, zero from Kg on, and for padding rows r >= R) as
// ozaki_magnitudes_* does. Where `refused` is given and set, it leaves at once.
template <typename T>
OZ_DEV void guard_rows(int R, int K, const T* __restrict__ X, i64 sr, const GuardOut& out,
                       signed char* __restrict__ P, int Kg, int Kgp, int TM,
                       signed char* __restrict__ RP, int Rp, int Kp, const Consts& c,
                       const Consts& c1, const int* refused) {
    if (refused != nullptr && *refused) return;
    // The early split's candidate (RP is given only after the early refusal, with refused).
    const int lead = RP != nullptr ? lead_of(refused) : 0;
    extern __shared__ __align__(16) unsigned char rows_smem[];
    T* row = reinterpret_cast<T*>(rows_smem);
    unsigned char* mag = rows_smem + ((K * (int)sizeof(T) + 15) & ~15);
    __shared__ int row_shift;
    const int r = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int sg = FLAG;
    if (r < R) {
        load_row(row, X + (i64)r * sr, K);
        const GuardSize z = row_guard_size(row, K);
        // Sigma needs only the largest magnitude, which every thread holds: the magnitudes
        // below start at once, while warp 0 writes the row's parts, a lane each (the lead's
        // shift kept for the residues).
        sg = sigma_of(z);
        if (warp == 0) {
            const int e = out.part(lane, r, z);
            if (lane == lead) row_shift = e;
        }
    }
    // The magnitudes into shared memory a byte a thread (conflict-free reads of the row), then
    // to the panel 8 bytes a thread.
    for (int k = tid; k < Kgp; k += ROWS_NT)
        mag[k] = (unsigned char)(k < Kg && r < R ? magnitude((double)row[k], sg) : 0u);
    __syncthreads();  // the magnitudes and row_shift
    const int sh = r < R ? row_shift : 0;
    for (int c = tid; c < Kgp / 8; c += ROWS_NT)
        *reinterpret_cast<uint2*>(panel_at(P, r, 8 * c, Kgp, TM)) =
            *reinterpret_cast<const uint2*>(mag + 8 * c);
    // Where RP is given, the lead candidate count's residues (c's, or c1's where the lead is
    // the next) as ozaki_split_* makes them (the panel's whole Kp: zero from K on, and for
    // rows r >= R), 8 k a thread, so that a product the guard runs at that count needs no
    // split of this operand after it.
    if (RP != nullptr) {
        const i64 layer = (i64)Rp * Kp;
        const auto split = [&](const Consts& cc) {
            for (int c8 = tid; c8 < Kp / 8; c8 += ROWS_NT) {
                double v[8];
                load8(row, 8 * c8, r < R ? K : 0, v);
                residues8(sh, v, panel_at(RP, r, 8 * c8, Kp, TM), layer, cc);
            }
        };
        if (lead)
            split(c1);
        else
            split(c);
    }
}

// The modulus of layer z and its umod constant.
OZ_DEV void modulus(const Consts& c, int z, unsigned& m, unsigned long long& mg) {
    m = 256;
    mg = 1ull << 32;
#pragma unroll
    for (int l = 0; l < MAX_MODULI; ++l)
        if (l == z) {
            m = c.moduli[l];
            mg = c.magic[l];
        }
}

// Stores the residues x0, x1 of columns col, col + 1 of a row of R (at rrow, N columns):
// one 2-byte store where the pair is whole and aligned (`even`: rrow is).
OZ_DEV void store_pair(unsigned char* rrow, int col, int N, bool even, unsigned x0, unsigned x1) {
    if (even && col + 1 < N) {
        *reinterpret_cast<unsigned short*>(rrow + col) = (unsigned short)(x0 | (x1 << 8));
    } else {
        if (col < N) rrow[col] = (unsigned char)x0;
        if (col + 1 < N) rrow[col + 1] = (unsigned char)x1;
    }
}

// |acc| <= 2^30 (see the scheme); adding the multiple of m just above 2^30 makes it a
// non-negative x < 2^31 + 2^8 for umod.
OZ_DEV unsigned acc_offset(unsigned m) { return (0x40000000u + m - 1) / m * m; }

// The residues of four n8 blocks of a row held by a quad of lanes (lane t: columns 2t, 2t + 1
// of each block; w0 = blocks 0 and 1, w1 = blocks 2 and 3, 16 bits each) traded so that lane
// t holds block t's 8 bytes, for one 8-byte store a lane. Every lane of the warp must take
// part.
OZ_DEV uint2 quad_trade(unsigned w0, unsigned w1, int t) {
    unsigned o0 = 0, o1 = 0;
#pragma unroll
    for (int d = 0; d < 4; ++d) {
        // Lane t ^ d wants block t ^ d's pair; it gives back its pair of block t, which lands
        // at bits 16 (s % 2) of o[s / 2], s = t ^ d the giver.
        const int to = t ^ d;
        const unsigned give = ((to & 2 ? w1 : w0) >> (16 * (to & 1))) & 0xffffu;
        const unsigned got = d ? __shfl_xor_sync(0xffffffffu, give, d) : give;
        const unsigned v = got << (16 * (to & 1));
        if (to & 2)
            o1 |= v;
        else
            o0 |= v;
    }
    return make_uint2(o0, o1);
}

// What an INT8 GEMM does with a finished tile (epilogue_wg and epilogue_mma, by overload):
// the residues modulo layer z's modulus into R[z] ...
struct ResidueTail {
    unsigned char* __restrict__ R;
    const Consts& c;
    int z0;  // the first layer the launch computes: its z is layer z0 + z
};
// ... or the magnitudes' product itself, as int32 into S (M x N, row-major), for
// ozaki_guard_judge.
struct GuardTail {
    int* __restrict__ S;
};
// ... or, for the guard's sure test, only whether some element is not surely passing, into
// *unsure.
struct SureTail {
    const Key* __restrict__ KX;
    const Key* __restrict__ KY;
    int* unsure;
};

// Stores the int32 sums x0, x1 of columns col, col + 1 of a row of S (at srow, N columns): one
// 8-byte store where the pair is whole and aligned (`even`).
OZ_DEV void store_sums(int* srow, int col, int N, bool even, int x0, int x1) {
    if (even && col + 1 < N) {
        *reinterpret_cast<int2*>(srow + col) = make_int2(x0, x1);
    } else {
        if (col < N) srow[col] = x0;
        if (col + 1 < N) srow[col + 1] = x1;
    }
}

// 2^e for -1022 <= e <= 1023, a normal double (e clamped into that range).
OZ_DEV double exp2i(int e) {
    return __longlong_as_double((long long)(min(max(e, -1022), 1023) + 1023) << 52);
}

// One side of an element for the guard: its row's sigma, scaled 1-norm, and for each
// candidate count c, p[c] = 2^(sigma - shift_c). The shift of a row with sigma lies within
// [sigma - 6, sigma + max(54, bits - 7)] (RowSize::shift: at least bits - 1 - ilogb(mx), at
// most the larger of that and 60 - ilogb(mx); sigma = 6 - ilogb(mx)), so p[c] is a normal
// power of two and every product below with it is exact.
struct Side {
    int sigma;
    double l1;
    double p[MAX_CANDIDATES];
    Side() = default;
    OZ_DEV Side(const int* S, const double* L, const int* E, int ld, int i, int n) {
        sigma = S[i];
        l1 = L[i];
#pragma unroll
        for (int c = 0; c < MAX_CANDIDATES; ++c)
            p[c] = c < n ? exp2i(sigma - E[(i64)c * ld + i]) : 0.0;
    }
};

// The index of the first candidate count at which the element of rows a and b, whose
// magnitudes' product is S, passes the guard; g.n where none does. Rows without sigma (zero,
// or holding Inf or NaN: the reconstruction computes those natively) pass at the first. The
// bound is E * 2^(sigma_a + sigma_b) = l1_a 2^db / 2 + l1_b 2^da / 2 + k 2^(da + db) / 4 with
// da = sigma_a - shift_a (and db likewise): its products are exact, as in the CPU model.
OZ_DEV int first_pass(const Guard& g, int S, const Side& a, const Side& b) {
    if (a.sigma == FLAG || b.sigma == FLAG) return 0;
    const double room = g.gu * (double)S;
    const double quarter_k = 0.25 * (double)g.k;
#pragma unroll
    for (int c = 0; c < MAX_CANDIDATES; ++c) {
        if (c >= g.n) break;
        const double bound =
            0.5 * (a.l1 * b.p[c]) + 0.5 * (b.l1 * a.p[c]) + quarter_k * (a.p[c] * b.p[c]);
        // Three rounded terms and a sum: 2^-50 more bounds their rounding.
        if (bound * (1.0 + 0x1p-50) <= room) return c;
    }
    return g.n;
}

// A row's key for the sure test: with p = 2^d (d = sigma - shift of the candidate `lead`) and
// w = (l1 / 2 + k p / 8) (1 + 2^-18) / gu rounded upwards to a float, element (i, j) surely
// passes at that candidate when (float)S_ij >= fmaf(w_i, p_j, p_i * w_j). Both products
// with a power of two are exact, so the float sum is within 2^-24 of
// (1 + 2^-18) / gu * (l1_i p_j / 2 + l1_j p_i / 2 + k p_i p_j / 4) = (1 + 2^-18) E_ij' / gu
// (E_ij' = `first_pass`'s bound, exactly), and (float)S within 2^-24 of S: then
// gu S >= (1 + 2^-20) E_ij', more than `first_pass`'s roundings need (2^-49). A row without
// sigma (or a padding row) has w = p = 0: its elements pass whatever S, as in `first_pass`.
// d lies in [-60, 6] (see `Side`), so p and the products are normal floats.
OZ_DEV void keys(const Guard& g, int M, int Mp, int N, int Np, Key* KX, Key* KY, int lead) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= Mp + Np) return;
    const bool x = idx < Mp;
    const int i = x ? idx : idx - Mp;
    Key key{0.0f, 0.0f};
    if (i < (x ? M : N)) {
        const int sigma = x ? g.sa[i] : g.sb[i];
        if (sigma != FLAG) {
            const double p =
                exp2i(sigma - (x ? g.ea[(i64)lead * g.lde_a + i] : g.eb[(i64)lead * g.lde_b + i]));
            const double l1 = x ? g.la[i] : g.lb[i];
            const double w = (0.5 * l1 + (0.125 * (double)g.k) * p) * ((1.0 + 0x1p-18) / g.gu);
            key = Key{__double2float_ru(w), (float)p};
        }
    }
    (x ? KX : KY)[i] = key;
}

// Whether element sum S of rows with keys a (of X) and b (of Y) is not surely passing.
OZ_DEV bool unsure_of(int S, const Key& a, float bw, float bp) {
    return (float)S < fmaf(a.w, bp, a.p * bw);
}

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ---- The warpgroup GEMM (sm_90a) ----
constexpr int WGS = 3;                                  // consumer warpgroups, 64 rows each
constexpr int BM = 64 * WGS, BN = 256, NT = 128 * WGS;
constexpr int PANEL_A = BM * BK, PANEL_B = BN * BK;     // bytes of one stage's tiles
constexpr int STAGE = PANEL_A + PANEL_B;
constexpr int STAGES = 4;
constexpr int SMEM_BYTES = STAGES * STAGE + 1024 + 64;  // + alignment slack, 8 mbarriers
static_assert(SMEM_BYTES == 230464, "keep the @launch line in sync");

// D(64 x 256, this warpgroup's s32 accumulators) += A(64 x 32) * B(32 x 256), s8 operands
// read from shared memory through the descriptors (integer products and sums are exact).
OZ_DEV void wgmma_m64n256k32(int (&d)[128], unsigned long long da, unsigned long long db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {" GD_WG_D128
                 "}, %128, %129, 1;\n"
                 : GD_WG_ACC128("+r", d)
                 : "l"(da), "l"(db));
}

// Tile pair `id` of a layer (the cluster's two tiles) in grouped order (`group` tile rows,
// an even count where pair_m, share their Y panels in L2), and this block's tile (m0, n0) of
// the two by its rank in the cluster.
OZ_DEV void tile_origin(int M, int N, int pair_m, int group, unsigned rank, int id, int& m0,
                        int& n0) {
    const int tiles_m = (M - 1) / BM + 1;
    const int tiles_n = (N - 1) / BN + 1;
    // Pairs of tile rows (each pair a unit of the grouped order, group / 2 to a group), or of
    // tile columns.
    const int units_m = pair_m ? (tiles_m + 1) / 2 : tiles_m;
    const int units_n = pair_m ? tiles_n : (tiles_n + 1) / 2;
    const int g = max(pair_m ? group / 2 : group, 1);
    const int group_size = g * units_n;
    const int first_m = (id / group_size) * g;
    const int gm = min(units_m - first_m, g);
    const int in_group = id % group_size;
    const int um = first_m + in_group % gm, un = in_group / gm;
    m0 = (pair_m ? 2 * um + (int)rank : um) * BM;
    n0 = (pair_m ? un : 2 * un + (int)rank) * BN;
}

// Work unit u of the GEMM: a pair of tiles of one layer, u = layer * pairs + pair. This
// block's tile of it: its layer z and origin (m0, n0).
struct Unit {
    int z, m0, n0;
    OZ_DEV Unit(int u, int pairs, int M, int N, int pair_m, int group, unsigned rank) {
        z = u / pairs;
        tile_origin(M, N, pair_m, group, rank, u - z * pairs, m0, n0);
    }
};

// Every unit u = cluster, cluster + clusters, ... (clusters = gridDim.x / 2): the block's
// 192 x 256 tile of R[z] from the residue panels of modulus z. One K step is one 128-wide K
// tile of both operands; the copies run STAGES steps ahead of the products across units, so
// the next unit's first tiles arrive during a unit's epilogue.
template <typename Tail>
OZ_DEV void gemm(int M, int N, const signed char* __restrict__ PA,
                 const signed char* __restrict__ PB, int Mp, int Np, int Kp, int layers,
                 int pair_m, int group, const Tail& tail) {
    constexpr int NACC = BN / 2;  // accumulators per thread: 64 rows x 256 / 128 threads
    constexpr unsigned WARPS = 2 * NT / 32;  // consumer warps of the cluster
    extern __shared__ unsigned char oz_smem[];
    const unsigned base = (gd::smem_u32(oz_smem) + 1023u) & ~1023u;
    // mbarriers after the stages: full[s] at bars + 8 s, empty[s] at bars + 8 (STAGES + s).
    const unsigned bars = base + STAGES * STAGE;
    auto full = [&](int st) { return bars + 8 * st; };
    auto empty = [&](int st) { return bars + 8 * (STAGES + st); };

    const unsigned rank = gd::cluster_rank();
    const int tiles = Kp / BK;  // K steps of a unit
    const int pairs = (Mp / BM) * (Np / BN) / 2;
    const int units = pairs * layers;
    const int first = blockIdx.x >> 1, stride = gridDim.x >> 1;
    const int tid = threadIdx.x;

    if (tid == 0) {
#pragma unroll
        for (int st = 0; st < STAGES; ++st) {
            gd::mbar_init(full(st), 1);
            gd::mbar_init(empty(st), WARPS);
        }
        gd::fence_mbarrier_init();
    }
    // Both blocks' barriers exist before either copies into or arrives on the other's.
    gd::cluster_arrive();
    gd::cluster_wait();

    // The copies (warp 0's cursor): the next step's unit lu and K tile lk, and where that
    // unit's operand tiles start: X's tile row (m0 / 192) and Y's (n0 / 256) of layer z, each
    // K tile one contiguous block (PANELS). The shared tile comes half from each block, to
    // both. Lane 0 of warp 0 copies (the whole warp runs the code, see the helpers).
    const int lane = tid & 31;
    int lu = first, lk = 0;
    const signed char *la = PA, *lb = PB;
    auto locate = [&]() {
        if (lu < units) {
            const Unit t(lu, pairs, M, N, pair_m, group, rank);
            la = PA + ((i64)t.z * Mp + t.m0) * Kp;  // = tile row m0/192 of layer z
            lb = PB + ((i64)t.z * Np + t.n0) * Kp;
        }
    };
    // Copies the next step into stage st, if any is left.
    auto load_next = [&](int st) {
        if (lu >= units) return;
        const unsigned dst = base + st * STAGE, bar = full(st), pred = lane == 0;
        gd::mbar_arrive_expect(bar, STAGE, pred);
        const signed char* a = la + (i64)lk * PANEL_A;
        const signed char* b = lb + (i64)lk * PANEL_B;
        if (pair_m) {
            gd::bulk_copy(dst, a, PANEL_A, bar, pred);
            const int h = rank * (PANEL_B / 2);
            gd::bulk_copy_both(dst + PANEL_A + h, b + h, PANEL_B / 2, bar, pred);
        } else {
            gd::bulk_copy(dst + PANEL_A, b, PANEL_B, bar, pred);
            const int h = rank * (PANEL_A / 2);
            gd::bulk_copy_both(dst + h, a + h, PANEL_A / 2, bar, pred);
        }
        if (++lk == tiles) {
            lk = 0;
            lu += stride;
            locate();
        }
    };
    // Step q's products are done: each warp releases its stage in both blocks, and warp 0
    // refills it (with step q + STAGES) once every warp of the two has.
    auto release = [&](unsigned q) {
        const int ps = q % STAGES;
        gd::mbar_arrive_at(empty(ps), 0, lane == 0);
        gd::mbar_arrive_at(empty(ps), 1, lane == 0);
        if (tid < 32 && lu < units) {
            gd::mbar_wait(empty(ps), (q / STAGES) & 1);
            load_next(ps);
        }
    };

    if (tid < 32) {
        locate();
        for (int st = 0; st < STAGES; ++st) load_next(st);
    }

    const int wg = tid >> 7;  // rows 64*wg .. 64*wg + 63 of the tile
    const int warp = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    unsigned q = 0;  // K steps this block has consumed
    bool arrived = false;
    for (int u = first; u < units; u += stride) {
        const Unit unit(u, pairs, M, N, pair_m, group, rank);
        int acc[NACC];
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = 0;
        for (int i = 0; i < tiles; ++i, ++q) {
            const int st = q % STAGES;
            gd::mbar_wait(full(st), (q / STAGES) & 1);
            const unsigned a_t = base + st * STAGE + wg * 64 * 128, b_t = base + st * STAGE + PANEL_A;
            gd::wg_fence();
            gd::fence_regs(acc);
#pragma unroll
            for (int k = 0; k < BK / 32; ++k)
                wgmma_m64n256k32(acc, gd::desc(a_t + 32 * k), gd::desc(b_t + 32 * k));
            gd::wg_commit();
            // Step q - 1's products are done.
            gd::wg_wait<1>();
            gd::fence_regs(acc);
            if (i > 0) release(q - 1);
        }
        gd::wg_wait<0>();
        gd::fence_regs(acc);
        release(q - 1);
        if (u + stride >= units) {
            // No more arrivals on the other block's barriers from this one.
            gd::cluster_arrive();
            arrived = true;
        }

        epilogue_wg(tail, unit.z, unit.m0, unit.n0, acc, wg, warp, g, t, M, N);
    }
    if (!arrived) gd::cluster_arrive();
    // Stay until the other block has made its last arrival here.
    gd::cluster_wait();
}

// The residues of the warpgroup GEMM's tile (m0, n0) of layer z into R[z]: accumulator i of
// n8 block j is row 16*warp + g (+8 for i % 4 >= 2), column 8*j + 2*t + i % 2 of this
// warpgroup's 64 rows.
OZ_DEV void epilogue_wg(const ResidueTail& tail, int z, int m0, int n0, const int (&acc)[BN / 2],
                        int wg, int warp, int g, int t, int M, int N) {
    unsigned char* __restrict__ R = tail.R;
    const Consts& c = tail.c;
    unsigned m;
    unsigned long long mg;
    z += tail.z0;
    modulus(c, z, m, mg);
    const unsigned off = acc_offset(m);
    unsigned char* rz = R + (i64)z * M * N;
    if ((N & 7) == 0) {
        // Rows 8-byte aligned: the quad's lanes trade residues so that lane t holds the 8
        // bytes of n8 block 4 blk + t, one 8-byte store each (a warp fills whole 32-byte
        // sectors). Every lane trades; the bounds' test comes after.
#pragma unroll
        for (int blk = 0; blk < BN / 32; ++blk)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                unsigned w[2];  // the pairs of n8 blocks 4 blk + 0 .. 3, 16 bits each
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int j = 4 * blk + 2 * r;
                    w[r] = umod((unsigned)acc[4 * j + 2 * h] + off, m, mg) |
                           umod((unsigned)acc[4 * j + 2 * h + 1] + off, m, mg) << 8 |
                           umod((unsigned)acc[4 * j + 4 + 2 * h] + off, m, mg) << 16 |
                           umod((unsigned)acc[4 * j + 4 + 2 * h + 1] + off, m, mg) << 24;
                }
                const uint2 o = quad_trade(w[0], w[1], t);
                const int row = m0 + wg * 64 + warp * 16 + g + 8 * h;
                const int col = n0 + 8 * (4 * blk + t);
                if (row < M && col < N) *reinterpret_cast<uint2*>(rz + (i64)row * N + col) = o;
            }
    } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wg * 64 + warp * 16 + g + 8 * h;
            if (row >= M) continue;
            unsigned char* rrow = rz + (i64)row * N;
            const bool even = (reinterpret_cast<unsigned long long>(rrow) & 1) == 0;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
                store_pair(rrow, n0 + 8 * j + 2 * t, N, even,
                           umod((unsigned)acc[4 * j + 2 * h] + off, m, mg),
                           umod((unsigned)acc[4 * j + 2 * h + 1] + off, m, mg));
        }
    }
}


// The magnitudes' product of the warpgroup GEMM's tile (m0, n0) into S (the layout of
// epilogue_wg's accumulators).
OZ_DEV void epilogue_wg(const GuardTail& tail, int, int m0, int n0, const int (&acc)[BN / 2],
                        int wg, int warp, int g, int t, int M, int N) {
    const bool even = (N & 1) == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + wg * 64 + warp * 16 + g + 8 * h;
        if (row >= M) continue;
        int* srow = tail.S + (i64)row * N;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
            store_sums(srow, n0 + 8 * j + 2 * t, N, even, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
}

// The sure test on the warpgroup GEMM's tile (m0, n0) (the layout of epilogue_wg's
// accumulators): the thread's two rows' keys from KX; the tile's columns' keys loaded by the
// warp 128 at a time (lane l holds columns l + 32 i) and passed round by shuffles.
OZ_DEV void epilogue_wg(const SureTail& tail, int, int m0, int n0, const int (&acc)[BN / 2],
                        int wg, int warp, int g, int t, int, int) {
    const int lane = threadIdx.x & 31;
    Key rows[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) rows[h] = tail.KX[m0 + wg * 64 + warp * 16 + g + 8 * h];
    bool unsure = false;
    // In two halves of 128 columns, to spare registers.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        Key cols[BN / 64];
#pragma unroll
        for (int i = 0; i < BN / 64; ++i) cols[i] = tail.KY[n0 + 128 * half + lane + 32 * i];
#pragma unroll
        for (int j = 16 * half; j < 16 * half + 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                // Column 8 j + 2 t + e of the tile: lane 8 (j % 4) + 2 t + e, key j / 4.
                const int from = 8 * (j % 4) + 2 * t + e;
                const float bw = __shfl_sync(0xffffffffu, cols[j / 4 - 4 * half].w, from);
                const float bp = __shfl_sync(0xffffffffu, cols[j / 4 - 4 * half].p, from);
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    unsure |= unsure_of(acc[4 * j + 2 * h + e], rows[h], bw, bp);
            }
    }
    if (__any_sync(0xffffffffu, unsure) && lane == 0) atomicOr(tail.unsure, 1);
}

#endif  // sm_90a

// ---- The mma.sync GEMM (sm_80 on) ----
// Block tile 128 x 128 from panels in tiles of 128 rows (PANELS, TM = 128 for both), eight
// warps of 64 x 32 (two down, four across), mma.sync.m16n8k32 with s8 operands read from
// shared memory by ldmatrix (the panels' 128-byte swizzle keeps its eight rows of 16 bytes in
// distinct banks), K tiles of 128 bytes copied by cp.async into MMA_STAGES stages.
constexpr int MMA_BM = 128, MMA_BN = 128, MMA_NT = 256, MMA_STAGES = 3;
constexpr int MMA_PANEL_A = MMA_BM * BK, MMA_PANEL_B = MMA_BN * BK;
constexpr int MMA_STAGE = MMA_PANEL_A + MMA_PANEL_B;
constexpr int MMA_SMEM_BYTES = MMA_STAGES * MMA_STAGE + 128;  // + alignment slack
static_assert(MMA_SMEM_BYTES == 98432, "keep the @launch line in sync");

OZ_DEV void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}
// D(16 x 8, s32) += A(16 x 32, s8, row-major) * B(32 x 8, s8, column-major).
OZ_DEV void mma_s8(int (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The block's 128 x 128 tile of R[z] (z = blockIdx.z), tiles in grouped order (8 tile rows
// share their Y panels in L2) on blockIdx.x.
template <typename Tail>
OZ_DEV void gemm_mma(int M, int N, const signed char* __restrict__ PA,
                     const signed char* __restrict__ PB, int Mp, int Np, int Kp,
                     const Tail& tail) {
    extern __shared__ unsigned char oz_smem[];
    const unsigned base = (gd::smem_u32(oz_smem) + 127u) & ~127u;
    const int z = blockIdx.z;
    const int tiles_m = Mp / MMA_BM, tiles_n = Np / MMA_BN;
    const int id = blockIdx.x, group = 8 * tiles_n;
    const int first_m = (id / group) * 8;
    const int gm = min(tiles_m - first_m, 8);
    const int m0 = (first_m + (id % group) % gm) * MMA_BM, n0 = ((id % group) / gm) * MMA_BN;
    const int ksteps = Kp / BK;
    // Tile row m0 / 128 of X's panel z, its K tiles one after another (PANELS); Y's alike.
    const signed char* a_src = PA + ((i64)z * Mp + m0) * Kp;
    const signed char* b_src = PB + ((i64)z * Np + n0) * Kp;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;

    // K tile kt of both operands into stage st, the tiles' bytes as they lie.
    auto load = [&](int st, int kt) {
        const unsigned dst = base + st * MMA_STAGE;
        const signed char* a = a_src + (i64)kt * MMA_PANEL_A;
        const signed char* b = b_src + (i64)kt * MMA_PANEL_B;
#pragma unroll
        for (int i = 0; i < MMA_PANEL_A / 16 / MMA_NT; ++i) {
            const int ch = (tid + i * MMA_NT) * 16;
            gd::cp_async<16>(dst + ch, a + ch);
            gd::cp_async<16>(dst + MMA_PANEL_A + ch, b + ch);
        }
    };
    int acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

#pragma unroll
    for (int st = 0; st < MMA_STAGES - 1; ++st) {
        if (st < ksteps) load(st, st);
        gd::cp_commit();
    }
    for (int kt = 0; kt < ksteps; ++kt) {
        // K tile kt has landed, and every warp is done with the stage refilled next.
        gd::cp_wait<MMA_STAGES - 2>();
        __syncthreads();
        const int next = kt + MMA_STAGES - 1;
        if (next < ksteps) load(next % MMA_STAGES, next);
        gd::cp_commit();
        const unsigned sa = base + (kt % MMA_STAGES) * MMA_STAGE, sb = sa + MMA_PANEL_A;
#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks) {
            // A: rows 16i .. 16i + 15 of the warp's 64, k 32ks .. 32ks + 31 (chunks 2ks, 2ks + 1):
            // lanes 0-15 give rows 0-15 of the low chunk, lanes 16-31 of the high one.
            unsigned a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = wm * 64 + i * 16 + (lane & 15);
                const int ch = 2 * ks + (lane >> 4);
                ldsm_x4(sa + row * BK + ((ch ^ (row & 7)) << 4), a[i][0], a[i][1], a[i][2], a[i][3]);
            }
            // B: columns 16p .. 16p + 15 of the warp's 32 (two n8 blocks), both chunks.
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int row = wn * 32 + p * 16 + (lane & 7) + ((lane >> 4) << 3);
                const int ch = 2 * ks + ((lane >> 3) & 1);
                ldsm_x4(sb + row * BK + ((ch ^ (row & 7)) << 4), b[2 * p][0], b[2 * p][1],
                        b[2 * p + 1][0], b[2 * p + 1][1]);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_s8(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }
    gd::cp_wait<0>();

    epilogue_mma(tail, z, m0, n0, wm, wn, lane, acc, M, N);
}

// The residues of the mma.sync GEMM's tile (m0, n0) of layer z into R[z], the warp's 64 x 32
// at (wm, wn): acc[i][j][e] is row 16i + g (+8 for e >= 2) of the warp's 64, column
// 8j + 2t + e % 2 of its 32.
OZ_DEV void epilogue_mma(const ResidueTail& tail, int z, int m0, int n0, int wm, int wn, int lane,
                         const int (&acc)[4][4][4], int M, int N) {
    unsigned char* __restrict__ R = tail.R;
    const Consts& c = tail.c;
    unsigned m;
    unsigned long long mg;
    z += tail.z0;
    modulus(c, z, m, mg);
    const unsigned off = acc_offset(m);
    const int g = lane >> 2, t = lane & 3;
    unsigned char* rz = R + (i64)z * M * N;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * 64 + i * 16 + g + 8 * h;
            unsigned char* rrow = rz + (i64)row * N;
            if ((N & 7) == 0) {
                // As the warpgroup GEMM's epilogue: one 8-byte store a lane.
                unsigned w[2];
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    w[r] = umod((unsigned)acc[i][2 * r][2 * h] + off, m, mg) |
                           umod((unsigned)acc[i][2 * r][2 * h + 1] + off, m, mg) << 8 |
                           umod((unsigned)acc[i][2 * r + 1][2 * h] + off, m, mg) << 16 |
                           umod((unsigned)acc[i][2 * r + 1][2 * h + 1] + off, m, mg) << 24;
                const uint2 o = quad_trade(w[0], w[1], t);
                const int col = n0 + wn * 32 + 8 * t;
                if (row < M && col < N) *reinterpret_cast<uint2*>(rrow + col) = o;
            } else if (row < M) {
                const bool even = (reinterpret_cast<unsigned long long>(rrow) & 1) == 0;
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    store_pair(rrow, n0 + wn * 32 + 8 * j + 2 * t, N, even,
                               umod((unsigned)acc[i][j][2 * h] + off, m, mg),
                               umod((unsigned)acc[i][j][2 * h + 1] + off, m, mg));
            }
        }
}

// The magnitudes' product of the mma.sync GEMM's tile (m0, n0) into S (the layout of
// epilogue_mma's accumulators).
OZ_DEV void epilogue_mma(const GuardTail& tail, int, int m0, int n0, int wm, int wn, int lane,
                         const int (&acc)[4][4][4], int M, int N) {
    const int g = lane >> 2, t = lane & 3;
    const bool even = (N & 1) == 0;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * 64 + i * 16 + g + 8 * h;
            if (row >= M) continue;
            int* srow = tail.S + (i64)row * N;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                store_sums(srow, n0 + wn * 32 + 8 * j + 2 * t, N, even, acc[i][j][2 * h],
                           acc[i][j][2 * h + 1]);
        }
}

// The sure test on the mma.sync GEMM's tile (m0, n0) (the layout of epilogue_mma's
// accumulators): the thread's eight rows' keys from KX, the warp's 32 columns' keys one a
// lane, passed round by shuffles.
OZ_DEV void epilogue_mma(const SureTail& tail, int, int m0, int n0, int wm, int wn, int lane,
                         const int (&acc)[4][4][4], int, int) {
    const int g = lane >> 2, t = lane & 3;
    const Key col = tail.KY[n0 + wn * 32 + lane];
    bool unsure = false;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const Key row = tail.KX[m0 + wm * 64 + i * 16 + g + 8 * h];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int from = 8 * j + 2 * t + e;
                    const float bw = __shfl_sync(0xffffffffu, col.w, from);
                    const float bp = __shfl_sync(0xffffffffu, col.p, from);
                    unsure |= unsure_of(acc[i][j][2 * h + e], row, bw, bp);
                }
        }
    if (__any_sync(0xffffffffu, unsure) && lane == 0) atomicOr(tail.unsure, 1);
}

// The guard's verdict on each tm x tn tile of the magnitudes' product S (M x N, row-major), in
// gridDim.y strips of rows (at most JUDGE_ROWS each): need[tile * gridDim.y + strip] = the
// largest, over the strip's elements, index of the first candidate each passes at (g.n: none).
// One block per strip, tile = blockIdx.x = tile_row * g.tiles_n + tile_col, strip =
// blockIdx.y. The strip's rows' sides go to shared memory; each thread takes columns t,
// t + blockDim.x, ..., its column's side in registers, and walks down the strip (one coalesced
// load of S a row, four rows' loads at a time). A thread stops at an element that passes at no candidate: its strip's
// verdict can be no worse.
constexpr int JUDGE_ROWS = 64;
OZ_DEV void judge(int M, int N, const int* __restrict__ S, int tm, int tn, const Guard& g) {
    const int tile = blockIdx.x, tr = tile / g.tiles_n;
    const int strip_rows = (tm - 1) / (int)gridDim.y + 1;
    const int m0 = tr * tm + blockIdx.y * strip_rows, n0 = (tile - tr * g.tiles_n) * tn;
    const int rows = min(min(strip_rows, tm - (int)blockIdx.y * strip_rows), M - m0);
    const int cols = min(tn, N - n0);
    __shared__ Side sides[JUDGE_ROWS];
    for (int r = threadIdx.x; r < rows; r += blockDim.x)
        sides[r] = Side(g.sa, g.la, g.ea, g.lde_a, m0 + r, g.n);
    __syncthreads();
    int worst = 0;
    for (int c = threadIdx.x; c < cols && worst < g.n; c += blockDim.x) {
        const Side b(g.sb, g.lb, g.eb, g.lde_b, n0 + c, g.n);
        const int* col = S + (i64)m0 * N + n0 + c;
        for (int r = 0; r < rows && worst < g.n; r += 4) {
            int sums[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) sums[i] = r + i < rows ? col[(i64)(r + i) * N] : 0;
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (r + i < rows) worst = max(worst, first_pass(g, sums[i], sides[r + i], b));
        }
    }
    __shared__ int warps_worst[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    worst = __reduce_max_sync(0xffffffffu, worst);
    if (lane == 0) warps_worst[warp] = worst;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < warps; ++w) worst = max(worst, warps_worst[w]);
        g.need[(i64)tile * gridDim.y + blockIdx.y] = worst;
    }
}

// What an element of the early refusal found, from its magnitudes' exact sum S: where it
// passes at no candidate, the refusal (F_REFUSED = 1); else F_LEAD becomes at least the index
// of the first candidate it passes at, and for each candidate c its ratio
// r_c = bound_c (1 + 2^-50) / (gu S) (it passes at c where r_c <= 1; `first_pass`'s
// arithmetic, exact but for the sum and the quotient), rounded to a float, joins the
// largest and smallest of the elements' (rows without sigma, computed natively, have none).
OZ_DEV void record_sample(const Guard& g, int S, const Side& a, const Side& b, int* flags) {
    const int first = first_pass(g, S, a, b);
    if (first == g.n) {
        flags[F_REFUSED] = 1;
        return;
    }
    if (first > 0) atomicMax(flags + F_LEAD, first);
    if (a.sigma == FLAG || b.sigma == FLAG) return;
    // It passes at `first`, so S > 0 and every ratio is finite.
    const double room = g.gu * (double)S;
    const double quarter_k = 0.25 * (double)g.k;
    unsigned* hi = reinterpret_cast<unsigned*>(flags + F_HI);
    unsigned* lo = reinterpret_cast<unsigned*>(flags + F_LO);
#pragma unroll
    for (int c = 0; c < MAX_CANDIDATES; ++c) {
        if (c >= g.n) break;
        const double bound =
            0.5 * (a.l1 * b.p[c]) + 0.5 * (b.l1 * a.p[c]) + quarter_k * (a.p[c] * b.p[c]);
        const unsigned bits = __float_as_uint(__double2float_rn(bound * (1.0 + 0x1p-50) / room));
        atomicMax(hi + c, bits);
        atomicMax(lo + c, 0x7fffffffu - bits);
    }
}

// Called by one thread of each block of the early refusal once its element is recorded (or
// it found none): the last block to finish settles the lead, the candidate the guard's
// passes split early for and the sure test tests: the latest candidate c the elements first
// pass at (which the product needs at least), or the next where the elements' ratios at c,
// extrapolated to the product's many elements, exceed 1: with hi and lo the largest and
// smallest ratio, where hi (hi / lo)^2 > 1. The product's ratios spread as the elements' do
// (rows of normal or ReLU elements spread them more than uniform ones), and a product of
// millions of elements reaches about two of the eight elements' spreads past their largest:
// where it does, some element needs the next count, and splitting for it early spares the
// guard's GEMM, its judge and a second split. A lead past what the product needs costs one
// modulus and changes no bound: the product then runs at it, and every element passes there.
OZ_DEV void settle_lead(int* flags, int n) {
    __threadfence();
    if (atomicAdd(flags + F_DONE, 1) != (int)gridDim.x - 1) return;
    __threadfence();
    volatile int* f = flags;
    if (f[F_REFUSED]) return;
    const int c = f[F_LEAD];
    if (c + 1 >= n) return;
    const unsigned hi = (unsigned)f[F_HI + c], lo = (unsigned)f[F_LO + c];
    if (hi == 0u || lo == 0u) return;
    const double top = (double)__uint_as_float(hi);
    const double spread = top / (double)__uint_as_float(0x7fffffffu - lo);
    if (top * spread * spread > 1.0) f[F_LEAD] = c + 1;
}

// The guard's early refusal, before its GEMM: a few elements' magnitudes' sums, computed
// exactly from the operands. Where one of those elements passes at no candidate, the judge
// would refuse the product, so *refused = 1 (the host zeroes it) and the guard's other passes
// leave without work. Block b of gridDim.x takes the element of the first row of X with a
// sigma at or after b * M / gridDim.x and the first such row of Y at or after b * N /
// gridDim.x (none where either has none). X's element (i, k) at X[i*xsr + k*xsk], Y's
// element (j, k) at Y[j*ysr + k*ysk], read for k < Kg. Inputs whose scales pair along k (X's
// large magnitudes where Y's are small), or whose rows each hold one huge entry, fail this
// way at every element.
template <typename T>
OZ_DEV void refuse(int M, int N, int Kg, const T* __restrict__ X, i64 xsr, i64 xsk,
                   const T* __restrict__ Y, i64 ysr, i64 ysk, const Guard& g, int* refused) {
    constexpr int NONE = 0x7fffffff;
    __shared__ int pick[2];
    __shared__ long long part[32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid < 2) pick[tid] = NONE;
    __syncthreads();
    for (int side = 0; side < 2; ++side) {
        const int n = side ? N : M;
        const int* sig = side ? g.sb : g.sa;
        for (int at = (int)((long long)blockIdx.x * n / gridDim.x); at < n; at += blockDim.x) {
            const int i = at + tid;
            const bool has = i < n && sig[i] != FLAG;
            if (has) atomicMin(&pick[side], i);
            if (__syncthreads_or(has)) break;
        }
    }
    __syncthreads();
    const int i = pick[0], j = pick[1];
    if (i == NONE || j == NONE) {
        if (tid == 0) settle_lead(refused, g.n);
        return;
    }
    const int sa = g.sa[i], sb = g.sb[j];
    const T* x = X + (i64)i * xsr;
    const T* y = Y + (i64)j * ysr;
    long long sum = 0;
#pragma unroll 4
    for (int k = tid; k < Kg; k += blockDim.x)
        sum += (long long)magnitude((double)x[(i64)k * xsk], sa) *
               magnitude((double)y[(i64)k * ysk], sb);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) part[warp] = sum;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) sum += part[w];
        // The sum fits an int, as the GEMM's: 127^2 * K < 2^31.
        const Side a(g.sa, g.la, g.ea, g.lde_a, i, g.n), b(g.sb, g.lb, g.eb, g.lde_b, j, g.n);
        record_sample(g, (int)sum, a, b, refused);
        settle_lead(refused, g.n);
    }
}

// The early refusal, run before the one-pass scalings (guard_rows) of the operands whose
// rows run along k and which those passes also split (`x_rows`, `y_rows`; they then leave at
// once where it refused): as `refuse`, but for such an operand each block gathers its row's
// guard data itself (row_guard_size, as guard_rows does: the same shifts, sigma and norm),
// from the first of up to REFUSE_TRIES rows at or after b * M / gridDim.x (or N) with a
// sigma (no element where those have none); the other operand's rows as its scaling left
// them. One block of ROWS_NT threads each, with K elements (rounded up to 16 bytes) and then
// Kg bytes of Y's magnitudes in dynamic shared memory.
constexpr int REFUSE_TRIES = 4;
template <typename T>
OZ_DEV bool refusal_side(int n, int K, const T* __restrict__ X, i64 xsr, bool gather,
                         const int* S, const double* L, const int* E, int ld, const GuardScale& gs,
                         T* row, Side& out, int& pick) {
    constexpr int NONE = 0x7fffffff;
    const int tid = threadIdx.x;
    const int at = (int)((long long)blockIdx.x * n / gridDim.x);
    if (gather) {
        for (int t = 0; t < REFUSE_TRIES && at + t < n; ++t) {
            load_row(row, X + (i64)(at + t) * xsr, K);
            const GuardSize z = row_guard_size(row, K);
            if (tid < 32) {
                // Warp 0 (which holds z whole): lane c the candidate c's ratio, all at once.
                Side a;
                a.sigma = sigma_of(z);
                a.l1 = scaled_norm(z, a.sigma);
                const double pc = tid < gs.n ? exp2i(a.sigma - candidate_shift(z, gs, tid)) : 0.0;
#pragma unroll
                for (int c = 0; c < MAX_CANDIDATES; ++c) a.p[c] = __shfl_sync(0xffffffffu, pc, c);
                if (tid == 0) {
                    out = a;
                    pick = at + t;
                }
            }
            __syncthreads();
            if (out.sigma != FLAG) return true;
            __syncthreads();  // every thread has read out.sigma
        }
        return false;
    }
    if (tid == 0) pick = NONE;
    __syncthreads();
    for (int i0 = at; i0 < n; i0 += ROWS_NT) {
        const int i = i0 + tid;
        const bool has = i < n && S[i] != FLAG;
        if (has) atomicMin(&pick, i);
        if (__syncthreads_or(has)) break;
    }
    if (pick == NONE) return false;
    if (tid == 0) out = Side(S, L, E, ld, pick, gs.n);
    __syncthreads();
    return true;
}
template <typename T>
OZ_DEV void refuse_rows(int M, int N, int K, int Kg, const T* __restrict__ X, i64 xsr, i64 xsk,
                        const T* __restrict__ Y, i64 ysr, i64 ysk, int x_rows, int y_rows,
                        const Guard& g, const GuardScale& gs, int* refused) {
    extern __shared__ __align__(16) unsigned char rows_smem[];
    T* row = reinterpret_cast<T*>(rows_smem);
    unsigned char* mag = rows_smem + ((K * (int)sizeof(T) + 15) & ~15);
    __shared__ int pick;
    __shared__ Side side_a, side_b;
    __shared__ long long part[ROWS_WARPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Y's row and its magnitudes (from the row in shared memory where gathered), then X's.
    if (!refusal_side(N, K, Y, ysr, y_rows, g.sb, g.lb, g.eb, g.lde_b, gs, row, side_b, pick)) {
        if (tid == 0) settle_lead(refused, g.n);
        return;
    }
    const int sb = side_b.sigma;
    const T* y = Y + (i64)pick * ysr;
    for (int k = tid; k < Kg; k += ROWS_NT)
        mag[k] = (unsigned char)magnitude(y_rows ? (double)row[k] : (double)y[(i64)k * ysk], sb);
    __syncthreads();
    if (!refusal_side(M, K, X, xsr, x_rows, g.sa, g.la, g.ea, g.lde_a, gs, row, side_a, pick)) {
        if (tid == 0) settle_lead(refused, g.n);
        return;
    }
    const Side a = side_a, b = side_b;
    const T* x = X + (i64)pick * xsr;
    long long sum = 0;
#pragma unroll 4
    for (int k = tid; k < Kg; k += ROWS_NT)
        sum += (long long)magnitude(x_rows ? (double)row[k] : (double)x[(i64)k * xsk], a.sigma) *
               mag[k];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) part[warp] = sum;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < ROWS_WARPS; ++w) sum += part[w];
        // The sum fits an int, as the GEMM's: 127^2 * K < 2^31.
        record_sample(g, (int)sum, a, b, refused);
        settle_lead(refused, g.n);
    }
}

// C'_ij * 2^-shift rounded once to T, from S = sum_p T_p * W_p in L partial 64-bit limbs:
// L = 3 up to 8 moduli (S < 9 * 2^25 * M < 2^96), 5 up to 16 (< 2^160), 6 beyond.
template <typename T, int L>
OZ_DEV T finish(const unsigned long long (&acc)[L], int shift, const Consts& c) {
    // Limbs of D = C' in two's complement: |C'| <= M/4 < 2^62, 2^124, 2^139 for L = 3, 5, 6.
    constexpr int NL = L - 1;
    unsigned s[L];
    unsigned long long carry = 0;
#pragma unroll
    for (int t = 0; t < L; ++t) {
        const unsigned long long v = acc[t] + carry;
        s[t] = (unsigned)v;
        carry = v >> 32;
    }
    // No carry out of the top limb. q = round(S / M) < 2^29: S/M = q + C'/M with
    // |C'/M| <= 1/4, and the estimate below is off by less than 2^-20.
    double sd = 0.0;
#pragma unroll
    for (int t = L - 1; t >= 0; --t) sd = fma(sd, 0x1p32, (double)s[t]);
    const unsigned q = __double2uint_rn(sd * c.inv_m);
    // D = S - q*M = S + q*(2^(32 NL) - M) modulo 2^(32 NL): C' in two's complement.
    unsigned d[5] = {0, 0, 0, 0, 0};
    carry = 0;
#pragma unroll
    for (int t = 0; t < NL; ++t) {
        const unsigned long long v = (unsigned long long)q * c.nm[t] + s[t] + carry;
        d[t] = (unsigned)v;
        carry = v >> 32;
    }
    const bool neg = (int)d[NL - 1] < 0;
    // |D| (two's complement negation where negative), then its top 64 bits with a sticky bit
    // for the rest, rounded once to T.
    const unsigned flip = neg ? 0xffffffffu : 0u;
    carry = neg;
#pragma unroll
    for (int t = 0; t < NL; ++t) {
        const unsigned long long v = (unsigned long long)(d[t] ^ flip) + carry;
        d[t] = (unsigned)v;
        carry = v >> 32;
    }
    int e = 0;
    unsigned sticky = 0;
    if (NL == 5 && d[4] != 0) {  // the window of the top four limbs
        sticky = d[0];
#pragma unroll
        for (int t = 0; t < 4; ++t) d[t] = d[t + 1];
        e = 32;
    }
    const unsigned long long hi = ((unsigned long long)d[3] << 32) | d[2];
    const unsigned long long lo = ((unsigned long long)d[1] << 32) | d[0];
    T x;
    if (hi == 0) {
        x = to_t(lo, (T)0);  // exact below 2^64 but for this one rounding
    } else {
        const int lz = __clzll((long long)hi);
        const unsigned long long top = lz ? (hi << lz) | (lo >> (64 - lz)) : hi;
        const unsigned long long rest = lz ? lo << lz : lo;
        x = to_t(top | (unsigned long long)((rest | sticky) != 0), (T)0);
        e += 64 - lz;
    }
    return scale_t(neg ? -x : x, e - shift);
}

struct alignas(16) d2 {
    double x, y;
};
struct alignas(16) f4 {
    float x, y, z, w;
};
OZ_DEV void store4(double* p, const double (&v)[4]) {
    reinterpret_cast<d2*>(p)[0] = d2{v[0], v[1]};
    reinterpret_cast<d2*>(p)[1] = d2{v[2], v[3]};
}
OZ_DEV void store4(float* p, const float (&v)[4]) {
    *reinterpret_cast<f4*>(p) = f4{v[0], v[1], v[2], v[3]};
}

// C_ij from the residues of C'_ij (see the file header). Each thread makes 4 adjacent outputs
// of a row, reading each modulus's 4 residues as one word where N % 4 == 0. For up to
// 2 * P moduli: S in L limbs, each W_p in WL (M < 2^(32 WL)); the pairs past the count
// have zero residues and constants and add nothing.
// The residues of outputs j0 .. j0 + 3 of row i for every modulus l < count, a word a
// modulus (output j0 + e in byte e), from R[l][M][N] ...
struct Residues {
    template <int LAYERS>
    static OZ_DEV void load(int M, int N, int i, int j0, const unsigned char* __restrict__ R,
                            const Consts& c, unsigned (&w)[LAYERS]) {
        const i64 mn = (i64)M * N;
        const bool words = (N & 3) == 0;  // R's layers and rows 4-byte aligned (R itself is)
        const unsigned char* r = R + (i64)i * N + j0;  // layer l's residues of the quad
#pragma unroll
        for (int l = 0; l < LAYERS; ++l, r += mn) {
            w[l] = 0;
            if (l < c.count) {
                if (words) {
                    w[l] = *reinterpret_cast<const unsigned*>(r);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (j0 + e < N) w[l] |= (unsigned)r[e] << (8 * e);
                }
            }
        }
    }
};
// ... or from the Karatsuba form's three products (see THE KARATSUBA FORM), N = 2 Nc outputs
// a row, the parts of complex column j at outputs 2j and 2j + 1: product t's layer l at
// R + (t * count + l) * M * Nc, each M x Nc, so that the quad is two complex columns.
struct KaratsubaResidues {
    template <int LAYERS>
    static OZ_DEV void load(int M, int N, int i, int j0, const unsigned char* __restrict__ R,
                            const Consts& c, unsigned (&w)[LAYERS]) {
        const int nc = N >> 1, jc = j0 >> 1;
        const i64 mn = (i64)M * nc, part = (i64)c.count * mn;
        const bool two = jc + 1 < nc;
        const unsigned char* r = R + (i64)i * nc + jc;
#pragma unroll
        for (int l = 0; l < LAYERS; ++l, r += mn) {
            w[l] = 0;
            if (l < c.count) {
                const unsigned m = c.moduli[l];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if (h == 1 && !two) break;
                    const unsigned t1 = r[h], t2 = r[part + h], t3 = r[2 * part + h];
                    unsigned re = t1 + m - t2;  // in [1, 2m)
                    re -= re >= m ? m : 0u;
                    unsigned im = t3 + 2 * m - t1 - t2;  // in (0, 3m)
                    im -= im >= m ? m : 0u;
                    im -= im >= m ? m : 0u;
                    w[l] |= (re | im << 8) << (16 * h);
                }
            }
        }
    }
};

template <typename T, int P, int WL, int L, typename Load>
OZ_DEV void rebuild(int M, int N, int K, const unsigned char* __restrict__ R,
                    const int* __restrict__ EA, const int* __restrict__ EB, T* __restrict__ C,
                    i64 ldc, const T* __restrict__ A, i64 asr, i64 ask, const T* __restrict__ B,
                    i64 bsr, i64 bsk, const Consts& c) {
    // Rows on grid y, column quads on x.
    for (int i = blockIdx.y; i < M; i += gridDim.y)
    for (int j0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x); j0 < N;
         j0 += 4 * gridDim.x * blockDim.x) {
        const int ea = EA[i];
        unsigned w[2 * P];
        Load::load(M, N, i, j0, R, c, w);
        T v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = j0 + e;
            if (j >= N) break;
            const int eb = EB[j];
            T* out = v + e;
            if (ea == FLAG || eb == FLAG) {
                // A row with Inf or NaN: the plain dot product, as the native product
                // computes it.
                double s = 0.0;
                for (int k = 0; k < K; ++k)
                    s = fma((double)A[(i64)i * asr + (i64)k * ask],
                            (double)B[(i64)j * bsr + (i64)k * bsk], s);
                *out = (T)s;
                continue;
            }
            // S = sum_p T_p * W_p, exactly, in 64-bit partial limbs (each < 9 * 2^57).
            unsigned long long acc[L];
#pragma unroll
            for (int t = 0; t < L; ++t) acc[t] = 0;
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const unsigned ra = __byte_perm(w[2 * p], 0, 0x4440 + e);
                const unsigned rb = __byte_perm(w[2 * p + 1], 0, 0x4440 + e);
                const unsigned t = ra * c.e[p][0] + rb * c.e[p][1];
                // 32 x 32 -> 64-bit multiply-adds.
#pragma unroll
                for (int u = 0; u < WL; ++u)
                    acc[u] += (unsigned long long)t * (unsigned long long)c.w[p][u];
            }
            *out = finish<T, L>(acc, ea + eb, c);
        }
        // The four outputs: two 16-byte stores (double) or one (float) where aligned.
        T* out = C + (i64)i * ldc + j0;
        if (j0 + 3 < N && (reinterpret_cast<unsigned long long>(out) & 15) == 0) {
            store4(out, v);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (j0 + e < N) out[e] = v[e];
        }
    }
}

}  // namespace oz

extern "C" __global__ void __launch_bounds__(1024) ozaki_scale_d(int R, int K, const double* X,
                                                                i64 sr, i64 sk, int bits,
                                                                double bound, int* E) {
    GD_AFTER_PREVIOUS();
    oz::scale<oz::RowSize>(R, K, X, sr, sk, oz::ShiftOut{E, bits, bound});
}
extern "C" __global__ void __launch_bounds__(1024) ozaki_scale_s(int R, int K, const float* X,
                                                                i64 sr, i64 sk, int bits,
                                                                double bound, int* E) {
    GD_AFTER_PREVIOUS();
    oz::scale<oz::RowSize>(R, K, X, sr, sk, oz::ShiftOut{E, bits, bound});
}
extern "C" __global__ void __launch_bounds__(1024)
    ozaki_guard_scale_d(int R, int K, const double* X, i64 sr, i64 sk, oz::GuardScale g, int* E,
                        int ldE, int* S, double* L) {
    GD_AFTER_PREVIOUS();
    oz::scale<oz::GuardSize>(R, K, X, sr, sk, oz::GuardOut{E, ldE, S, L, g});
}
extern "C" __global__ void __launch_bounds__(1024)
    ozaki_guard_scale_s(int R, int K, const float* X, i64 sr, i64 sk, oz::GuardScale g, int* E,
                        int ldE, int* S, double* L) {
    GD_AFTER_PREVIOUS();
    oz::scale<oz::GuardSize>(R, K, X, sr, sk, oz::GuardOut{E, ldE, S, L, g});
}
extern "C" __global__ void __launch_bounds__(256, 4)
    ozaki_split_d(int R, int K, const double* X, i64 sr, i64 sk, const int* E, signed char* P,
                  int Rp, int Kp, int TM, oz::Consts c) {
    GD_AFTER_PREVIOUS();
    oz::panels(R, K, X, sr, sk, P, Rp, Kp, TM, oz::SplitResidues{E, c});
}
extern "C" __global__ void __launch_bounds__(256, 4)
    ozaki_split_s(int R, int K, const float* X, i64 sr, i64 sk, const int* E, signed char* P,
                  int Rp, int Kp, int TM, oz::Consts c) {
    GD_AFTER_PREVIOUS();
    oz::panels(R, K, X, sr, sk, P, Rp, Kp, TM, oz::SplitResidues{E, c});
}
extern "C" __global__ void __launch_bounds__(256, 4)
    ozaki_split_int_d(int R, int K, const double* X, i64 sr, i64 sk, const int* E,
                      signed char* P, int Rp, int Kp, int TM, oz::Consts c) {
    GD_AFTER_PREVIOUS();
    oz::panels(R, K, X, sr, sk, P, Rp, Kp, TM, oz::SplitResiduesInt{E, c});
}
extern "C" __global__ void __launch_bounds__(256, 4)
    ozaki_split_int_s(int R, int K, const float* X, i64 sr, i64 sk, const int* E,
                      signed char* P, int Rp, int Kp, int TM, oz::Consts c) {
    GD_AFTER_PREVIOUS();
    oz::panels(R, K, X, sr, sk, P, Rp, Kp, TM, oz::SplitResiduesInt{E, c});
}
extern "C" __global__ void __launch_bounds__(oz::ROWS_NT)
    ozaki_guard_rows_d(int R, int K, const double* X, i64 sr, oz::GuardScale g, int* E, int ldE,
                       int* S, double* L, signed char* P, int Kg, int Kgp, int TM,
                       signed char* RP, int Rp, int Kp, oz::Consts c, oz::Consts c1,
                       const int* refused) {
    GD_AFTER_PREVIOUS();
    oz::guard_rows(R, K, X, sr, oz::GuardOut{E, ldE, S, L, g}, P, Kg, Kgp, TM, RP, Rp, Kp, c,
                   c1, refused);
}
extern "C" __global__ void __launch_bounds__(oz::ROWS_NT)
    ozaki_guard_rows_s(int R, int K, const float* X, i64 sr, oz::GuardScale g, int* E, int ldE,
                       int* S, double* L, signed char* P, int Kg, int Kgp, int TM,
                       signed char* RP, int Rp, int Kp, oz::Consts c, oz::Consts c1,
                       const int* refused) {
    GD_AFTER_PREVIOUS();
    oz::guard_rows(R, K, X, sr, oz::GuardOut{E, ldE, S, L, g}, P, Kg, Kgp, TM, RP, Rp, Kp, c,
                   c1, refused);
}
extern "C" __global__ void __launch_bounds__(256, 4)
    ozaki_magnitudes_d(int R, int K, const double* X, i64 sr, i64 sk, const int* S,
                       signed char* PM, int Kg, int Kgp, const int* E, signed char* P, int Rp,
                       int Kp, int TM, const int* refused, oz::Consts c,
                       oz::Consts c1) {
    GD_AFTER_PREVIOUS();
    oz::magnitudes(R, K, X, sr, sk, S, PM, Kg, Kgp, E, P, Rp, Kp, TM, refused, c, c1);
}
extern "C" __global__ void __launch_bounds__(256, 4)
    ozaki_magnitudes_s(int R, int K, const float* X, i64 sr, i64 sk, const int* S,
                       signed char* PM, int Kg, int Kgp, const int* E, signed char* P, int Rp,
                       int Kp, int TM, const int* refused, oz::Consts c,
                       oz::Consts c1) {
    GD_AFTER_PREVIOUS();
    oz::magnitudes(R, K, X, sr, sk, S, PM, Kg, Kgp, E, P, Rp, Kp, TM, refused, c, c1);
}
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(oz::NT, 1)
    ozaki_gemm(int M, int N, const signed char* PA, const signed char* PB, int Mp, int Np, int Kp,
               unsigned char* R, oz::Consts c, int pair_m, int group, int z0, const int* gate,
               int lo, int hi) {
    GD_AFTER_PREVIOUS();
    // The cluster's two blocks alike, before any barrier.
    if (gate != nullptr && !oz::gate_holds(gate, lo, hi)) return;
    oz::gemm(M, N, PA + (i64)z0 * Mp * Kp, PB + (i64)z0 * Np * Kp, Mp, Np, Kp, c.count - z0,
             pair_m, group, oz::ResidueTail{R, c, z0});
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(oz::NT, 1)
    ozaki_guard_gemm(int M, int N, const signed char* PA, const signed char* PB, int Mp, int Np,
                     int Kp, int pair_m, int group, int* S, const int* refused) {
    GD_AFTER_PREVIOUS();
    if (*refused) return;  // the cluster's two blocks alike, before any barrier
    oz::gemm(M, N, PA, PB, Mp, Np, Kp, 1, pair_m, group, oz::GuardTail{S});
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(oz::NT, 1)
    ozaki_guard_sure_gemm(int M, int N, const signed char* PA, const signed char* PB, int Mp,
                          int Np, int Kp, int pair_m, int group, const oz::Key* KX,
                          const oz::Key* KY, int* unsure, const int* refused) {
    GD_AFTER_PREVIOUS();
    if (*refused) return;  // the cluster's two blocks alike, before any barrier
    oz::gemm(M, N, PA, PB, Mp, Np, Kp, 1, pair_m, group, oz::SureTail{KX, KY, unsure});
}
#endif
extern "C" __global__ void __launch_bounds__(oz::MMA_NT, 1)
    ozaki_gemm_mma(int M, int N, const signed char* PA, const signed char* PB, int Mp, int Np,
                   int Kp, unsigned char* R, oz::Consts c, int z0, const int* gate, int lo,
                   int hi) {
    GD_AFTER_PREVIOUS();
    if (gate != nullptr && !oz::gate_holds(gate, lo, hi)) return;
    oz::gemm_mma(M, N, PA + (i64)z0 * Mp * Kp, PB + (i64)z0 * Np * Kp, Mp, Np, Kp,
                 oz::ResidueTail{R, c, z0});
}
extern "C" __global__ void __launch_bounds__(oz::MMA_NT, 1)
    ozaki_guard_gemm_mma(int M, int N, const signed char* PA, const signed char* PB, int Mp,
                         int Np, int Kp, int* S, const int* refused) {
    GD_AFTER_PREVIOUS();
    if (*refused) return;
    oz::gemm_mma(M, N, PA, PB, Mp, Np, Kp, oz::GuardTail{S});
}
extern "C" __global__ void __launch_bounds__(oz::MMA_NT, 1)
    ozaki_guard_sure_gemm_mma(int M, int N, const signed char* PA, const signed char* PB, int Mp,
                              int Np, int Kp, const oz::Key* KX, const oz::Key* KY, int* unsure,
                              const int* refused) {
    GD_AFTER_PREVIOUS();
    if (*refused) return;
    oz::gemm_mma(M, N, PA, PB, Mp, Np, Kp, oz::SureTail{KX, KY, unsure});
}
extern "C" __global__ void __launch_bounds__(256)
    ozaki_guard_keys(oz::Guard g, int M, int Mp, int N, int Np, oz::Key* KX, oz::Key* KY,
                     const int* refused) {
    GD_AFTER_PREVIOUS();
    if (*refused) return;
    oz::keys(g, M, Mp, N, Np, KX, KY, refused[oz::F_LEAD]);
}
extern "C" __global__ void __launch_bounds__(256)
    ozaki_guard_judge(int M, int N, const int* S, int tm, int tn, oz::Guard g,
                      const int* refused) {
    GD_AFTER_PREVIOUS();
    if (*refused) return;
    oz::judge(M, N, S, tm, tn, g);
}
extern "C" __global__ void __launch_bounds__(1024)
    ozaki_guard_refuse_d(int M, int N, int Kg, const double* X, i64 xsr, i64 xsk, const double* Y,
                         i64 ysr, i64 ysk, oz::Guard g, int* refused) {
    GD_AFTER_PREVIOUS();
    oz::refuse(M, N, Kg, X, xsr, xsk, Y, ysr, ysk, g, refused);
}
extern "C" __global__ void __launch_bounds__(oz::ROWS_NT)
    ozaki_guard_refuse_rows_d(int M, int N, int K, int Kg, const double* X, i64 xsr, i64 xsk,
                              const double* Y, i64 ysr, i64 ysk, int x_rows, int y_rows,
                              oz::Guard g, oz::GuardScale gs, int* refused) {
    GD_AFTER_PREVIOUS();
    oz::refuse_rows(M, N, K, Kg, X, xsr, xsk, Y, ysr, ysk, x_rows, y_rows, g, gs, refused);
}
extern "C" __global__ void __launch_bounds__(oz::ROWS_NT)
    ozaki_guard_refuse_rows_s(int M, int N, int K, int Kg, const float* X, i64 xsr, i64 xsk,
                              const float* Y, i64 ysr, i64 ysk, int x_rows, int y_rows,
                              oz::Guard g, oz::GuardScale gs, int* refused) {
    GD_AFTER_PREVIOUS();
    oz::refuse_rows(M, N, K, Kg, X, xsr, xsk, Y, ysr, ysk, x_rows, y_rows, g, gs, refused);
}
extern "C" __global__ void __launch_bounds__(1024)
    ozaki_guard_refuse_s(int M, int N, int Kg, const float* X, i64 xsr, i64 xsk, const float* Y,
                         i64 ysr, i64 ysk, oz::Guard g, int* refused) {
    GD_AFTER_PREVIOUS();
    oz::refuse(M, N, Kg, X, xsr, xsk, Y, ysr, ysk, g, refused);
}
// ozaki_rebuildN_* (and ozaki_krebuildN_*, the Karatsuba form's): up to N moduli.
#define OZ_REBUILD(NAME, T, P, WL, L, MIN_BLOCKS, LOAD)                                        \
    extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)                             \
        NAME(int M, int N, int K, const unsigned char* R, const int* EA, const int* EB, T* C, \
             i64 ldc, const T* A, i64 asr, i64 ask, const T* B, i64 bsr, i64 bsk,           \
             oz::Consts c) {                                                                  \
        GD_AFTER_PREVIOUS();                                                                  \
        oz::rebuild<T, P, WL, L, LOAD>(M, N, K, R, EA, EB, C, ldc, A, asr, ask, B, bsr, bsk,  \
                                       c);                                                    \
    }
OZ_REBUILD(ozaki_rebuild8_d, double, 4, 2, 3, 4, oz::Residues)
OZ_REBUILD(ozaki_rebuild8_s, float, 4, 2, 3, 4, oz::Residues)
OZ_REBUILD(ozaki_rebuild16_d, double, 8, 4, 5, 4, oz::Residues)
OZ_REBUILD(ozaki_rebuild16_s, float, 8, 4, 5, 3, oz::Residues)
OZ_REBUILD(ozaki_rebuild18_d, double, 9, 5, 6, 1, oz::Residues)
OZ_REBUILD(ozaki_rebuild18_s, float, 9, 5, 6, 1, oz::Residues)
OZ_REBUILD(ozaki_krebuild8_d, double, 4, 2, 3, 4, oz::KaratsubaResidues)
OZ_REBUILD(ozaki_krebuild8_s, float, 4, 2, 3, 4, oz::KaratsubaResidues)
OZ_REBUILD(ozaki_krebuild16_d, double, 8, 4, 5, 4, oz::KaratsubaResidues)
OZ_REBUILD(ozaki_krebuild16_s, float, 8, 4, 5, 3, oz::KaratsubaResidues)
OZ_REBUILD(ozaki_krebuild18_d, double, 9, 5, 6, 1, oz::KaratsubaResidues)
OZ_REBUILD(ozaki_krebuild18_s, float, 9, 5, 6, 1, oz::KaratsubaResidues)
extern "C" __global__ void __launch_bounds__(256, 4)
    ozaki_ksplit_d(int R, int K, const double* X, i64 sr, i64 sq, i64 sd, const int* E, int es,
                   signed char* P, int Rp, int Kp, int TM, oz::Consts c) {
    GD_AFTER_PREVIOUS();
    oz::karatsuba_panels(R, K, X, sr, sq, sd, E, es, P, Rp, Kp, TM, c);
}
extern "C" __global__ void __launch_bounds__(256, 4)
    ozaki_ksplit_s(int R, int K, const float* X, i64 sr, i64 sq, i64 sd, const int* E, int es,
                   signed char* P, int Rp, int Kp, int TM, oz::Consts c) {
    GD_AFTER_PREVIOUS();
    oz::karatsuba_panels(R, K, X, sr, sq, sd, E, es, P, Rp, Kp, TM, c);
}
// ozaki_pair_shifts(int Nc, int layers, int* E, int ldE): E[l * ldE + 2j] and [.. + 2j + 1]
// both the smaller of the two (FLAG where either is), for j < Nc and l < layers; any grid.
extern "C" __global__ void __launch_bounds__(256)
    ozaki_pair_shifts(int Nc, int layers, int* E, int ldE) {
    GD_AFTER_PREVIOUS();
    const i64 total = (i64)Nc * layers;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (i64)gridDim.x * blockDim.x) {
        int* e = E + (t / Nc) * ldE + 2 * (t % Nc);
        const int s = min(e[0], e[1]);  // FLAG is the least int
        e[0] = s;
        e[1] = s;
    }
}
