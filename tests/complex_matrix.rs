//! Device matrices of complex elements, `GpuMatrix<Complex<f32>>` and
//! `GpuMatrix<Complex<f64>>`: uploads and downloads of every layout, products between device
//! matrices, their transposed views and host arrays, and the general product with complex
//! `alpha` and `beta` into a device or a host output, each against a Dot2 reference with the
//! complex componentwise measure. The GPU tests (ignored here) run on the device with
//! `--include-ignored`; the rest run everywhere.

mod common;

use gpu_dot::accuracy::complex::ComplexReference;
use gpu_dot::num_complex::Complex;
use gpu_dot::{
    device_status, try_general_mat_mul_with, Backend, DeviceStatus, DotOptions, Dtype, Element,
    GpuDotError, GpuMatrix, Precision, Route,
};
use ndarray::{s, Array2, ArrayView2, ShapeBuilder};

use common::{assert_complex_product, both_parts, expect_device};

/// A `rows × cols` complex matrix with parts uniform in [-1, 1), from a fresh seed.
fn random<T: Element>(rows: usize, cols: usize) -> Array2<Complex<T>> {
    common::random_complex(rows, cols)
}

fn gpu(precision: Precision) -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .precision(precision)
        .poison_output(true)
}

fn unit<T: Element>() -> f64 {
    if T::DTYPE == Dtype::F32 {
        2f64.powi(-24)
    } else {
        2f64.powi(-53)
    }
}

fn wide<T: Element>(z: Complex<T>) -> Complex<f64> {
    Complex::new(z.re.into_f64(), z.im.into_f64())
}

/// Whether two complex arrays hold the same bits, element by element.
fn same_bits<T: Element>(x: ArrayView2<Complex<T>>, y: ArrayView2<Complex<T>>) -> bool {
    x.dim() == y.dim()
        && x.iter().zip(y).all(|(p, q)| {
            p.re.into_f64().to_bits() == q.re.into_f64().to_bits()
                && p.im.into_f64().to_bits() == q.im.into_f64().to_bits()
        })
}

/// Asserts that `c` is `alpha·a·b + beta·c0` within the native bound of the product scaled by
/// `|alpha|`, plus the rounding of the two scalings and the sum.
fn assert_general<T: Element>(
    c: ArrayView2<Complex<T>>,
    (alpha, a, b): (Complex<T>, ArrayView2<Complex<T>>, ArrayView2<Complex<T>>),
    (beta, c0): (Complex<T>, ArrayView2<Complex<T>>),
    what: &str,
) {
    let reference = ComplexReference::new(a, b);
    let (u, k) = (unit::<T>(), a.ncols() as f64);
    let (alpha, beta) = (wide(alpha), wide(beta));
    for ((ij, got), c0) in c.indexed_iter().zip(c0) {
        let (p, abs) = (reference.c[ij], reference.abs[ij]);
        // beta = 0 never reads C, whatever it held (NaN in these tests).
        let old = if beta == Complex::new(0.0, 0.0) {
            Complex::new(0.0, 0.0)
        } else {
            beta * wide(*c0)
        };
        let want = alpha * p + old;
        let bound =
            alpha.norm() * (k + 2.0) * u * abs + 8.0 * u * (alpha.norm() * p.norm() + old.norm());
        let err = (wide(*got) - want).norm();
        assert!(
            err <= bound,
            "{what} at {ij:?}: error {err:e} above {bound:e}"
        );
    }
}

fn is_complex_gpu(route: &Route) -> bool {
    matches!(route, Route::Gpu { complex: true, .. })
}

