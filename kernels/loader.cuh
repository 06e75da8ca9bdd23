// loader.cuh -- the cp.async tile loaders of the tiled GEMMs: each thread's share of an operand
// tile (global memory) copied into a shared-memory stage, unguarded for interior tiles or
// zero-filling at the edges; and the copy of one K tile of both operands into a stage.
//
// Included after common.cuh and cp_async.cuh; the crate splices it in as it does common.cuh.
#ifndef GPU_DOT_LOADER_CUH
#define GPU_DOT_LOADER_CUH

namespace gd {

// The tensor-core GEMMs' loader (mma.sync): operand X (extent BX along x = m or n, BK along k)
// of element type T into a stage that keeps its global orientation: S[x][k] (KC, row stride
// BK + 4) or S[k][x] (!KC, row stride BX + XPAD).
//   KC: element (x, k) at G[x*ld + k]   (A with TA=false, B with TB=true)
//   else: element (x, k) at G[k*ld + x] (A with TA=true,  B with TB=false)
// VEC: 16-byte copies along the contiguous direction; else copies of one element.
// Tiles must be loaded in increasing k order (the loader advances itself).
template <typename T, int BX, int BK, int NT, int XPAD, bool KC, bool VEC>
struct TileLoader {
    static constexpr int SK = BK + 4, SX = BX + XPAD;
    static constexpr unsigned ES = sizeof(T);                // bytes per element
    static constexpr int E = VEC ? 16 / (int)sizeof(T) : 1;  // elements per copy
    static constexpr int U = KC ? BK / E : BX / E;           // copies per contiguous row
    static constexpr int RP = NT / U;                        // rows per pass
    static constexpr int PASSES = (KC ? BX : BK) / RP;
    static_assert(NT % U == 0 && (KC ? BX : BK) % RP == 0, "loader map");

    const T* g0;    // operand base (valid address used as dummy source for zero-fill)
    const T* g;     // this thread's first source element for the current k tile
    long long ld;
    int xrem;       // number of valid x from this thread's first x (may be <= 0)
    int krem;       // number of valid k from this thread's first k in the current tile
    unsigned sdst;  // this thread's byte offset inside a stage (first copy)

    GD_DEV TileLoader(const T* G, long long ld_, int X, int K, int x0, int tid) {
        g0 = G;
        ld = ld_;
        const int r = tid / U, c = (tid % U) * E;
        if constexpr (KC) {
            g = G + (long long)(x0 + r) * ld + c;
            xrem = X - x0 - r;
            krem = K - c;
            sdst = (unsigned)(r * SK + c) * ES;
        } else {
            g = G + (long long)r * ld + x0 + c;
            xrem = X - x0 - c;
            krem = K - r;
            sdst = (unsigned)(r * SX + c) * ES;
        }
    }

    template <bool GUARD>
    GD_DEV void load(unsigned stage_addr) {
        const unsigned d = stage_addr + sdst;
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const T* src = g + (long long)(p * RP) * ld;
            const unsigned dd = d + (unsigned)(p * RP * (KC ? SK : SX)) * ES;
            if constexpr (!GUARD) {
                cp_async<VEC ? 16 : ES>(dd, src);
            } else {
                // valid elements of this copy
                int nb;
                if constexpr (KC) {
                    nb = (p * RP < xrem) ? (krem < E ? krem : E) : 0;
                } else {
                    nb = (p * RP < krem) ? (xrem < E ? xrem : E) : 0;
                }
                nb = nb < 0 ? 0 : nb;
                cp_async_z<VEC ? 16 : ES>(dd, nb ? src : g0, nb * (int)ES);
            }
        }
        g += KC ? (long long)BK : (long long)BK * ld;
        krem -= BK;
    }
};

// Where a warp's mma.sync fragments lie in a stage of two TileLoaders (CF's strides: SK of the
// S[x][k] rows, SXA and SXB of the S[k][x] rows of A and B): element (m, k) of A's tile at
// m*SK + k (!TA) or k*SXA + m (TA), element (k, n) of B's at n*SK + k (TB) or k*SXB + n (!TB).
// A_M8 and A_K4 step 8 rows and 4 k of A, B_N8 and B_K4 8 columns and 4 k of B.
template <class CF, bool TA, bool TB>
struct MmaFragments {
    static constexpr int A_M8 = TA ? 8 : 8 * CF::SK, A_K4 = TA ? 4 * CF::SXA : 4;
    static constexpr int B_N8 = TB ? 8 * CF::SK : 8, B_K4 = TB ? 4 : 4 * CF::SXB;
};

// The SIMT GEMM's loader (sgemm_fast.cu): FP32 operand X (extent BX along x = m or n, BK along
// k) into a stage laid out k-major, S[k][x] with row stride P floats, whichever way X lies.
//   KCONTIG: element (x, k) at G[x*ld + k]   (A with TA=false, B with TB=true): 4-byte copies,
//            transposing on the fly (8 consecutive k x 4 rows per warp: sector-complete reads,
//            and with P = BX + 4 conflict-free shared stores)
//   else   : element (x, k) at G[k*ld + x]   (A with TA=true,  B with TB=false): 16-byte
//            copies (VEC) or 4-byte ones along x
// Tiles must be loaded in increasing k order (the loader advances itself).
template <int BX, int BK, int NT, int P, bool KCONTIG, bool VEC>
struct KMajorLoader {
    // The cursor, as TileLoader's.
    const float *g0, *g;
    long long ld;
    int xrem, krem;
    unsigned sdst;

