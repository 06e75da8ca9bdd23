//! The host side of a transfer, measured piece by piece, to size the crate's copy path:
//!
//! - copying pageable memory into page-locked staging with 1 to 16 threads (GB/s);
//! - filling a fresh result (pages not yet faulted in) with several threads, with and without
//!   transparent huge pages, and a result whose memory the allocator reuses;
//! - the driver's copies between device and host: page-locked (async) against pageable
//!   (the driver stages those itself), at sizes from 256 KiB to 64 MiB, each synchronised;
//! - back-to-back page-locked copies of 32 MiB in chunks of 64 KiB to 4 MiB, each direction
//!   alone, up on two streams taking the chunks in turn, and both directions at once: the
//!   cost of cutting a transfer into parcels;
//! - with `--pack-and-copy`, a pipeline's up direction alone (packing while copying), its
//!   source just written or read from memory, and unpacking after a copy down;
//! - with `--register`, pageable memory page-locked in place (`cuMemHostRegister`): what the
//!   registration and its undoing cost, in small and in huge pages, touched and fresh, and how
//!   fast the copies from and to it run.
//!
//!     cargo run --release --example transfer [-- --json PATH] [--pack-and-copy | --register]
//!
//! Prints a table per measurement (medians of repeated runs) and writes them as JSON.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, sys, CudaContext, CudaStream};
use serde_json::{json, Value};

const MIB: usize = 1 << 20;

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Median seconds of `f` over `reps` runs (after one warm-up).
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..reps)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// Copies `src` to `dst` (possibly uninitialised memory, valid for `src.len()` floats and
/// used by nothing else meanwhile) on `threads` threads, in equal contiguous parts.
fn parallel_copy(src: &[f32], dst: *mut f32, threads: usize) {
    let part = src.len().div_ceil(threads);
    let dst = dst as usize;
    std::thread::scope(|s| {
        for (i, c) in src.chunks(part).enumerate() {
            s.spawn(move || {
                // SAFETY: the caller's `dst` holds `src.len()` floats; part `i` is
                // `c.len()` floats from `i·part`, disjoint from every other thread's.
                unsafe {
                    let d = (dst as *mut f32).add(i * part);
                    std::ptr::copy_nonoverlapping(c.as_ptr(), d, c.len());
                }
            });
        }
    });
}

/// Page-locked host memory from the driver.
struct Pinned {
    ptr: *mut f32,
    len: usize,
}

impl Pinned {
    fn new(ctx: &Arc<CudaContext>, len: usize) -> Pinned {
        ctx.bind_to_thread().expect("binding the context");
        // SAFETY: cuMemHostAlloc returns `len·4` bytes of page-locked memory or an error;
        // freed once in Drop.
        let ptr = unsafe { result::malloc_host(len * 4, 0) }.expect("page-locked memory");
        Pinned {
            ptr: ptr.cast(),
            len,
        }
    }

    fn slice(&mut self) -> &mut [f32] {
        // SAFETY: `ptr` holds `len` floats (allocated in `new`), and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: from cuMemHostAlloc in `new`; no copy uses it any more (every measurement
        // synchronises its stream).
        unsafe { result::free_host(self.ptr.cast()) }.expect("freeing page-locked memory");
    }
}

fn pack_bandwidth(ctx: &Arc<CudaContext>) -> Vec<Value> {
    println!("\n| bytes | threads | pageable → pinned GB/s |");
    println!("|---|---|---|");
    let mut out = Vec::new();
    for bytes in [MIB, 4 * MIB, 64 * MIB] {
        let src: Vec<f32> = (0..bytes / 4).map(|i| i as f32).collect();
        let mut dst = Pinned::new(ctx, bytes / 4);
        for threads in [1, 2, 4, 8, 16] {
            let s = time(20, || {
                parallel_copy(&src, dst.slice().as_mut_ptr(), threads)
            });
            let gbs = bytes as f64 / s / 1e9;
            println!("| {bytes} | {threads} | {gbs:.1} |");
            out.push(json!({"bytes": bytes, "threads": threads, "gb_per_s": gbs}));
        }
    }
    out
}

