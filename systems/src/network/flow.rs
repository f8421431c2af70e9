//! The flow-level network: a message is one flow whose bytes drain over its
//! whole route at once, instead of packets crossing links one by one
//! (docs/model.md §Flow-level network).
//!
//! A link serves flows by turn (the tick their latency phase ended, then
//! their message's id), first come, first served: a flow takes the least
//! of its bottleneck and what earlier turns left on its links, as the
//! packet engine reserves a link for packets in the order they reach it,
//! those of one tick in message-id order. Rates change only
//! when a flow starts or drains, and only those of flows connected to it
//! through shared links, of its turn or later, are recomputed (selective
//! update: a walk from the links whose flow set changed, over their flows'
//! routes; earlier flows it meets are pinned). A link that its flows could
//! not fill even at their bottlenecks never lowers a rate, so the walk
//! crosses only binding links, and each flow's bottleneck is its own limit.
//! The next message of a route takes a drained one's place and rate without
//! a pass when no other flow's turn falls between theirs: same links, same
//! bottleneck, same order of turns, so the same rates.
//!
//! Timing: a message's uncontended time on its route `alone`
//! ([`uncontended_ticks`], the packet engine's, exact) is an overhead
//! (`alone` − bytes / bottleneck bandwidth) plus the drain. A flow spends the
//! whole ticks of its overhead first (its latency phase, as in SimGrid: a
//! flow does not take bandwidth before its first bytes could reach a link),
//! then drains at its rates and arrives the overhead's fraction of a
//! tick after the drain ends, never before `alone`. A flow never slowed below
//! its bottleneck arrives exactly `alone` after it started. Link statistics
//! and hop counters are per-message sums, added once at injection, identical
//! to packet mode.
//!
//! A leg takes two calendar events (join, drained) plus one drained event
//! per rate change, and a message one more (arrival); a rate change bumps
//! the flow's generation, so drained events of an older generation, or of
//! an earlier message of a reused entity, are stale and ignored.

use super::{
    AheadLimit, Inbox, LinkId, LinkTable, Message, MessagePool, NetCounters, RoutedAhead, Routes,
    Segment,
};
use crate::ids::MsgId;
use crate::steady::Sig;
use crate::time::{Calendar, Clock, Tick};
use bevy_ecs::prelude::*;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::collections::VecDeque;

/// How messages cross the network; one choice per run (the spec's
/// `network.model`, default packet).
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkModel {
    /// Store-and-forward packets, one event per packet per link: exact.
    #[default]
    Packet,
    /// One flow per leg of a message, first come first served by turn:
    /// events per message and leg.
    Flow,
}

impl NetworkModel {
    /// The spec's spelling, as results record it.
    pub fn name(self) -> &'static str {
        match self {
            NetworkModel::Packet => "packet",
            NetworkModel::Flow => "flow",
        }
    }
}

/// The flow state of a message entity in flow mode.
#[derive(Component, Debug, Clone, Copy, PartialEq)]
pub struct Flow {
    /// The packet engine's uncontended time of the message on its route.
    pub alone: Tick,
    /// Whole ticks of the overhead (`alone` − bytes / `bottleneck`) spent
    /// before the drain, and the fraction of a tick left after it.
    pub latency: Tick,
    pub tail: f64,
    /// Bandwidth of the slowest link from the route's start to the leg's
    /// end, bytes per tick: the most the leg drains at.
    pub bottleneck: f64,
    /// Tick at which the message started (its latency phase).
    pub start: Tick,
    /// Its place in the order its links serve flows, set when its latency
    /// phase ends (it then drains, or queues behind its route).
    pub turn: Turn,
    /// Bytes left to drain as of `updated_at`.
    pub left: f64,
    /// Current rate, bytes per tick (0 before the first rate pass, and
    /// while earlier turns fill one of its links).
    pub rate: f64,
    pub updated_at: Tick,
    /// Bumped at every rate change: drained events of older ones are stale.
    pub generation: u32,
    /// Whether the flow ever drained slower than its bottleneck.
    pub shared: bool,
    /// Whether it waited behind an earlier message of its route (then its
    /// drain, not its start, sets its arrival).
    pub queued: bool,
    /// The leg: which of the route's segments it drains over
    /// (`first..first + len`), its place on the route, and ticks from the
    /// message's start until its last byte has left the leg uncontended.
    pub segs: (u16, u16),
    pub leg: u8,
    pub leg_end: Tick,
    /// On an earlier leg: the message's last leg, which arrives.
    pub last_leg: Option<Entity>,
    /// On the last leg: earlier legs still draining, the earliest arrival
    /// they allow, and whether it drained and waits for them.
    pub pending: u8,
    pub not_before: Tick,
    pub awaiting: bool,
}

impl Flow {
    /// The legs of message `msg` started at `start`, the last one last.
    pub(super) fn of(
        links: &LinkTable,
        routes: &Routes,
        (msg, start): (&Message, Tick),
        span: LegSpan,
    ) -> SmallVec<[Self; 2]> {
        let (segs, _, _) = routes.segments(msg.route);
        if segs.is_empty() || msg.bytes == 0 {
            let alone = uncontended_ticks(links, segs, msg.packet_bytes, msg.bytes);
            let whole = (0, segs.len() as u16);
            let bottleneck = slowest(links, segs, f64::INFINITY);
            let mut out = SmallVec::new();
            let f = Self::new(bottleneck, whole, (alone, alone), msg.bytes);
            out.push(Flow { start, ..f });
            return out;
        }
        let (ends, alone) = leg_ends(links, segs, (msg.packet_bytes, msg.bytes), span);
        let (mut first, mut bottleneck) = (0, f64::INFINITY);
        let mut out: SmallVec<[Self; 2]> = SmallVec::new();
        for (k, &(last, end)) in ends.iter().enumerate() {
            let range = (first as u16, (last + 1 - first) as u16);
            // The slowest link from the route's start to the leg's end: the
            // message's bytes cannot reach the leg faster.
            bottleneck = slowest(links, &segs[first..=last], bottleneck);
            let f = Self::new(bottleneck, range, (alone, end), msg.bytes);
            out.push(Flow {
                start,
                leg: k as u8,
                ..f
            });
            first = last + 1;
        }
        let legs = out.len();
        out[legs - 1].pending = (legs - 1) as u8;
        out
    }

    /// A leg over segments `range` of its route of a message of `bytes`
    /// taking `alone` ticks, whose last byte leaves the leg `end` ticks after
    /// its start and which drains at most at `bottleneck` (infinite on an
    /// empty route), started at tick 0.
    fn new(bottleneck: f64, range: (u16, u16), (alone, end): (Tick, Tick), bytes: u64) -> Self {
        let overhead = if bottleneck.is_infinite() {
            0.0
        } else {
            (end as f64 - bytes as f64 / bottleneck).max(0.0)
        };
        Flow {
            alone,
            latency: overhead.floor() as Tick,
            tail: overhead.fract(),
            bottleneck,
            start: 0,
            turn: Turn::default(),
            left: bytes as f64,
            rate: 0.0,
            updated_at: 0,
            generation: 0,
            shared: false,
            queued: false,
            segs: range,
            leg: 0,
            leg_end: end,
            last_leg: None,
            pending: 0,
            not_before: 0,
            awaiting: false,
        }
    }

    /// Whether the leg drains: it crosses links and its message has bytes
    /// (else the message only starts, then arrives).
    fn drains(&self, msg: &Message) -> bool {
        self.segs.1 > 0 && msg.bytes > 0
    }

