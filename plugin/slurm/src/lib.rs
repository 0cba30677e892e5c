//! Safe glue between Slurm and Tally's allocator, shared by the plugin
//! cdylibs (`priority_tally.so`, …).
//!
//! - [`guard`]: the one panic firewall every exported function goes through.
//! - [`slurm_log`]: the `log` facade into slurmctld's log (constant `"%s"`
//!   format, NULs escaped).
//! - [`host`]: the slurmctld-only symbols (`job_list`, `lock_slurmctld`, …),
//!   looked up at run time so client tools can load the plugin too.
//! - [`view`]: a `job_record_t` read into an owned [`view::JobView`] — the
//!   only place that dereferences job pointers.
//! - [`engine`]: safe, host-free logic: charging the ledger from job views,
//!   re-ranking, computing priorities. Unit-tested without Slurm.
//! - [`statefile`]: atomic save and careful load of the ledger.
//!
//! Safety invariants (in the manner of pgrx's SAFETY.md): a Slurm pointer is
//! only dereferenced in [`view`] and the plugin's exported functions, only
//! while slurmctld holds the lock its caller documents, and never kept past
//! the call. Strings are copied out; nothing borrowed from Slurm outlives the
//! call that lent it.

pub mod engine;
pub mod guard;
pub mod host;
pub mod slurm_log;
pub mod statefile;
pub mod view;
