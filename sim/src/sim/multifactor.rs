//! Slurm's classic multifactor baseline: its priority (fair share, age,
//! QOS) and the usage it decays and charges.

use super::Sim;
use crate::trace::Class;
use tally_allocator::WEEK_S;

impl<'a> Sim<'a> {
    /// priority = 10000·F + 1000·age + 2000·qos,  F = 2^(−U/S)
    pub(super) fn multifactor_key(&self, i: usize, now: u64) -> i64 {
        let j = &self.jobs[i];
        let total: f64 = self.usage.iter().sum();
        let u = if total > 0.0 { self.usage[j.team] / total } else { 0.0 };
        let share = self.shares[j.team];
        let f = if share > 0.0 { 2f64.powf(-u / share) } else { 0.0 };
        let age = (now.saturating_sub(j.job.submit_s) as f64 / WEEK_S as f64).min(1.0);
        let qos = if high_qos(j.class) { 1.0 } else { 0.0 };
        (10_000.0 * f + 1000.0 * age + 2000.0 * qos).round() as i64
    }

    pub(super) fn decay_to(&mut self, now: u64) {
        if now > self.usage_at {
            let f = 0.5f64.powf((now - self.usage_at) as f64 / self.s.half_life_s as f64);
            for u in &mut self.usage {
                *u *= f;
            }
            self.usage_at = now;
        }
    }

    pub(super) fn mf_charge(&mut self, i: usize, now: u64) {
        let j = &self.jobs[i];
        let from = self.mf_marks[i].max(j.run_start);
        if now > from {
            self.usage[j.team] += j.job.units() * (now - from) as f64;
            self.mf_marks[i] = now;
        }
    }
}

pub(super) fn high_qos(c: Class) -> bool {
    matches!(c, Class::Debug | Class::Interactive | Class::Realtime)
}
