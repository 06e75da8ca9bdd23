//! Never builds: gpu-dot refuses a build with no CUDA version feature (see Cargo.toml).
use gpu_dot::GpuDot;

fn main() {
    let a = ndarray::Array2::<f32>::ones((2, 2));
    assert_eq!(a.gpu_dot(&a), a.dot(&a));
}
