//! The per-tick pipeline: one `Schedule` run per visited tick, its stages in a
//! fixed order, and the [`Engine`] that drives it until nothing is due.
//!
//! Layout: the run-level state is resources, one per world ([`RunStats`],
//! [`RunLimits`], the clock, the calendars' registry); the per-PE state the
//! stages reach lives on the PE entities (see `hierarchy`).

use crate::RunErrors;
use crate::exec::{self, PeExec, PeState};
use crate::hierarchy::Hardware;
use crate::ipcq::{self, DmaCalendar, Tables};
use crate::memory::MemoryPlugin;
use crate::network::{
    self, Inbox, LinkTable, NetCalendar, NetCounters, Outbox, Purpose, RouteSource, Routes,
};
use crate::plugin::{Calendars, Plugin};
use crate::program::Launch;
use crate::time::{Clock, Tick};
use crate::trace::TracePlugin;
use crate::traffic::{self, Traffic, TrafficState};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ScheduleLabel, SingleThreadedExecutor};

/// The stages of one tick, run in this order. Each model module registers its
/// systems into its stage.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Runnable PEs issue their next ops.
    KernelStep,
    /// Memory transfers that complete now take effect.
    Dma,
    /// Packets due now enter their next link or arrive.
    Routing,
    /// Arrived messages are handed to their receivers.
    Delivery,
    /// Freed queue slots send credits back; arriving credits release senders.
    CreditReturn,
    /// Counters and occupancy records.
    Stats,
    /// Messages sent since routing enter the network.
    Inject,
    /// The clock jumps to the next due tick.
    Advance,
}

impl Stage {
    pub const ORDER: [Stage; 8] = [
        Stage::KernelStep,
        Stage::Dma,
        Stage::Routing,
        Stage::Delivery,
        Stage::CreditReturn,
        Stage::Stats,
        Stage::Inject,
        Stage::Advance,
    ];
}

/// Label of the tick schedule.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct TickSchedule;

/// Whole-run counters kept by the `stats` stage.
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunStats {
    /// Largest number of messages in flight at the end of any tick.
    pub peak_in_flight: u64,
    /// Tick of the last message delivery.
    pub last_delivery: Tick,
    delivered_seen: u64,
}

impl RunStats {
    /// For the fast-forward: deliveries seen.
    pub(crate) fn steady_counters(&mut self, f: &mut impl FnMut(&mut u64)) {
        f(&mut self.delivered_seen);
    }
}

fn stats(
    clock: Res<Clock>,
    counters: Res<NetCounters>,
    outbox: Res<Outbox>,
    mut run: ResMut<RunStats>,
) {
    if counters.delivered != run.delivered_seen {
        run.delivered_seen = counters.delivered;
        run.last_delivery = clock.now;
    }
    run.peak_in_flight = run.peak_in_flight.max(outbox.sent() - counters.delivered);
}