/// Fills `len` floats of fresh anonymous memory (mapped for the run, so every page faults)
/// on `threads` threads; with `huge`, advises transparent huge pages first.
#[cfg(target_os = "linux")]
fn fresh_fill(len: usize, threads: usize, huge: bool) -> f64 {
    let src = vec![1.0f32; len];
    time(10, || {
        let fresh = Mapping::new(len, huge, false);
        // The mapping holds `len` floats; dropping it unmaps it.
        parallel_copy(&src, fresh.ptr, threads);
    })
}

#[cfg(target_os = "linux")]
fn fill_fresh_results() -> Vec<Value> {
    println!(
        "\n| bytes | threads | fresh pages GB/s | fresh huge pages GB/s | reused (Vec) GB/s |"
    );
    println!("|---|---|---|---|---|");
    let mut out = Vec::new();
    for bytes in [4 * MIB, 64 * MIB] {
        let len = bytes / 4;
        let src = vec![1.0f32; len];
        for threads in [1, 4, 16] {
            let small = bytes as f64 / fresh_fill(len, threads, false) / 1e9;
            let huge = bytes as f64 / fresh_fill(len, threads, true) / 1e9;
            // A Vec allocated and dropped each time: what the allocator reuses.
            let reused = bytes as f64
                / time(10, || {
                    let mut v: Vec<f32> = Vec::with_capacity(len);
                    // The capacity holds `len` floats.
                    parallel_copy(&src, v.as_mut_ptr(), threads);
                    std::hint::black_box(&v);
                })
                / 1e9;
            println!("| {bytes} | {threads} | {small:.1} | {huge:.1} | {reused:.1} |");
            out.push(
                json!({"bytes": bytes, "threads": threads, "fresh_gb_per_s": small,
                "fresh_huge_gb_per_s": huge, "reused_gb_per_s": reused}),
            );
        }
    }
    out
}

#[cfg(not(target_os = "linux"))]
fn fill_fresh_results() -> Vec<Value> {
    Vec::new()
}

