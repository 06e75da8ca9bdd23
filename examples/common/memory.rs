//! The host memory's bandwidth, measured in the same run as a sweep: reading, writing and
//! copying buffers far larger than the caches, by thread count. Staging packs each operand
//! into page-locked memory and unpacks each result out of it, so a host-to-host product also
//! has a floor in the host memory's copy rate, beside the link's.

use std::time::Instant;

use serde_json::{json, Value};

/// Bytes each measurement moves per thread count (far past the last-level cache).
const BYTES: usize = 512 << 20;

/// One thread count's rates, in GB/s: bytes read, bytes written, and bytes copied (each
/// read once and written once; so a copy moves twice its bytes through memory).
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub threads: usize,
    pub read: f64,
    pub write: f64,
    pub copy: f64,
}

/// Median seconds of `f` over 5 runs.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Runs `f(chunk)` on `threads` threads, one chunk of `buf` each.
fn split<T: Send>(buf: &mut [T], threads: usize, f: impl Fn(&mut [T]) + Sync) {
    let chunk = buf.len().div_ceil(threads);
    std::thread::scope(|s| {
        for part in buf.chunks_mut(chunk) {
            let f = &f;
            s.spawn(move || f(part));
        }
    });
}

/// The rates with 1, 2, 4, … up to the host's cores.
pub fn rates() -> Vec<Rates> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let words = BYTES / 8;
    let mut src = vec![1u64; words];
    let mut dst = vec![0u64; words];
    let mut out = Vec::new();
    let mut threads = 1;
    loop {
        let read = time(|| {
            let sum = std::sync::atomic::AtomicU64::new(0);
            split(&mut src, threads, |part| {
                let s = part.iter().fold(0u64, |a, &x| a.wrapping_add(x));
                sum.fetch_add(s, std::sync::atomic::Ordering::Relaxed);
            });
            std::hint::black_box(sum.into_inner());
        });
        let write = time(|| split(&mut dst, threads, |part| part.fill(7)));
        let copy = time(|| {
            let chunk = words.div_ceil(threads);
            std::thread::scope(|s| {
                for (d, c) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                    s.spawn(move || d.copy_from_slice(c));
                }
            });
        });
        std::hint::black_box(&dst);
        out.push(Rates {
            threads,
            read: BYTES as f64 / read / 1e9,
            write: BYTES as f64 / write / 1e9,
            copy: BYTES as f64 / copy / 1e9,
        });
        if threads >= cores {
            break;
        }
        threads = (threads * 2).min(cores);
    }
    out
}

/// The best copy rate over the thread counts, GB/s.
pub fn best_copy(rates: &[Rates]) -> f64 {
    rates.iter().map(|r| r.copy).fold(0.0, f64::max)
}

/// The staging floor of a product that moves `bytes_in` up and `bytes_out` down, in ms: every
/// byte copied once through host memory (packed, or unpacked) at the best copy rate, plus the
/// round trip of [`super::link::ROUND_TRIP_MS`]. Packing and unpacking share the memory, so
/// their bytes add up.
pub fn floor_ms(copy_gbs: f64, bytes_in: usize, bytes_out: usize) -> f64 {
    (bytes_in + bytes_out) as f64 / copy_gbs / 1e6 + super::link::ROUND_TRIP_MS
}

/// The rates as a markdown table.
pub fn print(rates: &[Rates]) {
    println!("host memory, GB/s: | threads | read | write | copy |");
    println!("|---|---|---|---|");
    for r in rates {
        println!(
            "| {} | {:.1} | {:.1} | {:.1} |",
            r.threads, r.read, r.write, r.copy
        );
    }
}

/// The rates as JSON records.
pub fn json(rates: &[Rates]) -> Value {
    Value::Array(
        rates
            .iter()
            .map(|r| json!({"threads": r.threads, "read_gbs": r.read, "write_gbs": r.write, "copy_gbs": r.copy}))
            .collect(),
    )
}
