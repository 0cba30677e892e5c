//! Integration tests live in tests/; `replay` drives the real-Slurm replay
//! (tests/e2e/replay.sh).

#![forbid(unsafe_code)]

pub mod replay;