    // ---- KCONTIG (always 4-byte copies) ----
    static constexpr int RPP = NT / 8;       // rows per pass
    static constexpr int NR = BX / RPP;      // rows per thread
    static constexpr int NH = BK / 8;        // k-halves per thread
    // ---- x-contiguous, 16-byte ----
    static constexpr int XQ = BX / 4;
    static constexpr int KSTEP16 = NT / XQ;
    static constexpr int NS16 = BK / KSTEP16;
    // ---- x-contiguous, 4-byte ----
    static constexpr int KSTEP4 = NT / BX;
    static constexpr int NS4 = BK / KSTEP4;

    GD_DEV KMajorLoader(const float* G, long long ld_, int X, int K, int x0, int tid) {
        g0 = G;
        ld = ld_;
        if constexpr (KCONTIG) {
            static_assert(NT % 8 == 0 && BX % RPP == 0 && BK % 8 == 0, "kcontig map");
            const int xb = tid >> 3, kl = tid & 7;
            g = G + (long long)(x0 + xb) * ld + kl;
            xrem = X - x0 - xb;
            krem = K - kl;
            sdst = (unsigned)(kl * P + xb) * 4u;
        } else if constexpr (VEC) {
            static_assert(NT % XQ == 0 && BK % KSTEP16 == 0, "vec map");
            const int xq = tid % XQ, kb = tid / XQ;
            g = G + (long long)kb * ld + x0 + 4 * xq;
            xrem = X - x0 - 4 * xq;
            krem = K - kb;
            sdst = (unsigned)(kb * P + 4 * xq) * 4u;
        } else {
            static_assert(NT % BX == 0 && BK % KSTEP4 == 0, "scalar map");
            const int xs = tid % BX, kb = tid / BX;
            g = G + (long long)kb * ld + x0 + xs;
            xrem = X - x0 - xs;
            krem = K - kb;
            sdst = (unsigned)(kb * P + xs) * 4u;
        }
    }

    template <bool GUARD>
    GD_DEV void load(unsigned stage_addr) {
        const unsigned d = stage_addr + sdst;
        if constexpr (KCONTIG) {
#pragma unroll
            for (int r = 0; r < NR; ++r) {
                const float* gr = g + (long long)(r * RPP) * ld;
#pragma unroll
                for (int h = 0; h < NH; ++h) {
                    const unsigned dd = d + (unsigned)((8 * h) * P + r * RPP) * 4u;
                    if constexpr (!GUARD) {
                        cp_async<4>(dd, gr + 8 * h);
                    } else {
                        const bool ok = (r * RPP < xrem) && (8 * h < krem);
                        cp_async_z<4>(dd, ok ? gr + 8 * h : g0, ok ? 4 : 0);
                    }
                }
            }
            g += BK;
        } else {
            // x-contiguous: KSTEP k rows a pass, 16-byte (VEC) or 4-byte copies along x
            constexpr int KSTEP = VEC ? KSTEP16 : KSTEP4, NS = VEC ? NS16 : NS4;
#pragma unroll
            for (int s = 0; s < NS; ++s) {
                const float* gs = g + (long long)(s * KSTEP) * ld;
                const unsigned dd = d + (unsigned)(s * KSTEP * P) * 4u;
                if constexpr (!GUARD) {
                    cp_async<VEC ? 16 : 4>(dd, gs);
                } else if constexpr (VEC) {
                    int nb = xrem < 4 ? xrem : 4;
                    nb = nb < 0 ? 0 : nb;
                    if (s * KSTEP >= krem) nb = 0;
                    cp_async_z<16>(dd, nb ? gs : g0, nb * 4);
                } else {
                    const bool ok = (xrem > 0) && (s * KSTEP < krem);
                    cp_async_z<4>(dd, ok ? gs : g0, ok ? 4 : 0);
                }
            }
            g += (long long)BK * ld;
        }
        krem -= BK;
    }
};

}  // namespace gd

// The copy of K tile NT_ of both operands into stage SLOT_, as a statement in a tiled GEMM's
// body, from its names: loaders la and lb, stages of CF::STAGE elements of ES bytes from shared
// address sbase (A's CF::A_STAGE first), K tiles BK wide, KT of them in K. Unguarded copies
// where the block is `interior` and the tile whole in K, else zero-filling ones, and none past
// the last tile; always commits one group. (A macro rather than a function: each main loop
// compiles exactly as with the statement written out, which a function did not.)
#define GD_COPY_K_TILE(ES, NT_, SLOT_)                                        \
    {                                                                         \
        if ((NT_) < KT) {                                                     \
            const unsigned sa = sbase + (unsigned)((SLOT_) * CF::STAGE) * ES; \
            const unsigned sb = sa + (unsigned)CF::A_STAGE * ES;              \
            if (interior && K - (NT_) * BK >= BK) {                           \
                la.template load<false>(sa);                                  \
                lb.template load<false>(sb);                                  \
            } else {                                                          \
                la.template load<true>(sa);                                   \
                lb.template load<true>(sb);                                   \
            }                                                                 \
        }                                                                     \
        gd::cp_commit();                                                      \
    }

#endif  // GPU_DOT_LOADER_CUH
