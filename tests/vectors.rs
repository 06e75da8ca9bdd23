//! Every form of ndarray's `dot` with a vector: matrix · vector, vector · matrix and
//! vector · vector, with ndarray's result types, panics and typed errors, in both element
//! types, with vectors of every layout (contiguous, strided, reversed, a matrix's row or
//! column). The GPU tests (`--include-ignored`) run the matrix–vector kernels of every kernel
//! choice.

mod common;

use common::{
    both_types, check, cpu_options, gpu_options, panic_message, random, reference, TestElem,
    KERNELS,
};
use gpu_dot::{Backend, DotOptions, GpuDot, GpuDotError, Kernel};
use ndarray::{s, Array1, Array2, ArrayView1, Axis};

/// A store of `2·len` random values and the vectors of length `len` that views of it give:
/// contiguous, every other element, reversed, and a column of a row-major matrix.
struct Vectors<T> {
    store: Array2<T>,
}

impl<T: TestElem> Vectors<T> {
    fn new(len: usize) -> Self {
        Vectors {
            store: random::<T>(len.max(1), 2),
        }
    }

    fn all(&self, len: usize) -> Vec<(&'static str, ArrayView1<'_, T>)> {
        let flat = self
            .store
            .as_slice()
            .expect("a fresh array")
            .get(..2 * len)
            .expect("2·len values");
        let flat = ArrayView1::from(flat);
        vec![
            ("contiguous", flat.slice_move(s![..len])),
            ("strided", flat.slice_move(s![..;2])),
            ("reversed", flat.slice_move(s![..len;-1])),
            ("column", self.store.column(1).slice_move(s![..len])),
        ]
    }
}

/// `v` as a one-column matrix, for the reference and the check.
fn col<T: Clone>(v: &ArrayView1<T>) -> Array2<T> {
    v.to_owned().insert_axis(Axis(1))
}

/// `v` as a one-row matrix.
fn row<T: Clone>(v: &ArrayView1<T>) -> Array2<T> {
    v.to_owned().insert_axis(Axis(0))
}

/// Checks all three vector forms of `m × k` operands with `opts` against the reference.
fn check_forms<T: TestElem>(m: usize, k: usize, opts: &DotOptions, on_gpu: bool, what: &str) {
    let a = random::<T>(m, k);
    let at = random::<T>(k, m);
    let vectors = Vectors::<T>::new(k);
    for (layout, v) in vectors.all(k) {
        for (alayout, av) in [("C", a.view()), ("F", at.t())] {
            // Matrix · vector.
            let p = av
                .try_gpu_dot_with(&v, opts)
                .unwrap_or_else(|e| panic!("{what} mat·vec {alayout}/{layout}: {e}"));
            assert_eq!(p.c.dim(), m);
            assert_eq!(p.route.is_gpu(), on_gpu, "{:?}", p.route);
            let (vc, c2) = (col(&v), p.c.clone().insert_axis(Axis(1)));
            check(
                &c2,
                &av,
                &vc,
                &reference(&av, &vc),
                &format!("{what} mat·vec {alayout}/{layout}"),
            );
            // Vector · matrix.
            let p = v
                .try_gpu_dot_with(&av.t(), opts)
                .unwrap_or_else(|e| panic!("{what} vec·mat {alayout}/{layout}: {e}"));
            assert_eq!(p.c.dim(), m);
            assert_eq!(p.route.is_gpu(), on_gpu, "{:?}", p.route);
            let (vr, c2) = (row(&v), p.c.clone().insert_axis(Axis(0)));
            check(
                &c2,
                &vr,
                &av.t(),
                &reference(&vr, &av.t()),
                &format!("{what} vec·mat {alayout}/{layout}"),
            );
        }
        // Vector · vector.
        let w = a.row(0);
        let p = v
            .try_gpu_dot_with(&w, opts)
            .unwrap_or_else(|e| panic!("{what} vec·vec {layout}: {e}"));
        assert_eq!(p.route.is_gpu(), on_gpu, "{:?}", p.route);
        let (vr, wc) = (row(&v), col(&w));
        check(
            &Array2::from_elem((1, 1), p.c),
            &vr,
            &wc,
            &reference(&vr, &wc),
            &format!("{what} vec·vec {layout}"),
        );
    }
}