    /// The route segments the leg drains over.
    fn leg_segs<'a>(&self, routes: &'a Routes, msg: &Message) -> &'a [Segment] {
        let (first, n) = (self.segs.0 as usize, self.segs.1 as usize);
        &routes.segments(msg.route).0[first..first + n]
    }

    /// Drains at the current rate up to `now`.
    fn settle(&mut self, now: Tick) {
        self.left = (self.left - self.rate * (now - self.updated_at) as f64).max(0.0);
        self.updated_at = now;
    }

    /// Arrival tick of a message whose last leg's drain event came (its
    /// rate unchanged since `updated_at`): `alone` after its start when
    /// never slowed nor queued, else [`Flow::arrival_after`] its drain, never
    /// before `alone` nor before its earlier legs allow. A queued flow
    /// continues its route's stream: the route's pipeline was filled by the
    /// message before it, so only the rest of the route follows its drain.
    fn arrival(&self) -> Tick {
        let alone = (self.start + self.alone).max(self.not_before);
        if !self.shared && !self.queued {
            return alone;
        }
        alone.max(self.arrival_after())
    }

    /// The earliest arrival a leg allows once its drain event came: the
    /// drain's end plus the rest of the route's uncontended time after the
    /// leg's last byte left it (the fraction of a tick the latency phase
    /// left over, then what follows the leg).
    fn arrival_after(&self) -> Tick {
        let rest = self.left / self.rate + self.tail + (self.alone - self.leg_end) as f64;
        self.updated_at + ceil_ticks(rest)
    }
}

/// A flow's place in the order its links serve flows: the tick its latency
/// phase ended, then its message's id, as the packet engine serves packets
/// that reach a link in one tick in message-id order. The legs of one
/// message may share a turn but never a link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Turn {
    pub tick: Tick,
    pub msg: MsgId,
}

impl Turn {
    /// For the fast-forward: `d` ticks and `msgs` message ids later.
    pub(crate) fn shift(&mut self, d: Tick, msgs: u64) {
        (self.tick, self.msg) = (self.tick + d, self.msg.later(msgs));
    }

    /// For the fast-forward: the turn relative to now and the next id (a
    /// turn not yet taken, at tick 0, as one word).
    pub(crate) fn steady_words(&self, sig: &mut Sig) {
        sig.at_if_set(self.tick);
        if self.tick != 0 {
            sig.msg(self.msg);
        }
    }
}

/// The least of `so_far` and the bandwidths of `segs`' links, bytes per tick.
fn slowest(links: &LinkTable, segs: &[Segment], so_far: f64) -> f64 {
    segs.iter()
        .map(|s| link_rate(links, s.link))
        .fold(so_far, f64::min)
}

/// Bytes per tick of link `l`.
fn link_rate(links: &LinkTable, l: LinkId) -> f64 {
    let c = links.class(l);
    c.rate_num as f64 / c.rate_den as f64
}

/// Whole ticks covering `x` ticks, forgiving float noise far below a tick.
fn ceil_ticks(x: f64) -> Tick {
    let tolerance = 1e-9 * x.abs().max(1.0);
    (x - tolerance).ceil().max(0.0) as Tick
}

/// How far apart, in ticks, the moments a message's first packet reaches
/// two links of one leg may be (the spec's `network.leg_span_ticks`): past
/// it a link starts a new leg, so every link sees a message's bytes within
/// this many ticks of when its packets would reach it. 0 makes every link a
/// leg; `Tick::MAX` one leg a message. Fewer legs are cheaper.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegSpan(pub Tick);

impl LegSpan {
    /// The default: about three on-chip hops, or one die-to-die or
    /// chip-to-chip hop (docs/model.md §Flow-level network measures the
    /// alternatives).
    pub const DEFAULT: LegSpan = LegSpan(20);
}

impl Default for LegSpan {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A route has at most this many legs: the rest of a longer one is its last.
const MAX_LEGS: usize = u8::MAX as usize;

/// Where a route's legs end — (index of a leg's last segment, ticks from the
/// message's start until its last byte has left that segment, uncontended)
/// — and the message's uncontended time ([`uncontended_ticks`]). A leg ends
/// where the first packet's time from the leg's first link — serialisation
/// and latency of each link crossed — reaches `span`, and at the route's
/// end. The cut depends on the route alone, so every message of
/// a route has the same legs.
fn leg_ends(
    links: &LinkTable,
    segs: &[Segment],
    (packet_bytes, bytes): (u64, u64),
    span: LegSpan,
) -> (SmallVec<[(usize, Tick); 4]>, Tick) {
    let mut out: SmallVec<[(usize, Tick); 4]> = SmallVec::new();
    let mut since = 0;
    let alone = crossing_times(links, segs, packet_bytes, bytes, |j, last_left| {
        since += segs[j].ser_full + segs[j].latency;
        let cut = since >= span.0 && out.len() + 1 < MAX_LEGS;
        if cut || j + 1 == segs.len() {
            out.push((j, last_left));
            since = 0;
        }
    });
    (out, alone)
}

/// The packet engine's time for a message of `bytes`, cut into packets of
/// `packet_bytes`, to cross `segs` alone, in O(segments): full packets leave
/// link j at D(k,j) = D(1,j) + (k−1)·max_{i≤j} ser_i(P), the last one at
/// D(n,j) = max(D(n−1,j), D(n,j−1) + L_{j−1}) + ser_j(last); the message has
/// arrived L_m after the last packet leaves the last link. Ideal links take
/// no time, so an all-ideal route takes 0.
pub fn uncontended_ticks(
    links: &LinkTable,
    segs: &[Segment],
    packet_bytes: u64,
    bytes: u64,
) -> Tick {
    crossing_times(links, segs, packet_bytes, bytes, |_, _| ())
}

/// Walks the recurrence of [`uncontended_ticks`], telling `left` for each
/// segment `j` when the last packet leaves it (D(n, j), from the start),
/// and returns the arrival.
fn crossing_times(
    links: &LinkTable,
    segs: &[Segment],
    packet_bytes: u64,
    bytes: u64,
    mut left: impl FnMut(usize, Tick),
) -> Tick {
    let packets = bytes.div_ceil(packet_bytes).max(1);
    let last = bytes - packet_bytes * (packets - 1);
    // Relative to the start: when the first packet reaches link j, when the
    // last full packet (D(n−1,j)) and the last packet have left it.
    let (mut first_at, mut last_at) = (0, 0);
    let mut slowest_full = 0;
    for (j, seg) in segs.iter().enumerate() {
        let ser_last = links.class(seg.link).ser_ticks(last);
        let full_left = if packets > 1 {
            slowest_full = slowest_full.max(seg.ser_full);
            let first_left = first_at + seg.ser_full;
            first_at = first_left + seg.latency;
            first_left + (packets - 2) * slowest_full
        } else {
            0
        };
        let last_left = full_left.max(last_at) + ser_last;
        last_at = last_left + seg.latency;
        left(j, last_left);
    }
    last_at
}

/// What a flow calendar event asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FlowStep {
    /// A message that does not drain (an empty route, no bytes) is at its
    /// source.
    Start,
    /// The latency phase is over: the bytes start to drain.
    Join,
    /// The bytes have drained if the flow is still of this generation.
    Drained(u32),
    /// The message has arrived.
    Arrive,
}

