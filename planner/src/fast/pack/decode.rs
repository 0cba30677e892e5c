//! The decoder: an order of batch jobs and a block rule into a plan, its
//! value summed as it is built (the validator's definition), on one of the
//! layouts (`Ctx::bases`). Also the work count every loop of the search is
//! bounded by (`Ctx::spent`).

use super::deadline::Deadline;
use super::packer::Packer;
use crate::grid::{firsts, last_start, Discounts};
use crate::Scenario;

/// How a block is chosen among those free at the earliest start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rule {
    Lowest,
    Highest,
    /// The block whose buddies (the sibling block at each size up to the
    /// node) are busiest over the run, then the shortest free window.
    Buddy,
    /// The shortest free window around the run, then the busiest buddies.
    Time,
}

/// The block rules the seeded passes try, in this order.
pub(super) const RULES: [Rule; 4] = [Rule::Lowest, Rule::Buddy, Rule::Time, Rule::Highest];

/// A batch job as the decoder sees it.
#[derive(Debug, Clone)]
pub(super) struct Job {
    pub(super) id: u64,
    pub(super) gpus: u32,
    /// log2 of `gpus`: the index of its candidate list.
    pub(super) size: usize,
    /// Duration clipped to the horizon.
    pub(super) dur: usize,
    pub(super) arrival: usize,
    /// The last step it may start at (the horizon rule, `grid::last_start`).
    pub(super) last: usize,
    pub(super) priority: f64,
    /// Its value when it starts at its arrival (the most it can bring).
    pub(super) ideal: f64,
}

/// A layout as the decoder starts from it: the grid after the pinned jobs
/// (and the bands, or the per-step limit the services' counts leave), and
/// the constant part of the value (pinned batch value − unmet realtime
/// cost).
pub(super) type Base = (Packer, f64);

/// The state before every `every`-th position of a decoded order, and the
/// value so far.
pub(super) type Mark = (Packer, f64);

/// Where a decoding resumes: the current plan, its marks, the first
/// position that changed.
pub(super) type Resume<'a> = (&'a Decoded, &'a [Mark], usize);

/// A decoded order.
#[derive(Debug, Clone)]
pub(super) struct Decoded {
    pub(super) layout: usize,
    pub(super) rule: Rule,
    pub(super) order: Vec<u32>,
    /// Per job (index into `jobs`): start step and first GPU.
    pub(super) starts: Vec<Option<(usize, u32)>>,
    pub(super) value: f64,
}

/// The decoder: the jobs, the layouts they are decoded on, and the work
/// done so far.
pub(super) struct Ctx {
    pub(super) steps: usize,
    pub(super) per_node: u32,
    pub(super) jobs: Vec<Job>,
    /// Per size (log2): the first GPUs of the legal blocks.
    pub(super) cands: Vec<Vec<u32>>,
    /// The discount's prefix sums.
    pub(super) disc: Discounts,
    /// Per layout: the grid after pinned jobs and bands, and the constant
    /// part of the value (pinned batch value − unmet realtime cost).
    pub(super) bases: Vec<Base>,
    /// The services kept as counts: the index in `bases` of that grid
    /// (batch decoded on it only guides where the services go) and their
    /// curves.
    pub(super) elastic: Option<(usize, Vec<Vec<u32>>)>,
    /// Work units done (a candidate block examined is one, a job decoded
    /// four): what every loop's limit is counted in.
    pub(super) work: u64,
    /// The budget's wall-clock cap (none until `search` sets it).
    pub(super) deadline: Deadline,
}

impl Ctx {
    /// The decoder for `s`'s jobs that are not pinned and can finish
    /// inside the horizon, with no layouts yet.
    pub(super) fn new(s: &Scenario) -> Ctx {
        let steps = s.steps;
        let per_node = s.gpus_per_node.max(1);
        let jobs: Vec<Job> = s
            .jobs
            .iter()
            .filter(|job| job.pinned.is_none() && job.gpus > 0 && job.gpus.is_power_of_two() && job.gpus <= s.gpus)
            .filter_map(|job| last_start(s, job).map(|last| (job, last)))
            .map(|(job, last)| Job {
                id: job.id,
                gpus: job.gpus,
                size: job.gpus.trailing_zeros() as usize,
                dur: job.duration_steps.min(steps),
                arrival: job.arrival_step,
                last,
                priority: job.priority,
                ideal: 0.0,
            })
            .collect();
        let top_level = jobs.iter().map(|job| job.size).max().unwrap_or(0);
        let cands = (0..=top_level).map(|size| firsts(s.gpus, per_node, 1 << size).collect()).collect();
        let disc = Discounts::new(s.decay, steps);
        let mut ctx = Ctx { steps, per_node, jobs, cands, disc, bases: Vec::new(), elastic: None, work: 0, deadline: Deadline::none() };
        for i in 0..ctx.jobs.len() {
            ctx.jobs[i].ideal = ctx.value(&ctx.jobs[i], ctx.jobs[i].arrival);
        }
        ctx
    }

