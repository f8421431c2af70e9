//! Running the network ahead of the schedule: on ticks where only packets
//! move, or in flow mode only flows join, drain or change rate, the engine
//! runs the routing stage by itself, tick after tick, instead of a whole
//! schedule run per tick (docs/model.md §The clock).

use crate::time::{Clock, Tick};
use bevy_ecs::prelude::*;

/// Where a run ahead must stop: before `horizon`, the next tick at which
/// another module has work, and past `max_ticks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AheadLimit {
    pub horizon: Option<Tick>,
    pub max_ticks: Option<Tick>,
}

/// Set when the engine has already run the routing stages for the current
/// tick outside the schedule; the schedule's routing stages then wait for
/// the next run at this tick, as they would have, and `advance` clears it.
#[derive(Resource, Default)]
pub struct RoutedAhead(pub bool);

/// A routing stage the engine can run ahead of the schedule: it routes one
/// tick, knows its calendar's next tick and whether it delivered.
pub(super) trait RouteAhead {
    fn route(&mut self, now: Tick);
    fn next_due(&self) -> Option<Tick>;
    fn delivered(&self) -> bool;
}

/// Routes `stage` tick after tick from now, as the schedule would, and moves
/// the clock to the stage's next tick while nothing arrives and that tick is
/// within `limit`. The tick it stops at runs the whole schedule, whose
/// routing stages know they already ran ([`RoutedAhead`]).
pub(super) fn run_ahead(
    limit: AheadLimit,
    clock: &mut Clock,
    ahead: &mut RoutedAhead,
    stage: &mut impl RouteAhead,
) {
    loop {
        let at = clock.now;
        stage.route(at);
        let next = stage.next_due().filter(|&t| {
            t > at && limit.horizon.is_none_or(|h| t < h) && limit.max_ticks.is_none_or(|m| t <= m)
        });
        let Some(next) = next.filter(|_| !stage.delivered()) else {
            ahead.0 = true;
            return;
        };
        // What the rest of this tick's schedule would do: nothing but
        // `advance` to the stage's next tick.
        clock.steps += 1;
        clock.now = next;
    }
}
