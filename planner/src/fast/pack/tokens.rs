//! The co-placement search: realtime services and batch jobs decoded in one
//! order, so where the services sit is searched together with the batch.
//!
//! A service's curve (its demand dilated to its swap cap, clipped to the
//! GPUs pinned jobs leave) is cut into nested *tokens*: one GPU held from a
//! rise of the curve to a fall, the GPUs added last given back first. A
//! token's two ends are changes the curve makes anyway, so any subset of
//! the tokens is within the swap cap.
//!
//! An order of batch jobs and tokens, with a *delay* per job, decodes into
//! a plan. A job takes its earliest fit at or after its arrival plus its
//! delay under the block rule (as in the parent, `pack`): a delay holds a
//! job back so what comes after it in the order can take the place it
//! would have taken (without delays a job starts later than it fits only
//! when items before it in the order are in its way). A token takes one GPU
//! free over all its steps if there is one: one its service holds just
//! before or after them first (the service stays put), then the shortest
//! free window around them, then the node with the fewest GPUs free over
//! them (whole nodes are kept for whole-node blocks), then the highest
//! GPU. Otherwise it takes the free run of one GPU that serves the most
//! unmet demand, and the steps left on either side of it are placed the
//! same way (twice at most): the service moves around a batch job, or
//! gives those steps up. Where a piece's end fills its step's swap cap,
//! the piece beside it reaches one step into it (a handover: both GPUs
//! held for that step, one change at each of two steps rather than two at
//! one). The changes counted against the cap are the real ones, GPUs added
//! plus removed between steps: a piece's end is a change unless its
//! service holds that GPU on the other side, where the piece continues
//! another. A piece that would exceed the cap, or that would serve no
//! demand the pieces before it left unmet, is not placed. So every decoded
//! plan is legal by construction, and giving up realtime for a batch job
//! is a token after the job in the order: the search weighs the trade
//! without a rule of its own. The value is the validator's: batch value
//! minus `penalty × weight` per GPU-step of demand no piece serves.
//!
//! The search is simulated annealing over the order and the delays: a
//! random swap or move of one item (two moves in three), or a job's delay
//! drawn anew between 0 and its last start (half the time back to 0 if it
//! has one), decoding resumed at a saved state before the first changed
//! position; a worse plan is accepted with probability `exp(Δ / T)`, `T`
//! falling linearly from 0.5% of the plan's value to 0 over the budget. It
//! starts from the best of its seeds (the tokens first, longest first, then
//! each given batch order, no delays: the services served before any
//! batch job, as the bands are) and runs once per block rule (Time,
//! Lowest, Buddy), each with a third of the budget, counted in the
//! decoder's work units, so the result is deterministic.
//!
//! A move is evaluated without decoding what it cannot change. The
//! decoding starts from a saved state (one every few positions); the items
//! between it and the first changed position are put back as the current
//! plan has them, without a search. Past the last changed position, once
//! every item has come out as in the current plan (a move that changes
//! nothing, as about half of them do), the rest of the plan is the current
//! one: its value is summed from the pieces the current plan recorded. The
//! value (to the bit) and the work counted are those of decoding it all, so
//! the search takes the same path, only sooner.

use super::{free_around, Ctx, Packer, Rule};
use crate::grid::{demand, step_bits};
use crate::rng::Rng;
use crate::Scenario;
use std::ops::Range;

/// The block rules the search runs under, each with a third of the budget.
const RULES: [Rule; 3] = [Rule::Time, Rule::Lowest, Rule::Buddy];

/// The annealing's starting temperature, as a share of the plan's value.
const T0: f64 = 0.005;

/// Marks kept every this many multiples of `every` (see `Search::stride`).
const STRIDE: usize = 2;

/// How many times a token's steps may be split around busy GPUs (2: at
/// most seven pieces).
const SPLIT_DEPTH: u32 = 2;

/// One GPU a service holds over steps `from..to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Token {
    pub service: usize,
    pub from: usize,
    pub to: usize,
}

/// The nested tokens of every curve (`curves[s][t]`, `steps` values each):
/// at a rise the new GPUs are pushed, at a fall the last pushed are popped.
pub(super) fn cut(curves: &[Vec<u32>], steps: usize) -> Vec<Token> {
    let mut out = Vec::new();
    for (service, r) in curves.iter().enumerate() {
        let at = |t: usize| if t < steps { r.get(t).copied().unwrap_or(0) } else { 0 };
        let mut open: Vec<usize> = Vec::new();
        for t in 0..=steps {
            let before = if t == 0 { 0 } else { at(t - 1) };
            for _ in at(t)..before {
                let from = open.pop().expect("a fall closes tokens a rise opened");
                out.push(Token { service, from, to: t });
            }
            open.extend(std::iter::repeat_n(t, at(t).saturating_sub(before) as usize));
        }
    }
    out
}

