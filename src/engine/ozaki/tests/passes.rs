//! What the device's passes share: the INT8 GEMM's tiles and their order, the workspace's
//! sections, and the gate as the kernel reads it.

use super::*;

#[test]
fn the_gemm_pairs_whole_tiles() {
    // (m, n) → (tile rows paired, Mp, Np)
    assert_eq!(pairing(4096, 4096), (true, 4224, 4096));
    assert_eq!(pairing(8192, 8192), (false, 8256, 8192));
    assert_eq!(pairing(100, 100), (true, 384, 256));
    assert_eq!(pairing(150, 400), (false, 192, 512));
    assert_eq!(pairing(150, 600), (true, 384, 768));
    for m in [1, 191, 192, 193, 384, 385, 5000] {
        for n in [1, 255, 256, 257, 512, 513, 5000] {
            let (pair_m, mp, np) = pairing(m, n);
            assert!(mp >= m && np >= n && mp % 192 == 0 && np % 256 == 0);
            let pairs_of = if pair_m { mp / 192 } else { np / 256 };
            assert_eq!(pairs_of % 2, 0, "{m} × {n}");
        }
    }
}

#[test]
fn the_tile_order_groups_whole_pairs_of_tile_rows() {
    assert_eq!(group_rows(false), GROUP_ROWS as i32);
    assert_eq!(group_rows(true), GROUP_ROWS as i32);
    assert_eq!(GROUP_ROWS % 2, 0);
    // A benchmark's count: as set where the clusters pair tile columns, else rounded up to a
    // whole number of pairs of tile rows.
    for (set, columns, rows) in [
        (0, 1, 2),
        (1, 1, 2),
        (2, 2, 2),
        (3, 3, 4),
        (12, 12, 12),
        (u32::MAX, 1 << 16, 1 << 16),
    ] {
        crate::device::overrides::ozaki_gemm_group(Some(set));
        assert_eq!(
            (group_rows(false), group_rows(true)),
            (columns, rows),
            "{set}"
        );
    }
    crate::device::overrides::ozaki_gemm_group(None);
    assert_eq!(group_rows(false), GROUP_ROWS as i32);
}

#[test]
fn the_mma_sync_gemm_serves_sm_80_to_89_in_whole_tiles_of_128() {
    assert_eq!(Gemm::of(90, 4096, 4096), Gemm::Wg { pair_m: true });
    assert_eq!(Gemm::of(90, 8192, 8192), Gemm::Wg { pair_m: false });
    for sm in [80, 86, 89] {
        assert_eq!(Gemm::of(sm, 4096, 4096), Gemm::Mma);
    }
    for m in [1, 127, 128, 129, 4097] {
        for n in [1, 127, 128, 129, 4097] {
            let (tiles, (mp, np)) = Gemm::Mma.panels(m, n);
            assert_eq!(tiles, (128, 128));
            assert!(mp >= m && np >= n && mp - m < 128 && np - n < 128);
            assert!(mp % 128 == 0 && np % 128 == 0, "{m} × {n}");
        }
    }
    let (_, (mp, np)) = Gemm::Wg { pair_m: true }.panels(4096, 4096);
    assert_eq!((mp, np), (4224, 4096));
}

/// The workspace's sections: disjoint and 256-byte aligned, within its size, op(B)'s at
/// offsets that do not depend on m (the row panels that share op(B) find them), and when
/// guarded, op(A)'s magnitudes in a section of their own (the guard's passes write op(A)'s
/// residues meanwhile), of `Mp · Kgp` bytes.
#[test]
fn workspace_sections_are_disjoint_and_op_b_sits_still() {
    let sizes = |at: &[usize; SECTIONS], total: usize| {
        let mut order: Vec<(usize, usize)> = (0..SECTIONS).map(|s| (at[s], s)).collect();
        order.sort();
        order
            .iter()
            .enumerate()
            .map(|(i, &(o, s))| {
                let end = order.get(i + 1).map_or(total, |&(next, _)| next);
                (s, o, end - o)
            })
            .collect::<Vec<_>>()
    };
    for gemm in [Gemm::Wg { pair_m: true }, Gemm::Mma] {
        for (m, k, n) in [(4096, 4096, 4096), (200, 301, 330), (1000, 3000, 500)] {
            for guarded in [false, true] {
                let (count, shifts, kgp) = (8, if guarded { 4 } else { 1 }, 1024);
                let (total, at) = workspace(count, shifts, guarded, kgp, (m, k, n), gemm, None);
                let (_, (mp, np)) = gemm.panels(m, n);
                let kp = k.next_multiple_of(128);
                for (s, offset, room) in sizes(&at, total) {
                    assert_eq!(offset % ALIGN, 0, "section {s}");
                    let need = match s {
                        PA => count * mp * kp,
                        PB => count * np * kp,
                        MA => mp * kgp * guarded as usize,
                        MB => np * kgp * guarded as usize,
                        R => count.max(4 * guarded as usize) * m * n,
                        _ => 0,
                    };
                    assert!(
                        room >= need,
                        "{gemm:?} {m}×{k}×{n} guarded {guarded}: section {s}"
                    );
                }
                // op(B)'s sections (EB to PB) at the same offsets for any m.
                let (_, other) =
                    workspace(count, shifts, guarded, kgp, (m + 384, k, n), gemm, None);
                assert_eq!(at[..=PB], other[..=PB]);
            }
        }
    }
}