both_parts!(
    #[ignore = "needs a CUDA GPU"]
    uploads_and_downloads_keep_every_bit
);
/// `from_array`, `to_array`, `assign` and `copy_to` over C-order, F-order, stepped and
/// reversed arrays give back exactly what went up, and the wrong shape is an error that
/// changes nothing.
fn uploads_and_downloads_keep_every_bit<T: Element>() {
    expect_device();
    let (m, n) = (37, 65);
    let a = random::<T>(m, n);
    let g = GpuMatrix::from_array(&a).unwrap();
    assert_eq!(g.dim(), (m, n));
    let name = if T::DTYPE == Dtype::F32 { "f32" } else { "f64" };
    assert_eq!(
        format!("{g:?}"),
        format!("GpuMatrix<Complex<{name}>>({m} × {n})")
    );
    assert!(same_bits(g.to_array().unwrap().view(), a.view()));

    let f_order = {
        let mut f = Array2::from_elem((m, n).f(), Complex::new(T::zero(), T::zero()));
        f.assign(&a);
        f
    };
    let wide_a = random::<T>(2 * m, 2 * n);
    let stepped = wide_a.slice(s![..;2, ..;-2]);
    let at = a.t().to_owned();
    for (what, view) in [
        ("F order", f_order.view()),
        ("stepped, reversed", stepped),
        ("a transposed view", at.t()),
    ] {
        let g = GpuMatrix::from_array(&view).unwrap();
        assert!(same_bits(g.to_array().unwrap().view(), view), "{what}");
        let mut h = GpuMatrix::<Complex<T>>::zeros((m, n)).unwrap();
        h.assign(&view).unwrap();
        assert!(
            same_bits(h.to_array().unwrap().view(), view),
            "{what}: assign"
        );
    }

    // Downloads into every layout: in place where the rows' parts are side by side, through a
    // copy elsewhere.
    let mut into_f = Array2::from_elem((m, n).f(), Complex::new(T::nan(), T::nan()));
    g.copy_to(&mut into_f).unwrap();
    assert!(
        same_bits(into_f.view(), a.view()),
        "copy_to an F-order array"
    );
    let mut big = Array2::from_elem((2 * m, n + 3), Complex::new(T::nan(), T::nan()));
    g.copy_to(&mut big.slice_mut(s![..;2, 1..n + 1])).unwrap();
    assert!(
        same_bits(big.slice(s![..;2, 1..n + 1]), a.view()),
        "copy_to stepped rows"
    );
    assert!(
        big.slice(s![1..;2, ..]).iter().all(|z| z.re.is_nan()),
        "copy_to wrote outside its view"
    );
    let mut reversed = Array2::from_elem((m, n), Complex::new(T::nan(), T::nan()));
    g.copy_to(&mut reversed.slice_mut(s![..;-1, ..])).unwrap();
    assert!(
        same_bits(reversed.slice(s![..;-1, ..]), a.view()),
        "copy_to reversed rows"
    );

    let mut h = GpuMatrix::from_array(&a).unwrap();
    let wrong = random::<T>(m, n + 1);
    assert!(matches!(
        h.assign(&wrong),
        Err(GpuDotError::OperandShapes { .. })
    ));
    assert!(matches!(
        h.copy_to(&mut wrong.clone()),
        Err(GpuDotError::OperandShapes { .. })
    ));
    assert!(
        same_bits(h.to_array().unwrap().view(), a.view()),
        "a failed assign changed it"
    );
    let copy = h.to_device(h.device()).unwrap();
    assert!(
        same_bits(copy.to_array().unwrap().view(), a.view()),
        "to_device"
    );
}