/// The decoder's state before a position of the order.
#[derive(Debug, PartialEq)]
struct State {
    grid: Packer,
    /// GPUs held per service and step (`service · steps + t`).
    held: Vec<u32>,
    /// GPUs added + removed per service between steps `t − 1` and `t`.
    swaps: Vec<u32>,
    /// The GPUs each service holds by step, as in `cols`: word
    /// `(service · steps + t) · words + g / 64`.
    owned: Vec<u64>,
    /// Per service, bit `t` set while it holds fewer GPUs than its demand.
    short: Vec<u64>,
    /// The grid by step: bit `g % 64` of word `t · words + g / 64` set
    /// while GPU `g` is free at step `t`, so a token's candidate GPUs are a
    /// few word operations rather than a scan of every GPU.
    cols: Vec<u64>,
    value: f64,
}

// By hand so `clone_from` reuses the buffers (a saved state is copied on
// every move).
impl Clone for State {
    fn clone(&self) -> State {
        State {
            grid: self.grid.clone(),
            held: self.held.clone(),
            swaps: self.swaps.clone(),
            owned: self.owned.clone(),
            short: self.short.clone(),
            cols: self.cols.clone(),
            value: self.value,
        }
    }

    fn clone_from(&mut self, o: &State) {
        // Every state of a search has the same levels and no per-step limit:
        // the grid's bits are all that differ.
        debug_assert!(self.grid.at == o.grid.at && self.grid.cap.is_empty() && o.grid.cap.is_empty());
        self.grid.bits.clone_from(&o.grid.bits);
        self.held.clone_from(&o.held);
        self.swaps.clone_from(&o.swaps);
        self.owned.clone_from(&o.owned);
        self.short.clone_from(&o.short);
        self.cols.clone_from(&o.cols);
        self.value = o.value;
    }
}

impl State {
    /// Take GPUs `first..first + g` over steps `from..to`, in the grid and
    /// its columns.
    fn take(&mut self, words: usize, first: u32, g: u32, from: usize, to: usize) {
        self.grid.take(first, g, from, to);
        let (lo, hi) = (first as usize, (first + g) as usize);
        for w in lo / 64..hi.div_ceil(64) {
            let keep = !step_bits(lo.max(w * 64) - w * 64, hi.min(w * 64 + 64) - w * 64);
            for t in from..to {
                self.cols[t * words + w] &= keep;
            }
        }
    }

    /// Into `out` (one bit per GPU, as in `cols`): the GPUs free at every
    /// step of the mask `steps` (`all`), or at any of them.
    fn free_over(&self, words: usize, steps: u64, all: bool, out: &mut Vec<u64>) {
        out.clear();
        out.resize(words, if all { !0 } else { 0 });
        let mut m = steps;
        while m != 0 {
            let t = m.trailing_zeros() as usize;
            m &= m - 1;
            for (o, &c) in out.iter_mut().zip(&self.cols[t * words..(t + 1) * words]) {
                *o = if all { *o & c } else { *o | c };
            }
        }
    }
}

/// A piece of a token: one GPU over steps `from..to`, serving `served`
/// GPU-steps of demand the pieces before it left unmet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Piece {
    pub from: usize,
    pub to: usize,
    pub gpu: u32,
    served: u32,
}

/// A decoded order (items: the jobs, then the tokens) and its plan.
#[derive(Debug, Clone)]
pub(super) struct Found {
    pub order: Vec<u32>,
    /// Per item, a job's start and first GPU (`None`: not placed, or a
    /// token).
    pub at: Vec<Option<(usize, u32)>>,
    /// Per token, the pieces placed.
    pub pieces: Vec<Vec<Piece>>,
    /// Per job, the steps its start is held back past its arrival.
    pub delays: Vec<u16>,
    /// Per item, the work its decoding took (the same again whenever it is
    /// decoded from the same state).
    cost: Vec<u64>,
    pub value: f64,
}

impl Found {
    /// An order with its delays, not decoded yet.
    fn new(order: Vec<u32>, delays: Vec<u16>, tokens: usize) -> Found {
        let n = order.len();
        Found { order, at: vec![None; n], pieces: vec![Vec::new(); tokens], delays, cost: vec![0; n], value: 0.0 }
    }

    /// `self` made equal to `o`, reusing its buffers.
    fn copy_from(&mut self, o: &Found) {
        self.order.clone_from(&o.order);
        self.delays.clone_from(&o.delays);
        self.copy_plan_from(o);
    }

    /// `o`'s plan (placements, costs, value) into `self`, reusing its
    /// buffers.
    fn copy_plan_from(&mut self, o: &Found) {
        self.at.clone_from(&o.at);
        self.pieces.clone_from(&o.pieces);
        self.cost.clone_from(&o.cost);
        self.value = o.value;
    }
}