fn link(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Vec<Value> {
    println!(
        "\n| bytes | pinned H2D GB/s | pageable H2D GB/s | pinned D2H GB/s | pageable D2H GB/s |"
    );
    println!("|---|---|---|---|---|");
    let mut out = Vec::new();
    for bytes in [256 << 10, MIB, 4 * MIB, 16 * MIB, 64 * MIB] {
        let len = bytes / 4;
        // SAFETY: uninitialised device memory, written by the copies before it is read.
        let dev = unsafe { stream.alloc::<f32>(len) }.expect("device memory");
        let (ptr, _guard) = cudarc::driver::DevicePtr::device_ptr(&dev, stream);
        let mut pinned = Pinned::new(ctx, len);
        let mut pageable = vec![1.0f32; len];
        let cu = stream.cu_stream();
        let sync = || stream.synchronize().expect("synchronising");
        // SAFETY (all four): `ptr` holds `len` floats on the device; the host buffers hold
        // `len` floats and outlive the copies, which are synchronised before the next use.
        let h2d_pinned = time(20, || {
            unsafe { result::memcpy_htod_async(ptr, pinned.slice(), cu) }.expect("copy");
            sync();
        });
        let h2d_pageable = time(20, || {
            unsafe { result::memcpy_htod_async(ptr, &pageable, cu) }.expect("copy");
            sync();
        });
        let d2h_pinned = time(20, || {
            unsafe { result::memcpy_dtoh_async(pinned.slice(), ptr, cu) }.expect("copy");
            sync();
        });
        let d2h_pageable = time(20, || {
            unsafe { result::memcpy_dtoh_async(&mut pageable, ptr, cu) }.expect("copy");
            sync();
        });
        let gbs = |s: f64| bytes as f64 / s / 1e9;
        println!(
            "| {bytes} | {:.1} | {:.1} | {:.1} | {:.1} |",
            gbs(h2d_pinned),
            gbs(h2d_pageable),
            gbs(d2h_pinned),
            gbs(d2h_pageable)
        );
        out.push(json!({"bytes": bytes,
            "pinned_h2d_us": h2d_pinned * 1e6, "pageable_h2d_us": h2d_pageable * 1e6,
            "pinned_d2h_us": d2h_pinned * 1e6, "pageable_d2h_us": d2h_pageable * 1e6}));
    }
    out
}

/// Back-to-back asynchronous copies of 32 MiB in chunks of each size, on one stream with one
/// synchronisation at the end (as a pipeline issues them), each direction alone, up on two
/// streams taking the chunks in turn, and both directions at once on two streams.
fn chunked(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Vec<Value> {
    println!(
        "\n| chunk bytes | H2D GB/s | H2D on two streams, chunks alternating, GB/s | D2H GB/s | \
         both at once, GB/s each way |"
    );
    println!("|---|---|---|---|---|");
    let total = 32 * MIB / 4;
    // SAFETY: uninitialised device memory, only copied into and out of.
    let dev_up = unsafe { stream.alloc::<f32>(total) }.expect("device memory");
    // SAFETY: as above.
    let dev_down = unsafe { stream.alloc::<f32>(total) }.expect("device memory");
    let (up_ptr, _g1) = cudarc::driver::DevicePtr::device_ptr(&dev_up, stream);
    let (down_ptr, _g2) = cudarc::driver::DevicePtr::device_ptr(&dev_down, stream);
    let other = ctx.new_stream().expect("a second stream");
    let mut src = Pinned::new(ctx, total);
    let mut dst = Pinned::new(ctx, total);
    let mut out = Vec::new();
    for chunk in [
        64 << 10,
        128 << 10,
        256 << 10,
        512 << 10,
        MIB,
        2 * MIB,
        4 * MIB,
    ] {
        let floats = chunk / 4;
        // Up, the chunks alternating between the streams of `on`.
        let h2d_on = |on: &[&CudaStream], src: &mut Pinned| {
            for (i, part) in src.slice().chunks(floats).enumerate() {
                let lane = on[i % on.len()];
                // SAFETY: the device buffer holds `total` floats and part `i` lies at
                // `i·floats` inside it; `src` outlives the copies (synchronised below).
                unsafe {
                    result::memcpy_htod_async(up_ptr + (i * chunk) as u64, part, lane.cu_stream())
                }
                .expect("copy");
            }
        };
        let h2d = |on: &CudaStream, src: &mut Pinned| h2d_on(&[on], src);
        let d2h = |on: &CudaStream, dst: &mut Pinned| {
            for (i, part) in dst.slice().chunks_mut(floats).enumerate() {
                // SAFETY: as above, from the second device buffer into `dst`.
                unsafe {
                    result::memcpy_dtoh_async(part, down_ptr + (i * chunk) as u64, on.cu_stream())
                }
                .expect("copy");
            }
        };
        let up = time(10, || {
            h2d(stream, &mut src);
            stream.synchronize().expect("synchronising");
        });
        let down = time(10, || {
            d2h(stream, &mut dst);
            stream.synchronize().expect("synchronising");
        });
        let up_two = time(10, || {
            h2d_on(&[stream, &other], &mut src);
            stream.synchronize().expect("synchronising");
            other.synchronize().expect("synchronising");
        });
        let both = time(10, || {
            h2d(stream, &mut src);
            d2h(&other, &mut dst);
            stream.synchronize().expect("synchronising");
            other.synchronize().expect("synchronising");
        });
        let gbs = |s: f64| (total * 4) as f64 / s / 1e9;
        println!(
            "| {chunk} | {:.1} | {:.1} | {:.1} | {:.1} |",
            gbs(up),
            gbs(up_two),
            gbs(down),
            gbs(both)
        );
        out.push(json!({"chunk_bytes": chunk, "h2d_gb_per_s": gbs(up),
            "h2d_two_streams_gb_per_s": gbs(up_two),
            "d2h_gb_per_s": gbs(down), "duplex_gb_per_s_each": gbs(both)}));
    }
    out
}

/// Copies `len` floats from `src` to `dst` with non-temporal stores where the CPU has them
/// (x86-64: 16-byte streaming stores from `dst`'s first 16-byte boundary, then a store fence),
/// so that the written lines leave the core's caches for memory; plain copies elsewhere.
///
/// # Safety
/// `src` and `dst` hold `len` floats each and do not overlap.
unsafe fn stream_copy(src: *const f32, dst: *mut f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's ranges; SSE2 is part of x86-64. The head copies up to `dst`'s
    // first 16-byte boundary, the streaming stores write whole aligned 16-byte blocks inside
    // the range, and the tail copies what is left.
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = ((16 - (dst as usize) % 16) % 16 / 4).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let blocks = (len - head) / 4;
        let (s, d) = (src.add(head), dst.add(head));
        for b in 0..blocks {
            let v = _mm_loadu_si128(s.add(4 * b).cast::<__m128i>());
            _mm_stream_si128(d.add(4 * b).cast::<__m128i>(), v);
        }
        let done = head + 4 * blocks;
        std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done);
        _mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's ranges.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    }
}

/// Evicts the host's caches of other data: writes every line of a 512 MiB buffer.
struct Scrub(std::cell::RefCell<Vec<u64>>);

impl Scrub {
    fn new() -> Scrub {
        Scrub(std::cell::RefCell::new(vec![1; 64 * MIB]))
    }

    fn run(&self) {
        let mut b = self.0.borrow_mut();
        for (i, x) in b.iter_mut().enumerate().step_by(8) {
            *x = x.wrapping_add(i as u64);
        }
        std::hint::black_box(&*b);
    }
}

/// A pipeline's up direction alone: 32 MiB packed from pageable memory into page-locked
/// staging by `threads` threads, chunk by chunk, each chunk copied to the device as soon as
/// it is packed (one stream, one synchronisation at the end); with plain copies or
/// streaming stores, against the same copies of staging packed beforehand. With `scrub`, the
/// host's caches are filled with other data before each run, so that packing reads its
/// source from memory, as a product's does when its inputs were written long before.
fn pack_and_copy(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    scrub: Option<&Scrub>,
) -> Vec<Value> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let source = if scrub.is_some() {
        "source from memory"
    } else {
        "source just written"
    };
    println!("\n| chunk bytes | threads | packing ({source}) | GB/s, packed before | GB/s from the first copy, packed while copying |");
    println!("|---|---|---|---|---|");
    let total = 32 * MIB / 4;
    let src: Vec<f32> = (0..total).map(|i| i as f32).collect();
    let mut staging = Pinned::new(ctx, total);
    // SAFETY: uninitialised device memory, only copied into.
    let dev = unsafe { stream.alloc::<f32>(total) }.expect("device memory");
    let (dev_ptr, _g) = cudarc::driver::DevicePtr::device_ptr(&dev, stream);
    let stage = staging.slice().as_mut_ptr() as usize;
    let mut out = Vec::new();
    for chunk in [MIB, 4 * MIB] {
        let floats = chunk / 4;
        let chunks = total / floats;
        let issue = |c: usize| {
            // SAFETY: chunk `c` of staging (`floats` floats from `c·floats`) is packed and
            // not written again before the synchronisation that ends the measurement; the
            // device buffer holds `total` floats.
            unsafe {
                let part =
                    std::slice::from_raw_parts((stage as *const f32).add(c * floats), floats);
                result::memcpy_htod_async(dev_ptr + (c * chunk) as u64, part, stream.cu_stream())
            }
            .expect("copy");
        };
        for threads in [4usize, 8, 15] {
            for streaming in [false, true] {
                let run = |pipelined: bool| {
                    if let Some(scrub) = scrub {
                        scrub.run();
                    }
                    let done: Vec<AtomicUsize> = (0..chunks).map(|_| AtomicUsize::new(0)).collect();
                    let start = Instant::now();
                    let first_issue = std::cell::RefCell::new(start);
                    std::thread::scope(|s| {
                        for t in 0..threads {
                            let (done, src) = (&done, &src);
                            s.spawn(move || {
                                let share = floats.div_ceil(threads).next_multiple_of(16);
                                for (c, count) in done.iter().enumerate() {
                                    let from = (t * share).min(floats);
                                    let to = ((t + 1) * share).min(floats);
                                    let at = c * floats + from;
                                    // SAFETY: thread `t` writes its own share of chunk `c`
                                    // of staging, which holds `total` floats.
                                    unsafe {
                                        let d = (stage as *mut f32).add(at);
                                        if streaming {
                                            stream_copy(src.as_ptr().add(at), d, to - from);
                                        } else {
                                            std::ptr::copy_nonoverlapping(
                                                src.as_ptr().add(at),
                                                d,
                                                to - from,
                                            );
                                        }
                                    }
                                    count.fetch_add(1, Ordering::Release);
                                }
                            });
                        }
                        if pipelined {
                            for (c, count) in done.iter().enumerate() {
                                while count.load(Ordering::Acquire) < threads {
                                    std::hint::spin_loop();
                                }
                                if c == 0 {
                                    *first_issue.borrow_mut() = Instant::now();
                                }
                                issue(c);
                            }
                        }
                    });
                    let packed = start.elapsed().as_secs_f64();
                    let copy_start = if pipelined {
                        *first_issue.borrow()
                    } else {
                        Instant::now()
                    };
                    if !pipelined {
                        (0..chunks).for_each(issue);
                    }
                    stream.synchronize().expect("synchronising");
                    (packed, copy_start.elapsed().as_secs_f64())
                };
                let med = |pipelined: bool| {
                    let mut packs = Vec::new();
                    let mut times = Vec::new();
                    run(pipelined);
                    for _ in 0..9 {
                        let (p, t) = run(pipelined);
                        packs.push(p);
                        times.push(t);
                    }
                    (median(packs), median(times))
                };
                let (pack_s, before) = med(false);
                let (_, during) = med(true);
                let gbs = |s: f64| (total * 4) as f64 / s / 1e9;
                let how = if streaming { "streaming" } else { "plain" };
                println!(
                    "| {chunk} | {threads} | {how}, {:.1} GB/s | {:.1} | {:.1} |",
                    gbs(pack_s),
                    gbs(before),
                    gbs(during)
                );
                out.push(
                    json!({"chunk_bytes": chunk, "threads": threads, "stores": how,
                    "source_from_memory": scrub.is_some(),
                    "pack_gb_per_s": gbs(pack_s), "copy_after_pack_gb_per_s": gbs(before),
                    "pipelined_gb_per_s": gbs(during)}),
                );
            }
        }
    }
    out
}