/// One event of a flow; same-tick events run in message id order.
#[derive(Debug, Clone, Copy)]
pub struct FlowEvent {
    pub msg: MsgId,
    pub entity: Entity,
    pub step: FlowStep,
    /// The message's leg the event is for.
    pub leg: u8,
}

/// Flow events by tick.
#[derive(Resource, Default, Debug)]
pub struct FlowCalendar(pub Calendar<FlowEvent>);

/// What the flow stage keeps of one link: one entry per link, aligned to
/// a cache line, so a rate pass touches one line per link it reaches.
#[derive(Debug, Default, Clone)]
#[repr(align(64))]
struct LinkFlows {
    /// The flows draining over the link with their bottleneck bandwidth
    /// and turn, and the sum of the bottlenecks. Most links carry one flow
    /// at a time, kept in place: no heap block to fetch when a flow joins,
    /// leaves or is rated.
    flows: SmallVec<[LinkFlow; 1]>,
    demand: f64,
    /// Whether its flows, each at its bottleneck, would exceed its
    /// bandwidth. Only such a link can hold a flow below its bottleneck, so
    /// only such links connect flows in a rate pass.
    binding: bool,
    /// The stamp of the last rate pass that reached it, and its spare
    /// bandwidth in that pass.
    visit: u32,
    spare: f64,
}

/// A flow on a link, as rate passes read it without looking it up.
#[derive(Debug, Clone, Copy)]
struct LinkFlow {
    entity: Entity,
    bottleneck: f64,
    turn: Turn,
}

/// A flow as a rate pass reads it: its entity is looked up once, when the
/// pass reaches it, and once more to give it its new rate.
#[derive(Debug, Clone, Copy)]
struct Reached {
    entity: Entity,
    turn: Turn,
    /// Older than every change of the pass: its rate stands, and only
    /// lessens the spare of the pass's links.
    pinned: bool,
    /// Its binding links: `reached_binding[binding.0 .. binding.0 + binding.1]`,
    /// in route order.
    binding: (u32, u32),
    bottleneck: f64,
    /// Its rate before the pass, and the one the pass gives it (NaN until
    /// fixed; a pinned flow's stays its rate before).
    before: f64,
    rate: f64,
}

impl Reached {
    /// Where its binding links are in `FlowLinks::reached_binding`.
    fn binding_links(&self) -> std::ops::Range<usize> {
        let (first, n) = (self.binding.0 as usize, self.binding.1 as usize);
        first..first + n
    }
}

/// The messages of one route (one source and destination) in order: the
/// one draining, and those behind it. A route's messages cross the same
/// links first come first served, so a later one drains after an earlier
/// one, not beside it (flows of different routes share fairly).
#[derive(Debug, Default, Clone)]
struct RouteQueue {
    sending: bool,
    waiting: VecDeque<Entity>,
}

/// Which flows cross each link now, and the scratch of the rate pass.
#[derive(Resource, Default, Debug)]
pub struct FlowLinks {
    /// Per link (sized on first use).
    links: Vec<LinkFlows>,
    /// Per route (grown as routes are cached), per leg (grown as legs
    /// start): the streams.
    routes: Vec<SmallVec<[RouteQueue; 1]>>,
    /// Flows that joined since the last rate pass, and links whose flows
    /// changed while binding (before or after the change) or whose order of
    /// turns changed.
    joined: Vec<Entity>,
    dirty: Vec<LinkId>,
    /// The earliest turn of a flow that joined or left since the last pass:
    /// flows of earlier turns keep their rates.
    changed_turn: Option<Turn>,
    pass: u32,
    /// The pass's flows without a rate, ordered by turn.
    by_turn: Vec<(Turn, u32)>,
    /// The pass's connected links and flows.
    reached_links: Vec<LinkId>,
    reached_flows: Vec<Reached>,
    /// The reached flows' binding links, each flow's in one run.
    reached_binding: Vec<LinkId>,
    /// Per message entity index: the stamp of the last pass that reached
    /// its flow and the flow's place in `reached_flows`, so a pass looks
    /// each flow's entity up once however many of its links it walks.
    flow_slots: Vec<(u32, u32)>,
    /// Flows the rate passes reached, summed over the run: the flow model's
    /// own work, which grows with the flows draining together (a period the
    /// fast-forward skips adds none).
    pub reached: u64,
    /// Legs started beyond each message's first (a flow each), summed over
    /// the run (a skipped period adds none).
    pub extra_legs: u64,
}

impl FlowLinks {
    /// The stream of leg `leg` of route `route` (`cached` routes known).
    fn route_queue(&mut self, (route, leg): (usize, u8), cached: usize) -> &mut RouteQueue {
        if self.routes.len() <= route {
            self.routes.resize(cached.max(route + 1), SmallVec::new());
        }
        let legs = &mut self.routes[route];
        let leg = usize::from(leg);
        if legs.len() <= leg {
            legs.resize(leg + 1, RouteQueue::default());
        }
        &mut legs[leg]
    }

    fn size_for(&mut self, links: usize) {
        if self.links.len() < links {
            self.links.resize(links, LinkFlows::default());
        }
    }

    fn join(&mut self, links: &LinkTable, flow: LinkFlow, segs: &[Segment]) {
        self.joined.push(flow.entity);
        self.changed(flow.turn);
        for s in segs {
            let link = &mut self.links[s.link.index()];
            link.flows.push(flow);
            link.demand += flow.bottleneck;
            self.update_binding(links, s.link);
        }
    }

    fn leave(&mut self, links: &LinkTable, (e, turn): (Entity, Turn), segs: &[Segment]) {
        self.changed(turn);
        for s in segs {
            let link = &mut self.links[s.link.index()];
            if let Some(i) = link.flows.iter().position(|f| f.entity == e) {
                let bottleneck = link.flows.remove(i).bottleneck;
                // An emptied link starts again from an exact zero.
                link.demand = if link.flows.is_empty() {
                    0.0
                } else {
                    link.demand - bottleneck
                };
            }
            self.update_binding(links, s.link);
        }
    }

    /// Re-derives whether link `l` binds after a change of its flows; a
    /// link that binds before or after the change is dirty.
    fn update_binding(&mut self, links: &LinkTable, l: LinkId) {
        let link = &mut self.links[l.index()];
        let binds = link.demand > link_rate(links, l) * (1.0 + 1e-9);
        if binds || link.binding {
            self.dirty.push(l);
        }
        link.binding = binds;
    }

    /// A flow of turn `turn` joined or left: flows of that turn and later
    /// ones may change rate.
    fn changed(&mut self, turn: Turn) {
        self.changed_turn = Some(self.changed_turn.map_or(turn, |t| t.min(turn)));
    }
}

impl FlowLinks {
    /// Whether the last rate pass took in every change (true between ticks).
    pub(crate) fn settled(&self) -> bool {
        self.joined.is_empty() && self.dirty.is_empty()
    }

    /// For the fast-forward: every flow on a link `d` ticks and `msgs`
    /// message ids later, as the turns of the flows themselves move.
    pub(crate) fn steady_shift(&mut self, d: Tick, msgs: u64) {
        let flows = self.links.iter_mut().flat_map(|l| l.flows.iter_mut());
        flows.for_each(|f| f.turn.shift(d, msgs));
    }