/// Where a decoding resumes: the current plan's marks, and the positions
/// `lo..=hi` at which the new order (or a delay) differs from it.
#[derive(Clone, Copy)]
struct Resume<'m> {
    marks: &'m [State],
    lo: usize,
    hi: usize,
}

/// The search over one scenario.
pub(super) struct Search<'a> {
    ctx: &'a mut Ctx,
    s: &'a Scenario,
    tokens: Vec<Token>,
    base: State,
    /// A decoding resumed at position `p` counts the work from the last
    /// multiple of `every` at or before `p` on (the work the search is
    /// budgeted in) …
    every: usize,
    /// … and starts from the state kept at the last multiple of `stride`
    /// (a multiple of `every`): fewer states copied, the positions between
    /// redone from the current plan without a search.
    stride: usize,
    /// Words per step in `State::cols`.
    words: usize,
    /// A GPU set (`State::free_over`) reused by every token placed.
    scratch: Vec<u64>,
    /// The GPUs of `scratch` the service holds beside a token's steps.
    beside: Vec<u64>,
    /// The decoder's working state, kept between decodes for its buffers.
    spare: Option<State>,
    /// A token's pieces as they are placed, before they replace its old ones.
    placed: Vec<Piece>,
    /// The GPUs each service wants by step (`service · steps + t`).
    demand: Vec<u32>,
}

