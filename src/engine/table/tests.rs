//! The kernel table against the sources: every `// @launch` line, entry and constant.

use super::*;

/// The `key=value` fields of each `// @launch STEM ...` line of a source.
fn launch_lines(src: &str) -> Vec<(String, Vec<(String, String)>)> {
    src.lines()
        .filter_map(|l| l.trim_start().strip_prefix("// @launch "))
        .map(|l| {
            let mut words = l.split_whitespace();
            let stem = words.next().expect("a stem").to_string();
            let fields = words
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            (stem, fields)
        })
        .collect()
}

#[test]
fn the_table_matches_the_launch_lines_of_the_sources() {
    for family in Family::ALL {
        // A file compiled as several families holds the lines of all of them: a family's
        // are those that name no other family's row.
        // (stem, tile, threads, smem, bk, minsm) of each row the family serves.
        let rows: Vec<_> = TILES
            .iter()
            .filter(|r| r.family == family)
            .map(|r| (r.stem, r.tile, r.threads, r.smem, r.bk, r.min_sm))
            .chain(
                WG.iter()
                    .filter(|_| family == Family::SgemmWg)
                    .map(|r| (r.stem, r.tile, r.threads, r.smem, r.bk, r.sm)),
            )
            .chain(
                [
                    (
                        OZAKI_GEMM.0,
                        OZAKI_GEMM_TILE.0,
                        OZAKI_GEMM_TILE.1,
                        OZAKI_GEMM.1,
                        128,
                        90,
                    ),
                    (
                        OZAKI_GEMM_MMA.0,
                        OZAKI_GEMM_MMA_TILE.0,
                        OZAKI_GEMM_MMA_TILE.1,
                        OZAKI_GEMM_MMA.1,
                        128,
                        80,
                    ),
                ]
                .into_iter()
                .filter(|_| family == Family::Ozaki),
            )
            .collect();
        let lines: Vec<_> = launch_lines(family.raw_source())
            .into_iter()
            .filter(|(stem, _)| !TILES.iter().any(|r| r.stem == stem && r.family != family))
            .collect();
        assert_eq!(
            lines.len(),
            rows.len(),
            "{}: {} @launch lines, {} table rows",
            family.name(),
            lines.len(),
            rows.len()
        );
        for (row_stem, tile, threads, smem, bk, min_sm) in rows {
            let (_, fields) = lines
                .iter()
                .find(|(stem, _)| stem == row_stem)
                .unwrap_or_else(|| panic!("no @launch line for {row_stem}"));
            let get = |k: &str| {
                fields
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.as_str())
                    .unwrap_or_else(|| panic!("{row_stem}: no {k}="))
            };
            assert_eq!(get("tile"), format!("{}x{}", tile.0, tile.1), "{row_stem}");
            assert_eq!(get("block"), threads.to_string(), "{row_stem}");
            assert_eq!(get("smem"), smem.to_string(), "{row_stem}");
            assert_eq!(get("bk"), bk.to_string(), "{row_stem}");
            assert_eq!(get("minsm"), min_sm.to_string(), "{row_stem}");
        }
    }
}

#[test]
fn every_simple_kernel_and_element_type_has_a_row() {
    for dtype in Dtype::ALL {
        for kernel in [Kernel::Naive, Kernel::Tiled16, Kernel::Tiled32] {
            let row = SimpleRow::of(dtype, kernel).expect("a row");
            assert!(row.stem.starts_with(dtype.letter()));
            let stem: String = row.stem[1..]
                .split('_')
                .take(2)
                .collect::<Vec<_>>()
                .join("_");
            assert!(row.family.raw_source().contains(&stem), "{}", row.stem);
        }
        for config in TileConfig::ALL {
            for sm in [70, 80, 90] {
                for precision in Precision::ALL {
                    let row = TileRow::of(dtype, precision, config, sm);
                    assert!(row.min_sm <= sm && row.dtype == dtype);
                    // The precision asked for where the device and element type have
                    // it, else FP32.
                    let has = dtype == Dtype::F32 && sm >= 80;
                    let want = if has { precision } else { Precision::Native };
                    assert_eq!(row.precision, want, "{dtype:?} {precision} sm_{sm}");
                }
            }
        }
    }
    assert!(SimpleRow::of(Dtype::F32, Kernel::Auto).is_none());
}

#[test]
fn shared_memory_is_raised_only_for_large_tiles() {
    assert_eq!(
        Family::shared_bytes("sgemm_fast_64x128_nn_u_splitk"),
        Some(51_200)
    );
    assert_eq!(Family::shared_bytes("sgemm_fast_64x64_tt"), None);
    assert_eq!(Family::shared_bytes("sgemv_m1_nn"), None);
    for row in TILES {
        for e in [
            row.entry((true, false), false, true),
            row.batched_entry((false, true), true),
        ] {
            assert_eq!(
                Family::shared_bytes(&e),
                (row.smem > 48 * 1024).then_some(row.smem),
                "{e}"
            );
        }
    }
}

