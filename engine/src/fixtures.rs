//! What the engine's unit tests share: a moment, a config of two teams and
//! jobs in it.

use crate::view::{JobView, RunState};

/// A bucket edge (unix s).
pub const T0: u64 = 1_796_083_200;

/// 16 GPUs; teams `a` (alice) and `b` (bob), 50% each; a tick a minute.
pub const TWO_TEAMS: &str = r#"
[cluster]
gpus = 16
[priority]
calc_period = "1m"
[accounts.a]
share = 50
[accounts.b]
share = 50
[users]
alice = "a"
bob = "b"
"#;

/// A pending job of `account` (user `user-<account>`, partition `gpu`) with
/// `comment` (none when empty) asking for `gpus`, submitted and eligible
/// 10 minutes before [`T0`].
pub fn job(id: u32, account: &str, comment: &str, gpus: u32) -> JobView {
    JobView {
        account: Some(account.into()),
        user_id: 1000,
        comment: (!comment.is_empty()).then(|| comment.to_string()),
        partition: Some("gpu".into()),
        gpus,
        submit_s: T0 - 600,
        begin_s: T0 - 600,
        ..JobView::pending(id, format!("user-{account}").into())
    }
}

/// `v` running since `start`.
pub fn running(mut v: JobView, start: u64) -> JobView {
    v.state = RunState::Running;
    v.start_s = start;
    v
}