/// How unpacking leaves the staging lines it read.
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// In the reading core's caches.
    Cached,
    /// Flushed (`clflush`).
    Flush,
    /// Flushed with the weakly ordered `clflushopt`, where the CPU has it.
    FlushOpt,
    /// Demoted to the shared last-level cache (`cldemote`), where the CPU has it.
    Demote,
}

/// Whether the CPU has `clflushopt` and `cldemote` (CPUID leaf 7).
fn cache_ops() -> (bool, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        let max = std::arch::x86_64::__cpuid(0).eax;
        if max >= 7 {
            let r = std::arch::x86_64::__cpuid_count(7, 0);
            return (r.ebx & (1 << 23) != 0, r.ecx & (1 << 25) != 0);
        }
    }
    (false, false)
}

/// Applies `after` to every cache line of `len` bytes from `ptr` (nothing for `Cached`, or
/// off x86-64).
fn after_read(ptr: *const u8, len: usize, after: After) {
    #[cfg(target_arch = "x86_64")]
    for at in (0..len).step_by(64) {
        // SAFETY: `ptr + at` lies inside the caller's range; each instruction only changes
        // where the line is cached, and the caller checked that the CPU has it.
        unsafe {
            let p = ptr.add(at);
            match after {
                After::Cached => {}
                After::Flush => std::arch::x86_64::_mm_clflush(p),
                After::FlushOpt => std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack)),
                After::Demote => std::arch::asm!("cldemote [{0}]", in(reg) p, options(nostack)),
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if after == After::FlushOpt {
        // SAFETY: sfence has no operands.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (ptr, len, after);
}

/// The down direction alone: 32 MiB copied from the device into page-locked staging in chunks
/// of 4 MiB, after the staging was left alone, after 8 threads read it all into pageable
/// memory (as unpacking does), and after they read it and flushed its lines from the caches.
fn down_after_read(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Vec<Value> {
    println!("\n| staging before the copies | D2H GB/s | read (and flush) GB/s |");
    println!("|---|---|---|");
    let total = 32 * MIB / 4;
    let chunk = 4 * MIB / 4;
    let threads = 8;
    let mut staging = Pinned::new(ctx, total);
    let mut out_buf: Vec<f32> = vec![1.0; total];
    let dev = stream
        .clone_htod(&vec![2.0f32; total])
        .expect("device memory");
    let (dev_ptr, _g) = cudarc::driver::DevicePtr::device_ptr(&dev, stream);
    let stage = staging.slice().as_mut_ptr() as usize;
    let out = out_buf.as_mut_ptr() as usize;
    let d2h = || {
        for c in 0..total / chunk {
            // SAFETY: chunk `c` of staging and of the device buffer, both `total` floats; the
            // staging is not used by the host until the synchronisation below.
            unsafe {
                let part =
                    std::slice::from_raw_parts_mut((stage as *mut f32).add(c * chunk), chunk);
                result::memcpy_dtoh_async(
                    part,
                    dev_ptr + (c * chunk * 4) as u64,
                    stream.cu_stream(),
                )
            }
            .expect("copy");
        }
        stream.synchronize().expect("synchronising");
    };
    let read = |after: After| {
        let share = total / threads;
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    // SAFETY: thread `t` reads its own share of staging and writes its own
                    // share of `out`, both `total` floats.
                    unsafe {
                        let src = (stage as *const f32).add(t * share);
                        std::ptr::copy_nonoverlapping(src, (out as *mut f32).add(t * share), share);
                        after_read(src.cast(), share * 4, after);
                    }
                });
            }
        });
    };
    let mut rows = Vec::new();
    let (flushopt, demote) = cache_ops();
    println!("clflushopt: {flushopt}, cldemote: {demote}");
    let mut cases = vec![
        ("left alone", None),
        ("read", Some(After::Cached)),
        ("read, clflush", Some(After::Flush)),
    ];
    if flushopt {
        cases.push(("read, clflushopt", Some(After::FlushOpt)));
    }
    if demote {
        cases.push(("read, cldemote", Some(After::Demote)));
    }
    for (name, before) in cases {
        let mut copies = Vec::new();
        let mut reads = Vec::new();
        for rep in 0..11 {
            let start = Instant::now();
            if let Some(after) = before {
                read(after);
            }
            let r = start.elapsed().as_secs_f64();
            let start = Instant::now();
            d2h();
            if rep > 0 {
                copies.push(start.elapsed().as_secs_f64());
                reads.push(r);
            }
        }
        let gbs = |s: f64| (total * 4) as f64 / s / 1e9;
        let (c, r) = (gbs(median(copies)), gbs(median(reads)));
        println!(
            "| {name} | {c:.1} | {} |",
            if before.is_some() {
                format!("{r:.1}")
            } else {
                "-".into()
            }
        );
        rows.push(json!({"staging": name, "d2h_gb_per_s": c, "read_gb_per_s": before.map(|_| r)}));
    }
    drop(out_buf);
    rows
}

