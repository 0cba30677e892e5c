//! What the benchmarks share: the synthetic workload's random numbers.

/// Draws in `0..m` from a fixed xorshift sequence, so every run of a
/// benchmark builds the same jobs.
pub fn draws() -> impl FnMut(u64) -> u64 {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    }
}
