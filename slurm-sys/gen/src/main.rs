//! Generates `slurm-sys/src/bindings.rs` from the Debian source of Slurm.
//!
//! Usage: `slurm-sys-gen <slurm source dir> <stub include dir> <output file>`
//!
//! Normally run by `scripts/gen-bindings.sh`, which installs libclang and
//! libslurm-dev, fetches the source, and makes the stub include dir: an empty
//! `config.h` (no `./configure` is run; no struct in the headers used has a
//! preprocessor conditional inside it, so the layouts do not depend on it) and
//! a copy of libslurm-dev's `slurm/slurm_version.h`.
//!
//! The output is deterministic: no timestamps, no absolute paths except the
//! source dir named in the header comment, semantic sorting, and prettyplease
//! rather than whatever rustfmt is installed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs, process};

use bindgen::callbacks::{EnumVariantCustomBehavior, EnumVariantValue, IntKind, ParseCallbacks};

/// Struct/union/enum types (typedef names and tags) whose full definitions
/// Tally's plugins read or write.
const TYPES: &[&str] = &[
    "job_record_t",
    // A job array's record of its pending tasks (`job_record_t.array_recs`):
    // `task_cnt`, how many tasks it still holds.
    "job_array_struct_t",
    "job_record",
    "job_queue_rec_t",
    "job_desc_msg_t",
    "priority_factors_object_t",
    "slurmdb_assoc_rec_t",
    "slurm_conf_t",
    "slurmctld_lock_t",
    "lock_level_t",
    "job_states",
    "node_states",
    "slurm_err_t",
    "ListDelF",
    // The node table: state, GPUs (config_ptr->gres), partitions, for the
    // planner thread, GPU types and host drain.
    "node_record_t",
    "config_record_t",
    "part_record_t",
];

/// Types whose name depends on the release: (22.05, 24.11). Between the two,
/// `List`/`ListIterator` became `list_t`/`list_itr_t`, `struct job_details`
/// the anonymous `job_details_t` (in src/common/job_record.h), and
/// `priority_factors_request_msg_t` went (sprio filters on its side; the
/// factors moved into `priority_factors_t`). slurm-sys's lib.rs gives the
/// 24.11 names the 22.05 ones where the meaning is the same.
const TYPES_BY_RELEASE: &[(&str, &str)] = &[
    ("List", "list_t"),
    ("ListIterator", "list_itr_t"),
    ("job_details", "job_details_t"),
    ("priority_factors_request_msg_t", "priority_factors_t"),
];

/// Functions likewise: 24.11's libslurmfull exports `bit_test` only as
/// `slurm_bit_test` (its bitstring.h `#define`s the short name).
const FUNCTIONS_BY_RELEASE: &[(&str, &str)] = &[("bit_test", "slurm_bit_test")];

/// The first release whose names are the right-hand side of [`TYPES_BY_RELEASE`].
const RENAMED_IN: u32 = 0x17_0b_00; // 23.11.0

/// What 25.11 removed or replaced, present before it: `preempt_p_get_data`'s
/// request type went (the preempt plugin answers `get_grace_time`,
/// `get_mode` and `get_prio` instead), and slurmctld's `job_requeue` by job
/// id became `job_requeue_internal` on the job record.
const TYPES_BEFORE_25_11: &[&str] = &["slurm_preempt_data_type_t"];
const FUNCTIONS_BY_RELEASE_25_11: &[(&str, &str)] = &[("job_requeue", "job_requeue_internal")];
/// 25.11.0.
const CHANGED_IN_25_11: u32 = 0x19_0b_00;

/// Functions. All are exported by libslurmfull.so except `lock_slurmctld` and
/// `unlock_slurmctld`, which exist only in the slurmctld binary.
const FUNCTIONS: &[&str] = &[
    "list_create",
    "list_append",
    "list_count",
    "list_iterator_create",
    "list_next",
    "list_iterator_destroy",
    "list_destroy",
    "list_flush",
    "slurm_xcalloc",
    "slurm_xfree",
    "xfree_ptr",
    "xstrdup",
    "slurm_info",
    "slurm_error",
    "slurm_verbose",
    "slurm_debug",
    "slurm_destroy_priority_factors_object",
    "lock_slurmctld",
    "unlock_slurmctld",
    // slurmctld only, like the two above: requeue a job (host drain):
    // FUNCTIONS_BY_RELEASE_25_11.
    // A running job's nodes (job_record_t.node_bitmap), for the planner
    // (and bit_test: FUNCTIONS_BY_RELEASE).
    "bit_size",
];