    /// Whether a loop bounded by `limit` work units is to stop: the work is
    /// spent, or the wall-clock cap has passed.
    pub(super) fn spent(&mut self, limit: u64) -> bool {
        self.work >= limit || self.deadline.passed()
    }

    /// Value of `job` started at `start` (its steps inside the horizon).
    pub(super) fn value(&self, job: &Job, start: usize) -> f64 {
        let end = (start + job.dur).min(self.steps);
        self.disc.run(job.priority, job.gpus, start.min(end), end)
    }

    /// Decode `order` under `rule` on `layout`. With `from` (the current
    /// plan, same layout and rule, and its marks) the decoding resumes at the
    /// last mark at or before `changed`, the first position where `order`
    /// differs from it. `marks[i]` receives the state before position
    /// `i · every` (only the marks after the resumed one are written).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode(
        &mut self,
        scratch: &mut Packer,
        marks: &mut [Mark],
        every: usize,
        from: Option<Resume<'_>>,
        layout: usize,
        order: Vec<u32>,
        rule: Rule,
    ) -> Decoded {
        let (begin, mut value, mut starts) = match from {
            Some((current, current_marks, changed)) => {
                let resumed = changed / every;
                scratch.clone_from(&current_marks[resumed].0);
                (resumed * every, current_marks[resumed].1, current.starts.clone())
            }
            None => {
                scratch.clone_from(&self.bases[layout].0);
                (0, self.bases[layout].1, vec![None; self.jobs.len()])
            }
        };
        for (pos, &job_index) in order.iter().enumerate().skip(begin) {
            if pos % every == 0 && (pos > begin || from.is_none()) {
                let mark = &mut marks[pos / every];
                mark.0.clone_from(scratch);
                mark.1 = value;
            }
            let job = self.jobs[job_index as usize].clone();
            self.work += 4;
            starts[job_index as usize] = self.find(scratch, &job, rule);
            if let Some((start, first)) = starts[job_index as usize] {
                scratch.take(first, job.gpus, start, (start + job.dur).min(self.steps));
                value += self.value(&job, start);
            }
        }
        Decoded { layout, rule, order, starts, value }
    }

    /// Positions in `plan.order` of the jobs that started after their
    /// arrival or not at all (and could bring something).
    pub(super) fn late_positions(&self, plan: &Decoded) -> Vec<usize> {
        plan.order
            .iter()
            .enumerate()
            .filter(|&(_, &job_index)| {
                let job = &self.jobs[job_index as usize];
                job.ideal > 0.0 && plan.starts[job_index as usize].is_none_or(|(start, _)| start > job.arrival)
            })
            .map(|(pos, _)| pos)
            .collect()
    }
}

/// The decoder's working space shared by the search's loops: the state
/// being decoded into, the marks of the plan being tried (swapped with the
/// current plan's when it is accepted) and the mark spacing.
pub(super) struct Buffers {
    pub(super) scratch: Packer,
    pub(super) candidate_marks: Vec<Mark>,
    /// Marks are kept before every `every`-th position of an order.
    pub(super) every: usize,
}

impl Buffers {
    /// Buffers for `ctx`'s jobs and layouts: about 16 marks an order, so a
    /// changed order resumes decoding near its first change.
    pub(super) fn new(ctx: &Ctx) -> Buffers {
        let scratch = ctx.bases[0].0.clone();
        let every = ctx.jobs.len().div_ceil(16).max(1);
        let mut buffers = Buffers { scratch, candidate_marks: Vec::new(), every };
        buffers.candidate_marks = buffers.new_marks(ctx.jobs.len());
        buffers
    }

    /// A set of marks for an order of `job_count` jobs.
    pub(super) fn new_marks(&self, job_count: usize) -> Vec<Mark> {
        vec![(self.scratch.clone(), 0.0); job_count / self.every + 1]
    }
}
