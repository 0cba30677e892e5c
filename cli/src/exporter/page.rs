//! The exporter's page for researchers: one read-only HTML page for the
//! cluster (`/`) and one per account (`/account/NAME`), server-rendered
//! with `maud` (every value escaped), no JavaScript. The chart is the one
//! `tally share --svg` draws ([`crate::plot::owed_days`]); a job's page
//! (`/job/ID`) is what `tally explain` says of it.

use super::reading::{JobClass, LiveJob, Reading};
use crate::share::Row;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use tally_allocator::format_duration;

const STYLE: &str = "body{font-family:DejaVu Sans,sans-serif;margin:1.5em;color:#222;max-width:1200px}\
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.4em}\
table{border-collapse:collapse;font-size:.95em}th,td{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:right}\
th{background:#f2f2f2}td.l,th.l{text-align:left}.muted{color:#666}.warn{background:#fff3cd;padding:.5em}\
.short{color:#b00;font-weight:bold}a{color:#0645ad;text-decoration:none}pre{background:#f7f7f7;padding:1em;white-space:pre-wrap}";

fn frame(title: &str, r: Option<&Reading>, stale: Option<&str>, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                p.muted {
                    a href="/" { "Tally" } " · "
                    @if let Some(r) = r {
                        "figures read " (clock(r.at)) " UTC from the ledger priority/tally saved " (ago(r.at.saturating_sub(r.saved_at))) " before · "
                    }
                    a href="/metrics" { "metrics" }
                }
                @if let Some(why) = stale {
                    p.warn { "These are the last good figures: the last refresh failed (" (why) ")." }
                }
                (body)
            }
        }
    }
    .into_string()
}

/// A span of seconds as the reports write it (`0s` for none).
fn ago(s: u64) -> String {
    if s == 0 {
        "0s".to_string()
    } else {
        format_duration(s)
    }
}