/// Global variables and `#define` constants. `job_list` and `last_job_update`
/// exist only in slurmctld; `slurm_conf` is in libslurmfull.so.
const VARS: &[&str] = &[
    "slurm_conf",
    "job_list",
    "last_job_update",
    "node_record_table_ptr",
    "node_record_count",
    "NODE_STATE_BASE",
    "NODE_STATE_DOWN",
    "NODE_STATE_FUTURE",
    "NODE_STATE_FLAG_DRAIN",
    "NODE_STATE_FLAG_RES",
    "NODE_STATE_FLAG_POWERED_DOWN",
    "NODE_STATE_FLAG_POWERING_DOWN",
    "NODE_STATE_FLAG_NO_RESPOND",
    "NODE_STATE_FLAG_FAIL",
    "NODE_STATE_FLAG_MAINT",
    "NODE_STATE_FLAG_REBOOT_ISSUED",
    "SLURM_VERSION_NUMBER",
    "SLURM_SUCCESS",
    "SLURM_ERROR",
    "NO_VAL",
    "NO_VAL16",
    "NO_VAL64",
    "INFINITE",
    "INFINITE16",
    "INFINITE64",
    "NICE_OFFSET",
    "JOB_STATE_BASE",
    "JOB_STATE_FLAGS",
    "PREEMPT_MODE_OFF",
    "PREEMPT_MODE_SUSPEND",
    "PREEMPT_MODE_REQUEUE",
    "PREEMPT_MODE_CANCEL",
    "PREEMPT_MODE_GANG",
    // `job_details.whole_node`: the job gets whole nodes (and all their GPUs).
    "WHOLE_NODE_REQUIRED",
];

/// The only variants of the (300-variant) `slurm_err_t` enum that are kept.
const ERRNOS: &[&str] = &[
    "ESLURM_ACCESS_DENIED",
    "ESLURM_NOT_SUPPORTED",
    "ESLURM_INVALID_ACCOUNT",
    "ESLURM_ACCOUNTING_POLICY",
    "ESLURM_INVALID_TIME_LIMIT",
    "ESLURM_INVALID_TIME_VALUE",
    "ESLURM_MISSING_TIME_LIMIT",
    "ESLURM_INVALID_GRES",
    "ESLURM_INVALID_NICE",
];

/// Types reached only through pointers from the structs above. They are
/// blocklisted and declared as incomplete (opaque, unsized-in-spirit) types,
/// like bindgen's own forward declarations: Tally never dereferences them, and
/// this keeps the output small. (bindgen's `opaque_type` silently drops
/// anonymous `typedef struct {..} x_t` types, hence this route.) To read one,
/// move it out of this list and regenerate.
const FORWARD: &[&str] = &[
    "acct_gather_energy_t",
    "bf_part_data_t",
    "cron_entry_t",
    "ext_sensors_data_t",
    "power_mgmt_data_t",
    "slurm_msg_t",
    "dynamic_plugin_data",
    "front_end_record_t",
    "het_job_details_t",
    "job_fed_details_t",
    "job_resources",
    "multi_core_data",
    "slurmctld_resv_t",
    "slurmdb_assoc_usage",
    "slurmdb_bf_usage",
    "slurmdb_qos_rec_t",
    "slurmdb_user_rec",
];

/// More of them in 24.11, where `part_record_t` and `slurmctld_resv_t` are
/// reached by their struct tags, and job_record_t gained pointers to
/// `identity_t`, `elem_t` (extra constraints) and `slurm_addr_t`.
const FORWARD_24_11: &[&str] = &["elem", "identity_t", "slurm_addr_t", "slurmctld_resv"];

/// Types bindgen would still emit (reached only from the FORWARD types above)
/// although nothing in the output refers to them.
const UNUSED: &[&str] = &[
    "slurmdb_qos_usage_t",
    "xhash_st",
    "xhash_t",
];

/// The bindgen release pinned (with `=`) in Cargo.toml; keep the two in sync.
const BINDGEN_VERSION: &str = "0.73.2";

#[derive(Debug)]
struct Callbacks;