both_parts!(
    #[ignore = "needs a CUDA GPU"]
    products_of_device_matrices_views_and_host_arrays
);
/// `GpuMatrix::product` over device matrices, their transposed views and host arrays, in
/// the native precision and the default, on odd and rectangular shapes, each against the
/// reference; the wrong shapes are an error.
fn products_of_device_matrices_views_and_host_arrays<T: Element>() {
    expect_device();
    for &(m, k, n) in &[(1, 1, 1), (37, 129, 65), (300, 513, 257), (640, 96, 1030)] {
        let (a, b) = (random::<T>(m, k), random::<T>(k, n));
        let (ga, gb) = (
            GpuMatrix::from_array(&a).unwrap(),
            GpuMatrix::from_array(&b).unwrap(),
        );
        // The transposes, stored, so that their views `.t()` are A and B again.
        let (gat, gbt) = (
            GpuMatrix::from_array(&a.t()).unwrap(),
            GpuMatrix::from_array(&b.t()).unwrap(),
        );
        for precision in [Precision::Native, Precision::Auto] {
            let opts = gpu(precision);
            let what = |form: &str| format!("{} {m}×{k}×{n} {precision:?}: {form}", T::DTYPE);
            let check = |c: GpuMatrix<Complex<T>>, form: &str| {
                assert_complex_product(
                    c.to_array().unwrap().view(),
                    a.view(),
                    b.view(),
                    &what(form),
                );
            };
            check(
                GpuMatrix::product_with(&ga, &gb, &opts).unwrap(),
                "device · device",
            );
            check(
                GpuMatrix::product_with(&a, &gb, &opts).unwrap(),
                "host · device",
            );
            check(
                GpuMatrix::product_with(&ga, &b, &opts).unwrap(),
                "device · host",
            );
            check(
                GpuMatrix::product_with(&a, &b, &opts).unwrap(),
                "host · host",
            );
            check(
                GpuMatrix::product_with(&gat.t(), &gb, &opts).unwrap(),
                "transposed view · device",
            );
            check(
                GpuMatrix::product_with(&ga, &gbt.t(), &opts).unwrap(),
                "device · transposed view",
            );
            check(
                GpuMatrix::product_with(&gat.t(), &gbt.t(), &opts).unwrap(),
                "both transposed views",
            );
        }
        // A chain stays on the device: (A·B)·Bᵀ.
        let ab = ga.try_dot(&gb).unwrap();
        let abbt = ab.try_dot(&gb.t()).unwrap().to_array().unwrap();
        let ab_host = ab.to_array().unwrap();
        assert_complex_product(abbt.view(), ab_host.view(), b.t(), "a chain on the device");
        let wrong = GpuMatrix::from_array(&random::<T>(k + 1, n)).unwrap();
        assert!(matches!(
            ga.try_dot(&wrong),
            Err(GpuDotError::ShapeMismatch { .. })
        ));
    }
}

both_parts!(
    #[ignore = "needs a CUDA GPU"]
    the_general_product_into_device_and_host_outputs
);
/// `C = alpha·A·B + beta·C` with complex `alpha` and `beta`, real ones, `alpha = 1, beta = 0`
/// (written in place) and `beta = 0` over a C of NaN (never read), into a device matrix and
/// into a host array of another layout, with device and host operands; and the product of
/// an empty sum, `C = beta·C`.
fn the_general_product_into_device_and_host_outputs<T: Element>() {
    expect_device();
    let (m, k, n) = (300, 513, 257);
    let (a, b, c0) = (random::<T>(m, k), random::<T>(k, n), random::<T>(m, n));
    let (ga, gb) = (
        GpuMatrix::from_array(&a).unwrap(),
        GpuMatrix::from_array(&b).unwrap(),
    );
    let t = |x: f64| T::from_f64(x);
    let z = |re: f64, im: f64| Complex::new(t(re), t(im));
    let nan = Complex::new(T::nan(), T::nan());
    let scalars = [
        (z(0.75, -1.25), z(-0.5, 2.0)),
        (z(2.0, 0.0), z(-1.0, 0.0)),
        (z(1.0, 0.0), z(0.0, 0.0)),
        (z(0.0, 1.0), z(0.0, 0.0)),
    ];
    for precision in [Precision::Native, Precision::Auto] {
        let opts = gpu(precision);
        for (alpha, beta) in scalars {
            let what = format!("{} {precision:?} alpha {alpha} beta {beta}", T::DTYPE);
            let start = if beta == z(0.0, 0.0) {
                Array2::from_elem((m, n), nan)
            } else {
                c0.clone()
            };
            let mut gc = GpuMatrix::from_array(&start).unwrap();
            let route = try_general_mat_mul_with(alpha, &ga, &gb, beta, &mut gc, &opts).unwrap();
            assert!(is_complex_gpu(&route), "{what}: {route}");
            let args = (alpha, a.view(), b.view());
            assert_general(
                gc.to_array().unwrap().view(),
                args,
                (beta, start.view()),
                &what,
            );

            let mut host = Array2::from_elem((m, n).f(), nan);
            host.assign(&start);
            let route = try_general_mat_mul_with(alpha, &a, &gb, beta, &mut host, &opts).unwrap();
            assert!(is_complex_gpu(&route), "{what}, host C: {route}");
            let host_what = format!("{what}, host C");
            assert_general(host.view(), args, (beta, start.view()), &host_what);
        }
    }
    // An empty sum: C = beta·C, on the device and on the host.
    let (a0, b0) = (Array2::<Complex<T>>::zeros((m, 0)), Array2::zeros((0, n)));
    let beta = z(0.5, -2.0);
    let mut gc = GpuMatrix::from_array(&c0).unwrap();
    let route =
        try_general_mat_mul_with(z(3.0, 1.0), &a0, &b0, beta, &mut gc, &gpu(Precision::Auto))
            .unwrap();
    assert!(matches!(route, Route::Empty), "{route}");
    // Each part one product and a sum (or one fused): within 4·u·|beta||c|.
    let u = unit::<T>();
    for (got, c) in gc.to_array().unwrap().iter().zip(&c0) {
        let want = wide(beta) * wide(*c);
        let bound = 4.0 * u * wide(beta).norm() * wide(*c).norm();
        let err = (wide(*got) - want).norm();
        assert!(
            err <= bound,
            "C = beta·C on the device: {got} against {want}"
        );
    }
}

