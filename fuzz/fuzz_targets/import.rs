//! libFuzzer target `import`: see [`tally_fuzz::import`]. Built without
//! `--cfg fuzzing` (plain `cargo build`) it replays the files or directories
//! given as arguments, with the smoke's allocation cap.
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tally_fuzz::import(data));

#[cfg(not(fuzzing))]
#[global_allocator]
static ALLOC: tally_fuzz::smoke::CappedAlloc = tally_fuzz::smoke::CappedAlloc;

#[cfg(not(fuzzing))]
fn main() {
    tally_fuzz::replay_main("import", tally_fuzz::import);
}
