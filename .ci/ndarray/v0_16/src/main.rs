//! gpu-dot on the arrays of a project's own ndarray version (see Cargo.toml).
use gpu_dot::GpuDot;
use ndarray::{Array2, Array3, ArrayView2};
use num_complex::Complex64;

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
    // Complex matrices, of the project's own num-complex.
    let z = Array2::from_shape_fn((3, 3), |(i, j)| Complex64::new(i as f64, j as f64));
    assert_eq!(z.gpu_dot(&z.t()), z.dot(&z.t()));
    let mut w = Array2::<Complex64>::zeros((3, 3));
    gpu_dot::general_mat_mul(Complex64::new(1.0, 1.0), &z, &z, Complex64::new(0.0, 0.0), &mut w);
}