impl<'a> Search<'a> {
    /// `grid`: the pinned jobs only; `fixed`: the value of the pinned jobs.
    pub(super) fn new(ctx: &'a mut Ctx, s: &'a Scenario, grid: Packer, fixed: f64, curves: &[Vec<u32>]) -> Search<'a> {
        let steps = ctx.steps;
        let tokens = cut(curves, steps);
        let unmet: f64 =
            (0..s.services.len()).map(|si| s.penalty * s.services[si].weight * (0..steps).map(|t| f64::from(demand(s, si, t))).sum::<f64>()).sum();
        let short = (0..s.services.len()).map(|si| (0..steps).filter(|&t| demand(s, si, t) > 0).fold(0, |m, t| m | 1 << t)).collect();
        let words = grid.gpus.div_ceil(64) as usize;
        let mut cols = vec![0u64; steps * words];
        for g in 0..grid.gpus {
            for t in (0..steps).filter(|&t| grid.bits[g as usize] >> t & 1 == 1) {
                cols[t * words + (g / 64) as usize] |= 1 << (g % 64);
            }
        }
        let services = s.services.len() * steps;
        let owned = vec![0; services * words];
        let base = State { grid, held: vec![0; services], swaps: vec![0; services], owned, short, cols, value: fixed - unmet };
        let items = ctx.jobs.len() + tokens.len();
        let every = items.div_ceil(16).max(1);
        let demand = (0..s.services.len()).flat_map(|si| (0..steps).map(move |t| demand(s, si, t))).collect();
        Search {
            ctx,
            s,
            tokens,
            base,
            every,
            stride: STRIDE * every,
            words,
            scratch: Vec::new(),
            beside: Vec::new(),
            spare: None,
            placed: Vec::new(),
            demand,
        }
    }

    /// The tokens.
    pub(super) fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    /// Decode `f.order` under `rule` into `f`'s plan, each job starting no
    /// earlier than its arrival plus its delay: from scratch, or (`from`)
    /// from the current plan's last mark at or before the first changed
    /// position, `f` then holding the current plan on entry. The work counted is that
    /// of decoding from the last multiple of `every` at or before that
    /// position; the items before it are the current plan's. Past the
    /// changed positions, once every item decoded has come out as in the
    /// current plan, the rest of the plan is the current one too: it is
    /// taken as it is, its value and work added as decoding it would add
    /// them, so the search sees the same figures either way. `marks`
    /// receives the states before every `stride`-th position decoded and,
    /// past those, the values alone (the states are the current plan's);
    /// returns the indices of the marks written whole.
    fn decode(&mut self, rule: Rule, f: &mut Found, from: Option<Resume<'_>>, marks: &mut [State]) -> Range<usize> {
        let steps = self.ctx.steps;
        let jobs = self.ctx.jobs.len();
        let stride = self.stride;
        let mut st = self.spare.take().unwrap_or_else(|| self.base.clone());
        let (begin, counted, hi) = match from {
            Some(r) => {
                let m = r.lo / stride;
                st.clone_from(&r.marks[m]);
                (m * stride, r.lo / self.every * self.every, r.hi)
            }
            None => {
                st.clone_from(&self.base);
                (0, 0, usize::MAX)
            }
        };
        let first_mark = if from.is_some() { begin / stride + 1 } else { 0 };
        let mut end = f.order.len();
        // Every item decoded so far placed as in the current plan.
        let mut same = true;
        let mut placed = std::mem::take(&mut self.placed);
        for pos in begin..f.order.len() {
            if same && pos > hi {
                for (q, &item) in f.order.iter().enumerate().skip(pos) {
                    if q % stride == 0 {
                        marks[q / stride].value = st.value;
                    }
                    self.replay(&mut st, f, item as usize);
                }
                end = pos;
                break;
            }
            if pos % stride == 0 && (pos > begin || from.is_none()) {
                marks[pos / stride].clone_from(&st);
            }
            let item = f.order[pos] as usize;
            if pos < counted {
                self.redo(&mut st, f, item);
                continue;
            }
            let work = self.ctx.work;
            if item < jobs {
                let mut j = self.ctx.jobs[item].clone();
                j.arrival += usize::from(f.delays[item]);
                self.ctx.work += 4;
                let found = self.ctx.find(&st.grid, &j, rule);
                if let Some((t, first)) = found {
                    st.take(self.words, first, j.gpus, t, (t + j.dur).min(steps));
                    st.value += self.ctx.value(&j, t);
                }
                same &= found == f.at[item];
                f.at[item] = found;
            } else {
                let k = self.tokens[item - jobs];
                placed.clear();
                self.place(&mut st, k, k.from, k.to, SPLIT_DEPTH, &mut placed);
                same &= placed == f.pieces[item - jobs];
                std::mem::swap(&mut placed, &mut f.pieces[item - jobs]);
            }
            f.cost[item] = self.ctx.work - work;
        }
        self.placed = placed;
        f.value = st.value;
        self.spare = Some(st);
        first_mark..end.div_ceil(stride)
    }

    /// The marks of a plan decoded from `marks` into `cand_marks` (the
    /// marks `written` whole) made `marks`: the states the decoding wrote
    /// and, past them, the values alone (the states there are the same for
    /// both plans, the values summed in another order).
    fn adopt(&self, marks: &mut [State], cand_marks: &mut [State], written: Range<usize>) {
        let positions = self.ctx.jobs.len() + self.tokens.len();
        for m in written.start..marks.len() {
            if m < written.end {
                std::mem::swap(&mut marks[m], &mut cand_marks[m]);
            } else if m * self.stride < positions {
                marks[m].value = cand_marks[m].value;
            }
        }
    }

    /// `item` placed in `st` as in `f`, its value added as decoding it
    /// would add it (its work is not counted: see `decode`).
    fn redo(&self, st: &mut State, f: &Found, item: usize) {
        let jobs = self.ctx.jobs.len();
        if item < jobs {
            if let Some((t, first)) = f.at[item] {
                let j = &self.ctx.jobs[item];
                st.take(self.words, first, j.gpus, t, (t + j.dur).min(self.ctx.steps));
                st.value += self.ctx.value(j, t);
            }
        } else {
            let service = self.tokens[item - jobs].service;
            for &p in &f.pieces[item - jobs] {
                self.hold(st, service, p);
            }
        }
    }

    /// The value and work of `item` placed as in `f`, added to `st` and the
    /// work count as decoding it would add them (the state itself is left
    /// as it is: nothing after it is decoded).
    fn replay(&mut self, st: &mut State, f: &Found, item: usize) {
        let jobs = self.ctx.jobs.len();
        self.ctx.work += f.cost[item];
        if item < jobs {
            if let Some((t, _)) = f.at[item] {
                st.value += self.ctx.value(&self.ctx.jobs[item], t);
            }
        } else {
            let weight = self.s.services[self.tokens[item - jobs].service].weight;
            for p in &f.pieces[item - jobs] {
                st.value += self.s.penalty * weight * f64::from(p.served);
            }
        }
    }

    /// Put `k`'s steps `from..to` on GPUs: on one GPU free over all of them
    /// if any, else (`depth` > 0) on the free run that serves the most
    /// demand, and what is left on either side the same way with one level
    /// less. A piece's ends count against the service's swap cap where they
    /// add or remove a GPU (not where it continues one the service holds).
    fn place(&mut self, st: &mut State, k: Token, from: usize, to: usize, depth: u32, out: &mut Vec<Piece>) {
        let steps = self.ctx.steps;
        let words = self.words;
        let row = k.service * steps;
        let cap = self.s.services[k.service].swap_cap;
        if st.short[k.service] & step_bits(from, to) == 0 {
            return;
        }
        self.ctx.work += 1 + u64::from(st.grid.gpus) / 4;
        // The service's GPUs at step `t`, and whether it holds `g` there.
        let owned = |t: usize| (row + t) * words..(row + t + 1) * words;
        let holds = |st: &State, t: usize, g: u32| st.owned[owned(t)][(g / 64) as usize] >> (g % 64) & 1 == 1;
        // A piece on `g` over `a..b` changes nothing at an end where the
        // service holds `g` on the other side; elsewhere it adds a change.
        let room = |st: &State, a: usize, b: usize, g: u32| {
            (a == 0 || st.swaps[row + a] < cap || holds(st, a - 1, g)) && (b >= steps || st.swaps[row + b] < cap || holds(st, b, g))
        };
        // The GPUs free over all the steps with room at both ends (`room`,
        // a word at a time), and of those, the ones the service holds
        // beside the steps: there it stays where it is instead of moving.
        st.free_over(words, step_bits(from, to), true, &mut self.scratch);
        self.beside.clear();
        for (i, f) in self.scratch.iter_mut().enumerate() {
            let before = if from > 0 { st.owned[owned(from - 1)][i] } else { 0 };
            let after = if to < steps { st.owned[owned(to)][i] } else { 0 };
            if from > 0 && st.swaps[row + from] >= cap {
                *f &= before;
            }
            if to < steps && st.swaps[row + to] >= cap {
                *f &= after;
            }
            self.beside.push(*f & (before | after));
        }
        let free = if self.beside.iter().any(|&w| w != 0) { &self.beside } else { &self.scratch };
        let mut pick = gpu_for(&st.grid, free, Token { service: k.service, from, to }, steps, self.ctx.per_node).map(|g| (from, to, g));
        if pick.is_none() && depth > 0 {
            self.ctx.work += u64::from(st.grid.gpus) / 2;
            let w = step_bits(from, to);
            let short = st.short[k.service] & w;
            // (steps served, length, piece): the most served, then the shortest.
            let mut best: Option<(u32, usize, (usize, usize, u32))> = None;
            // Only a GPU free at a step the service is short of can serve.
            st.free_over(words, short, false, &mut self.scratch);
            for g in descending(&self.scratch) {
                let mut m = st.grid.bits[g as usize] & w;
                // No run on this GPU serves more than its free short steps.
                if best.is_some_and(|x| (short & m).count_ones() < x.0) {
                    continue;
                }
                while m != 0 {
                    let a = m.trailing_zeros() as usize;
                    let b = (a + (!(m >> a)).trailing_zeros() as usize).min(to);
                    m &= !step_bits(a, b);
                    let served = short & step_bits(a, b);
                    if served == 0 {
                        continue;
                    }
                    let n = served.count_ones();
                    let better = best.is_none_or(|x| n > x.0 || (n == x.0 && b - a < x.1));
                    if better && room(st, a, b, g) {
                        best = Some((n, b - a, (a, b, g)));
                    }
                }
            }
            pick = best.map(|b| b.2);
        }
        let Some((a, b, g)) = pick else { return };
        let piece = Piece { from: a, to: b, gpu: g, served: (st.short[k.service] & step_bits(a, b)).count_ones() };
        self.hold(st, k.service, piece);
        out.push(piece);
        if depth > 0 && (a, b) != (from, to) {
            // Where this piece's end fills its boundary's swap cap, the piece
            // beside it reaches one step into this one: a handover, both GPUs
            // held for that step, one change at each of two boundaries
            // instead of two at one.
            let full = |st: &State, t: usize| t > 0 && t < steps && st.swaps[row + t] >= cap;
            let left_end = if a > from && full(st, a) { (a + 1).min(b) } else { a };
            self.place(st, k, from, left_end, depth - 1, out);
            let right_start = if b < to && full(st, b) { (b - 1).max(a) } else { b };
            self.place(st, k, right_start, to, depth - 1, out);
        }
    }

    /// `service` takes `p` in `st`: its swaps at the piece's ends (one more
    /// change, or one fewer where it continues a GPU the service holds on
    /// the other side), the GPU, the value of the demand it serves.
    fn hold(&self, st: &mut State, service: usize, p: Piece) {
        let (steps, words) = (self.ctx.steps, self.words);
        let row = service * steps;
        let (w, bit) = ((p.gpu / 64) as usize, 1 << (p.gpu % 64));
        // The ends first, while the bits beside the piece are the others'.
        for (t, beside) in [(p.from, p.from.wrapping_sub(1)), (p.to, p.to)] {
            if t > 0 && t < steps {
                if st.owned[(row + beside) * words + w] & bit != 0 {
                    st.swaps[row + t] -= 1;
                } else {
                    st.swaps[row + t] += 1;
                }
            }
        }
        st.take(words, p.gpu, 1, p.from, p.to);
        st.value += self.s.penalty * self.s.services[service].weight * f64::from(p.served);
        for t in p.from..p.to {
            st.owned[(row + t) * words + w] |= bit;
            st.held[row + t] += 1;
            if st.held[row + t] >= self.demand[row + t] {
                st.short[service] &= !(1 << t);
            }
        }
    }

    /// Annealing from the best of `seeds` (batch orders: indices into the
    /// jobs), `work` units in all. Returns the best plan seen.
    pub(super) fn run(&mut self, seeds: &[Vec<u32>], work: u64) -> Option<Found> {
        let jobs = self.ctx.jobs.len() as u32;
        let n = jobs as usize + self.tokens.len();
        if self.tokens.is_empty() || n < 2 {
            return None;
        }
        let mut first: Vec<u32> = (0..self.tokens.len() as u32).collect();
        first.sort_by_key(|&k| std::cmp::Reverse(self.tokens[k as usize].to - self.tokens[k as usize].from));
        let marks_len = n / self.stride + 1;
        let mut marks = vec![self.base.clone(); marks_len];
        let mut cand_marks = marks.clone();
        let mut best: Option<Found> = None;
        for rule in RULES {
            for seed in seeds {
                let order: Vec<u32> = first.iter().map(|&k| k + jobs).chain(seed.iter().copied()).collect();
                let mut f = Found::new(order, vec![0; jobs as usize], self.tokens.len());
                self.decode(rule, &mut f, None, &mut marks);
                if best.as_ref().is_none_or(|b| f.value > b.value) {
                    best = Some(f);
                }
            }
        }
        let mut best = best?;
        // Deterministic: a fixed stream, and the work decides where it stops
        // (the clock only at the budget's time cap).
        let mut rng = Rng::new(1);
        let share = (work / RULES.len() as u64).max(1);
        let mut cur = best.clone();
        let mut cand = best.clone();
        for rule in RULES {
            let start = self.ctx.work;
            cur.copy_from(&best);
            self.decode(rule, &mut cur, None, &mut marks);
            while !self.ctx.spent(start + share) {
                let done = (self.ctx.work - start) as f64 / share as f64;
                let temp = T0 * cur.value.abs() * (1.0 - done);
                cand.order.clone_from(&cur.order);
                cand.delays.clone_from(&cur.delays);
                let (lo, hi) = if jobs == 0 || rng.below(3) < 2 {
                    // Swap two items, or move one (only that without jobs).
                    let (i, k) = (rng.below(n), rng.below(n));
                    if i == k {
                        continue;
                    }
                    if rng.below(2) == 0 {
                        cand.order.swap(i, k);
                    } else {
                        let x = cand.order.remove(i);
                        cand.order.insert(k, x);
                    }
                    (i.min(k), i.max(k))
                } else {
                    // Hold a job back (a new delay up to its last start) or
                    // let it start at its arrival again.
                    let j = rng.below(jobs as usize);
                    let span = self.ctx.jobs[j].last.saturating_sub(self.ctx.jobs[j].arrival);
                    let was = cand.delays[j];
                    cand.delays[j] = if was > 0 && rng.below(2) == 0 { 0 } else { rng.below(span + 1) as u16 };
                    if cand.delays[j] == was {
                        continue;
                    }
                    let p = cand.order.iter().position(|&x| x as usize == j).expect("every job is in the order");
                    (p, p)
                };
                cand.copy_plan_from(&cur);
                let written = self.decode(rule, &mut cand, Some(Resume { marks: &marks, lo, hi }), &mut cand_marks);
                let delta = cand.value - cur.value;
                if delta >= 0.0 || (temp > 0.0 && rng.unit() < (delta / temp).exp()) {
                    self.adopt(&mut marks, &mut cand_marks, written);
                    std::mem::swap(&mut cur, &mut cand);
                    if cur.value > best.value {
                        best.copy_from(&cur);
                    }
                }
            }
        }
        Some(best)
    }
}