    /// For the fast-forward: the flows on each link and route, named by
    /// their messages' ids.
    pub(crate) fn steady_words(&self, id_of: &impl Fn(Entity) -> MsgId, sig: &mut Sig) {
        for l in &self.links {
            sig.word(l.flows.len() as u64);
            for f in &l.flows {
                sig.msg(id_of(f.entity));
                sig.float(f.bottleneck);
                f.turn.steady_words(sig);
            }
            sig.float(l.demand);
            sig.word(u64::from(l.binding));
        }
        let streams = self.routes.iter().enumerate().flat_map(|(route, legs)| {
            legs.iter()
                .enumerate()
                .map(move |(leg, q)| (route as u64 | (leg as u64) << 48, q))
        });
        for (key, r) in streams {
            if !r.sending && r.waiting.is_empty() {
                continue;
            }
            sig.word(key);
            sig.word(u64::from(r.sending));
            sig.word(r.waiting.len() as u64);
            r.waiting.iter().for_each(|&e| sig.msg(id_of(e)));
        }
    }
}

/// Queues leg `entity` of message `msg`: its join once its latency phase
/// is over, or its start on an empty route or for an empty message, which
/// arrive without draining.
pub(super) fn schedule_leg(cal: &mut FlowCalendar, msg: &Message, (entity, flow): (Entity, &Flow)) {
    let (step, at) = if flow.drains(msg) {
        (FlowStep::Join, flow.start + flow.latency)
    } else {
        (FlowStep::Start, flow.start)
    };
    let (msg, leg) = (msg.id, flow.leg);
    cal.0.push(
        at,
        FlowEvent {
            msg,
            entity,
            step,
            leg,
        },
    );
}

/// What the flow stage touches.
#[derive(bevy_ecs::system::SystemParam)]
pub struct FlowAccess<'w, 's> {
    cal: ResMut<'w, FlowCalendar>,
    net: ResMut<'w, FlowLinks>,
    links: Res<'w, LinkTable>,
    routes: Res<'w, Routes>,
    flows: Query<'w, 's, (&'static mut Message, &'static mut Flow)>,
    inbox: ResMut<'w, Inbox>,
    pool: ResMut<'w, MessagePool>,
    counters: ResMut<'w, NetCounters>,
    trace: ResMut<'w, crate::trace::Trace>,
}

/// The flow-mode routing stage: flows due now start, drain or arrive, then
/// the rates of the flows connected to any change are recomputed.
pub fn flow_routing(clock: Res<Clock>, mut net: FlowAccess) {
    flow_tick(clock.now, &mut net);
}

/// [`flow_routing`] run by the engine over ticks where only flows change,
/// tick after tick in one system run, as [`super::routing_ahead`] does for
/// packets ([`super::run_ahead`]): most flow events (a leg joins or drains,
/// a rate changes) deliver nothing, and a whole schedule run for each would
/// cost more than the event. The flow stage sends nothing and reports no
/// error.
pub fn flow_routing_ahead(
    In(limit): In<AheadLimit>,
    mut clock: ResMut<Clock>,
    mut ahead: ResMut<RoutedAhead>,
    mut net: FlowAccess,
) {
    super::run_ahead(limit, &mut clock, &mut ahead, &mut net);
}

impl super::RouteAhead for FlowAccess<'_, '_> {
    fn route(&mut self, now: Tick) {
        flow_tick(now, self);
    }
    fn next_due(&self) -> Option<Tick> {
        self.cal.0.next_due()
    }
    fn delivered(&self) -> bool {
        !self.inbox.is_empty()
    }
}

/// The flows due at `now` start, join, drain or arrive, then the rates of
/// the flows connected to any change are recomputed.
fn flow_tick(now: Tick, net: &mut FlowAccess) {
    let links = net.links.len();
    net.net.size_for(links);
    while let Some(mut due) = net.cal.0.take_due(now) {
        due.sort_unstable_by_key(|e| (e.msg, e.step, e.leg));
        for (i, ev) in due.iter().enumerate() {
            prefetch_ahead(&due, i, net);
            match ev.step {
                FlowStep::Start => begin(now, ev, net),
                FlowStep::Join => join(now, ev.entity, net),
                FlowStep::Drained(g) => drained(now, ev, g, net),
                FlowStep::Arrive => deliver(now, ev.entity, net),
            }
        }
        net.cal.0.recycle(due);
    }
    if !net.net.dirty.is_empty() || !net.net.joined.is_empty() {
        reassign_rates(now, net);
    }
    drop_stale_head(net);
}

/// Asks the caches for what the events after event `i` read: the message
/// and flow 8 events ahead, the links of a leg that joins or drains 4 ahead
/// (through the flow fetched by then). On machines whose flows and links
/// outgrow the caches, each is a miss an event would otherwise wait for.
fn prefetch_ahead(due: &[FlowEvent], i: usize, net: &FlowAccess) {
    if let Some(ev) = due.get(i + 8)
        && let Ok((msg, flow)) = net.flows.get(ev.entity)
    {
        crate::prefetch::prefetch(msg);
        crate::prefetch::prefetch(flow);
    }
    if let Some(ev) = due.get(i + 4)
        && matches!(ev.step, FlowStep::Join | FlowStep::Drained(_))
        && let Ok((msg, flow)) = net.flows.get(ev.entity)
    {
        for s in flow.leg_segs(&net.routes, msg) {
            if let Some(link) = net.net.links.get(s.link.index()) {
                crate::prefetch::prefetch(link);
            }
        }
    }
}

/// Drops the calendar's earliest buckets while they hold only stale drained
/// events, so the clock never stops at a tick where nothing happens (a
/// stale event at the end of a run would also make it end late).
fn drop_stale_head(net: &mut FlowAccess) {
    while let Some((t, bucket)) = net.cal.0.front() {
        let live = bucket.iter().any(|ev| match ev.step {
            FlowStep::Drained(g) => net
                .flows
                .get(ev.entity)
                .is_ok_and(|(msg, flow)| flow.generation == g && msg.id == ev.msg),
            _ => true,
        });
        if live {
            return;
        }
        if let Some(stale) = net.cal.0.take_due(t) {
            net.cal.0.recycle(stale);
        }
    }
}

/// A message that does not drain starts: over an empty (all-ideal)
/// route it arrives now, an empty message after its latencies.
fn begin(now: Tick, ev: &FlowEvent, net: &mut FlowAccess) {
    let Ok((_, flow)) = net.flows.get(ev.entity) else {
        unreachable!("flow event for a message entity that no longer exists");
    };
    if flow.segs.1 == 0 {
        return deliver(now, ev.entity, net);
    }
    let (step, at) = (FlowStep::Arrive, now + flow.alone);
    net.cal.0.push(at, FlowEvent { step, ..*ev });
}

/// Flow `e`'s bytes start to drain over its links now, or wait behind the
/// message of its route that drains now.
fn join(now: Tick, e: Entity, net: &mut FlowAccess) {
    let Ok((msg, mut flow)) = net.flows.get_mut(e) else {
        unreachable!("flow event for a message entity that no longer exists");
    };
    flow.turn = Turn {
        tick: now,
        msg: msg.id,
    };
    net.net.extra_legs += u64::from(flow.leg > 0);
    let cached = net.routes.cached();
    let queue = net.net.route_queue((msg.route.index(), flow.leg), cached);
    if queue.sending {
        queue.waiting.push_back(e);
        flow.queued = true;
        return;
    }
    queue.sending = true;
    drain_now(now, e, net);
}