/// Moves the clock to the earliest tick at which any module has work (none
/// once an error is reported: the run stops).
fn advance(world: &mut World) {
    let now = world.resource::<Clock>().now;
    let next = if world.resource::<RunErrors>().first.is_some() {
        None
    } else {
        world.resource::<Calendars>().next(world, now)
    };
    world.resource_mut::<network::RoutedAhead>().0 = false;
    let mut clock = world.resource_mut::<Clock>();
    clock.steps += 1;
    clock.schedule_runs += 1;
    clock.last_run = clock.now;
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

/// A tick schedule with every stage chained in [`Stage::ORDER`] and the
/// engine's own systems (delivery, stats, advance); the plugins add theirs.
/// Each system runs only when it has work this tick (a run condition reading
/// one or two resources), so a visited tick costs what happens in it.
fn tick_schedule() -> Schedule {
    let mut s = Schedule::new(TickSchedule);
    s.set_executor(SingleThreadedExecutor::new());
    for pair in Stage::ORDER.windows(2) {
        s.configure_sets(pair[1].after(pair[0]));
    }
    s.add_systems(delivery.run_if(delivery_work).in_set(Stage::Delivery));
    s.add_systems(stats.in_set(Stage::Stats));
    s.add_systems(advance.in_set(Stage::Advance));
    s
}

/// The model modules, built into every engine in this order.
const PLUGINS: [&dyn Plugin; 6] = [
    &network::NetworkPlugin,
    &MemoryPlugin,
    &ipcq::IpcqPlugin,
    &exec::ExecPlugin,
    &traffic::TrafficPlugin,
    &TracePlugin,
];

/// The `delivery` stage: each purpose's arrivals go to the module that owns
/// them (one system, so a tick pays for one parameter fetch).
fn delivery(
    mut inbox: ResMut<Inbox>,
    mut dma: ResMut<DmaCalendar>,
    mut traffic: ResMut<TrafficState>,
    mut ka: exec::KernelAccess,
    mut qa: ipcq::QueueAccess,
    mut pes: Query<(
        Option<&mut PeExec>,
        Option<&mut ipcq::NeighborTables>,
        &crate::hierarchy::PeRate,
    )>,
    mut commands: Commands,
) {
    if inbox.has(Purpose::Traffic) || traffic.needs_start() {
        let now = qa.clock.now;
        traffic::deliver_traffic(now, &mut inbox, &mut traffic, &mut qa.outbox);
    }
    if [
        Purpose::Install,
        Purpose::Launch,
        Purpose::LoadData,
        Purpose::StoreData,
    ]
    .into_iter()
    .any(|p| inbox.has(p))
    {
        exec::deliver_control(&mut inbox, &mut ka, &mut qa, &mut pes, &mut commands);
    }
    if inbox.has(Purpose::Chunk) {
        ipcq::deliver_chunks(&mut inbox, &mut dma, &mut qa);
    }
    if inbox.has(Purpose::SlotData) {
        ipcq::deliver_slot_data(&mut inbox, &mut qa);
    }
}

/// The purposes the delivery stage handles (credits belong to `credit_return`).
const DELIVERED: [Purpose; 7] = [
    Purpose::Traffic,
    Purpose::Install,
    Purpose::Launch,
    Purpose::LoadData,
    Purpose::StoreData,
    Purpose::Chunk,
    Purpose::SlotData,
];

fn delivery_work(inbox: Res<Inbox>, t: Res<TrafficState>) -> bool {
    DELIVERED.iter().any(|&p| inbox.has(p)) || t.needs_start()
}

/// What a finished run reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// Tick of the last event.
    pub end_tick: Tick,
    /// Earliest start of any launched PE's program (0 if none).
    pub kernel_start: Tick,
    /// Latest completion tick of any launched PE (0 if none).
    pub kernel_end: Tick,
    /// Schedule runs (visited ticks plus same-tick re-runs).
    pub steps: u64,
    pub messages: u64,
    pub hops: u64,
    pub peak_in_flight: u64,
}

/// Why a run stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// A model error: bad route, double install, bad op operands, ...
    Failed(String),
    /// Nothing was due but some PE had not finished; the report says why.
    Deadlock(String),
    /// The watchdog: no op issued and no message delivered for
    /// `RunLimits::stall_steps` visited ticks, or the clock passed
    /// `RunLimits::max_ticks`; the report says what each PE waits for.
    Stalled(String),
    /// The process's heap passed the ceiling of [`crate::heap`].
    OutOfMemory(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Failed(e)
            | RunError::Deadlock(e)
            | RunError::Stalled(e)
            | RunError::OutOfMemory(e) => f.write_str(e),
        }
    }
}

/// Bounds of one [`Engine::run`]: the watchdog that ends a livelock.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Stop when the clock passes this tick.
    pub max_ticks: Option<Tick>,
    /// Stop after this many visited ticks in a row in which no packet moved,
    /// no message arrived and no op issued.
    pub stall_steps: u64,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_ticks: None,
            stall_steps: 1_000_000,
        }
    }
}

impl std::error::Error for RunError {}