impl ParseCallbacks for Callbacks {
    fn enum_variant_behavior(
        &self,
        enum_name: Option<&str>,
        variant: &str,
        _value: EnumVariantValue,
    ) -> Option<EnumVariantCustomBehavior> {
        let is_errno_enum = enum_name.is_some_and(|n| n.ends_with("slurm_err_t"));
        if is_errno_enum && !ERRNOS.contains(&variant) {
            Some(EnumVariantCustomBehavior::Hide)
        } else {
            None
        }
    }

    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        // PREEMPT_MODE_*: Slurm stores them in uint16_t (preempt_p_get_data(MODE) writes a u16).
        if name.starts_with("PREEMPT_MODE_") || name == "NO_VAL16" || name == "INFINITE16" {
            return Some(IntKind::U16);
        }
        // cexpr reads 0xffffffffffffffff as the i64 -1 and bindgen would then pick i32.
        if name == "NO_VAL64" || name == "INFINITE64" {
            return Some(IntKind::U64);
        }
        if name == "SLURM_SUCCESS" || name == "SLURM_ERROR" {
            return Some(IntKind::Int);
        }
        None
    }
}

fn first_line(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap_or_else(|e| die(&format!("cannot read {}: {e}", path.display())))
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// `SLURM_VERSION_NUMBER` of the stub dir's `slurm/slurm_version.h`, as written there.
fn header_version(stub: &Path) -> String {
    let version_h = stub.join("slurm/slurm_version.h");
    fs::read_to_string(&version_h)
        .unwrap_or_else(|e| die(&format!("cannot read {}: {e}", version_h.display())))
        .lines()
        .find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER").map(|v| v.trim().to_owned()))
        .unwrap_or_else(|| die(&format!("no SLURM_VERSION_NUMBER in {}", version_h.display())))
}

/// 0x180b05 -> "24.11.5"
fn slurm_version_dotted(v: u32) -> String {
    format!("{}.{:02}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
}

fn parse_hex(v: &str) -> Option<u32> {
    u32::from_str_radix(v.trim_start_matches("0x").trim_start_matches("0X"), 16).ok()
}

fn die(msg: &str) -> ! {
    eprintln!("slurm-sys-gen: {msg}");
    process::exit(1)
}

fn main() {
    let args: Vec<PathBuf> = env::args_os().skip(1).map(PathBuf::from).collect();
    let [src, stub, out] = args.as_slice() else {
        die("usage: slurm-sys-gen <slurm source dir> <stub include dir> <output file>")
    };
    let wrapper = Path::new(env!("CARGO_MANIFEST_DIR")).join("wrapper.h");
    let slurm_version = header_version(stub);
    let version_number = parse_hex(&slurm_version)
        .unwrap_or_else(|| die(&format!("SLURM_VERSION_NUMBER {slurm_version} is not hex")));
    // The Debian source package's changelog, or (an upstream tarball, e.g.
    // the .orig.tar.gz when the mirror has no .debian.tar.xz) the dir's name.
    // (Upstream's tarball carries a debian/ of its own, for "slurm-smd".)
    let changelog = src.join("debian/changelog");
    let line = if changelog.exists() { first_line(&changelog) } else { String::new() };
    let package = if line.starts_with("slurm-smd ") {
        // SchedMD's release tarball (`git archive` of the release tag).
        let name = line.split_once(')').map_or(line.as_str(), |(head, _)| head).replace(" (", " ");
        format!("SchedMD's release tarball of Slurm {} (its debian/changelog: {name})", slurm_version_dotted(version_number))
    } else if line.starts_with("slurm-wlm ") {
        // "slurm-wlm (22.05.8-4+deb12u3) bookworm-security; urgency=medium" -> name, version
        let name = line.split_once(')').map_or(line.as_str(), |(head, _)| head).replace(" (", " ");
        format!("Debian source package {name} (`apt-get source slurm-wlm`)")
    } else {
        format!(
            "the .orig.tar.gz of Debian's source package slurm-wlm {} (Debian's patches not applied)",
            slurm_version_dotted(version_number)
        )
    };
    let types: Vec<&str> = TYPES
        .iter()
        .copied()
        .chain(TYPES_BY_RELEASE.iter().map(|&(old, new)| if version_number >= RENAMED_IN { new } else { old }))
        .chain(TYPES_BEFORE_25_11.iter().copied().filter(|_| version_number < CHANGED_IN_25_11))
        .collect();

    let mut builder = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_arg(format!("-I{}", src.display()))
        .clang_arg(format!("-I{}", stub.display()))
        .rust_target(bindgen::RustTarget::stable(80, 0).unwrap_or_else(|e| die(&e.to_string())))
        .rust_edition(bindgen::RustEdition::Edition2021)
        .formatter(bindgen::Formatter::Prettyplease)
        .use_core()
        .layout_tests(false)
        // Slurm documents fields with trailing /* */ comments, which clang does
        // not attach; the few it does attach are section banners, misplaced.
        .generate_comments(false)
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_debug(true)
        .derive_default(false)
        .merge_extern_blocks(true)
        .sort_semantically(true)
        .parse_callbacks(Box::new(Callbacks));
    for t in &types {
        builder = builder.allowlist_type(format!("^{t}$"));
    }
    let functions: Vec<&str> = FUNCTIONS
        .iter()
        .copied()
        .chain(FUNCTIONS_BY_RELEASE.iter().map(|&(old, new)| if version_number >= RENAMED_IN { new } else { old }))
        .chain(FUNCTIONS_BY_RELEASE_25_11.iter().map(|&(old, new)| if version_number >= CHANGED_IN_25_11 { new } else { old }))
        .collect();
    for f in &functions {
        builder = builder.allowlist_function(format!("^{f}$"));
    }
    for v in VARS {
        builder = builder.allowlist_var(format!("^{v}$"));
    }
    for u in UNUSED {
        builder = builder.blocklist_type(format!("^{u}$"));
    }
    let forward: Vec<&str> = FORWARD
        .iter()
        .chain(if version_number >= RENAMED_IN { FORWARD_24_11 } else { &[] })
        .copied()
        .collect();
    for f in forward {
        builder = builder.blocklist_type(format!("^{f}$")).raw_line(format!(
            "#[repr(C)]\n#[derive(Debug)]\npub struct {f} {{\n    _unused: [u8; 0],\n}}"
        ));
    }

    let bindings = builder
        .generate()
        .unwrap_or_else(|e| die(&format!("bindgen failed: {e}")))
        .to_string();

    // An allowlist entry that matches nothing (renamed or removed in another
    // Slurm release) must fail loudly, not vanish from the bindings.
    let missing: Vec<&str> = types
        .iter()
        .chain(&functions)
        .chain(VARS)
        .chain(ERRNOS)
        .copied()
        .filter(|name| {
            !bindings.lines().any(|l| {
                let l = l.trim_start();
                [
                    "pub struct ",
                    "pub type ",
                    "pub fn ",
                    "pub const ",
                    "pub static mut ",
                ]
                .iter()
                .any(|kw| {
                    l.strip_prefix(kw).is_some_and(|r| {
                        r.strip_prefix(name)
                            .is_some_and(|r| r.starts_with([' ', ':', '(', '<']))
                    })
                })
            })
        })
        .collect();
    if !missing.is_empty() {
        die(&format!(
            "allowlisted but not generated: {}",
            missing.join(", ")
        ));
    }

    let clang = bindgen::clang_version().full;

    let mut text = String::new();
    let _ = write!(
        text,
        "// @generated by slurm-sys/gen -- DO NOT EDIT; regenerate with scripts/gen-bindings.sh\n\
         //\n\
         // Source:  {package},\n\
         //          unpacked in {src}, SLURM_VERSION_NUMBER {slurm_version}\n\
         // Headers: slurm-sys/gen/wrapper.h (src/slurmctld/*.h, src/common/*.h, slurm/*.h), plus a\n\
         //          stub dir: an empty config.h and the release's installed slurm/slurm_version.h\n\
         // Allowlist: slurm-sys/gen/src/main.rs\n\
         // Tools:   bindgen {BINDGEN_VERSION}, {clang}\n\
         // Command: scripts/gen-bindings.sh\n\
         //          = slurm-sys-gen {src} <stub dir> {out}\n\n",
        src = src.display(),
        // The script writes to a temporary file first and names the real one.
        out = env::var("SLURM_SYS_GEN_OUT").unwrap_or_else(|_| out.display().to_string()),
    );
    text.push_str(&bindings);
    fs::write(out, text).unwrap_or_else(|e| die(&format!("cannot write {}: {e}", out.display())));
}