both_parts!(general_products_of_host_arrays_are_ndarrays_on_the_cpu);
/// The general product's `try_` forms take complex host arrays too: on the CPU backend the
/// result is ndarray's `general_mat_mul`, bit for bit, and the wrong shapes are errors.
fn general_products_of_host_arrays_are_ndarrays_on_the_cpu<T: Element>() {
    let (m, k, n) = (9, 17, 5);
    let (a, b, c0) = (random::<T>(m, k), random::<T>(k, n), random::<T>(m, n));
    let alpha = Complex::new(T::from_f64(0.5), T::from_f64(1.5));
    let beta = Complex::new(T::from_f64(-2.0), T::from_f64(0.25));
    let cpu = DotOptions::builtin().backend(Backend::Cpu);
    let mut ours = c0.clone();
    let route =
        try_general_mat_mul_with(alpha, &a, &b.t().to_owned().t(), beta, &mut ours, &cpu).unwrap();
    assert!(matches!(route, Route::Cpu(_)), "{route}");
    let mut theirs = c0.clone();
    ndarray::linalg::general_mat_mul(alpha, &a, &b, beta, &mut theirs);
    assert!(same_bits(ours.view(), theirs.view()));
    let mut wrong = Array2::zeros((m, n + 1));
    assert!(matches!(
        try_general_mat_mul_with(alpha, &a, &b, beta, &mut wrong, &cpu),
        Err(GpuDotError::OutputShape { .. })
    ));
    assert!(matches!(
        try_general_mat_mul_with(alpha, &a, &a, beta, &mut ours, &cpu),
        Err(GpuDotError::ShapeMismatch { .. })
    ));
}

both_parts!(device_matrices_without_a_gpu_are_errors);
/// Without a usable GPU, a complex device matrix is an error to make, not a panic; with one,
/// it holds what went up.
fn device_matrices_without_a_gpu_are_errors<T: Element>() {
    let a = random::<T>(3, 4);
    match device_status() {
        DeviceStatus::Unavailable(_) => {
            assert!(GpuMatrix::from_array(&a).is_err());
            assert!(GpuMatrix::<Complex<T>>::zeros((3, 4)).is_err());
        }
        _ => {
            let g = GpuMatrix::from_array(&a).unwrap();
            assert!(same_bits(g.to_array().unwrap().view(), a.view()));
        }
    }
}
