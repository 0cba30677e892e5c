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

/// A tally.toml of `gpus` GPUs, a 1-minute calc_period and the load test's
/// tree: 10 programmes × 20 teams (`team{p}x{t}`), equal shares. (The
/// copy bench, which includes this file too, needs no config.)
#[allow(dead_code)]
pub fn config_text(gpus: u32) -> String {
    let mut text = format!("[cluster]\ngpus = {gpus}\n[priority]\ncalc_period = \"1m\"\n");
    for p in 0..10 {
        text.push_str(&format!("[accounts.prog{p}]\nshare = 10\n"));
        for t in 0..20 {
            text.push_str(&format!("[accounts.team{p}x{t}]\nparent = \"prog{p}\"\nshare = 5\n"));
        }
    }
    text
}
