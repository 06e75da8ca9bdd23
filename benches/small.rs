//! `gpu_dot` against ndarray's `dot` on the small products that stay on the CPU (below the
//! GPU threshold): each form (matrix · matrix, matrix · vector, vector · matrix, vector ·
//! vector, a batch) in `f32`, `f64`, `Complex<f32>` and `Complex<f64>`, and a per-sample
//! training loop's pattern. Such a call should cost what `dot` costs.
//!
//! Criterion reports each pair; then a table of nanoseconds per call (median of 41 rounds,
//! the two alternating round by round), which `GPU_DOT_SMALL_JSON=PATH` also writes as JSON.
//!
//!     cargo bench --bench small

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use gpu_dot::num_complex::Complex;
use gpu_dot::profile::random_matrix_of;
use gpu_dot::{Element, GpuDot, GpuScalar};
use ndarray::{Array1, Array2, Array3};

/// An element type of the bench: random matrices of it, and its name.
trait Gen: GpuScalar {
    const NAME: &'static str;
    fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<Self>;
    fn from_f64(x: f64) -> Self;
}

macro_rules! real_gen {
    ($t:ty, $name:literal) => {
        impl Gen for $t {
            const NAME: &'static str = $name;
            fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<$t> {
                random_matrix_of::<$t>(rows, cols, seed)
            }
            fn from_f64(x: f64) -> $t {
                <$t as Element>::from_f64(x)
            }
        }
    };
}
real_gen!(f32, "f32");
real_gen!(f64, "f64");

impl<T: Element + Gen> Gen for Complex<T> {
    const NAME: &'static str = if std::mem::size_of::<T>() == 4 {
        "c32"
    } else {
        "c64"
    };
    fn matrix(rows: usize, cols: usize, seed: u64) -> Array2<Complex<T>> {
        let (re, im) = (T::matrix(rows, cols, seed), T::matrix(rows, cols, !seed));
        ndarray::Zip::from(&re)
            .and(&im)
            .map_collect(|&re, &im| Complex::new(re, im))
    }
    fn from_f64(x: f64) -> Complex<T> {
        Complex::new(
            <T as Element>::from_f64(x),
            <T as Element>::from_f64(-0.5 * x),
        )
    }
}

/// One form's operands.
struct Case<A: Gen> {
    name: &'static str,
    run_dot: Box<dyn Fn() -> A>,
    run_gpu_dot: Box<dyn Fn() -> A>,
}

fn vector<A: Gen>(len: usize, seed: u64) -> Array1<A> {
    A::matrix(len, 1, seed).column(0).to_owned()
}

/// Sums one element of a result, so that nothing is optimised away.
fn first<A: Gen, D: ndarray::Dimension>(a: ndarray::Array<A, D>) -> A {
    *a.iter().next().expect("a non-empty result")
}

fn cases<A: Gen>() -> Vec<Case<A>> {
    let (a16, b16) = (A::matrix(16, 16, 1), A::matrix(16, 16, 2));
    let (w, x) = (A::matrix(32, 16, 3), vector::<A>(16, 4));
    let (y, w2) = (vector::<A>(32, 5), A::matrix(32, 16, 6));
    let (u, v) = (vector::<A>(64, 7), vector::<A>(64, 8));
    let q: Array3<A> = Array3::from_shape_fn((4, 8, 8), |(i, j, k)| {
        A::from_f64((i * 64 + j * 8 + k) as f64 * 0.01)
    });
    let kk: Array3<A> = q.clone();
    let (a, b) = (a16.clone(), b16.clone());
    let (wc, xc) = (w.clone(), x.clone());
    let (yc, w2c) = (y.clone(), w2.clone());
    let (uc, vc) = (u.clone(), v.clone());
    let (qc, kc) = (q.clone(), kk.clone());
    // The per-sample loop: a forward matrix · vector and a backward vector · matrix per
    // sample, over 32 samples.
    let (lw, lx, lg) = (
        A::matrix(32, 16, 9),
        A::matrix(32, 16, 10),
        vector::<A>(32, 11),
    );
    let (lwc, lxc, lgc) = (lw.clone(), lx.clone(), lg.clone());
    vec![
        Case {
            name: "16x16 . 16x16",
            run_dot: Box::new(move || first(a16.dot(&b16))),
            run_gpu_dot: Box::new(move || first(a.gpu_dot(&b))),
        },
        Case {
            name: "32x16 . vector 16",
            run_dot: Box::new(move || first(w.dot(&x))),
            run_gpu_dot: Box::new(move || first(wc.gpu_dot(&xc))),
        },
        Case {
            name: "vector 32 . 32x16",
            run_dot: Box::new(move || first(y.dot(&w2))),
            run_gpu_dot: Box::new(move || first(yc.gpu_dot(&w2c))),
        },
        Case {
            name: "vector 64 . vector 64",
            run_dot: Box::new(move || u.dot(&v)),
            run_gpu_dot: Box::new(move || uc.gpu_dot(&vc)),
        },
        Case {
            name: "batch 4 x 8x8 . 8x8",
            run_dot: Box::new(move || {
                let mut s = A::zero();
                for i in 0..4 {
                    let (qi, ki) = (
                        q.index_axis(ndarray::Axis(0), i),
                        kk.index_axis(ndarray::Axis(0), i),
                    );
                    s = s + first(qi.dot(&ki));
                }
                s
            }),
            run_gpu_dot: Box::new(move || first(qc.gpu_dot(&kc))),
        },
        Case {
            name: "per-sample loop (32 samples)",
            run_dot: Box::new(move || per_sample(&lw, &lx, &lg, |m, v| m.dot(v), |v, m| v.dot(m))),
            run_gpu_dot: Box::new(move || {
                per_sample(&lwc, &lxc, &lgc, |m, v| m.gpu_dot(v), |v, m| v.gpu_dot(m))
            }),
        },
    ]
}

