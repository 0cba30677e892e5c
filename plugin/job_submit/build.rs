// The fake-host test defines slurmctld's globals (`job_list`,
// `lock_slurmctld`, …) in the test executable; export them so the plugin's
// `dlsym(RTLD_DEFAULT, …)` finds them, as it finds slurmctld's.
fn main() {
    println!("cargo:rustc-link-arg-tests=-Wl,--export-dynamic");
}