/// A simulation world and its tick schedule.
pub struct Engine {
    pub world: World,
    schedule: Schedule,
    /// The network's [`network::routing_ahead`] and
    /// [`network::flow::flow_routing_ahead`] systems, run by themselves on
    /// ticks where only packets move or only flows change
    /// ([`Engine::route_ahead`]).
    routing: AheadSystem,
    flow_routing: AheadSystem,
    /// Called between schedule runs while a run goes on, if set.
    watch: Option<crate::watch::Watch>,
}

/// A routing stage the engine runs ahead of the schedule.
type AheadSystem = Box<dyn System<In = In<network::AheadLimit>, Out = ()>>;

/// `system`, initialised on `world`.
fn ahead_system<M>(
    world: &mut World,
    system: impl IntoSystem<In<network::AheadLimit>, (), M>,
) -> AheadSystem {
    let mut boxed: AheadSystem = Box::new(IntoSystem::into_system(system));
    boxed.initialize(world);
    boxed
}

impl Engine {
    /// A world over `links`, routing through `routes`. Memories start ideal and
    /// empty: [`Engine::set_memories`] sizes them once the hardware is spawned.
    pub fn new(links: LinkTable, routes: Box<dyn RouteSource>) -> Self {
        let mut world = World::new();
        world.insert_resource(links);
        world.insert_resource(Routes::new(routes));
        world.init_resource::<Clock>();
        world.init_resource::<RunErrors>();
        world.init_resource::<Hardware>();
        world.init_resource::<RunStats>();
        world.init_resource::<RunLimits>();
        world.init_resource::<Calendars>();
        let mut schedule = tick_schedule();
        for plugin in PLUGINS {
            plugin.build(&mut world, &mut schedule);
        }
        let routing = ahead_system(&mut world, network::routing_ahead);
        let flow_routing = ahead_system(&mut world, network::flow::flow_routing_ahead);
        Self {
            world,
            schedule,
            routing,
            flow_routing,
            watch: None,
        }
    }

    /// Has the run loop call `watch`'s report while runs go on (replacing
    /// any earlier one); None stops it. Results do not depend on it.
    pub fn set_watch(&mut self, watch: Option<crate::watch::Watch>) {
        self.watch = watch;
    }

    /// Chooses how messages cross the network (packet unless set). It
    /// applies to messages injected from then on, so set it before the
    /// first run: messages already in flight keep their model, and packets
    /// and flows never contend with each other.
    pub fn set_network_model(&mut self, model: network::NetworkModel) {
        self.world.insert_resource(model);
    }

    /// How far apart the links of one leg of a flow may see a message's
    /// first bytes, in ticks ([`network::flow::LegSpan`]; flow mode only).
    /// Set it before the first run, as the network model.
    pub fn set_flow_leg_span(&mut self, span: network::flow::LegSpan) {
        self.world.insert_resource(span);
    }

    /// Whether periodic stretches of a run are skipped (on unless set;
    /// exact either way: see [`crate::steady`]).
    pub fn set_fast_forward(&mut self, on: bool) {
        self.world.resource_mut::<crate::steady::Steady>().enabled = on;
    }

