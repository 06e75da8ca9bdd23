//! Batched products: a 3-D stack times a 3-D stack item by item, and a 3-D stack times one
//! shared matrix, with operands of every layout (C order, items transposed, F order, steps,
//! reversed, windows), both element types, checked item by item against a reference of
//! higher precision. The GPU tests (`--include-ignored`) run every kernel choice, poison the
//! output first, and cover a batch longer than one launch's grid.

mod common;

use common::{
    both_types, check, cpu_options, gpu_options, panic_message, random, reference, TestElem,
    KERNELS,
};
use gpu_dot::{Backend, DotOptions, GpuDot, GpuDotError, Kernel, Route};
use ndarray::{s, Array2, Array3, ArrayBase, ArrayView3, Axis, Data, Ix3, ShapeBuilder};

/// A random `batch × rows × cols` stack.
fn stack<T: TestElem>(batch: usize, rows: usize, cols: usize) -> Array3<T> {
    let flat = random::<T>(batch * rows, cols.max(1));
    Array3::from_shape_fn((batch, rows, cols), |(z, i, j)| flat[[z * rows + i, j]])
}

/// Storage for a `batch × rows × cols` stack, and the views of each layout it gives (all of
/// the same shape and values as their own storage says).
struct Stacks<T> {
    c: Array3<T>,
    items_t: Array3<T>,
    f: Array3<T>,
    wide: Array3<T>,
}

impl<T: TestElem> Stacks<T> {
    fn new((batch, rows, cols): (usize, usize, usize)) -> Self {
        let c = stack::<T>(batch, rows, cols);
        // Each item stored transposed (a C-order batch × cols × rows stack, viewed back).
        let items_t = c
            .view()
            .permuted_axes([0, 2, 1])
            .as_standard_layout()
            .into_owned();
        let f = Array3::from_shape_fn(
            ndarray::ShapeBuilder::f((batch, rows, cols)),
            |(z, i, j)| c[[z, i, j]],
        );
        let wide = stack::<T>(2 * batch + 1, rows + 2, 2 * cols + 3);
        Stacks {
            c,
            items_t,
            f,
            wide,
        }
    }

    fn all(&self) -> Vec<(&'static str, ArrayView3<'_, T>)> {
        let (batch, rows, cols) = self.c.dim();
        vec![
            ("C order", self.c.view()),
            (
                "items transposed",
                self.items_t.view().permuted_axes([0, 2, 1]),
            ),
            ("F order", self.f.view()),
            (
                "steps",
                self.wide
                    .slice(s![..2 * batch;2, 1..rows + 1, ..2 * cols;2]),
            ),
            (
                "reversed items",
                self.wide.slice(s![..batch;-1, ..rows;-1, 3..cols + 3]),
            ),
            (
                "window",
                self.wide.slice(s![1..batch + 1, 2..rows + 2, 1..cols + 1]),
            ),
        ]
    }
}

/// Checks every item of `c` against the reference product of its operands.
#[track_caller]
fn check_items<T: TestElem, S: Data<Elem = T>>(
    c: &ArrayBase<S, Ix3>,
    a: &ArrayView3<'_, T>,
    b: Option<&ArrayView3<'_, T>>,
    shared: Option<&Array2<T>>,
    what: &str,
) {
    let (batch, m, _) = a.dim();
    let n = b.map_or_else(|| shared.unwrap().ncols(), |b| b.dim().2);
    assert_eq!(c.dim(), (batch, m, n), "{what}: shape");
    assert!(c.is_standard_layout(), "{what}: a batch comes in C order");
    for z in 0..batch {
        let az = a.index_axis(Axis(0), z);
        let bz = match (b, shared) {
            (Some(b), _) => b.index_axis(Axis(0), z).to_owned(),
            (None, Some(s)) => s.clone(),
            _ => unreachable!(),
        };
        check(
            &c.index_axis(Axis(0), z),
            &az,
            &bz,
            &reference(&az, &bz),
            &format!("{what}, item {z}"),
        );
    }
}

fn the_cpu_route_multiplies_each_item_with_ndarray<T: TestElem>() {
    let (batch, m, k, n) = (3, 5, 7, 4);
    let (sa, sb) = (
        Stacks::<T>::new((batch, m, k)),
        Stacks::<T>::new((batch, k, n)),
    );
    let shared = random::<T>(k, n);
    for (la, a) in sa.all() {
        for (lb, b) in sb.all() {
            let p = a.try_gpu_dot_with(&b, &cpu_options()).unwrap();
            assert!(matches!(p.route, Route::Cpu(_)), "{}", p.route);
            for z in 0..batch {
                let want = a.index_axis(Axis(0), z).dot(&b.index_axis(Axis(0), z));
                assert_eq!(p.c.index_axis(Axis(0), z), want, "{la} · {lb}, item {z}");
            }
        }
        let p = a.try_gpu_dot_with(&shared, &cpu_options()).unwrap();
        for z in 0..batch {
            let want = a.index_axis(Axis(0), z).dot(&shared);
            let diff = (&p.c.index_axis(Axis(0), z) - &want)
                .iter()
                .fold(0.0f64, |m, d| m.max(d.into_f64().abs()));
            assert!(diff <= 8.0 * T::EPS * k as f64, "{la} · shared, item {z}");
        }
    }
}
both_types!(the_cpu_route_multiplies_each_item_with_ndarray);