/// A name as one segment of a URL path.
fn url_part(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// `HH:MM:SS` of a Unix time (UTC).
fn clock(t: u64) -> String {
    format!("{:02}:{:02}:{:02}", (t / 3600) % 24, (t / 60) % 60, t % 60)
}

fn num(v: Option<f64>, d: usize) -> String {
    v.map_or(String::new(), |v| format!("{v:.d$}"))
}

fn accounts_table(rows: &[Row], link: bool) -> Markup {
    html! {
        table {
            tr {
                th.l { "Account" } th { "Budget" } th { "Rate (GPUs)" } th { "Used 7d (GPU-h)" } th { "Allocated 7d" } th { "Ratio" } th { "Rank" }
                th { "Short now" } th { "Running" } th { "Waiting" } th { "Owed" } th { "Delivered" } th { "Deliv% hourly" }
                th { "Deliv% window" }
            }
            @for r in rows {
                tr {
                    td.l {
                        (PreEscaped("&nbsp;&nbsp;".repeat(r.depth)))
                        @if link { a href={ "/account/" (url_part(&r.account)) } { (r.account) } } @else { (r.account) }
                    }
                    td { (r.budget.clone().unwrap_or_default()) }
                    td { (num(r.rate, 2)) }
                    td { (num(r.used, 1)) }
                    td { (num(r.alloc, 1)) }
                    td { (num(r.ratio, 3)) }
                    td { (r.rank.map_or(String::new(), |x| x.to_string())) }
                    td class=[r.short.filter(|s| *s > 0.0).map(|_| "short")] { (num(r.short, 1)) }
                    td { (num(r.running, 0)) }
                    td { (num(r.waiting, 0)) }
                    td { (num(r.owed.map(|o| o.delivery.owed_gpu_hours), 1)) }
                    td { (num(r.owed.map(|o| o.delivery.delivered_gpu_hours), 1)) }
                    td { (num(r.owed.and_then(|o| o.delivery.ratio()).map(|x| 100.0 * x), 1)) }
                    td { (num(r.window_fraction().map(|x| 100.0 * x), 1)) }
                }
            }
        }
    }
}

fn jobs_summary(jobs: &[LiveJob]) -> Markup {
    html! {
        table {
            tr { th.l { "Jobs now" } @for c in JobClass::ALL { th { (c.name()) } } }
            @for (state, running) in [("running", true), ("pending", false)] {
                tr {
                    td.l { (state) }
                    @for c in JobClass::ALL { td { (jobs.iter().filter(|j| j.running == running && j.class == c).count()) } }
                }
            }
        }
    }
}

/// `/`: the cluster, and (unless private) every account.
pub fn index(r: &Reading, stale: Option<&str>) -> String {
    let (alloc, unalloc) = r.running_gpus().unwrap_or_default();
    let body = html! {
        h1 { "Tally: owed and delivered" }
        p {
            (r.gpus) " GPUs; running now: " (alloc) " allocated, " (unalloc) " unallocated (contract 0, never charged). "
            "Teams are sorted by what they are short of now, then by their 7-day ratio of used to allocated GPU time (rank 0 goes first)."
        }
        p.muted { "Config: " (r.config_source) }
        @if let Some(jobs) = &r.jobs { (jobs_summary(jobs)) } @else { p.muted { "squeue did not answer at the last refresh." } }
        @if r.private {
            p { "[reports] private = true: the page shows no account. Your own accounts: " code { "tally share" } " and " code { "tally explain JOBID" } "." }
        } @else {
            h2 { "Accounts" }
            (accounts_table(&r.accounts, true))
            h2 { "Delivered vs owed per team per day" }
            (PreEscaped(crate::plot::owed_days("Delivered vs owed per team per day", &r.days)))
        }
    };
    frame("Tally", Some(r), stale, body)
}

/// `/account/NAME`: where the team stands and why, its subtree, its chart,
/// its jobs. `None` when there is no such account.
pub fn account(r: &Reading, name: &str, stale: Option<&str>) -> Option<String> {
    let me = r.accounts.iter().find(|a| a.account == name)?;
    let place = r.places.get(name)?;
    let prefix = format!("{}/", place.path);
    let subtree: Vec<Row> = r
        .accounts
        .iter()
        .filter(|a| r.places.get(&a.account).is_some_and(|p| p.path == place.path || p.path.starts_with(&prefix)))
        .cloned()
        .collect();
    let names: Vec<&str> = subtree.iter().map(|a| a.account.as_str()).collect();
    let days: Vec<_> = r.days.iter().filter(|(n, _)| names.contains(&n.as_str())).cloned().collect();
    let n = r.accounts.iter().filter(|a| a.rank.is_some()).count();
    let mut jobs: Vec<&LiveJob> = r.jobs.iter().flatten().filter(|j| names.contains(&j.account.as_str())).collect();
    jobs.sort_by_key(|j| (!j.running, j.submit_s, j.id));
    let short = me.short.unwrap_or(0.0);
    let body = html! {
        h1 { (name) }
        p.muted { "in " (place.path) }
        h2 { "Where it stands in the queue" }
        ul {
            li {
                "7-day rank " b { (me.rank.map_or("-".into(), |x| x.to_string())) } " of " (n) " (0 = the most under-served, first): used "
                (num(me.used, 1)) " of " (num(me.alloc, 1)) " allocated GPU-hours over the window, a ratio of " (num(me.ratio, 3)) "."
            }
            li {
                @if short > 0.0 {
                    span.short { "Short now by " (num(Some(short), 1)) " GPUs" }
                    ": it runs " (num(me.running, 0)) " of its rate of " (num(me.rate, 1)) " GPUs with work waiting, so its jobs go before those of teams that are not owed GPUs now."
                } @else {
                    "Not short now (running " (num(me.running, 0)) ", waiting " (num(me.waiting, 0)) ", rate " (num(me.rate, 1)) " GPUs): its jobs are sorted among the others by the 7-day rank."
                }
            }
            li {
                "Over the window: owed " (num(me.owed.map(|o| o.delivery.owed_gpu_hours), 1)) " GPU-hours, delivered "
                (num(me.owed.map(|o| o.delivery.delivered_gpu_hours), 1)) " ("
                (num(me.owed.and_then(|o| o.delivery.ratio()).map(|x| 100.0 * x), 1)) "% of what was owed, credited hour by hour; "
                (num(me.window_fraction().map(|x| 100.0 * x), 1)) "% over the whole window)."
            }
        }
        (accounts_table(&subtree, true))
        h2 { "Jobs" }
        @if jobs.is_empty() {
            p.muted { "No running or waiting jobs." }
        } @else {
            table {
                tr { th { "Job" } th.l { "Account" } th.l { "User" } th.l { "State" } th { "GPUs" } th.l { "Contract" } th.l { "Class" } th { "For" } th.l { "Reason" } }
                @for j in &jobs {
                    tr {
                        td { a href={ "/job/" (j.id) } { (j.name) } }
                        td.l { (j.account) }
                        td.l { (j.user) }
                        td.l { @if j.running { "running" } @else { "pending" } }
                        td { (j.gpus) }
                        td.l { (j.contract) }
                        td.l { (j.class.name()) }
                        td { (ago(r.at.saturating_sub(if j.running { j.start_s } else { j.submit_s }))) }
                        td.l { (j.reason) }
                    }
                }
            }
        }
        h2 { "Delivered vs owed per day" }
        (PreEscaped(crate::plot::owed_days(&format!("{name}: delivered vs owed per team per day"), &days)))
    };
    Some(frame(&format!("Tally: {name}"), Some(r), stale, body))
}

/// `/job/ID`: what `tally explain` says.
pub fn job(id: &str, text: &str) -> String {
    let body = html! {
        h1 { "Job " (id) }
        p.muted { "What " code { "tally explain " (id) } " says:" }
        pre { (text) }
    };
    frame(&format!("Tally: job {id}"), None, None, body)
}

/// A page that says why there is nothing to show.
pub fn message(title: &str, text: &str) -> String {
    frame(title, None, None, html! { h1 { (title) } p { (text) } })
}