/// Anonymous memory of `len` floats, with transparent huge pages advised where `huge`, and
/// every page written once where `touched`.
#[cfg(target_os = "linux")]
struct Mapping {
    ptr: *mut f32,
    bytes: usize,
}

#[cfg(target_os = "linux")]
impl Mapping {
    fn new(len: usize, huge: bool, touched: bool) -> Mapping {
        let bytes = len * 4;
        // SAFETY: an anonymous private mapping of `bytes` bytes, checked for failure, unmapped
        // on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap failed");
        if huge {
            // SAFETY: advice on the mapping made above; failure only means no huge pages.
            unsafe { libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE) };
        }
        let m = Mapping {
            ptr: ptr.cast(),
            bytes,
        };
        if touched {
            let src = vec![1.0f32; len];
            parallel_copy(&src, m.ptr, 16);
        }
        m
    }
}

#[cfg(target_os = "linux")]
impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (every registration undone).
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}

/// Pageable memory page-locked in place: per size, in 4 KiB and in huge pages, the time of
/// `cuMemHostRegister` on touched memory (an operand) and on fresh memory (a result), of
/// `cuMemHostUnregister`, and of one copy each way from and to the registered memory.
#[cfg(target_os = "linux")]
fn register_in_place(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Vec<Value> {
    println!(
        "\n| MiB | pages | register touched µs | register fresh µs | unregister µs | H2D GB/s | \
         D2H GB/s | register + H2D + unregister, GB/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    ctx.bind_to_thread().expect("binding the context");
    let mut out = Vec::new();
    for mib in [1usize, 4, 16, 64, 256] {
        let bytes = mib * MIB;
        let len = bytes / 4;
        // SAFETY: uninitialised device memory, written by the copies before it is read.
        let dev = unsafe { stream.alloc::<f32>(len) }.expect("device memory");
        let (dptr, _guard) = cudarc::driver::DevicePtr::device_ptr(&dev, stream);
        let cu = stream.cu_stream();
        for huge in [false, true] {
            let reg = |m: &Mapping| {
                let t = Instant::now();
                // SAFETY: `m` maps `bytes` bytes, alive until it is unregistered below.
                let r = unsafe { sys::cuMemHostRegister_v2(m.ptr.cast(), bytes, 0) };
                assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "cuMemHostRegister");
                t.elapsed().as_secs_f64()
            };
            let unreg = |m: &Mapping| {
                let t = Instant::now();
                // SAFETY: `m` was registered by `reg` and no copy uses it any more.
                let r = unsafe { sys::cuMemHostUnregister(m.ptr.cast()) };
                assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "cuMemHostUnregister");
                t.elapsed().as_secs_f64()
            };
            let reps = if mib >= 64 { 5 } else { 15 };
            let (mut r_t, mut r_f, mut u, mut up, mut down, mut whole) =
                (vec![], vec![], vec![], vec![], vec![], vec![]);
            let touched = Mapping::new(len, huge, true);
            for _ in 0..reps {
                let t0 = Instant::now();
                r_t.push(reg(&touched));
                let t = Instant::now();
                // SAFETY: `dptr` holds `len` floats; the registered host memory holds as many
                // and outlives the copy, synchronised right after.
                let host = unsafe { std::slice::from_raw_parts(touched.ptr, len) };
                unsafe { result::memcpy_htod_async(dptr, host, cu) }.expect("copy");
                stream.synchronize().expect("synchronising");
                up.push(t.elapsed().as_secs_f64());
                u.push(unreg(&touched));
                whole.push(t0.elapsed().as_secs_f64());
                let fresh = Mapping::new(len, huge, false);
                r_f.push(reg(&fresh));
                let t = Instant::now();
                // SAFETY: as above, the other way.
                let host = unsafe { std::slice::from_raw_parts_mut(fresh.ptr, len) };
                unsafe { result::memcpy_dtoh_async(host, dptr, cu) }.expect("copy");
                stream.synchronize().expect("synchronising");
                down.push(t.elapsed().as_secs_f64());
                unreg(&fresh);
            }
            let (r_t, r_f, u, up, down, whole) = (
                median(r_t),
                median(r_f),
                median(u),
                median(up),
                median(down),
                median(whole),
            );
            let gbs = |s: f64| bytes as f64 / s / 1e9;
            let pages = if huge { "huge" } else { "4 KiB" };
            println!(
                "| {mib} | {pages} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} |",
                r_t * 1e6,
                r_f * 1e6,
                u * 1e6,
                gbs(up),
                gbs(down),
                gbs(whole)
            );
            out.push(json!({"bytes": bytes, "huge_pages": huge,
                "register_touched_us": r_t * 1e6, "register_fresh_us": r_f * 1e6,
                "unregister_us": u * 1e6, "h2d_us": up * 1e6, "d2h_fresh_us": down * 1e6,
                "register_h2d_unregister_us": whole * 1e6}));
        }
    }
    out
}

