//! gpu-dot on the arrays of a project's own ndarray version (see Cargo.toml).
use gpu_dot::GpuDot;
use ndarray::{Array2, Array3, ArrayView2};

fn main() {
    let a = Array2::<f64>::from_shape_fn((3, 4), |(i, j)| (i + j) as f64);
    let b: ArrayView2<f64> = a.t();
    assert_eq!(a.gpu_dot(&b), a.dot(&b));
    // The re-export is the same crate as the project's own.
    let c: gpu_dot::ndarray::Array2<f32> = Array2::zeros((2, 2));
    assert_eq!(c.try_gpu_dot(&c).expect("shapes agree"), c);
    // A batch: a stack of matrices times a stack, and times one shared matrix.
    let s = Array3::<f32>::ones((4, 2, 3));
    let t = Array3::<f32>::ones((4, 3, 2));
    assert_eq!(s.gpu_dot(&t), Array3::from_elem((4, 2, 2), 3.0));
    assert_eq!(s.gpu_dot(&Array2::<f32>::ones((3, 5))).dim(), (4, 2, 5));
}
