//! Builds gpu-dot beside another crate's choice of cudarc features (see Cargo.toml).
use gpu_dot::GpuDot;
use ndarray::Array2;

fn main() {
    let a = Array2::<f32>::ones((3, 4));
    let b = Array2::<f32>::ones((4, 2));
    assert_eq!(a.gpu_dot(&b), a.dot(&b));
    // The other crate's cudarc is the same crate, with its features joined to gpu-dot's.
    let _ = cudarc::driver::sys::CUresult::CUDA_SUCCESS;
}