fn the_cpu_route_gives_ndarrays_dot_for_every_vector_form<T: TestElem>() {
    for (m, k) in [(1, 1), (3, 5), (17, 33), (64, 1)] {
        check_forms::<T>(m, k, &cpu_options(), false, &format!("{m}×{k} cpu"));
        let (a, v) = (random::<T>(m, k), random::<T>(k, 1).remove_axis(Axis(1)));
        // The CPU route is ndarray's own `dot`: equal, not merely close.
        assert_eq!(a.try_gpu_dot_with(&v, &cpu_options()).unwrap().c, a.dot(&v));
        assert_eq!(
            v.try_gpu_dot_with(&a.t(), &cpu_options()).unwrap().c,
            v.dot(&a.t())
        );
        assert_eq!(v.try_gpu_dot_with(&v, &cpu_options()).unwrap().c, v.dot(&v));
        // Below the threshold, the default form goes to the CPU too.
        assert_eq!(a.gpu_dot(&v), a.dot(&v));
        assert_eq!(v.gpu_dot(&a.t()), v.dot(&a.t()));
        assert_eq!(v.gpu_dot(&v), v.dot(&v));
        assert_eq!(v.try_gpu_dot(&v).unwrap(), v.dot(&v));
    }
}
both_types!(the_cpu_route_gives_ndarrays_dot_for_every_vector_form);

fn vector_shape_errors_panic_as_ndarray_and_are_typed_in_try_forms<T: TestElem>() {
    let (a, v4, v3) = (
        Array2::<T>::zeros((2, 3)),
        Array1::<T>::zeros(4),
        Array1::<T>::zeros(3),
    );
    let pairs: [(String, String); 3] = [
        (
            panic_message(|| drop(a.gpu_dot(&v4))),
            panic_message(|| drop(a.dot(&v4))),
        ),
        (
            panic_message(|| drop(v4.gpu_dot(&a.t()))),
            panic_message(|| drop(v4.dot(&a.t()))),
        ),
        (
            panic_message(|| {
                v4.gpu_dot(&v3);
            }),
            panic_message(|| {
                v4.dot(&v3);
            }),
        ),
    ];
    for (ours, ndarrays) in pairs {
        assert_eq!(ours, ndarrays);
    }
    assert!(matches!(
        a.try_gpu_dot(&v4),
        Err(GpuDotError::ShapeMismatch {
            m: 2,
            k: 3,
            k2: 4,
            n: 1
        })
    ));
    assert!(matches!(
        v4.try_gpu_dot(&a.t()),
        Err(GpuDotError::ShapeMismatch {
            m: 1,
            k: 4,
            k2: 3,
            n: 2
        })
    ));
    assert!(matches!(
        v4.try_gpu_dot_with(&v3, &cpu_options()),
        Err(GpuDotError::ShapeMismatch {
            m: 1,
            k: 4,
            k2: 3,
            n: 1
        })
    ));
}
both_types!(vector_shape_errors_panic_as_ndarray_and_are_typed_in_try_forms);

fn empty_vectors_give_ndarrays_zeros<T: TestElem>() {
    let (a, e) = (Array2::<T>::zeros((3, 0)), Array1::<T>::zeros(0));
    for opts in [cpu_options(), DotOptions::builtin().backend(Backend::Gpu)] {
        assert_eq!(a.try_gpu_dot_with(&e, &opts).unwrap().c, Array1::zeros(3));
        assert_eq!(
            e.try_gpu_dot_with(&a.t(), &opts).unwrap().c,
            Array1::zeros(3)
        );
        assert_eq!(e.try_gpu_dot_with(&e, &opts).unwrap().c, T::zero());
        let none = Array2::<T>::zeros((0, 5));
        let v = Array1::<T>::ones(5);
        assert_eq!(none.try_gpu_dot_with(&v, &opts).unwrap().c.len(), 0);
    }
}
both_types!(empty_vectors_give_ndarrays_zeros);

fn every_kernel_computes_every_vector_form_on_the_gpu<T: TestElem>() {
    for kernel in KERNELS {
        for (m, k) in [(1, 1), (7, 3), (129, 257), (1000, 1)] {
            check_forms::<T>(
                m,
                k,
                &gpu_options(kernel),
                true,
                &format!("{m}×{k} {kernel}"),
            );
        }
    }
    // Long vectors: the matrix–vector kernels' vectorised and split paths.
    for (m, k) in [(4097, 3001), (3, 100_003)] {
        check_forms::<T>(
            m,
            k,
            &gpu_options(Kernel::Auto),
            true,
            &format!("{m}×{k} auto"),
        );
    }
}
both_types!(
    #[ignore = "needs a CUDA GPU"]
    every_kernel_computes_every_vector_form_on_the_gpu
);

fn large_vector_products_go_to_the_gpu_by_default<T: TestElem>() {
    // 2·m·k = 32 Mflop: above both element types' thresholds.
    let (a, v) = (random::<T>(4096, 4096), random::<T>(4096, 1));
    let v = v.column(0);
    let p = a
        .try_gpu_dot_with(&v, &DotOptions::builtin())
        .expect("Auto never fails");
    assert!(p.route.is_gpu(), "{:?}", p.route);
    let (vc, c2) = (col(&v), p.c.insert_axis(Axis(1)));
    check(&c2, &a, &vc, &reference(&a, &vc), "default mat·vec");
    assert_eq!(a.gpu_dot(&v).dim(), 4096);
}
both_types!(
    #[ignore = "needs a CUDA GPU"]
    large_vector_products_go_to_the_gpu_by_default
);