#[cfg(not(target_os = "linux"))]
fn register_in_place(_: &Arc<CudaContext>, _: &Arc<CudaStream>) -> Vec<Value> {
    println!("registration in place is measured on Linux only");
    Vec::new()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1).cloned());
    // SAFETY: only tries to open the driver library.
    if !unsafe { sys::is_culib_present() } {
        eprintln!("transfer needs the CUDA driver");
        std::process::exit(2);
    }
    let ctx = CudaContext::new(0).expect("a CUDA context on device 0");
    let stream = ctx.new_stream().expect("a stream");
    println!(
        "device: {}; host threads available: {}",
        ctx.name().expect("the device's name"),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    if args.iter().any(|a| a == "--register") {
        let doc = json!({"register": register_in_place(&ctx, &stream)});
        if let Some(path) = json_path {
            std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON"))
                .expect("writing the JSON");
        }
        return;
    }
    if args.iter().any(|a| a == "--pack-and-copy") {
        let scrub = Scrub::new();
        let doc = json!({"pack_and_copy": pack_and_copy(&ctx, &stream, None),
            "pack_and_copy_from_memory": pack_and_copy(&ctx, &stream, Some(&scrub)),
            "down_after_read": down_after_read(&ctx, &stream)});
        if let Some(path) = json_path {
            std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON"))
                .expect("writing the JSON");
        }
        return;
    }
    let doc = json!({
        "pack": pack_bandwidth(&ctx),
        "fill": fill_fresh_results(),
        "link": link(&ctx, &stream),
        "chunked": chunked(&ctx, &stream),
        "pack_and_copy": pack_and_copy(&ctx, &stream, None),
        "down_after_read": down_after_read(&ctx, &stream),
    });
    if let Some(path) = json_path {
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON"))
            .expect("writing the JSON");
        println!("wrote {path}");
    }
}
