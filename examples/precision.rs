//! The precisions of `f32` products on the device: for each shape, the kernel alone (device
//! time, operands resident) under `Kernel::Auto` in FP32, 3xTF32 and TF32, against cuBLAS
//! SGEMM in FP32 (`CUBLAS_PEDANTIC_MATH`) and with TF32 (`CUBLAS_TF32_TENSOR_OP_MATH`), all in
//! one run; each with its relative error against an f64 reference of sampled rows.
//!
//!     cargo run --release --features cublas --example precision -- [--quick] [--json PATH]

use gpu_dot::profile::{DeviceProblem, SampledReference};
use gpu_dot::{Device, Kernel, Precision};
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1).cloned());
    if Device::count() == 0 {
        eprintln!(
            "the precision figures need a CUDA GPU: {}",
            gpu_dot::device_status()
        );
        std::process::exit(2);
    }
    let suite: &[(usize, usize, usize)] = if quick {
        &[(1024, 1024, 1024), (4096, 4096, 4096)]
    } else {
        &[
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (4096, 1024, 4096),
            (1024, 8192, 1024),
            (8192, 256, 8192),
            (3000, 2000, 1000),
        ]
    };
    println!("{}", Device::new(0).status());
    println!("\n| m×k×n | precision | TFLOP/s | cuBLAS FP32 | ratio | cuBLAS TF32 | rel err | cuBLAS FP32 err |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut records = Vec::new();
    for &(m, k, n) in suite {
        let mut p = DeviceProblem::<f32>::new(m, k, n, 7).expect("a device problem");
        let reference = SampledReference::new(p.a(), p.b(), 64);
        let reps = if m * k * n >= 4096 * 4096 * 4096 {
            10
        } else {
            30
        };
        let tflops = |ms: f64| 2.0 * (m * k * n) as f64 / ms / 1e9;
        #[cfg(feature = "cublas")]
        let cublas = |p: &mut DeviceProblem<f32>, tf32: bool| {
            p.set_cublas_tf32(tf32);
            let c = p.run_cublas().expect("cuBLAS runs");
            let t = p.time_cublas(2, reps).expect("cuBLAS timing");
            (tflops(t.median_ms), reference.relative_error(c.view()))
        };
        #[cfg(not(feature = "cublas"))]
        let cublas = |_: &mut DeviceProblem<f32>, _: bool| (f64::NAN, f64::NAN);
        let (fp32_blas, fp32_blas_err) = cublas(&mut p, false);
        let (tf32_blas, tf32_blas_err) = cublas(&mut p, true);
        for precision in Precision::ALL {
            p.set_precision(precision);
            // Settle the isolated autotuner, then measure.
            let c = p.run(Kernel::Auto).expect("a product");
            let err = reference.relative_error(c.view());
            let t = p.time(Kernel::Auto, 2, reps).expect("timing");
            let ours = tflops(t.median_ms);
            let versus = if precision == Precision::Tf32 {
                tf32_blas
            } else {
                fp32_blas
            };
            println!(
                "| {m}×{k}×{n} | {precision} | {ours:.1} | {fp32_blas:.1} | {:.2}× | {tf32_blas:.1} | {err:.2e} | {fp32_blas_err:.2e} |",
                ours / versus
            );
            records.push(json!({
                "m": m, "k": k, "n": n,
                "precision": precision.name(),
                "gflops": ours * 1e3,
                "rel_err": err,
                "cublas_gflops": fp32_blas * 1e3,
                "cublas_rel_err": fp32_blas_err,
                "cublas_tf32_gflops": tf32_blas * 1e3,
                "cublas_tf32_rel_err": tf32_blas_err,
                "ratio_to_cublas": ours / fp32_blas,
                "ratio_to_cublas_tf32": ours / tf32_blas,
            }));
        }
    }
    if let Some(path) = json_path {
        let doc = json!({ "device": Device::new(0).status().to_string(), "records": records });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON")).expect("writing");
        println!("wrote {path}");
    }
}
