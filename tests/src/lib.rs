//! Integration tests live in tests/; `replay` drives the real-Slurm replay
//! (tests/e2e/replay.sh).

pub mod replay;