    /// How messages cross the network.
    pub fn network_model(&self) -> network::NetworkModel {
        *self.world.resource::<network::NetworkModel>()
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

    /// When PE `pe`'s latest launch started and finished, once it has.
    pub fn pe_span(&self, pe: crate::ids::PeIdx) -> Option<(Tick, Tick)> {
        let entity = self
            .world
            .resource::<crate::hierarchy::Hardware>()
            .pe_entity(pe);
        let ex = self.world.get::<PeExec>(entity)?;
        match ex.state {
            PeState::Done(end) => Some((ex.started, end)),
            PeState::Running => None,
        }
    }

    pub fn now(&self) -> Tick {
        self.world.resource::<Clock>().now
    }

    /// Sends the neighbour tables of communicator `scope` from the host
    /// (global PE index, entries), leaving at `at` or now if later; they
    /// apply when their messages arrive during a later run.
    pub fn install(&mut self, scope: ipcq::Scope, tables: Tables, at: Tick) {
        exec::send_installs(&mut self.world, scope, tables, at);
    }

    /// Sends launch messages from the host, leaving at `at` or now if later;
    /// each PE starts its program when its message arrives plus the launch
    /// overhead, or when its running kernel finishes. The launch's record
    /// ([`exec::Launches`]) says when it is done.
    pub fn launch(
        &mut self,
        scope: ipcq::Scope,
        programs: Vec<(crate::ids::PeIdx, Launch)>,
        at: Tick,
    ) -> exec::LaunchId {
        exec::send_launches(&mut self.world, scope, programs, at)
    }

    /// Removes a launch's record once the host has read it.
    pub fn take_launch(&mut self, id: exec::LaunchId) -> Option<exec::LaunchRecord> {
        self.world.resource_mut::<exec::Launches>().take(id)
    }

    /// Runs one visited tick (one schedule run), after running ahead over
    /// the ticks before it where only packets move or only flows change;
    /// returns true when nothing is due.
    pub fn step(&mut self) -> bool {
        self.world.resource_mut::<Clock>().idle = false;
        self.route_ahead();
        self.schedule.run(&mut self.world);
        self.world.resource::<Clock>().idle
    }

    /// Ticks where the network alone has work (no message is waiting to be
    /// sent or delivered, and no other module's calendar is due before the
    /// network's next event) cost a whole schedule run for one system's
    /// work. Here the packet engine's [`network::routing_ahead`], or in flow
    /// mode [`network::flow::flow_routing_ahead`], routes such ticks by
    /// itself, tick after tick in one system run, doing exactly what the
    /// schedule would: the other stages would find nothing to do, and
    /// `advance` would pick the network's next tick. Packets and flows are
    /// each other's horizon, as other modules are. It stops at a tick whose
    /// routing delivers something, before the next tick another module is
    /// due, or past `--max-ticks`; that tick then runs the whole schedule,
    /// whose routing stages know they already ran ([`network::RoutedAhead`]).
    fn route_ahead(&mut self) {
        let w = &mut self.world;
        let now = w.resource::<Clock>().now;
        let quiet = w.resource::<RunErrors>().first.is_none()
            && w.resource::<Inbox>().is_empty()
            && w.resource::<network::Outbox>().is_empty();
        if !quiet {
            return;
        }
        let packets = w.resource::<NetCalendar>().0.next_due();
        let flows = w.resource::<network::flow::FlowCalendar>().0.next_due();
        let (system, other_network) = if packets == Some(now) {
            (&mut self.routing, flows)
        } else if flows == Some(now) {
            (&mut self.flow_routing, packets)
        } else {
            return;
        };
        let others = w.resource::<Calendars>().next_besides_network(w, now);
        let horizon = others.into_iter().chain(other_network).min();
        if horizon.is_some_and(|h| h <= now) {
            return;
        }
        let limit = network::AheadLimit {
            horizon,
            max_ticks: w.resource::<RunLimits>().max_ticks,
        };
        // The boxed systems always run: their parameters are plain
        // resources and queries, never invalid.
        let _ = system.run(limit, w);
    }

    /// Runs ticks until nothing is due, or the watchdog ([`RunLimits`]) ends it.
    pub fn run(&mut self) -> Result<RunSummary, RunError> {
        self.run_until(|_| false)?;
        self.finish()
    }

    /// Runs ticks until `done` holds (checked after each schedule run, not
    /// after the ticks routed ahead before it, which deliver nothing) or
    /// nothing is due; Ok(true) if `done` held. Errors of the run and the watchdog end it.
    /// When `done` comes to hold, the clock is left at the tick whose run made
    /// it hold ([`Engine::rewind`]): what the host sends next leaves then.
    pub fn run_until(&mut self, done: impl Fn(&World) -> bool) -> Result<bool, RunError> {
        let outcome = self.run_ticks(done);
        self.world.resource_mut::<crate::steady::Steady>().forget();
        outcome
    }

    /// [`Engine::run_until`]'s loop.
    fn run_ticks(&mut self, done: impl Fn(&World) -> bool) -> Result<bool, RunError> {
        let limits = *self.world.resource::<RunLimits>();
        // Progress: a packet moved, a message arrived or an op issued.
        let progress = |w: &World| {
            let net = w.resource::<NetCounters>();
            net.hops + net.delivered + w.resource::<exec::OpsIssued>().0
        };
        let (mut last, mut still) = (progress(&self.world), 0u64);
        if done(&self.world) {
            return Ok(true);
        }
        loop {
            // An error ends the tick idle (advance stops the clock), so only
            // an idle step can carry one.
            let idle = self.step();
            crate::steady::observe(&mut self.world);
            if let Some(w) = &mut self.watch {
                w.poll(&self.world);
            }
            if idle && let Some(e) = self.world.resource_mut::<RunErrors>().first.take() {
                return Err(RunError::Failed(e));
            }
            if done(&self.world) {
                self.rewind();
                return Ok(true);
            }
            if idle {
                return Ok(false);
            }
            let now = self.now();
            if let Some((used, ceiling)) = crate::heap::over_ceiling() {
                return Err(RunError::OutOfMemory(format!(
                    "run stopped at tick {now}: the simulator's heap holds {}, over the memory budget of {} (--max-memory; default 80% of this machine's memory). Its estimate fitted the budget but does not see all of a run's memory (docs/model.md §Cost estimate); allowed: a smaller run (fewer SIPs or cubes, a smaller -e/--max-bytes, larger slot_size), --network packet where flow mode holds many messages at once, or a larger --max-memory where the machine has it",
                    crate::heap::size(used),
                    crate::heap::size(ceiling)
                )));
            }
            if limits.max_ticks.is_some_and(|m| now > m) {
                return Err(self.stalled(format!(
                    "the clock passed --max-ticks {} (at tick {now})",
                    limits.max_ticks.unwrap_or_default()
                )));
            }
            let p = progress(&self.world);
            still = if p == last { still + 1 } else { 0 };
            last = p;
            if still >= limits.stall_steps {
                return Err(self.stalled(format!(
                    "nothing moved (no packet hop, delivery or op issued) for {still} visited ticks (at tick {now})"
                )));
            }
        }
    }

    /// Moves the clock back from the next due tick, where `advance` left it,
    /// to the tick the schedule last ran at. Nothing is due in between
    /// (`advance` chose the earliest due tick), so no event is skipped or run
    /// twice; the next step runs that tick again, as after an idle stop, for
    /// what the host sent meanwhile, which queues behind the tick's earlier
    /// work (links and ports are reserved in tick order).
    fn rewind(&mut self) {
        let mut clock = self.world.resource_mut::<Clock>();
        clock.now = clock.last_run;
    }

    /// The watchdog's error: why, and what every unfinished PE waits for.
    fn stalled(&mut self, why: String) -> RunError {
        let report = exec::deadlock_report(&mut self.world)
            .unwrap_or_else(|| "no launched PE is waiting".into());
        RunError::Stalled(format!("run stopped: {why}\n{report}"))
    }

    /// The outcome once [`Engine::step`] reported idle.
    pub fn finish(&mut self) -> Result<RunSummary, RunError> {
        if let Some(e) = self.world.resource_mut::<RunErrors>().first.take() {
            return Err(RunError::Failed(e));
        }
        if let Some(report) = exec::deadlock_report(&mut self.world) {
            return Err(RunError::Deadlock(report));
        }
        let mut q = self.world.query::<&PeExec>();
        let (mut kernel_start, mut kernel_end) = (Tick::MAX, 0);
        for ex in q.iter(&self.world) {
            if let PeState::Done(t) = ex.state {
                kernel_start = kernel_start.min(ex.started);
                kernel_end = kernel_end.max(t);
            }
        }
        let kernel_start = if kernel_start == Tick::MAX {
            0
        } else {
            kernel_start
        };
        let clock = self.world.resource::<Clock>();
        let net = self.world.resource::<NetCounters>();
        let run = self.world.resource::<RunStats>();
        Ok(RunSummary {
            end_tick: clock.now,
            kernel_start,
            kernel_end,
            steps: clock.steps,
            messages: net.delivered,
            hops: net.hops,
            peak_in_flight: run.peak_in_flight,
        })
    }
}
