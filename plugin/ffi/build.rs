//! The Slurm release slurm-sys's bindings are for (its build script hands
//! it over through `links = "slurm"`), as `cfg(slurm = "22.05")`, `"24.11"`,
//! `"25.11"` or `"26.05"`: what differs between releases is in
//! `src/release.rs`, and nowhere else.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(slurm, values(\"22.05\", \"24.11\", \"25.11\", \"26.05\"))");
    let release = std::env::var("DEP_SLURM_RELEASE").expect("slurm-sys sets DEP_SLURM_RELEASE (links = \"slurm\")");
    println!("cargo:rustc-cfg=slurm=\"{release}\"");
}
