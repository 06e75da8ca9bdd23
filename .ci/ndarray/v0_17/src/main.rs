//! gpu-dot on the arrays of a project's own ndarray version (see Cargo.toml).
use gpu_dot::GpuDot;
use ndarray::{Array2, ArrayView2};

fn main() {
    let a = Array2::<f64>::from_shape_fn((3, 4), |(i, j)| (i + j) as f64);
    let b: ArrayView2<f64> = a.t();
    assert_eq!(a.gpu_dot(&b), a.dot(&b));
    // The re-export is the same crate as the project's own.
    let c: gpu_dot::ndarray::Array2<f32> = Array2::zeros((2, 2));
    assert_eq!(c.try_gpu_dot(&c).expect("shapes agree"), c);
    let v = ndarray::Array1::<f32>::ones(2);
    assert_eq!(by_reference(&c, &v), c.dot(&v));
}

/// ndarray 0.17's reference types, as a function written against them takes its operands.
fn by_reference(a: &ndarray::ArrayRef2<f32>, v: &ndarray::ArrayRef1<f32>) -> ndarray::Array1<f32> {
    a.gpu_dot(v)
}
