//! The stable smoke: every fuzz body over its seed corpus plus a fixed
//! number of deterministic pseudo-random mutations of the seeds.
//!
//! This is a smoke test, not fuzzing: no coverage feedback, a fixed seed,
//! a few thousand inputs a target. It catches a body or a parser that
//! panics on its own seeds or on inputs a byte or two away from them, and
//! keeps the bodies compiling on stable. Real fuzzing is `cargo +nightly
//! fuzz run` (docs/reliability.md, "Fuzzing").

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Longest input the smoke builds (libFuzzer's runs use `-max_len=4096`).
pub const MAX_LEN: usize = 4096;

/// Largest single allocation the smoke and the replay binaries allow: 2 GiB,
/// libFuzzer's default `-malloc_limit_mb` (= `-rss_limit_mb`, 2048).
pub const ALLOC_CAP: usize = 2048 << 20;

thread_local! {
    /// The input the body on this thread is running, for [`CappedAlloc`]'s report.
    static CURRENT: Cell<(&'static str, *const u8, usize)> = const { Cell::new(("", std::ptr::null(), 0)) };
}

/// The system allocator, but a request above [`ALLOC_CAP`] is a finding: it
/// prints the input being run (and saves it like a panic's) and fails, so
/// Rust aborts with "memory allocation of N bytes failed" instead of
/// letting an unbounded allocation take the machine's memory. Installed by
/// `tests/smoke.rs` and the stable replay binaries (libFuzzer has its own
/// `-malloc_limit_mb`).
#[derive(Debug)]
pub struct CappedAlloc;

fn oversize(size: usize) {
    let (target, ptr, len) = CURRENT.with(Cell::get);
    // Small allocations below go to the system allocator: no recursion.
    let data: &[u8] = if ptr.is_null() { &[] } else { unsafe { std::slice::from_raw_parts(ptr, len) } };
    let saved =
        if target.is_empty() { String::new() } else { format!(" (saved to {})", save_crash(target, data).display()) };
    // Straight to stderr: the test harness's capture of `eprintln!` is lost
    // when the process aborts.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "fuzz body `{target}` asked for {size} bytes in one allocation (cap {ALLOC_CAP}) on input{saved}: {:?}",
        String::from_utf8_lossy(data)
    );
}

// SAFETY: forwards to `System`, or fails an allocation (null) above the cap.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            oversize(layout.size());
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            oversize(layout.size());
            return std::ptr::null_mut();
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_CAP {
            oversize(new_size);
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Run `body` on `data` with `data` registered for [`CappedAlloc`]'s report.
pub fn with_current<R>(target: &'static str, data: &[u8], f: impl FnOnce() -> R) -> R {
    let before = CURRENT.with(|c| c.replace((target, data.as_ptr(), data.len())));
    let r = f();
    CURRENT.with(|c| c.set(before));
    r
}

fn save_crash(target: &str, data: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join("tally-fuzz-smoke");
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join(format!("{target}-crash"));
    let _ = std::fs::write(&file, data);
    file
}

/// xorshift64*: small, deterministic, good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-ish in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes and tokens that matter to Tally's text formats.
const TOKENS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"1",
    b"18446744073709551615",
    b"18446744073709551616",
    b"9223372036854775807",
    b"99999999999999999999",
    b"4294967295",
    b"1e30",
    b"NaN",
    b"inf",
    b"-0",
    b"1.5",
    b"d",
    b"h",
    b"m",
    b"s",
    b"contract=",
    b"resumable",
    b",",
    b";",
    b" ",
    b"\t",
    b"\n",
    b"\r\n",
    b"=",
    b"\"",
    b"'",
    b"[",
    b"]",
    b"[[",
    b"]]",
    b"{",
    b"}",
    b"#",
    b".",
    b"\xef\xbb\xbf",
    b"\xe2\x80\xa8",
    b"\xc2\xa0",
    b"\xff",
    b"\0",
    b"use ",
    b"charged ",
    b"geometry ",
    b"saved_at ",
    b"tally-state 1\n",
    b"steps = ",
    b"gpus = ",
    b"share = ",
    b"gpu_hours = ",
    b"parent = ",
    b"\"1h\"",
    b"\"0\"",
    b"\"7d\"",
    b"training",
    b"debug",
    b"true",
    b"false",
];

/// One mutation of `input` (with `others`, the seeds, for splicing).
pub fn mutate_once(rng: &mut Rng, input: &mut Vec<u8>, others: &[Vec<u8>]) {
    let len = input.len();
    match rng.below(9) {
        // Flip a bit.
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        // Overwrite a byte with any byte.
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = rng.next() as u8;
        }
        // Insert a byte.
        2 => {
            let i = rng.below(len + 1);
            input.insert(i, rng.next() as u8);
        }
        // Delete a range.
        3 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(64));
            input.drain(i..i + n);
        }
        // Duplicate a range somewhere else.
        4 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(256));
            let chunk: Vec<u8> = input[i..i + n].to_vec();
            let at = rng.below(len + 1);
            input.splice(at..at, chunk);
        }
        // Splice: a prefix of this input and a suffix of another seed.
        5 if !others.is_empty() => {
            let other = &others[rng.below(others.len())];
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            input.truncate(cut);
            input.extend_from_slice(&other[from..]);
        }
        // Replace a run of digits by an extreme number.
        6 if len > 0 => {
            let i = rng.below(len);
            if let Some(start) = (i..len).find(|&k| input[k].is_ascii_digit()) {
                let end = (start..len).find(|&k| !input[k].is_ascii_digit()).unwrap_or(len);
                let tok = [&b"18446744073709551615"[..], b"0", b"4294967296", b"99999999999999999999", b"-1", b"1e300"]
                    [rng.below(6)];
                input.splice(start..end, tok.iter().copied());
            }
        }
        // Insert a token.
        _ => {
            let tok = TOKENS[rng.below(TOKENS.len())];
            let i = rng.below(len + 1);
            input.splice(i..i, tok.iter().copied());
        }
    }
    input.truncate(MAX_LEN);
}

/// The seed corpus of a target: `corpus/<target>/` of this crate.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target)
}

/// Run `body` on `data`; on a panic, print the input (escaped, and as the
/// file to replay it with) before failing.
pub fn run_one(target: &'static str, what: &str, body: fn(&[u8]), data: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| with_current(target, data, || body(data)))).is_err() {
        let file = save_crash(target, data);
        panic!(
            "fuzz body `{target}` panicked on {what}: {:?}\n(saved to {}; replay: cargo run --manifest-path fuzz/Cargo.toml --bin {target} -- {})",
            String::from_utf8_lossy(data),
            file.display(),
            file.display()
        );
    }
}

/// The smoke of one target: every seed as is, then `mutations` mutated
/// inputs (1 to 4 stacked mutations of a random seed), from a fixed RNG
/// seed. Returns (seeds, inputs run).
pub fn smoke(target: &'static str, body: fn(&[u8]), mutations: usize) -> (usize, usize) {
    let seeds: Vec<Vec<u8>> = crate::files_under(&corpus_dir(target))
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect();
    assert!(!seeds.is_empty(), "no seeds in {}", corpus_dir(target).display());
    for (i, s) in seeds.iter().enumerate() {
        run_one(target, &format!("seed {i}"), body, s);
    }
    // The seed of the RNG depends on the target only: every run is the same.
    let mut rng = Rng::new(
        target.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)),
    );
    for m in 0..mutations {
        let mut input = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            mutate_once(&mut rng, &mut input, &seeds);
        }
        run_one(target, &format!("mutation {m}"), body, &input);
    }
    (seeds.len(), seeds.len() + mutations)
}
