//! ndarray 0.17's reference types (`&ArrayRef2<A>`, `&ArrayRef1<A>`) as `gpu_dot` operands,
//! on either side and mixed with arrays and views, as ndarray's own `dot` takes them: the
//! results, the panics and the typed errors are those of the same product on views.

mod common;

use common::{both_types, check, cpu_options, random, reference, TestElem};
use gpu_dot::{Backend, DotOptions, GpuDot, GpuDotError};
use ndarray::{Array1, Array2, ArrayRef1, ArrayRef2, Axis};

/// What a function written against ndarray 0.17's reference types does.
fn matrix_by_reference<T: TestElem>(a: &ArrayRef2<T>, b: &ArrayRef2<T>) -> Array2<T> {
    a.gpu_dot(b)
}

fn vector_by_reference<T: TestElem>(
    a: &ArrayRef2<T>,
    v: &ArrayRef1<T>,
) -> (Array1<T>, Array1<T>, T) {
    (a.gpu_dot(v), v.gpu_dot(&a.t()), v.gpu_dot(v))
}

fn every_reference_form_matches_dot<T: TestElem>() {
    let (a, b) = (random::<T>(37, 23), random::<T>(23, 19));
    let v = random::<T>(23, 1).remove_axis(Axis(1));
    let (ar, br, vr): (&ArrayRef2<T>, &ArrayRef2<T>, &ArrayRef1<T>) = (&a, &b, &v);
    // Below the threshold the default forms run ndarray's own dot: equal, not merely close.
    assert_eq!(matrix_by_reference(ar, br), a.dot(&b));
    assert_eq!(ar.gpu_dot(&b), a.dot(&b));
    assert_eq!(a.gpu_dot(br), a.dot(&b));
    assert_eq!(ar.gpu_dot(&b.view()), a.dot(&b));
    let (mv, vm, vv) = vector_by_reference(ar, vr);
    assert_eq!(mv, a.dot(&v));
    assert_eq!(vm, v.dot(&a.t()));
    assert_eq!(vv, v.dot(&v));
    assert_eq!(a.gpu_dot(vr), a.dot(&v));
    assert_eq!(ar.gpu_dot(&v), a.dot(&v));
    assert_eq!(vr.gpu_dot(&a.t()), v.dot(&a.t()));
    assert_eq!(v.gpu_dot(&*a.t()), v.dot(&a.t()));
    assert_eq!(vr.gpu_dot(&v), v.dot(&v));
    assert_eq!(v.gpu_dot(vr), v.dot(&v));
    // The options form reports the route, as for views.
    let p = ar
        .try_gpu_dot_with(br, &cpu_options())
        .expect("the CPU backend");
    assert!(!p.route.is_gpu());
    check(&p.c, &a, &b, &reference(&a, &b), "by reference");
}
both_types!(every_reference_form_matches_dot);

fn reference_shape_errors_are_dots_and_typed<T: TestElem>() {
    let (a, b) = (Array2::<T>::zeros((2, 3)), Array2::<T>::zeros((4, 5)));
    let (ar, br): (&ArrayRef2<T>, &ArrayRef2<T>) = (&a, &b);
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let ours = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ar.gpu_dot(br);
    }));
    let theirs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ar.dot(br);
    }));
    std::panic::set_hook(quiet);
    let (ours, theirs) = (
        ours.expect_err("mismatched shapes panic"),
        theirs.expect_err("ndarray panics"),
    );
    let text = |e: &Box<dyn std::any::Any + Send>| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
    };
    assert!(text(&ours).is_some_and(|t| t.contains("not compatible")));
    assert_eq!(text(&ours), text(&theirs));
    assert!(matches!(
        ar.try_gpu_dot(br),
        Err(GpuDotError::ShapeMismatch {
            m: 2,
            k: 3,
            k2: 4,
            n: 5
        })
    ));
}
both_types!(reference_shape_errors_are_dots_and_typed);

fn references_reach_the_gpu<T: TestElem>() {
    let (a, b) = (random::<T>(333, 517), random::<T>(517, 129));
    let (ar, br): (&ArrayRef2<T>, &ArrayRef2<T>) = (&a, &b);
    let gpu = DotOptions::builtin()
        .backend(Backend::Gpu)
        .poison_output(true);
    let p = ar.try_gpu_dot_with(br, &gpu).expect("a GPU product");
    assert!(p.route.is_gpu(), "{:?}", p.route);
    check(&p.c, &a, &b, &reference(&a, &b), "references on the GPU");
}
both_types!(
    #[ignore = "needs a CUDA GPU"]
    references_reach_the_gpu
);
