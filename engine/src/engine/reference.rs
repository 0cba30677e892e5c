//! The test oracle: [`Engine::tick_reference`], the recalculation with
//! nothing kept between ticks ([`Engine::tick_from_scratch`], the path a
//! job list with a duplicate id takes): every job converted, charged and
//! ranked afresh, so that the incremental [`Engine::tick`] is checked
//! against it tick by tick (`super::equivalence`).

use super::*;

impl Engine {
    /// [`Engine::tick`] with nothing kept: everything from scratch.
    pub(super) fn tick_reference(&mut self, now: u64, views: impl Into<Vec<JobView>>, plan: Option<&PlanBoard>) -> TickReport {
        let mut views: Vec<JobView> = views.into();
        self.see_holds(&mut views);
        self.tick_from_scratch(now, views, plan)
    }
}