/// The free GPU for `k`'s steps (`free`: the GPUs free over all of them):
/// the shortest free window around them, then the node with the fewest
/// GPUs free over them (whole nodes are kept for whole-node blocks), then
/// the highest GPU. `None` when no GPU is free over all of them.
fn gpu_for(grid: &Packer, free: &[u64], k: Token, steps: usize, per_node: u32) -> Option<u32> {
    let mut best: Option<((usize, u32), u32)> = None;
    // From the highest GPU down, so the first of equal keys is the highest.
    let mut node = (u32::MAX, 0);
    for g in descending(free) {
        let around = free_around(grid.bits[g as usize], k.from, k.to, steps);
        if best.is_some_and(|b| around > b.0 .0) {
            continue;
        }
        if g / per_node != node.0 {
            let lo = g / per_node * per_node;
            node = (g / per_node, count(free, lo, (lo + per_node).min(grid.gpus)));
        }
        let key = (around, node.1);
        if best.is_none_or(|b| key < b.0) {
            best = Some((key, g));
        }
    }
    best.map(|b| b.1)
}

/// How many of GPUs `lo..hi` are in `words` (bit `g % 64` of word `g / 64`
/// is GPU `g`).
fn count(words: &[u64], lo: u32, hi: u32) -> u32 {
    let (lo, hi) = (lo as usize, hi as usize);
    (lo / 64..hi.div_ceil(64)).map(|w| (words[w] & step_bits(lo.max(w * 64) - w * 64, hi.min(w * 64 + 64) - w * 64)).count_ones()).sum()
}

