//! The per-tick pipeline: one `Schedule` run per visited tick, its stages in a
//! fixed order, and the [`Engine`] that drives it until nothing is due.

use crate::network::{
    self, Arrived, LinkTable, MessagePool, NetCalendar, NetCounters, RouteSource, Routes,
};
use crate::time::{Clock, Tick};
use crate::traffic::{self, Traffic, TrafficState};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ScheduleLabel, SingleThreadedExecutor};

/// The stages of one tick, run in this order. Each model module registers its
/// systems into its stage; stages that no module fills yet are still ordered.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Runnable PEs issue their next ops.
    KernelStep,
    /// Memory transfers progress and complete.
    Dma,
    /// Packets due now enter their next link or arrive.
    Routing,
    /// Arrived messages are handed to their receivers.
    Delivery,
    /// Freed queue slots send credits back.
    CreditReturn,
    /// Counters and occupancy records.
    Stats,
    /// The clock jumps to the next due tick.
    Advance,
}

impl Stage {
    pub const ORDER: [Stage; 7] = [
        Stage::KernelStep,
        Stage::Dma,
        Stage::Routing,
        Stage::Delivery,
        Stage::CreditReturn,
        Stage::Stats,
        Stage::Advance,
    ];
}

/// Label of the tick schedule.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tick_;

/// Whole-run counters kept by the `stats` stage.
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunStats {
    /// Largest number of messages in flight at the end of any tick.
    pub peak_in_flight: u64,
    /// Tick of the last message delivery.
    pub last_delivery: Tick,
    delivered_seen: u64,
}

fn stats(
    clock: Res<Clock>,
    counters: Res<NetCounters>,
    traffic: Res<TrafficState>,
    mut run: ResMut<RunStats>,
) {
    if counters.delivered != run.delivered_seen {
        run.delivered_seen = counters.delivered;
        run.last_delivery = clock.now;
    }
    run.peak_in_flight = run.peak_in_flight.max(traffic.next_id - counters.delivered);
}

/// Moves the clock to the earliest tick at which any calendar has work.
fn advance(mut clock: ResMut<Clock>, net: Res<NetCalendar>, traffic: Res<TrafficState>) {
    clock.steps += 1;
    let next = if traffic.error.is_some() {
        None
    } else {
        net.0.next_due()
    };
    match next {
        Some(t) => {
            debug_assert!(
                t >= clock.now,
                "clock would go back from {} to {t}",
                clock.now
            );
            clock.now = t;
        }
        None => clock.idle = true,
    }
}

/// Builds the tick schedule with every stage chained in [`Stage::ORDER`].
pub fn tick_schedule() -> Schedule {
    let mut s = Schedule::new(Tick_);
    s.set_executor(SingleThreadedExecutor::new());
    s.configure_sets(
        (
            Stage::KernelStep,
            Stage::Dma,
            Stage::Routing,
            Stage::Delivery,
            Stage::CreditReturn,
            Stage::Stats,
            Stage::Advance,
        )
            .chain(),
    );
    s.add_systems(network::routing.in_set(Stage::Routing));
    s.add_systems(traffic::delivery.in_set(Stage::Delivery));
    s.add_systems(stats.in_set(Stage::Stats));
    s.add_systems(advance.in_set(Stage::Advance));
    s
}

/// What a finished run reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// Tick of the last event (the makespan when the run started at 0).
    pub end_tick: Tick,
    /// Schedule runs (visited ticks plus same-tick re-runs).
    pub steps: u64,
    pub messages: u64,
    pub hops: u64,
    pub peak_in_flight: u64,
}

/// A simulation world and its tick schedule.
pub struct Engine {
    pub world: World,
    schedule: Schedule,
}

impl Engine {
    /// A world over `links`, routing through `routes`.
    pub fn new(links: LinkTable, routes: Box<dyn RouteSource>) -> Self {
        let mut world = World::new();
        world.insert_resource(links);
        world.insert_resource(Routes::new(routes));
        world.init_resource::<Clock>();
        world.init_resource::<NetCalendar>();
        world.init_resource::<Arrived>();
        world.init_resource::<MessagePool>();
        world.init_resource::<NetCounters>();
        world.init_resource::<TrafficState>();
        world.init_resource::<RunStats>();
        Self {
            world,
            schedule: tick_schedule(),
        }
    }

    /// Installs the workload that the next [`Engine::run`] starts.
    pub fn set_traffic(&mut self, t: impl Traffic) {
        self.world.resource_mut::<TrafficState>().source = Some(Box::new(t));
    }

    /// The installed workload, if it is a `T`.
    pub fn traffic<T: Traffic>(&self) -> Option<&T> {
        let source = self.world.resource::<TrafficState>().source.as_deref()?;
        (source as &dyn std::any::Any).downcast_ref::<T>()
    }

    pub fn links(&self) -> &LinkTable {
        self.world.resource::<LinkTable>()
    }

    pub fn now(&self) -> Tick {
        self.world.resource::<Clock>().now
    }

    /// Runs ticks until nothing is due. Errors if a message could not be routed.
    pub fn run(&mut self) -> Result<RunSummary, String> {
        self.world.resource_mut::<Clock>().idle = false;
        while !self.world.resource::<Clock>().idle {
            self.schedule.run(&mut self.world);
        }
        if let Some(e) = self.world.resource_mut::<TrafficState>().error.take() {
            return Err(e);
        }
        let clock = self.world.resource::<Clock>();
        let net = self.world.resource::<NetCounters>();
        let run = self.world.resource::<RunStats>();
        Ok(RunSummary {
            end_tick: clock.now,
            steps: clock.steps,
            messages: net.delivered,
            hops: net.hops,
            peak_in_flight: run.peak_in_flight,
        })
    }
}