#[test]
fn sources_are_self_contained_for_nvrtc_and_name_every_entry() {
    for family in Family::ALL {
        let src = family.source();
        assert!(
            !src.lines().any(|l| l.trim_start().starts_with("#include")),
            "{} still includes a header",
            family.name()
        );
        for entry in family.entries(90) {
            // Entries are declared by name or assembled by a macro from their stem.
            let stem = entry.split('_').take(2).collect::<Vec<_>>().join("_");
            assert!(src.contains(&stem), "{} lacks {entry}", family.name());
        }
    }
    // The tiled families declare batched entries through their entry macros.
    for family in [
        Family::Sgemm,
        Family::Dgemm,
        Family::SgemmTf32x3,
        Family::SgemmTf32,
    ] {
        assert!(
            family.entries(90).iter().any(|e| e.ends_with("_batched"))
                && family.raw_source().contains("##_batched(GEMM_PARAMS("),
            "{} lacks its batched entries",
            family.name()
        );
    }
    // Devices before sm_80 get no tensor-core entries.
    assert!(!Family::Dgemm
        .entries(75)
        .iter()
        .any(|e| e.starts_with("dgemm_tc")));
    assert!(Family::SgemmTf32x3.entries(75).is_empty());
    // The two TF32 families compile one file, each with its own define.
    assert!(Family::SgemmTf32x3
        .source()
        .starts_with("#define SGT_X3 1\n"));
    assert!(Family::SgemmTf32.source().starts_with("#define SGT_X3 0\n"));
}

#[test]
fn short_k_matches_the_k_from_which_the_source_runs_its_pipelined_loop() {
    // Only the 128 × 64 DGEMM builds its unsplit entries for long K alone; its split-K
    // entry switches loops at PIPE_MIN_KT K tiles, the bound the host routes by.
    for row in TILES.iter() {
        if row.stem == "dgemm_tc_128x64" {
            let kt = row.short_k / row.bk;
            assert_eq!(kt * row.bk, row.short_k);
            let line = format!("static constexpr int PIPE_MIN_KT = {kt};");
            assert!(row.family.raw_source().contains(&line), "{line}");
            assert!(row
                .family
                .raw_source()
                .contains("dgm::tc_body<CFG, TA, TB, AL, false, CFG::PIPE>"));
        } else {
            assert_eq!(row.short_k, 0, "{}", row.stem);
        }
    }
}

#[test]
fn the_warpgroup_family_is_compiled_for_sm_90a_and_serves_tf32_tiles_there() {
    assert_eq!(Family::SgemmWg.arch("sm_90"), "sm_90a");
    assert_eq!(Family::SgemmWg.arch("sm_100"), "sm_100");
    assert_eq!(Family::Sgemm.arch("sm_90"), "sm_90");
    // sm_90a code runs on 9.0 only: other devices load no warpgroup entry.
    for sm in [80, 89, 100, 120] {
        assert!(Family::SgemmWg.entries(sm).is_empty(), "sm_{sm}");
    }
    let e = Family::SgemmWg.entries(90);
    assert!(e.contains(&WgRow::PACK.to_string()) && e.len() == 1 + WG.len());
    for precision in [Precision::Tf32x3, Precision::Tf32] {
        let row = WgRow::of(Dtype::F32, precision, TileConfig::Big, 90).expect("a row");
        assert_eq!(row.precision, precision);
        assert_eq!(Family::shared_bytes(row.stem), Some(row.smem));
        assert_eq!(row.tile.0, 128, "the panels of A are padded to 128 rows");
        assert!(!row.direct);
        let small = WgRow::of(Dtype::F32, precision, TileConfig::Small, 90).expect("a row");
        assert!(small.direct && small.precision == precision && small.tile == (128, 64));
        assert_eq!(Family::shared_bytes(small.stem), Some(small.smem));
        for config in TileConfig::ALL {
            assert!(WgRow::of(Dtype::F64, precision, config, 90).is_none());
            assert!(WgRow::of(Dtype::F32, precision, config, 80).is_none());
        }
    }
    assert!(WgRow::of(Dtype::F32, Precision::Native, TileConfig::Big, 90).is_none());
    let x3 = WgRow::of(Dtype::F32, Precision::Tf32x3, TileConfig::Big, 90).unwrap();
    assert_eq!(
        x3.panels(1, 33, 129),
        (2 * (128 + 256) * 64, (128, 256, 64))
    );
    let one = WgRow::of(Dtype::F32, Precision::Tf32, TileConfig::Big, 90).unwrap();
    assert_eq!(one.panels(128, 32, 128), ((128 + 256) * 32, (128, 256, 32)));
    assert_eq!(one.tiles(129, 256), 2);
    // A direct row takes the way round with fewer tiles: Cᵀ for few rows, many columns.
    let direct = WgRow::of(Dtype::F32, Precision::Tf32x3, TileConfig::Small, 90).unwrap();
    assert_eq!((direct.tiles(8192, 64), direct.tiles(64, 8192)), (64, 64));
    assert!(direct.transposed(64, 8192) && !direct.transposed(8192, 64));
    assert!(!direct.transposed(512, 512) && direct.tiles(512, 512) == 32);
    assert!(!x3.transposed(64, 8192));
}