/// Puts flow `e` on its links: its bytes drain from `now`.
fn drain_now(now: Tick, e: Entity, net: &mut FlowAccess) {
    let Ok((msg, mut flow)) = net.flows.get_mut(e) else {
        unreachable!("a flow to drain exists");
    };
    flow.updated_at = now;
    let segs = flow.leg_segs(&net.routes, &msg);
    let link_flow = LinkFlow {
        entity: e,
        bottleneck: flow.bottleneck,
        turn: flow.turn,
    };
    net.net.join(&net.links, link_flow, segs);
}

/// Flow `from` (of turn `from_turn`) drained and `to`, the next message of
/// its route, drains from now in its place on every link. The two share
/// their links and bottleneck; when every other flow on a binding link
/// comes before both or after both, the rates
/// stand: `to` takes `from`'s rate without a rate pass (one still runs if
/// other flows changed this tick, and then reaches `to` if they are
/// connected to it). Otherwise the links are rated again.
fn hand_over(now: Tick, (from, from_turn): (Entity, Turn), to: Entity, net: &mut FlowAccess) {
    let rate = net.flows.get(from).expect("the drained flow exists").1.rate;
    let Ok((msg, mut flow)) = net.flows.get_mut(to) else {
        unreachable!("a flow waiting on its route exists");
    };
    let fl: &mut FlowLinks = &mut net.net;
    let to_turn = flow.turn;
    let mut same_order = true;
    for s in flow.leg_segs(&net.routes, &msg) {
        let link = &mut fl.links[s.link.index()];
        let mut passed = false;
        for f in link.flows.iter_mut() {
            if f.entity == from {
                (f.entity, f.turn) = (to, to_turn);
            } else {
                passed |= from_turn.cmp(&f.turn) != to_turn.cmp(&f.turn);
            }
        }
        if link.binding && passed {
            same_order = false;
            fl.dirty.push(s.link);
        }
    }
    flow.updated_at = now;
    if same_order {
        set_rate(now, (msg.id, to), &mut flow, rate, &mut net.cal);
    } else {
        fl.joined.push(to);
        fl.changed(from_turn);
    }
}

/// Gives flow `e` (of message `id`, drained up to `now`) the rate `rate`
/// and schedules its drained event, making the earlier one stale; a flow
/// at rate 0 waits for a rate pass without one.
fn set_rate(
    now: Tick,
    (id, e): (MsgId, Entity),
    flow: &mut Flow,
    rate: f64,
    cal: &mut FlowCalendar,
) {
    flow.rate = rate;
    if rate < flow.bottleneck * (1.0 - 1e-12) {
        flow.shared = true;
    }
    flow.generation = flow.generation.wrapping_add(1);
    if rate == 0.0 {
        return;
    }
    let at = now + ceil_ticks(flow.left / rate).max(1);
    let step = FlowStep::Drained(flow.generation);
    let leg = flow.leg;
    cal.0.push(
        at,
        FlowEvent {
            msg: id,
            entity: e,
            step,
            leg,
        },
    );
}

/// A drained event: stale unless of the flow's message and generation; a
/// current one takes the flow off its links and schedules its arrival.
fn drained(now: Tick, ev: &FlowEvent, generation: u32, net: &mut FlowAccess) {
    let Ok((msg, flow)) = net.flows.get(ev.entity) else {
        unreachable!("flow event for a message entity that no longer exists");
    };
    // Stale: the rate changed since, or the entity now carries a later message.
    if flow.generation != generation || msg.id != ev.msg {
        return;
    }
    let segs = flow.leg_segs(&net.routes, msg);
    if net.trace.enabled() {
        for s in segs {
            net.trace.packet(crate::trace::PacketSpan {
                link: s.link,
                start: flow.start + flow.latency,
                end: now,
                msg: msg.id,
                bytes: msg.bytes,
            });
        }
    }
    let (turn, last_leg) = (flow.turn, flow.last_leg);
    let at = match last_leg {
        Some(_) => flow.arrival_after(),
        None => flow.arrival().max(now),
    };
    let cached = net.routes.cached();
    let queue = net.net.route_queue((msg.route.index(), flow.leg), cached);
    match queue.waiting.pop_front() {
        Some(next) => hand_over(now, (ev.entity, turn), next, net),
        None => {
            queue.sending = false;
            net.net.leave(&net.links, (ev.entity, turn), segs);
        }
    }
    match last_leg {
        Some(last) => leg_drained(now, (ev.entity, last), at, net),
        None => {
            let Ok((_, mut flow)) = net.flows.get_mut(ev.entity) else {
                unreachable!("a drained flow exists");
            };
            if flow.pending > 0 {
                (flow.not_before, flow.awaiting) = (at, true);
                return;
            }
            arrive_at(now, ev.entity, at, net);
        }
    }
}

/// An earlier leg `leg` of the message whose last leg is `last` drained,
/// allowing its arrival from `at`: the leg's entity is parked, and the
/// message arrives if its last leg drained and waited for this one.
fn leg_drained(now: Tick, (leg, last): (Entity, Entity), at: Tick, net: &mut FlowAccess) {
    if let Ok((mut msg, _)) = net.flows.get_mut(leg) {
        msg.delivered = msg.packets;
    }
    net.pool.0.push(leg);
    let Ok((_, mut flow)) = net.flows.get_mut(last) else {
        unreachable!("a message's last leg exists");
    };
    flow.not_before = flow.not_before.max(at);
    flow.pending -= 1;
    if flow.pending == 0 && flow.awaiting {
        let at = flow.not_before.max(now);
        arrive_at(now, last, at, net);
    }
}

/// Schedules the arrival of the message whose last leg is `e` at `at`
/// (now: delivers it).
fn arrive_at(now: Tick, e: Entity, at: Tick, net: &mut FlowAccess) {
    if at == now {
        return deliver(now, e, net);
    }
    let Ok((msg, flow)) = net.flows.get(e) else {
        unreachable!("an arriving message exists");
    };
    let ev = FlowEvent {
        msg: msg.id,
        entity: e,
        step: FlowStep::Arrive,
        leg: flow.leg,
    };
    net.cal.0.push(at, ev);
}

/// The message has arrived: to the inbox of its purpose, its entity parked.
fn deliver(now: Tick, entity: Entity, net: &mut FlowAccess) {
    let Ok((mut msg, _)) = net.flows.get_mut(entity) else {
        unreachable!("flow event for a message entity that no longer exists");
    };
    msg.delivered = msg.packets;
    let arrival = msg.arrival(now);
    net.trace.message(&arrival);
    net.inbox.lists[msg.purpose as usize].push(arrival);
    net.pool.0.push(entity);
    net.counters.delivered += 1;
}

/// Recomputes the rates of the flows that joined and of every flow
/// connected to them or to a dirty link through binding links, and
/// schedules a new drained event for each flow whose rate changed.
fn reassign_rates(now: Tick, net: &mut FlowAccess) {
    reach_connected(now, net);
    net.net.reached += net.net.reached_flows.len() as u64;
    fill_by_turn(net);
    let FlowAccess {
        cal,
        net: fl,
        flows,
        ..
    } = net;
    for r in &fl.reached_flows {
        // Unchanged: the flow holds this rate, and was marked shared when
        // it got it, unless it waits at 0 since it joined.
        if r.rate == r.before && (r.rate > 0.0 || r.pinned) {
            continue;
        }
        let e = r.entity;
        let Ok((msg, mut flow)) = flows.get_mut(e) else {
            unreachable!("a reached flow exists");
        };
        if r.rate == r.before {
            flow.shared = true;
            continue;
        }
        set_rate(now, (msg.id, e), &mut flow, r.rate, cal);
    }
}