/// The set bits of `words` (bit `g % 64` of word `g / 64` is GPU `g`),
/// highest first.
fn descending(words: &[u64]) -> impl Iterator<Item = u32> + '_ {
    words.iter().enumerate().rev().flat_map(|(i, &w)| {
        let mut w = w;
        std::iter::from_fn(move || {
            (w != 0).then(|| {
                let b = 63 - w.leading_zeros();
                w &= !(1u64 << b);
                i as u32 * 64 + b
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::{dilate, pinned_bits};
    use crate::PlanJob;

    #[test]
    fn a_delay_holds_a_job_back_within_its_last_start() {
        // 2 GPUs, 6 steps, must-finish: a 1-GPU job of 2 steps arriving at
        // step 1 may start at steps 1 to 4. GPU 0 is taken first (rule
        // Lowest); its value is priority × decay^t per step run.
        let job = PlanJob { id: 1, gpus: 1, duration_steps: 2, priority: 3.0, arrival_step: 1, pinned: None };
        let s = Scenario {
            gpus: 2,
            gpus_per_node: 2,
            steps: 6,
            step_s: crate::time::HOUR_S,
            decay: 0.9,
            penalty: 1.0,
            must_finish: true,
            jobs: vec![job],
            services: Vec::new(),
        };
        let mut ctx = Ctx::new(&s);
        assert_eq!(ctx.jobs[0].last, 4);
        let grid = Packer::from_grid(&pinned_bits(&s), s.gpus, s.steps, 0);
        let mut search = Search::new(&mut ctx, &s, grid, 0.0, &[]);
        let mut marks = vec![search.base.clone(); 2];
        for (delay, start) in [(0u16, 1usize), (2, 3), (3, 4)] {
            let mut f = Found::new(vec![0], vec![delay], 0);
            search.decode(Rule::Lowest, &mut f, None, &mut marks);
            assert_eq!(f.at[0], Some((start, 0)), "delay {delay}");
            let want = 3.0 * (0.9f64.powi(start as i32) + 0.9f64.powi(start as i32 + 1));
            assert!((f.value - want).abs() < 1e-9, "delay {delay}: {} vs {want}", f.value);
        }
    }

    #[test]
    fn a_piece_that_continues_on_its_services_gpu_is_no_change() {
        // 2 GPUs, 6 steps, one service wanting [1, 1, 2, 2, 1, 1] with one
        // GPU change allowed per step. GPU 1 is busy at steps 0-1, GPU 0 at
        // 4-5, so no GPU is free for the whole curve. Holding GPU 0 over
        // steps 0-3 and GPU 1 over 2-5 serves everything with one change at
        // step 2 and one at step 4, whichever GPU the 2-4 token is put on
        // first: the piece that meets it on the same GPU continues the
        // service there rather than counting as a removal and an addition.
        let s = Scenario {
            gpus: 2,
            gpus_per_node: 2,
            steps: 6,
            step_s: crate::time::HOUR_S,
            decay: 1.0,
            penalty: 1.0,
            must_finish: true,
            jobs: Vec::new(),
            services: vec![crate::Service { name: "chat".into(), demand: vec![1, 1, 2, 2, 1, 1], swap_cap: 1, weight: 1.0 }],
        };
        let mut ctx = Ctx::new(&s);
        let grid = Packer::from_grid(&pinned_bits(&s), s.gpus, s.steps, 0);
        let mut search = Search::new(&mut ctx, &s, grid, 0.0, &[s.services[0].demand.clone()]);
        assert_eq!(search.tokens(), &[Token { service: 0, from: 2, to: 4 }, Token { service: 0, from: 0, to: 6 }]);
        let words = search.words;
        search.base.take(words, 1, 1, 0, 2);
        search.base.take(words, 0, 1, 4, 6);
        let mut marks = vec![search.base.clone(); 2];
        let mut f = Found::new(vec![0, 1], Vec::new(), 2);
        search.decode(Rule::Lowest, &mut f, None, &mut marks);
        let pieces = &f.pieces;
        assert_eq!(f.value, 0.0, "every GPU-step of demand served: {pieces:?}");
        let mut held: Vec<Vec<u32>> = vec![Vec::new(); 6];
        for p in pieces.iter().flatten() {
            (p.from..p.to).for_each(|t| held[t].push(p.gpu));
        }
        for t in 1..6 {
            let changes = held[t].iter().filter(|g| !held[t - 1].contains(g)).count() + held[t - 1].iter().filter(|g| !held[t].contains(g)).count();
            assert!(changes <= 1, "{changes} changes at step {t}: {pieces:?}");
        }
    }

    #[test]
    fn a_decoding_resumed_from_the_current_plan_is_a_decoding_from_scratch() {
        // Random moves on generated instances, each decoded from the current
        // plan's marks (and cut short where it rejoins that plan) and from
        // scratch: the same plan, the same value to the bit, the same work
        // and, once adopted, the same marks.
        use crate::generate::{instance, Family};
        let mut rng = Rng::new(3);
        for (family, seed) in [(Family::Mixed, 1), (Family::RealtimeContention, 2), (Family::Scale64, 3)] {
            let s = instance(family, seed);
            let mut ctx = Ctx::new(&s);
            let top = ctx.cands.len() - 1;
            let curves: Vec<Vec<u32>> = s
                .services
                .iter()
                .map(|svc| {
                    let mut r = svc.demand.clone();
                    r.resize(s.steps, 0);
                    dilate(&mut r, svc.swap_cap);
                    r
                })
                .collect();
            let grid = Packer::from_grid(&pinned_bits(&s), s.gpus, s.steps, top);
            let mut search = Search::new(&mut ctx, &s, grid, 0.0, &curves);
            let (jobs, tokens) = (search.ctx.jobs.len(), search.tokens.len());
            let n = jobs + tokens;
            let order: Vec<u32> = (jobs..n).chain(0..jobs).map(|x| x as u32).collect();
            let fresh = |search: &mut Search<'_>, rule: Rule, f: &Found, marks: &mut [State]| {
                let mut g = Found::new(f.order.clone(), f.delays.clone(), tokens);
                search.decode(rule, &mut g, None, marks);
                g
            };
            let len = n / search.stride + 1;
            let (mut marks, mut cand_marks, mut want_marks) =
                (vec![search.base.clone(); len], vec![search.base.clone(); len], vec![search.base.clone(); len]);
            for rule in RULES {
                let mut cur = Found::new(order.clone(), vec![0; jobs], tokens);
                search.decode(rule, &mut cur, None, &mut marks);
                for _ in 0..300 {
                    let mut cand = cur.clone();
                    let (i, k) = (rng.below(n), rng.below(n));
                    let (lo, hi) = match rng.below(3) {
                        0 => {
                            cand.order.swap(i, k);
                            (i.min(k), i.max(k))
                        }
                        1 => {
                            let x = cand.order.remove(i);
                            cand.order.insert(k, x);
                            (i.min(k), i.max(k))
                        }
                        _ => {
                            let j = rng.below(jobs);
                            cand.delays[j] = rng.below(4) as u16;
                            let p = cand.order.iter().position(|&x| x as usize == j).unwrap();
                            (p, p)
                        }
                    };
                    let before = search.ctx.work;
                    let written = search.decode(rule, &mut cand, Some(Resume { marks: &marks, lo, hi }), &mut cand_marks);
                    let work = search.ctx.work - before;
                    let want = fresh(&mut search, rule, &cand, &mut want_marks);
                    assert_eq!((&cand.at, &cand.pieces, &cand.cost), (&want.at, &want.pieces, &want.cost));
                    assert_eq!(cand.value.to_bits(), want.value.to_bits());
                    let begin = lo / search.every * search.every;
                    assert_eq!(work, cand.order[begin..].iter().map(|&x| want.cost[x as usize]).sum::<u64>());
                    search.adopt(&mut marks, &mut cand_marks, written);
                    for m in (0..len).filter(|m| m * search.stride < n) {
                        assert!(marks[m] == want_marks[m], "{} #{seed}: mark {m}", family.name());
                    }
                    cur = cand;
                }
            }
        }
    }

    #[test]
    fn tokens_hold_the_curve_nested_from_rises_to_falls() {
        let mut rng = Rng::new(7);
        for _ in 0..300 {
            let steps = 1 + rng.below(30);
            let cap = 1 + rng.below(3) as u32;
            let curves: Vec<Vec<u32>> = (0..2)
                .map(|_| {
                    let mut r: Vec<u32> = (0..steps).map(|_| rng.below(6) as u32).collect();
                    dilate(&mut r, cap);
                    r
                })
                .collect();
            let tokens = cut(&curves, steps);
            for (si, r) in curves.iter().enumerate() {
                let mine: Vec<&Token> = tokens.iter().filter(|k| k.service == si).collect();
                for t in 0..steps {
                    // The curve's count at every step …
                    assert_eq!(mine.iter().filter(|k| (k.from..k.to).contains(&t)).count() as u32, r[t], "{r:?}");
                    // … and a token starts only where it rises and ends only where it falls.
                    let before = if t == 0 { 0 } else { r[t - 1] };
                    assert_eq!(mine.iter().filter(|k| k.from == t).count() as u32, r[t].saturating_sub(before));
                    assert_eq!(mine.iter().filter(|k| k.to == t).count() as u32, before.saturating_sub(r[t]));
                }
                // Nested or disjoint, never crossing.
                for a in &mine {
                    for b in &mine {
                        let crossing = a.from < b.from && b.from < a.to && a.to < b.to;
                        assert!(!crossing, "{a:?} {b:?}");
                    }
                }
            }
        }
    }
}