fn batch_shape_errors_panic_and_are_typed<T: TestElem>() {
    let a = Array3::<T>::zeros((2, 3, 4));
    let msg = panic_message(|| {
        a.gpu_dot(&Array3::<T>::zeros((3, 4, 5)));
    });
    assert!(msg.contains("2 × 3 × 4 and 3 × 4 × 5"), "{msg}");
    let msg = panic_message(|| {
        a.gpu_dot(&Array3::<T>::zeros((2, 5, 5)));
    });
    assert!(msg.contains("not compatible"), "{msg}");
    let msg = panic_message(|| {
        a.gpu_dot(&Array2::<T>::zeros((5, 5)));
    });
    assert!(msg.contains("2 × 3 × 4 and 5 × 5"), "{msg}");
    assert!(matches!(
        a.try_gpu_dot(&Array3::<T>::zeros((3, 4, 5))),
        Err(GpuDotError::BatchMismatch {
            batch: 2,
            batch2: 3
        })
    ));
    assert!(matches!(
        a.try_gpu_dot_with(&Array2::<T>::zeros((5, 6)), &DotOptions::builtin()),
        Err(GpuDotError::ShapeMismatch {
            m: 3,
            k: 4,
            k2: 5,
            n: 6
        })
    ));
}
both_types!(batch_shape_errors_panic_and_are_typed);

fn empty_batches_give_zeros<T: TestElem>() {
    for (batch, m, k, n) in [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 0, 5), (2, 3, 4, 0)] {
        let a = Array3::<T>::ones((batch, m, k));
        let p = a
            .try_gpu_dot_with(&Array3::<T>::ones((batch, k, n)), &DotOptions::builtin())
            .unwrap();
        assert!(matches!(p.route, Route::Empty), "{}", p.route);
        assert_eq!(p.c, Array3::<T>::zeros((batch, m, n)));
        assert_eq!(a.gpu_dot(&Array2::<T>::ones((k, n))).dim(), (batch, m, n));
    }
}
both_types!(empty_batches_give_zeros);

fn small_batches_stay_on_the_cpu_under_auto<T: TestElem>() {
    let (a, b) = (stack::<T>(2, 3, 4), stack::<T>(2, 4, 5));
    let p = a.try_gpu_dot_with(&b, &DotOptions::builtin()).unwrap();
    assert!(matches!(p.route, Route::Cpu(_)), "{}", p.route);
    check_items(&p.c, &a.view(), Some(&b.view()), None, "small");
}
both_types!(small_batches_stay_on_the_cpu_under_auto);

fn every_kernel_multiplies_batches_of_every_layout<T: TestElem>() {
    for kernel in KERNELS {
        for &(batch, m, k, n) in &[
            (3, 33, 17, 65),
            (5, 1, 40, 7),
            (2, 130, 129, 1),
            (4, 64, 64, 64),
        ] {
            let (sa, sb) = (
                Stacks::<T>::new((batch, m, k)),
                Stacks::<T>::new((batch, k, n)),
            );
            let shared = random::<T>(k, n);
            let shared_t = shared.t().as_standard_layout().into_owned();
            let opts = gpu_options(kernel);
            for (la, a) in sa.all() {
                for (lb, b) in sb.all() {
                    let what = format!("{kernel:?} {batch}×{m}×{k}×{n} {la} · {lb}");
                    let p = a.try_gpu_dot_with(&b, &opts).expect(&what);
                    match &p.route {
                        Route::Gpu { batch: items, .. } => assert_eq!(*items, batch, "{what}"),
                        other => panic!("{what}: {other}"),
                    }
                    check_items(&p.c, &a, Some(&b), None, &what);
                }
                for (ls, s) in [("shared C", shared.view()), ("shared F", shared_t.t())] {
                    let what = format!("{kernel:?} {batch}×{m}×{k}×{n} {la} · {ls}");
                    let p = a.try_gpu_dot_with(&s, &opts).expect(&what);
                    assert!(p.route.is_gpu(), "{what}: {}", p.route);
                    check_items(&p.c, &a, None, Some(&s.to_owned()), &what);
                }
            }
        }
    }
}
both_types!(
    #[ignore = "needs a CUDA GPU"]
    every_kernel_multiplies_batches_of_every_layout
);