/// Collects the flows that joined and those connected to them or to the
/// dirty links through binding links, with those links. A flow of a turn
/// before every change is pinned: its rate stands and the walk does not go
/// on from it. Every other reached flow is drained up to `now` and loses
/// its rate.
fn reach_connected(now: Tick, net: &mut FlowAccess) {
    let FlowAccess {
        net: fl,
        flows,
        routes,
        ..
    } = net;
    let fl: &mut FlowLinks = fl;
    fl.pass = fl.pass.wrapping_add(1).max(1);
    let pass = fl.pass;
    let from_turn = fl.changed_turn.take().unwrap_or_default();
    fl.reached_links.clear();
    fl.reached_flows.clear();
    fl.reached_binding.clear();
    // Dirty links are walked whether they bind now or did before.
    for k in 0..fl.dirty.len() {
        let l = fl.dirty[k];
        if fl.links[l.index()].visit != pass {
            fl.links[l.index()].visit = pass;
            fl.reached_links.push(l);
        }
    }
    fl.dirty.clear();
    let mut joined = std::mem::take(&mut fl.joined);
    for &e in &joined {
        reach_flow((now, from_turn), e, fl, flows, routes);
    }
    joined.clear();
    fl.joined = joined;
    let mut i = 0;
    while i < fl.reached_links.len() {
        let l = fl.reached_links[i].index();
        i += 1;
        for k in 0..fl.links[l].flows.len() {
            let LinkFlow { entity, turn, .. } = fl.links[l].flows[k];
            reach_flow((now, from_turn), entity, fl, flows, routes);
            debug_assert_eq!(
                turn,
                fl.reached_flows[fl.flow_slots[entity.index_u32() as usize].1 as usize].turn,
                "a link's entry has its flow's turn"
            );
        }
    }
}

/// Adds flow `e` to the pass (once): pinned if its turn is before
/// `from_turn`, else drained up to `now` with its binding links added to
/// the walk.
fn reach_flow(
    (now, from_turn): (Tick, Turn),
    e: Entity,
    fl: &mut FlowLinks,
    flows: &mut Query<(&mut Message, &mut Flow)>,
    routes: &Routes,
) {
    let slot = e.index_u32() as usize;
    if fl.flow_slots.len() <= slot {
        fl.flow_slots.resize(slot + 1, (0, 0));
    }
    if fl.flow_slots[slot].0 == fl.pass {
        return;
    }
    let Ok((msg, mut flow)) = flows.get_mut(e) else {
        unreachable!("a flow on a link exists");
    };
    let pinned = flow.turn < from_turn;
    if !pinned {
        flow.settle(now);
    }
    fl.flow_slots[slot] = (fl.pass, fl.reached_flows.len() as u32);
    let first = fl.reached_binding.len() as u32;
    for s in flow.leg_segs(routes, &msg) {
        let link = &mut fl.links[s.link.index()];
        if !link.binding {
            continue;
        }
        fl.reached_binding.push(s.link);
        if !pinned && link.visit != fl.pass {
            link.visit = fl.pass;
            fl.reached_links.push(s.link);
        }
    }
    let binding = (first, fl.reached_binding.len() as u32 - first);
    fl.reached_flows.push(Reached {
        entity: e,
        turn: flow.turn,
        pinned,
        binding,
        bottleneck: flow.bottleneck,
        before: flow.rate,
        rate: if pinned { flow.rate } else { f64::NAN },
    });
}

/// Rates of the reached flows in turn order: a pinned flow's rate leaves
/// the spare of the pass's links first, then each flow takes the least of
/// its bottleneck and what earlier turns left on its binding links (a link
/// that does not bind cannot hold a flow below its bottleneck). Turns are
/// distinct on a link (the legs of one message, which share one, cross
/// different links), so this is also the max-min share of every turn.
fn fill_by_turn(net: &mut FlowAccess) {
    let FlowAccess { net: fl, links, .. } = net;
    let fl: &mut FlowLinks = fl;
    for &l in &fl.reached_links {
        fl.links[l.index()].spare = link_rate(links, l);
    }
    let mut by_turn = std::mem::take(&mut fl.by_turn);
    by_turn.clear();
    for (i, r) in fl.reached_flows.iter().enumerate() {
        if !r.pinned {
            by_turn.push((r.turn, i as u32));
            continue;
        }
        for &l in &fl.reached_binding[r.binding_links()] {
            let link = &mut fl.links[l.index()];
            if link.visit == fl.pass {
                link.spare -= r.rate;
            }
        }
    }
    by_turn.sort_unstable();
    for &(_, i) in &by_turn {
        let r = &fl.reached_flows[i as usize];
        let mut rate = r.bottleneck;
        for &l in &fl.reached_binding[r.binding_links()] {
            let spare = fl.links[l.index()].spare;
            // Earlier turns filled the link (up to float noise: a
            // billionth of its bandwidth): the flow waits for one to finish.
            let spare = if spare > link_rate(links, l) * 1e-9 {
                spare
            } else {
                0.0
            };
            rate = rate.min(spare);
        }
        for &l in &fl.reached_binding[r.binding_links()] {
            fl.links[l.index()].spare -= rate;
        }
        fl.reached_flows[i as usize].rate = rate;
    }
    fl.by_turn = by_turn;
}

/// Whether flow events are due now.
pub(super) fn flow_due(clock: Res<Clock>, cal: Res<FlowCalendar>, ahead: Res<RoutedAhead>) -> bool {
    !ahead.0 && crate::plugin::due(cal.0.next_due(), clock.now)
}

