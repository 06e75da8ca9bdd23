//! Page-locked arrays ([`PinnedArray`]): products read them and write into them straight by
//! DMA, with the same results as ordinary arrays; views that are not contiguous are staged;
//! arrays shared between threads, many arrays and `trim` keep working; no registration
//! outlives its array; and without a GPU a pinned array is an ordinary one.

mod common;

use std::sync::{Arc, Mutex, MutexGuard};

use common::*;
use gpu_dot::__testing::live_registrations;
use gpu_dot::{
    device_status, general_mat_mul, try_general_mat_mul_with, DeviceStatus, DotOptions, GpuDot,
    GpuMatrix, HostCopies, PinnedArray, PinnedArray2, Route,
};
use ndarray::{s, Array2, Array3, ShapeBuilder};

/// The tests count live registrations, which every test of the binary changes: one at a time.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a GPU route's host arrays crossed the link.
fn host_of(route: &Route) -> HostCopies {
    match route {
        Route::Gpu { host, .. } => host.clone(),
        other => panic!("expected a GPU route, got {other}"),
    }
}

fn pinned<T: TestElem>(rows: usize, cols: usize) -> PinnedArray2<T> {
    PinnedArray::new(random::<T>(rows, cols))
}

/// Runs on any machine: the wrapper reads, writes and gives its array back as an ordinary
/// one; it is page-locked exactly where a GPU is usable, and says why not elsewhere; products
/// through it equal `dot`'s; and it leaves no registration behind.
#[test]
fn a_pinned_array_works_as_its_array_with_or_without_a_gpu() {
    let _turn = turn();
    let before = live_registrations();
    let a = random::<f64>(40, 30);
    let mut p = PinnedArray::new(a.clone());
    assert_eq!(live_registrations(), before + 1);
    match device_status() {
        DeviceStatus::Ready(_) => {
            assert!(p.is_page_locked(), "{:?}", p.registration_error());
            assert!(p.registration_error().is_none());
        }
        other => {
            assert!(!p.is_page_locked(), "page-locked without a GPU ({other})");
            let why = p.registration_error().expect("a reason").to_string();
            assert!(!why.is_empty());
        }
    }
    // Reading through the dereference: slicing, views, arithmetic, `dot` and `gpu_dot`.
    assert_eq!(*p, a);
    assert_eq!(p.slice(s![1..3, ..2]), a.slice(s![1..3, ..2]));
    assert_eq!(&*p + &a, &a * 2.0);
    let b = random::<f64>(30, 20);
    assert_eq!(p.gpu_dot(&b), a.dot(&b));
    assert_eq!(b.t().gpu_dot(&p.t()), b.t().dot(&a.t()));
    // Writing in place, through a view and through the slice.
    p.view_mut().mapv_inplace(|x| x * 2.0);
    p.as_slice_mut()[0] = 7.0;
    let mut want = &a * 2.0;
    want[[0, 0]] = 7.0;
    assert_eq!(*p, want);
    // A product into it.
    let mut c = PinnedArray::<f64, _>::zeros((40, 20).f());
    general_mat_mul(1.0, &*p, &b, 0.0, &mut c.view_mut());
    assert_eq!(*c, want.dot(&b));
    assert!(c.t().is_standard_layout(), "zeros((..).f()) is F order");
    // Clones are registered on their own; taking the array back unregisters.
    let q = p.clone();
    assert_eq!(live_registrations(), before + 3);
    assert_eq!(*q, want);
    assert_eq!(p.into_inner(), want);
    drop((q, c));
    assert_eq!(live_registrations(), before);
    // An owned array that is not contiguous is copied into one that is; an empty one has
    // nothing to register.
    let mut wide = random::<f32>(6, 8);
    wide.slice_collapse(s![.., ..;2]);
    let p = PinnedArray::new(wide.clone());
    assert_eq!(*p, wide);
    assert!(p.as_slice_memory_order().is_some());
    let empty = PinnedArray::new(Array2::<f32>::zeros((0, 5)));
    assert!(!empty.is_page_locked() && empty.registration_error().is_none());
    assert_eq!(empty.gpu_dot(&Array2::<f32>::zeros((5, 3))).dim(), (0, 3));
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    operands_and_results_go_straight_from_and_into_pinned_memory
);
fn operands_and_results_go_straight_from_and_into_pinned_memory<T: TestElem>() {
    let _turn = turn();
    let gpu = gpu_options(gpu_dot::Kernel::Auto);
    for (m, k, n) in [
        (1024, 768, 512),
        (3000, 1000, 700),
        (257, 129, 513),
        (64, 64, 64),
    ] {
        let what = format!("{} {m}×{k}×{n}", test_name::<T>("pinned"));
        let (a, b) = (pinned::<T>(m, k), pinned::<T>(k, n));
        assert!(
            a.is_page_locked() && b.is_page_locked(),
            "{what}: registered"
        );
        // Into a pinned C (poisoned by the options first), β = 0 and β ≠ 0.
        let old = random::<T>(m, n);
        let mut c = PinnedArray::new(old.clone());
        let route =
            try_general_mat_mul_with(T::one(), &*a, &*b, T::zero(), &mut c.view_mut(), &gpu)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        // The smallest products' kernels read and write the staging themselves.
        let small = m * n * std::mem::size_of::<T>() <= 256 << 10;
        let host = host_of(&route);
        if small {
            assert!(
                matches!(host, HostCopies::Mixed | HostCopies::Staged),
                "{what}: {route}"
            );
        } else {
            assert_eq!(host, HostCopies::Direct, "{what}: {route}");
        }
        assert_close(&*c, &*a, &*b, &what);
        // C read and written in place: α·A·B + β·C.
        let half = T::from_f64(0.5);
        let mut c = PinnedArray::new(old.clone());
        let route = try_general_mat_mul_with(T::one(), &*a, &*b, half, &mut c.view_mut(), &gpu)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(host_of(&route), HostCopies::Direct, "{what} β ≠ 0: {route}");
        let r = reference(&*a, &*b) + old.mapv(|x| 0.5 * x.into_f64());
        check(&*c, &*a, &*b, &r, &format!("{what} β ≠ 0"));
        // A fresh result is ordinary memory: staged, beside operands that go straight.
        let p = a.try_gpu_dot_with(&*b, &gpu).unwrap();
        let host = host_of(&p.route);
        assert!(
            host == HostCopies::Mixed || (small && host == HostCopies::Staged),
            "{what}: {}",
            p.route
        );
        assert_close(&p.c, &*a, &*b, &what);
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    views_that_are_not_contiguous_are_staged
);
fn views_that_are_not_contiguous_are_staged<T: TestElem>() {
    let _turn = turn();
    let gpu = gpu_options(gpu_dot::Kernel::Auto);
    let what = test_name::<T>("pinned views");
    let a = pinned::<T>(1200, 900);
    let f = PinnedArray::new(random::<T>(700, 900).reversed_axes());
    assert!(f.t().is_standard_layout(), "{what}: F order");
    // An F-order operand is read as its transpose, in order: straight.
    let mut c = PinnedArray::<T, _>::zeros((1200, 700));
    let route =
        try_general_mat_mul_with(T::one(), &*a, &*f, T::zero(), &mut c.view_mut(), &gpu).unwrap();
    assert_eq!(
        host_of(&route),
        HostCopies::Direct,
        "{what} F order: {route}"
    );
    assert_close(&*c, &*a, &*f, &what);
    // A band of rows of a C-order array is contiguous: straight.
    let band = a.slice(s![100..1100, ..]);
    let b = pinned::<T>(900, 700);
    let p = band.try_gpu_dot_with(&*b, &gpu).unwrap();
    assert_eq!(
        host_of(&p.route),
        HostCopies::Mixed,
        "{what} band: {}",
        p.route
    );
    assert_close(&p.c, &band, &*b, &what);
    // Stepped columns are not: staged beside a straight B, and the result right.
    let stepped = a.slice(s![.., ..;2]);
    let b2 = pinned::<T>(450, 700);
    let mut c2 = PinnedArray::<T, _>::zeros((1200, 700));
    let route = try_general_mat_mul_with(
        T::one(),
        &stepped,
        &*b2,
        T::zero(),
        &mut c2.view_mut(),
        &gpu,
    )
    .unwrap();
    assert_eq!(
        host_of(&route),
        HostCopies::Mixed,
        "{what} stepped: {route}"
    );
    assert_close(&*c2, &stepped, &*b2, &what);
    // Into a stepped window of a pinned C: staged, and nothing outside the window written.
    let mut wide = PinnedArray::new(Array2::<T>::from_elem((1200, 1400), T::from_f64(3.0)));
    let mut window = wide.view_mut();
    let mut window = window.slice_mut(s![.., ..;2]);
    try_general_mat_mul_with(T::one(), &*a, &*b, T::zero(), &mut window, &gpu).unwrap();
    assert_close(&wide.slice(s![.., ..;2]), &*a, &*b, &what);
    assert!(
        wide.slice(s![.., 1..;2])
            .iter()
            .all(|&x| x == T::from_f64(3.0)),
        "{what}: written outside the window"
    );
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    device_matrices_load_from_and_store_into_pinned_arrays
);
fn device_matrices_load_from_and_store_into_pinned_arrays<T: TestElem>() {
    let _turn = turn();
    let what = test_name::<T>("pinned device matrices");
    let a = pinned::<T>(2000, 1500);
    let mut dev = GpuMatrix::from_array(&*a).unwrap();
    assert_eq!(dev.to_array().unwrap(), *a, "{what}: upload");
    let other = pinned::<T>(2000, 1500);
    dev.assign(&*other).unwrap();
    let mut back = PinnedArray::new(Array2::from_elem((2000, 1500), T::from_f64(f64::NAN)));
    dev.copy_to(&mut back.view_mut()).unwrap();
    assert_eq!(
        *back, *other,
        "{what}: assign, then copy_to into a pinned array"
    );
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    batches_read_pinned_stacks
);
fn batches_read_pinned_stacks<T: TestElem>() {
    let _turn = turn();
    let what = test_name::<T>("pinned batch");
    let a = PinnedArray::new(Array3::from_shape_fn((6, 300, 200), |(z, i, j)| {
        T::from_f64(((z * 7 + i * 3 + j) % 17) as f64 - 8.0)
    }));
    let b = PinnedArray::new(Array3::from_shape_fn((6, 200, 250), |(z, i, j)| {
        T::from_f64(((z + i * 5 + j * 11) % 13) as f64 - 6.0)
    }));
    let p = a
        .try_gpu_dot_with(&*b, &gpu_options(gpu_dot::Kernel::Auto))
        .unwrap();
    assert_eq!(host_of(&p.route), HostCopies::Mixed, "{what}: {}", p.route);
    for z in 0..6 {
        let want = a
            .index_axis(ndarray::Axis(0), z)
            .dot(&b.index_axis(ndarray::Axis(0), z));
        assert_eq!(
            p.c.index_axis(ndarray::Axis(0), z),
            want,
            "{what}: item {z}"
        );
    }
}

/// Threads share pinned weights (in an `Arc`) and each multiplies into its own pinned result
/// while the others do; many arrays live at once, `trim` runs between products, and when all
/// are dropped no registration is left.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_arrays_shared_between_threads_many_and_trimmed() {
    let _turn = turn();
    let before = live_registrations();
    let w: Arc<PinnedArray2<f32>> = Arc::new(pinned::<f32>(1024, 1024));
    let opts = DotOptions::builtin().backend(gpu_dot::Backend::Gpu);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (w, opts) = (Arc::clone(&w), opts.clone());
            s.spawn(move || {
                let x = pinned::<f32>(512, 1024);
                let mut y = PinnedArray::<f32, _>::zeros((512, 1024));
                for i in 0..12 {
                    let r = try_general_mat_mul_with(1.0, &*x, &**w, 0.0, &mut y.view_mut(), &opts)
                        .unwrap();
                    assert_eq!(host_of(&r), HostCopies::Direct, "thread {t}: {r}");
                    if i % 4 == 3 {
                        gpu_dot::trim();
                    }
                }
                assert_close(&*y, &*x, &**w, &format!("thread {t}"));
            });
        }
    });
    // Many small arrays side by side (neighbours in the allocator's memory, some sharing a
    // page): each registered on its own, each read straight.
    let many: Vec<PinnedArray2<f32>> = (0..64).map(|_| pinned::<f32>(300, 300)).collect();
    assert!(many.iter().all(|p| p.is_page_locked()));
    assert_eq!(live_registrations(), before + 65);
    let mut out = PinnedArray::<f32, _>::zeros((300, 300));
    for (i, p) in many.iter().enumerate() {
        let r =
            try_general_mat_mul_with(1.0, p, &*many[0], 0.0, &mut out.view_mut(), &opts).unwrap();
        assert_eq!(host_of(&r), HostCopies::Direct, "array {i}: {r}");
        assert_close(&*out, p, &*many[0], &format!("array {i}"));
    }
    drop((many, out));
    drop(w);
    assert_eq!(live_registrations(), before);
}