/// More items than one launch's grid holds along z (65 535): the batch runs in chunks. (Its
/// items are small enough, 9 MiB in all for f64, that it runs as one group.)
fn a_batch_longer_than_the_grid_runs_in_chunks<T: TestElem>() {
    let batch = 70_001;
    let (a, b) = (stack::<T>(batch, 3, 2), stack::<T>(batch, 2, 2));
    let p = a.try_gpu_dot_with(&b, &gpu_options(Kernel::Auto)).unwrap();
    assert!(p.route.is_gpu(), "{}", p.route);
    for z in [0, 1, 65_534, 65_535, 65_536, batch - 1] {
        let (az, bz) = (a.index_axis(Axis(0), z), b.index_axis(Axis(0), z));
        check(
            &p.c.index_axis(Axis(0), z),
            &az,
            &bz,
            &reference(&az, &bz),
            &format!("item {z}"),
        );
    }
    // Every item written (the output was poisoned).
    assert!(p.c.iter().all(|x| x.is_finite()));
}
both_types!(
    #[ignore = "needs a CUDA GPU"]
    a_batch_longer_than_the_grid_runs_in_chunks
);

/// `gpu_dot` on a batch large enough for the GPU under `Auto` takes it there, and agrees.
fn gpu_dot_takes_large_batches_to_the_gpu<T: TestElem>() {
    let (a, b) = (stack::<T>(16, 128, 96), stack::<T>(16, 96, 160));
    let p = a
        .try_gpu_dot_with(&b, &DotOptions::builtin().backend(Backend::Auto))
        .unwrap();
    assert!(p.route.is_gpu(), "{}", p.route);
    check_items(&p.c, &a.view(), Some(&b.view()), None, "Auto");
    let c = a.gpu_dot(&b);
    check_items(&c, &a.view(), Some(&b.view()), None, "gpu_dot");
    let shared = random::<T>(96, 160);
    let c = a.gpu_dot(&shared);
    check_items(&c, &a.view(), None, Some(&shared), "gpu_dot, shared");
}
both_types!(
    #[ignore = "needs a CUDA GPU"]
    gpu_dot_takes_large_batches_to_the_gpu
);

/// A batch of several MiB runs in groups of items, each group's copies overlapping another's
/// kernels, when each operand's items lie one after another in its packed copy (C order,
/// items transposed, a copied F-order stack, a shared B); a stack whose items interleave
/// (the rows of one F-order matrix) runs whole. Every item agrees with the reference either
/// way (the output is poisoned first).
fn large_batches_run_in_groups_of_items<T: TestElem>() {
    let (batch, m, k, n) = (48, 250, 64, 190);
    let (sa, sb) = (
        Stacks::<T>::new((batch, m, k)),
        Stacks::<T>::new((batch, k, n)),
    );
    let shared = random::<T>(k, n);
    // Items stacked down the rows of one F-order matrix: element (z, i, j) at
    // (z·m + i) + j·batch·m of a k × batch·m C-order array.
    let storage =
        sa.c.to_shape((batch * m, k))
            .unwrap()
            .t()
            .as_standard_layout()
            .into_owned();
    let interleaved = ArrayView3::from_shape(
        (batch, m, k).strides((m, 1, batch * m)),
        storage.as_slice().unwrap(),
    )
    .unwrap();
    assert_eq!(interleaved, sa.c);
    let parts = |route: &Route| match route {
        Route::Gpu {
            panels, batch: b, ..
        } => {
            assert_eq!(*b, batch);
            *panels
        }
        other => panic!("{other}"),
    };
    let opts = gpu_options(Kernel::Auto);
    let layouts = [
        ("C order", sa.c.view()),
        (
            "items transposed",
            sa.items_t.view().permuted_axes([0, 2, 1]),
        ),
        ("F order", sa.f.view()),
    ];
    for (la, a) in layouts {
        let p = a.try_gpu_dot_with(&sb.c, &opts).expect(la);
        assert!(parts(&p.route) > 1, "{la}: {}", p.route);
        check_items(&p.c, &a, Some(&sb.c.view()), None, la);
        // A C-order stack times a shared B is one 2-D product, in its own row panels.
        let p = a.try_gpu_dot_with(&shared, &opts).expect(la);
        if la != "C order" {
            assert!(parts(&p.route) > 1, "{la} · shared: {}", p.route);
        }
        check_items(&p.c, &a, None, Some(&shared), &format!("{la} · shared"));
    }
    let b_t = sb.items_t.view().permuted_axes([0, 2, 1]);
    let p = sa.c.try_gpu_dot_with(&b_t, &opts).unwrap();
    assert!(parts(&p.route) > 1, "· items transposed: {}", p.route);
    check_items(&p.c, &sa.c.view(), Some(&b_t), None, "· items transposed");
    let p = interleaved.try_gpu_dot_with(&sb.c, &opts).unwrap();
    assert_eq!(parts(&p.route), 1, "interleaved: {}", p.route);
    check_items(
        &p.c,
        &interleaved.view(),
        Some(&sb.c.view()),
        None,
        "interleaved",
    );
}
both_types!(
    #[ignore = "needs a CUDA GPU"]
    large_batches_run_in_groups_of_items
);