/// One pass of a per-sample training loop's products: `h = W · x_i` and `g_i · X`.
fn per_sample<A: Gen>(
    w: &Array2<A>,
    x: &Array2<A>,
    g: &Array1<A>,
    mat_vec: impl Fn(&Array2<A>, &Array1<A>) -> Array1<A>,
    vec_mat: impl Fn(&Array1<A>, &Array2<A>) -> Array1<A>,
) -> A {
    let mut s = A::zero();
    for i in 0..x.nrows() {
        let xi = x.row(i).to_owned();
        let h = mat_vec(w, &xi);
        let back = vec_mat(g, x);
        s = s + h[0] + back[0];
    }
    s
}

/// Median nanoseconds per call of `dot` and of `gpu_dot`, alternating rounds.
fn median_ns<A: Gen>(case: &Case<A>) -> (f64, f64) {
    let calls = {
        let start = Instant::now();
        let mut n = 0u32;
        while start.elapsed().as_micros() < 2000 {
            black_box((case.run_dot)());
            n += 1;
        }
        n.max(1)
    };
    let round = |f: &dyn Fn() -> A| {
        let start = Instant::now();
        for _ in 0..calls {
            black_box(f());
        }
        start.elapsed().as_nanos() as f64 / f64::from(calls)
    };
    let (mut dot, mut gpu) = (Vec::new(), Vec::new());
    for _ in 0..41 {
        dot.push(round(&*case.run_dot));
        gpu.push(round(&*case.run_gpu_dot));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(dot), median(gpu))
}

fn criterion_pairs<A: Gen>(c: &mut Criterion) {
    for case in cases::<A>() {
        let mut group = c.benchmark_group(format!("small {} {}", A::NAME, case.name));
        group.warm_up_time(std::time::Duration::from_millis(200));
        group.measurement_time(std::time::Duration::from_millis(600));
        group.bench_function("dot", |b| b.iter(|| black_box((case.run_dot)())));
        group.bench_function("gpu_dot", |b| b.iter(|| black_box((case.run_gpu_dot)())));
        group.finish();
    }
}

fn table<A: Gen>(rows: &mut Vec<serde_json::Value>) {
    for case in cases::<A>() {
        let (dot, gpu) = median_ns(&case);
        println!(
            "| {} | {} | {dot:.0} | {gpu:.0} | {:.3} |",
            A::NAME,
            case.name,
            gpu / dot
        );
        rows.push(serde_json::json!({
            "dtype": A::NAME, "case": case.name,
            "dot_ns": dot, "gpu_dot_ns": gpu, "ratio": gpu / dot,
        }));
    }
}

fn small(c: &mut Criterion) {
    criterion_pairs::<f32>(c);
    criterion_pairs::<f64>(c);
    criterion_pairs::<Complex<f32>>(c);
    criterion_pairs::<Complex<f64>>(c);
    println!("\n| type | product | dot ns | gpu_dot ns | gpu_dot / dot |");
    println!("|---|---|---|---|---|");
    let mut rows = Vec::new();
    table::<f32>(&mut rows);
    table::<f64>(&mut rows);
    table::<Complex<f32>>(&mut rows);
    table::<Complex<f64>>(&mut rows);
    if let Ok(path) = std::env::var("GPU_DOT_SMALL_JSON") {
        let out = serde_json::json!({
            "device": gpu_dot::device_status().to_string(),
            "threshold_f32": gpu_dot::DEFAULT_MIN_GPU_FLOPS,
            "threshold_f64": gpu_dot::DEFAULT_MIN_GPU_FLOPS_F64,
            "rows": rows,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&out).unwrap()).expect("JSON");
        println!("wrote {path}");
    }
}

criterion_group!(benches, small);
criterion_main!(benches);