/// The route's share of a message's link statistics and hop counts, added
/// once at injection: per non-ideal link `packets` packets, `bytes` bytes
/// and (packets − 1)·ser(P) + ser(last) busy ticks, as the packets would.
pub(super) fn account(
    links: &mut LinkTable,
    counters: &mut NetCounters,
    routes: &Routes,
    msg: &Message,
) {
    let (segs, ideal_after, _) = routes.segments(msg.route);
    let packets = u64::from(msg.packets);
    let last = msg.packet_size(msg.packets - 1);
    let mut ideal = u64::from(ideal_after);
    for s in segs {
        let busy = (packets - 1) * s.ser_full + links.class(s.link).ser_ticks(last);
        links.record(s.link, msg.bytes, packets, busy);
        ideal += u64::from(s.ideal_before);
    }
    counters.ideal_hops += packets * ideal;
    counters.hops += packets * (ideal + segs.len() as u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{LinkClass, LinkTableBuilder, NodeId, RouteId, RouteSource};
    use crate::traffic::{ScheduledTraffic, Start};
    use crate::{Engine, RunLimits};

    fn class(bytes_per_tick: u64, per_ticks: u64, latency: Tick, packet_bytes: u64) -> LinkClass {
        LinkClass {
            name: "test".into(),
            latency,
            rate_num: bytes_per_tick,
            rate_den: per_ticks,
            packet_bytes,
            ideal: false,
        }
    }

    /// Nodes on a line; routes walk it.
    struct Line;

    impl RouteSource for Line {
        fn route(&self, src: NodeId, dst: NodeId, out: &mut Vec<NodeId>) -> Result<(), String> {
            if src <= dst {
                out.extend((src.0..=dst.0).map(NodeId));
            } else {
                out.extend((dst.0..=src.0).rev().map(NodeId));
            }
            Ok(())
        }
    }

    /// A line whose link i→i+1 (both ways) has class `classes[i]`.
    fn line(classes: Vec<LinkClass>) -> (LinkTable, Routes) {
        let n = classes.len() as u32;
        let mut b = LinkTableBuilder::new(n + 1, classes);
        for i in 0..n {
            b.duplex(NodeId(i), NodeId(i + 1), i as u8);
        }
        (b.build(), Routes::new(Box::new(Line)))
    }

    /// Departure of every packet from every link, one reservation at a time.
    fn packet_by_packet(links: &LinkTable, segs: &[Segment], p: u64, bytes: u64) -> Tick {
        let n = bytes.div_ceil(p).max(1);
        let size = |k: u64| if k + 1 < n { p } else { bytes - p * (n - 1) };
        let mut ready: Vec<Tick> = vec![0; n as usize];
        for seg in segs {
            let mut free = 0;
            for (k, at) in ready.iter_mut().enumerate() {
                let left = (*at).max(free) + links.class(seg.link).ser_ticks(size(k as u64));
                free = left;
                *at = left + seg.latency;
            }
        }
        ready[n as usize - 1]
    }

    fn uncontended(classes: Vec<LinkClass>, bytes: u64) -> (Tick, Tick) {
        let hops = classes.len() as u32;
        let (links, mut routes) = line(classes);
        let r = routes.get(&links, NodeId(0), NodeId(hops)).unwrap();
        let (segs, _, route_p) = routes.segments(r);
        let p = route_p.min(bytes.max(1));
        (
            uncontended_ticks(&links, segs, p, bytes),
            packet_by_packet(&links, segs, p, bytes),
        )
    }

    #[test]
    fn uncontended_time_is_the_closed_form_on_identical_links() {
        // docs/model.md: k·L + (n−1)·T_P + T_last + (k−1)·⌈min(P, s)/B⌉.
        for (k, s, p, b, l) in [
            (1u64, 4096u64, 1024u64, 64u64, 5u64),
            (3, 4096, 1024, 64, 5),
            (5, 10_000, 1024, 64, 7),
            (4, 1_000_000, 4096, 100, 300),
            (2, 100, 64, 3, 0),
            (6, 12_345, 1 << 40, 100, 250),
            (3, 0, 1024, 64, 5),
        ] {
            let n = s.div_ceil(p).max(1);
            let last = s - (n - 1) * p;
            let expect =
                k * l + (n - 1) * p.div_ceil(b) + last.div_ceil(b) + (k - 1) * s.min(p).div_ceil(b);
            let classes = vec![class(b, 1, l, p); k as usize];
            assert_eq!(
                uncontended(classes, s).0,
                expect,
                "k={k} s={s} P={p} B={b} L={l}"
            );
        }
    }

    #[test]
    fn uncontended_time_follows_every_packet_on_mixed_links() {
        // Classes of different rate (some fractional), latency and packet
        // size on one route: the O(hops) recurrence equals reserving every
        // packet on every link.
        let (mut x, mut checked) = (7u64, 0);
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for _ in 0..300 {
            let hops = 1 + next(5) as usize;
            let classes = (0..hops)
                .map(|_| class(1 + next(90), 1 + next(3), next(40), 16 + next(300)))
                .collect();
            let bytes = next(3000);
            let (fast, slow) = uncontended(classes, bytes);
            assert_eq!(fast, slow, "bytes={bytes}");
            checked += 1;
        }
        assert_eq!(checked, 300);
    }

    #[test]
    fn ceil_ticks_forgives_float_noise_only() {
        assert_eq!(ceil_ticks(64.0), 64);
        assert_eq!(ceil_ticks(64.000_000_000_01), 64);
        assert_eq!(ceil_ticks(64.001), 65);
        assert_eq!(ceil_ticks(0.3), 1);
        assert_eq!(ceil_ticks(0.0), 0);
    }

    /// A flow-mode engine on a line of `classes` sending `msgs`
    /// (source, destination, bytes, start tick).
    fn flow_engine(classes: Vec<LinkClass>, msgs: &[(u32, u32, u64, Tick)]) -> Engine {
        let (links, _) = line(classes);
        let mut e = Engine::new(links, Box::new(Line));
        e.set_network_model(NetworkModel::Flow);
        e.set_flow_leg_span(LegSpan(Tick::MAX));
        let mut t = ScheduledTraffic::new();
        for &(a, b, bytes, at) in msgs {
            t.add(NodeId(a), NodeId(b), bytes, Start::At(at));
        }
        e.set_traffic(t);
        e
    }

    /// Runs `e` until its clock passes `tick`, and leaves it at the last
    /// tick run: the ticks routed ahead stop at `tick` too (they are
    /// bounded by `--max-ticks`, and `run_until` checks its condition only
    /// after whole schedule runs).
    fn run_past(e: &mut Engine, tick: Tick) {
        e.world.resource_mut::<RunLimits>().max_ticks = Some(tick);
        e.run_until(|w| w.resource::<Clock>().now > tick).unwrap();
        e.world.resource_mut::<RunLimits>().max_ticks = None;
    }

    /// Every flow's current rate, by message id.
    fn flow_rates(e: &mut Engine) -> Vec<(MsgId, f64)> {
        let mut q = e.world.query::<(&Message, &Flow)>();
        let mut rates: Vec<(MsgId, f64)> = q.iter(&e.world).map(|(m, f)| (m.id, f.rate)).collect();
        rates.sort_by_key(|r| r.0);
        rates
    }

    /// 0→1 at 100 B/tick, 1→2 at 60, latency 10, one packet a message.
    fn parking_lot() -> Vec<LinkClass> {
        vec![class(100, 1, 10, 1 << 20), class(60, 1, 10, 1 << 20)]
    }

    #[test]
    fn one_turn_is_served_in_message_order() {
        // 0→1 at 100 B/tick, 1→2 at 60 B/tick, L = 10; a long flow 0→2 and a
        // short one on each link, all draining from tick 70 (the long one
        // starts at 0 with an overhead of 70, its last byte leaving 1→2 at
        // 170, the short ones at 70 with none).
        // The long one (message 0) comes first: its bottleneck, 60, on both
        // links; the short one on 0→1 takes the 40 left there, the one on
        // 1→2 waits at 0, as its packet would wait behind message 0's.
        let msgs = [(0, 2, 6000, 0), (0, 1, 6000, 70), (1, 2, 6000, 70)];
        let mut e = flow_engine(parking_lot(), &msgs);
        run_past(&mut e, 80);
        assert_eq!(
            flow_rates(&mut e),
            vec![(MsgId(0), 60.0), (MsgId(1), 40.0), (MsgId(2), 0.0)]
        );
    }

    #[test]
    fn a_link_that_cannot_bind_does_not_connect_flows() {
        // 0→1 and 2→3 at 100 B/tick, 1→2 at 1000: flows 0→2 and 1→3 share
        // 1→2, but at their bottlenecks (100 each) they cannot fill it, so
        // the later one's rate pass reaches it alone; both drain at 100.
        let classes = vec![
            class(100, 1, 5, 1 << 20),
            class(1000, 1, 5, 1 << 20),
            class(100, 1, 5, 1 << 20),
        ];
        let mut e = flow_engine(classes, &[(0, 2, 6000, 0), (1, 3, 6000, 20)]);
        // The second flow joins at 20 + its overhead of 11.
        run_past(&mut e, 36);
        let fl = e.world.resource::<FlowLinks>();
        assert_eq!(fl.reached_flows.len(), 1);
        assert!(fl.links.iter().all(|l| !l.binding));
        assert_eq!(
            flow_rates(&mut e),
            vec![(MsgId(0), 100.0), (MsgId(1), 100.0)]
        );
    }

    #[test]
    fn an_earlier_turn_is_served_first() {
        // Parking lot, one leg a message: a flow 1→2 joins at 0 (its one
        // packet holds the link from its start) and takes all of 1→2
        // (60 B/tick); a flow 0→2 joining at 70 waits at rate 0 until the
        // first drains at 6000 / 60 = 100, then takes all 60.
        let msgs = [(0, 2, 6000, 0), (1, 2, 6000, 0)];
        let mut e = flow_engine(parking_lot(), &msgs);
        run_past(&mut e, 80);
        assert_eq!(flow_rates(&mut e), vec![(MsgId(0), 0.0), (MsgId(1), 60.0)]);
        run_past(&mut e, 110);
        assert_eq!(flow_rates(&mut e)[0], (MsgId(0), 60.0));
    }

    #[test]
    fn the_next_message_of_a_route_takes_its_rate_without_a_pass() {
        // 0→1 at 100 B/tick, 1→2 at 60, L = 10. Two messages 0→2 queue on
        // their route (both join at 70); a long one 1→2 joins at 70 too
        // (its start, no overhead), after the first 0→2 in message order:
        // that one drains at its bottleneck, 60, and the long one waits.
        // The first drains at 70 + 6000 / 60 = 170 and the second drains in
        // its place at 60 until 270, with no rate pass: it comes before the
        // long one too, as the first did.
        let msgs = [(0, 2, 6000, 0), (0, 2, 6000, 0), (1, 2, 60_000, 70)];
        let mut e = flow_engine(parking_lot(), &msgs);
        run_past(&mut e, 100);
        let reached = e.world.resource::<FlowLinks>().reached;
        run_past(&mut e, 200);
        assert_eq!(e.world.resource::<FlowLinks>().reached, reached);
        let want = vec![((MsgId(1), 0), 60.0), ((MsgId(2), 0), 0.0)];
        assert_eq!(rates_by_brute_force(&mut e), want);
        let mut rates = flow_rates(&mut e);
        rates.retain(|r| r.0 != MsgId(0));
        let rates: Vec<_> = rates.into_iter().map(|(id, r)| ((id, 0), r)).collect();
        assert_eq!(rates, want);
    }

    /// The rates of every draining flow, turn by turn from the earliest,
    /// each turn's flows max-min fair by progressive filling over every
    /// link at once in what earlier turns left (no selective update, no
    /// pruning, no pinning; a turn's legs cross different links, so this
    /// is the order of turns as the engine applies it).
    fn rates_by_brute_force(e: &mut Engine) -> Vec<((MsgId, u8), f64)> {
        let mut q = e.world.query::<(Entity, &Message, &Flow)>();
        type Msg = (Entity, (MsgId, u8), RouteId, Turn, (u16, u16), f64);
        let msgs: Vec<Msg> = q
            .iter(&e.world)
            .map(|(en, m, f)| (en, (m.id, f.leg), m.route, f.turn, f.segs, f.bottleneck))
            .collect();
        let (fl, routes, links) = (
            e.world.resource::<FlowLinks>(),
            e.world.resource::<Routes>(),
            e.world.resource::<LinkTable>(),
        );
        let draining = |en: Entity| {
            fl.links
                .iter()
                .any(|l| l.flows.iter().any(|f| f.entity == en))
        };
        type Draining = (Turn, (MsgId, u8), Vec<LinkId>, f64);
        let mut flows: Vec<Draining> = msgs
            .iter()
            .filter(|m| draining(m.0))
            .map(|m| {
                let (first, n) = (m.4.0 as usize, m.4.1 as usize);
                let segs = &routes.segments(m.2).0[first..first + n];
                (m.3, m.1, segs.iter().map(|s| s.link).collect(), m.5)
            })
            .collect();
        flows.sort_by_key(|f| (f.0, f.1));
        let mut spare: Vec<f64> = links.ids().map(|l| link_rate(links, l)).collect();
        let mut rates = Vec::new();
        for turn in flows.chunk_by(|a, b| a.0 == b.0) {
            let mut todo: Vec<&Draining> = turn.iter().collect();
            while !todo.is_empty() {
                // A flow whose own bound (the route's slowest link up to
                // its leg's end) is below every link's share takes it.
                let capped = todo.iter().copied().min_by(|a, b| a.3.total_cmp(&b.3));
                let users = |l: LinkId| todo.iter().filter(|f| f.2.contains(&l)).count();
                let least_share = links
                    .ids()
                    .filter(|&l| users(l) > 0)
                    .map(|l| spare[l.index()].max(0.0) / users(l) as f64)
                    .fold(f64::INFINITY, f64::min);
                if let Some(f) = capped.filter(|f| f.3 < least_share) {
                    f.2.iter().for_each(|&k| spare[k.index()] -= f.3);
                    rates.push((f.1, f.3));
                    todo.retain(|g| g.1 != f.1);
                    continue;
                }
                let (share, l) = links
                    .ids()
                    .filter(|&l| users(l) > 0)
                    .map(|l| (spare[l.index()].max(0.0) / users(l) as f64, l))
                    .fold(
                        (f64::INFINITY, LinkId(0)),
                        |a, b| {
                            if b.0 < a.0 { b } else { a }
                        },
                    );
                let share = if share > link_rate(links, l) * 1e-9 {
                    share
                } else {
                    0.0
                };
                let (fixed, rest): (Vec<_>, Vec<_>) =
                    todo.into_iter().partition(|f| f.2.contains(&l));
                for f in fixed {
                    f.2.iter().for_each(|&k| spare[k.index()] -= share);
                    rates.push((f.1, share));
                }
                todo = rest;
            }
        }
        rates.sort_by_key(|r| r.0);
        rates
    }

    #[test]
    fn selective_updates_keep_every_rate_of_a_full_recomputation() {
        let (mut x, mut compared) = (99u64, 0);
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for _ in 0..30 {
            let classes = (0..5)
                .map(|_| class(10 + next(90), 1, next(20), 1 << 20))
                .collect();
            let (links, _) = line(classes);
            let mut e = Engine::new(links, Box::new(Line));
            e.set_network_model(NetworkModel::Flow);
            let mut t = ScheduledTraffic::new();
            for _ in 0..10 {
                let (a, b) = (NodeId(next(6) as u32), NodeId(next(6) as u32));
                t.add(a, b, 1 + next(5000), Start::At(next(100)));
            }
            e.set_traffic(t);
            while !e.step() {
                let want = rates_by_brute_force(&mut e);
                let mut q = e.world.query::<(&Message, &Flow)>();
                for (id, rate) in want {
                    let got = q.iter(&e.world).find(|f| (f.0.id, f.1.leg) == id);
                    let got = got.unwrap().1.rate;
                    assert!(
                        (got - rate).abs() <= 1e-9 * rate + 1e-9,
                        "message {} leg {}: {got} vs {rate}",
                        id.0,
                        id.1
                    );
                    compared += 1;
                }
            }
        }
        assert!(compared > 300, "{compared}");
    }
}
