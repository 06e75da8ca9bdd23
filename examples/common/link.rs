//! The host-to-host floor of a product: what the PCIe link allows, measured in the same run.

use std::time::Instant;

use cudarc::driver::{result, CudaContext};

/// Fixed cost of one round trip to the device (a 16³ product forced to the GPU: 0.031 ms on
/// an H200), added to every floor.
pub const ROUND_TRIP_MS: f64 = 0.025;

/// The link's page-locked bandwidth in GB/s, host to device and back (medians of 64 MiB
/// copies, each synchronised).
pub fn pinned_gbs() -> (f64, f64) {
    const BYTES: usize = 64 << 20;
    let ctx = CudaContext::new(0).expect("a CUDA context on device 0");
    let stream = ctx.new_stream().expect("a stream");
    // SAFETY: cuMemHostAlloc returns BYTES of page-locked memory or an error; freed below
    // after every copy that uses it has been synchronised.
    let host = unsafe { result::malloc_host(BYTES, 0) }.expect("page-locked memory");
    // SAFETY: `host` holds BYTES bytes, exclusively ours until it is freed.
    let slice = unsafe { std::slice::from_raw_parts_mut(host.cast::<u8>(), BYTES) };
    slice.fill(1);
    // SAFETY: uninitialised device memory, written by the copies before it is read.
    let dev = unsafe { stream.alloc::<u8>(BYTES) }.expect("device memory");
    let (ptr, guard) = cudarc::driver::DevicePtr::device_ptr(&dev, &stream);
    let cu = stream.cu_stream();
    let mut time = |up: bool| {
        let mut t: Vec<f64> = (0..7)
            .map(|_| {
                let start = Instant::now();
                // SAFETY: `ptr` holds BYTES on the device and `slice` BYTES on the host; the
                // copy is synchronised before either is used again.
                unsafe {
                    if up {
                        result::memcpy_htod_async(ptr, &slice[..], cu).expect("copy up");
                    } else {
                        result::memcpy_dtoh_async(&mut slice[..], ptr, cu).expect("copy down");
                    }
                }
                stream.synchronize().expect("synchronising");
                start.elapsed().as_secs_f64()
            })
            .collect();
        t.sort_by(f64::total_cmp);
        BYTES as f64 / t[t.len() / 2] / 1e9
    };
    let (up, down) = (time(true), time(false));
    drop(guard);
    drop(dev);
    // SAFETY: from cuMemHostAlloc above; every copy that used it has been synchronised.
    unsafe { result::free_host(host) }.expect("freeing page-locked memory");
    (up, down)
}

/// The floor of a product that moves `bytes_in` to the device and `bytes_out` back, in ms:
/// the longer direction at the link's speed (the two overlap) plus one round trip.
pub fn floor_ms((up_gbs, down_gbs): (f64, f64), bytes_in: usize, bytes_out: usize) -> f64 {
    let up = bytes_in as f64 / up_gbs / 1e6;
    let down = bytes_out as f64 / down_gbs / 1e6;
    up.max(down) + ROUND_TRIP_MS
}
