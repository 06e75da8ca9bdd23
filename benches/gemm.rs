//! gpu_dot host to host, each kernel alone (device time), ndarray's `dot` and matrixmultiply's
//! threaded `sgemm`, at square sizes 64…4096. Throughput is reported in FLOP/s (2·m·k·n).
//!
//! On a machine without a GPU only the CPU rows run.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gpu_dot::profile::{random_matrix, DeviceProblem};
use gpu_dot::{device_status, Backend, DeviceStatus, DotOptions, GpuDot, Kernel};

const SIZES: [usize; 4] = [64, 256, 1024, 4096];

fn gemm(c: &mut Criterion) {
    let gpu = matches!(device_status(), DeviceStatus::Ready(_));
    if !gpu {
        eprintln!("{}: GPU rows skipped", device_status());
    }
    for size in SIZES {
        let mut group = c.benchmark_group(format!("gemm_{size}"));
        group.throughput(Throughput::Elements(gpu_dot::flops(size, size, size)));
        group.sample_size(10);
        group.warm_up_time(std::time::Duration::from_millis(300));
        group.measurement_time(std::time::Duration::from_millis(1500));
        let a = random_matrix(size, size, 1);
        let b = random_matrix(size, size, 2);

        group.bench_function("ndarray_dot", |bench| bench.iter(|| a.dot(&b)));
        group.bench_function("matrixmultiply_sgemm", |bench| {
            let mut out = vec![0.0f32; size * size];
            bench.iter(|| {
                // SAFETY: a, b and out are contiguous row-major size × size buffers; the
                // strides describe exactly that layout.
                unsafe {
                    matrixmultiply::sgemm(
                        size,
                        size,
                        size,
                        1.0,
                        a.as_ptr(),
                        size as isize,
                        1,
                        b.as_ptr(),
                        size as isize,
                        1,
                        0.0,
                        out.as_mut_ptr(),
                        size as isize,
                        1,
                    )
                }
            })
        });
        if gpu {
            let opts = DotOptions::builtin().backend(Backend::Gpu);
            group.bench_function("gpu_dot_host_to_host", |bench| {
                bench.iter(|| a.try_gpu_dot_with(&b, &opts).expect("gpu product").c)
            });
            let mut problem =
                DeviceProblem::<f32>::new(size, size, size, 3).expect("device problem");
            for kernel in Kernel::ALL {
                group.bench_function(BenchmarkId::new("device_kernel", kernel.name()), |bench| {
                    bench.iter_custom(|iters| problem.elapsed(kernel, iters).expect("kernel runs"))
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, gemm);
criterion_main!(benches);