/// A complex product read as reals in the Karatsuba form: its three parts' panels (each
/// `count` layers of the complex problem's padded rows by `k/2` padded to 128, written whole
/// by `ozaki_ksplit_*`) and its three products' residues (`count` layers of `m × n/2` each,
/// read by `ozaki_krebuild*`) fit the sections of the residues' buffer, which stay disjoint
/// and aligned, and whose size is that of the count alone; the workspace holds none of them.
#[test]
fn the_karatsuba_forms_sections_hold_its_three_parts() {
    for sm in [80, 90] {
        for (m, k, n) in [
            (4096, 8192, 8192),
            (200, 302, 330),
            (1000, 6000, 1000),
            (1, 2, 2),
        ] {
            let pairs = Pairs::of(sm, (m, k, n));
            let gemm = Gemm::of(sm, m, n);
            assert_eq!(pairs.gemm, Gemm::of(sm, m, n / 2));
            let (_, (cmp, cnp)) = pairs.gemm.panels(m, n / 2);
            assert_eq!(pairs.padded, (cmp, cnp));
            assert!(pairs.kp >= k / 2 && pairs.kp.is_multiple_of(128) && pairs.kp - k / 2 < 128);
            for guarded in [false, true] {
                let (count, shifts, kgp) = (8, if guarded { 4 } else { 1 }, 1024);
                let (_, at) = workspace(count, shifts, guarded, kgp, (m, k, n), gemm, Some(&pairs));
                // The workspace's residue sections are empty (each begins where the next does).
                for s in [PB, PA, R] {
                    assert_eq!(at[s], at[s + 1], "section {s}");
                }
            }
            for count in [8, 16, 18] {
                let (total, at) = pairs.residues(count, m, n);
                let (part_a, part_b, part_r) = pairs.part_bytes(count, m, n);
                let needs = [
                    3 * count * cmp * pairs.kp,
                    3 * count * cnp * pairs.kp,
                    3 * count * m * (n / 2),
                ];
                // The products' strides between parts are what the sections hold a third of.
                let thirds = [part_a, part_b, part_r].map(|p| 3 * p as usize);
                assert_eq!(needs, thirds);
                let sections = [RESIDUES_PA, RESIDUES_PB, RESIDUES_R];
                for (s, need) in sections.into_iter().zip(needs) {
                    let end = at.get(s + 1).copied().unwrap_or(total);
                    assert_eq!(at[s] % ALIGN, 0, "section {s}");
                    assert!(end - at[s] >= need, "sm_{sm} {m}×{k}×{n}: section {s}");
                    assert!(
                        end - at[s] - need < ALIGN,
                        "sm_{sm} {m}×{k}×{n}: section {s}"
                    );
                }
            }
        }
    }
}

/// The host reads a gate as kernels/ozaki.cu's `gate_holds` does: nothing refused, every
/// element surely within, the lead within its leads; and a GEMM without a gate never counts
/// as run before the verdict.
#[test]
fn a_gate_holds_as_the_kernel_reads_it() {
    let gate = Gate {
        flags: 0x1000,
        lo: 0,
        hi: 1,
    };
    let flags = |refused, unsure, lead| {
        let mut f = [0i32; FLAG_INTS];
        f[..3].copy_from_slice(&[refused, unsure, lead]);
        f
    };
    assert!(gate.held(&flags(0, 0, 0)));
    assert!(gate.held(&flags(0, 0, 1)));
    assert!(!gate.held(&flags(0, 0, 2)));
    assert!(!gate.held(&flags(1, 0, 0)));
    assert!(!gate.held(&flags(0, 1, 0)));
    assert!(!gate.held(&flags(0, 0, -1)));
    let one = Gate {
        lo: 1,
        hi: 1,
        ..gate
    };
    assert!(!one.held(&flags(0, 0, 0)) && one.held(&flags(0, 0, 1)));
    assert!(!Gate::NONE.held(&flags(0, 0, 0)));
}
