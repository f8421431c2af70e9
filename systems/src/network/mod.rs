//! Link-level network timing: contended store-and-forward links, routes, and
//! the in-flight message entities that cross them.
//!
//! Timing (docs/model.md §Links): a packet of `s` bytes that reaches a link at
//! tick `t` starts at `max(t, free_at)`, holds the link for `ser(s) = ⌈s/B⌉`
//! ticks and reaches the far node `L` ticks after it leaves the link. A link
//! serves packets first-come first-served; packets that reach it in the same
//! tick are served in (message id, packet index) order. Because the calendar
//! hands out events in tick order, reserving the link on arrival *is* that
//! FIFO queue, so no explicit queue is kept.

use crate::time::{Calendar, Clock, Tick};
use bevy_ecs::prelude::*;
use rustc_hash::FxHashMap;

pub mod flow;

pub use crate::ids::{Arrival, LinkId, MsgId, NodeId, Purpose};
pub use flow::NetworkModel;

/// Timing shared by every link of one edge kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkClass {
    /// Edge-kind name, for reports ("noc", "ucie", "inter_sip", "pcie").
    pub name: String,
    /// Propagation latency L in ticks.
    pub latency: Tick,
    /// Bandwidth as a reduced fraction: `ser(s) = ⌈s · den / num⌉` ticks.
    pub rate_num: u64,
    pub rate_den: u64,
    /// Messages are cut into packets of at most this many bytes.
    pub packet_bytes: u64,
    /// Zero latency, unlimited bandwidth, never contended.
    pub ideal: bool,
}

impl LinkClass {
    /// A class that takes no time (memories before the machine sizes them).
    pub fn ideal() -> Self {
        LinkClass {
            name: "ideal".into(),
            latency: 0,
            rate_num: 1,
            rate_den: 1,
            packet_bytes: u64::MAX,
            ideal: true,
        }
    }

    /// Ticks a packet of `bytes` holds a link of this class.
    #[inline]
    pub fn ser_ticks(&self, bytes: u64) -> Tick {
        if self.ideal {
            return 0;
        }
        match bytes.checked_mul(self.rate_den) {
            Some(n) => n.div_ceil(self.rate_num),
            None => {
                let n = bytes as u128 * self.rate_den as u128;
                n.div_ceil(self.rate_num as u128) as Tick
            }
        }
    }
}

/// All directed links: endpoints, class, and contention state, in dense vectors.
#[derive(Resource, Debug, Default)]
pub struct LinkTable {
    pub classes: Vec<LinkClass>,
    class_of: Vec<u8>,
    src: Vec<NodeId>,
    dst: Vec<NodeId>,
    /// CSR index of outgoing links per node (`links_from[n]..links_from[n+1]`).
    links_from: Vec<u32>,
    /// Per link: when it is free, and what it carried (one cache line per
    /// reservation).
    state: Vec<LinkState>,
}

/// The contention state and statistics of one non-ideal link.
#[derive(Debug, Default, Clone, Copy)]
struct LinkState {
    free_at: Tick,
    stats: LinkStats,
}

/// What one link carried. Ideal links cost nothing and keep no per-link
/// record; their traversals are counted in [`NetCounters::ideal_hops`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkStats {
    /// Ticks the link spent serialising packets.
    pub busy: Tick,
    pub bytes: u64,
    pub packets: u64,
}

/// Builds a [`LinkTable`]; links may be added in any order.
#[derive(Debug, Default)]
pub struct LinkTableBuilder {
    classes: Vec<LinkClass>,
    links: Vec<(NodeId, NodeId, u8)>,
    nodes: u32,
}

impl LinkTableBuilder {
    pub fn new(nodes: u32, classes: Vec<LinkClass>) -> Self {
        assert!(classes.len() <= u8::MAX as usize);
        Self {
            classes,
            links: Vec::new(),
            nodes,
        }
    }

    pub fn reserve(&mut self, n: usize) {
        self.links.reserve(n);
    }

    /// Adds a directed link `a → b` of class index `class`.
    pub fn link(&mut self, a: NodeId, b: NodeId, class: u8) {
        debug_assert!(a < self.nodes && b < self.nodes && (class as usize) < self.classes.len());
        self.links.push((a, b, class));
    }

    /// Adds links `a → b` and `b → a`.
    pub fn duplex(&mut self, a: NodeId, b: NodeId, class: u8) {
        self.link(a, b, class);
        self.link(b, a, class);
    }

    pub fn build(mut self) -> LinkTable {
        // Stable sort keeps insertion order among a node's links: link ids are
        // deterministic for a given spec.
        self.links.sort_by_key(|l| l.0);
        let n = self.links.len();
        let mut links_from = vec![0u32; self.nodes as usize + 1];
        for &(a, _, _) in &self.links {
            links_from[a as usize + 1] += 1;
        }
        for i in 0..self.nodes as usize {
            links_from[i + 1] += links_from[i];
        }
        LinkTable {
            classes: self.classes,
            class_of: self.links.iter().map(|l| l.2).collect(),
            src: self.links.iter().map(|l| l.0).collect(),
            dst: self.links.iter().map(|l| l.1).collect(),
            links_from,
            state: vec![LinkState::default(); n],
        }
    }
}

impl LinkTable {
    pub fn len(&self) -> usize {
        self.src.len()
    }

    pub fn is_empty(&self) -> bool {
        self.src.is_empty()
    }

    pub fn nodes(&self) -> u32 {
        self.links_from.len() as u32 - 1
    }

    /// The link `a → b`, if any.
    pub fn find(&self, a: NodeId, b: NodeId) -> Option<LinkId> {
        let (lo, hi) = (self.links_from[a as usize], self.links_from[a as usize + 1]);
        (lo..hi).find(|&l| self.dst[l as usize] == b)
    }

    /// Links leaving node `a`.
    pub fn out_links(&self, a: NodeId) -> std::ops::Range<LinkId> {
        self.links_from[a as usize]..self.links_from[a as usize + 1]
    }

    pub fn endpoints(&self, l: LinkId) -> (NodeId, NodeId) {
        (self.src[l as usize], self.dst[l as usize])
    }

    pub fn class(&self, l: LinkId) -> &LinkClass {
        &self.classes[self.class_of[l as usize] as usize]
    }

    pub fn class_index(&self, l: LinkId) -> u8 {
        self.class_of[l as usize]
    }

    pub fn stats(&self, l: LinkId) -> LinkStats {
        self.state[l as usize].stats
    }

    /// A packet of `bytes` that holds the non-ideal link `l` for `ser` ticks
    /// (its [`LinkClass::ser_ticks`]) reaches it at `t`: reserve the link FIFO
    /// and return the tick at which the packet has left it (the far node
    /// sees it the class's latency later). Ideal links are never reserved:
    /// routes skip them (see [`Routes`]).
    #[inline]
    pub fn reserve(&mut self, l: LinkId, t: Tick, bytes: u64, ser: Tick) -> Tick {
        debug_assert!(
            !self.class(l).ideal,
            "ideal links are crossed without reservation"
        );
        debug_assert_eq!(ser, self.class(l).ser_ticks(bytes));
        let st = &mut self.state[l as usize];
        let start = t.max(st.free_at);
        st.free_at = start + ser;
        st.stats.bytes += bytes;
        st.stats.packets += 1;
        st.stats.busy += ser;
        start + ser
    }
}

/// Produces the node path between two nodes; implemented by the topology layer,
/// which knows coordinates. The engine only caches what it returns.
pub trait RouteSource: Send + Sync + 'static {
    /// Appends the nodes from `src` to `dst` inclusive to `out`.
    fn route(&self, src: NodeId, dst: NodeId, out: &mut Vec<NodeId>) -> Result<(), String>;
}

/// Index of a cached route.
pub type RouteId = u32;

/// Routes cached per (src, dst) pair on first use; no all-pairs table.
///
/// A route is kept as its *segments*: each
/// non-ideal link with the number of ideal links crossed (in zero time) just
/// before it. Packets take one calendar event per segment.
#[derive(Resource)]
pub struct Routes {
    source: Box<dyn RouteSource>,
    cache: FxHashMap<(NodeId, NodeId), RouteId>,
    segments: Vec<Segment>,
    spans: Vec<RouteSpan>,
    scratch: Vec<NodeId>,
}

/// A non-ideal link of a route and the ideal links crossed just before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub link: LinkId,
    pub ideal_before: u32,
    /// Ticks a full packet of the route (its `packet_bytes`) holds the link:
    /// precomputed, so a hop of a full packet needs no division.
    pub ser_full: Tick,
    /// The link's latency, ticks.
    pub latency: Tick,
}

#[derive(Debug, Clone, Copy)]
struct RouteSpan {
    seg_start: u32,
    seg_len: u32,
    /// Ideal links after the last segment.
    ideal_after: u32,
    /// Packet size for messages on this route: the smallest packet size of its
    /// non-ideal links (a message is cut once, at the source).
    packet_bytes: u64,
}

impl Routes {
    pub fn new(source: Box<dyn RouteSource>) -> Self {
        Self {
            source,
            cache: FxHashMap::default(),
            segments: Vec::new(),
            spans: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// The route `src → dst`, computed and cached on first use.
    pub fn get(&mut self, links: &LinkTable, src: NodeId, dst: NodeId) -> Result<RouteId, String> {
        if let Some(&r) = self.cache.get(&(src, dst)) {
            return Ok(r);
        }
        self.scratch.clear();
        self.source.route(src, dst, &mut self.scratch)?;
        if self.scratch.first() != Some(&src) || self.scratch.last() != Some(&dst) {
            return Err(format!(
                "route {src}→{dst} does not start at {src} and end at {dst}"
            ));
        }
        let seg_start = self.segments.len() as u32;
        let mut packet_bytes = u64::MAX;
        let mut ideal = 0;
        for w in self.scratch.windows(2) {
            let Some(l) = links.find(w[0], w[1]) else {
                self.segments.truncate(seg_start as usize);
                return Err(format!(
                    "route {src}→{dst} uses missing link {}→{}",
                    w[0], w[1]
                ));
            };
            let class = links.class(l);
            if class.ideal {
                ideal += 1;
            } else {
                packet_bytes = packet_bytes.min(class.packet_bytes);
                self.segments.push(Segment {
                    link: l,
                    ideal_before: ideal,
                    ser_full: 0,
                    latency: class.latency,
                });
                ideal = 0;
            }
        }
        for seg in &mut self.segments[seg_start as usize..] {
            seg.ser_full = links.class(seg.link).ser_ticks(packet_bytes);
        }
        let id = self.spans.len() as RouteId;
        self.spans.push(RouteSpan {
            seg_start,
            seg_len: self.segments.len() as u32 - seg_start,
            ideal_after: ideal,
            packet_bytes,
        });
        self.cache.insert((src, dst), id);
        Ok(id)
    }

    /// The non-ideal links of a route with the ideal links before each, the
    /// number of ideal links after the last one, and the route's packet size.
    #[inline]
    pub fn segments(&self, r: RouteId) -> (&[Segment], u32, u64) {
        let s = self.spans[r as usize];
        let segs = &self.segments[s.seg_start as usize..(s.seg_start + s.seg_len) as usize];
        (segs, s.ideal_after, s.packet_bytes)
    }

    pub fn packet_bytes(&self, r: RouteId) -> u64 {
        self.spans[r as usize].packet_bytes
    }

    /// Whether the route crosses any non-ideal link.
    pub fn has_segments(&self, r: RouteId) -> bool {
        self.spans[r as usize].seg_len > 0
    }

    /// Routes cached so far.
    pub fn cached(&self) -> usize {
        self.spans.len()
    }
}

/// A message to inject: it becomes a [`Message`] entity in `inject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewMessage {
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
    /// Tick at which the message is at its source, ready to enter the first link.
    pub at: Tick,
    pub purpose: Purpose,
    /// Meaning depends on `purpose`; handed back in [`Arrival::tag`].
    pub tag: u64,
    /// The route `src → dst` if the sender already looked it up (saves the
    /// cache lookup on hot paths); None lets `inject` find it.
    pub route: Option<RouteId>,
}

/// Messages waiting to be spawned into the network; every model module sends
/// through it, so ids (the tie-break order) follow one global send order.
#[derive(Resource, Debug, Default)]
pub struct Outbox {
    next_id: MsgId,
    pending: Vec<(MsgId, NewMessage)>,
}

impl Outbox {
    /// Queues a message and returns its id.
    pub fn send(&mut self, s: NewMessage) -> MsgId {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push((id, s));
        id
    }

    /// Messages ever sent.
    pub fn sent(&self) -> u64 {
        self.next_id
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Arrivals of the current tick, one list per [`Purpose`].
#[derive(Resource, Debug, Default)]
pub struct Inbox {
    lists: [Vec<Arrival>; Purpose::COUNT],
}

impl Inbox {
    /// Takes the arrivals of one purpose; give the vector back with [`Inbox::restore`].
    pub fn take(&mut self, p: Purpose) -> Vec<Arrival> {
        std::mem::take(&mut self.lists[p as usize])
    }

    /// Returns an emptied list (keeps its allocation).
    pub fn restore(&mut self, p: Purpose, mut v: Vec<Arrival>) {
        v.clear();
        if self.lists[p as usize].is_empty() {
            self.lists[p as usize] = v;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lists.iter().all(|l| l.is_empty())
    }

    /// Whether arrivals of purpose `p` wait.
    pub fn has(&self, p: Purpose) -> bool {
        !self.lists[p as usize].is_empty()
    }
}

/// A message: an entity that is in flight from injection until its last
/// packet arrives (`delivered < packets`). A delivered message's entity is
/// parked in [`MessagePool`] and reused by the next injection, because
/// spawning and despawning tens of millions of entities would dominate a run.
#[derive(Component, Debug, Clone)]
pub struct Message {
    pub id: MsgId,
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
    pub route: RouteId,
    pub packet_bytes: u64,
    pub packets: u32,
    pub delivered: u32,
    pub injected_at: Tick,
    pub purpose: Purpose,
    /// Meaning depends on `purpose`, handed back on arrival.
    pub tag: u64,
}

impl Message {
    /// The message as delivered at `at`.
    fn arrival(&self, at: Tick) -> Arrival {
        Arrival {
            id: self.id,
            purpose: self.purpose,
            tag: self.tag,
            src: self.src,
            dst: self.dst,
            bytes: self.bytes,
            injected_at: self.injected_at,
            at,
        }
    }

    /// Size of packet `k` (all full but the last).
    #[inline]
    pub fn packet_size(&self, k: u32) -> u64 {
        Self::size_of_packet(k, self.packets, self.packet_bytes, self.bytes)
    }

    /// Size of packet `k` of `packets` packets of `packet_bytes` carrying `bytes`.
    #[inline]
    fn size_of_packet(k: u32, packets: u32, packet_bytes: u64, bytes: u64) -> u64 {
        if k + 1 < packets {
            packet_bytes
        } else {
            bytes - packet_bytes * (packets as u64 - 1)
        }
    }
}

/// "A packet of message `entity` with `left` packets behind it is at the
/// near end of segment `seg` of route `route` now." A message's packets enter
/// the network as one train event (`seg` 0, every packet, `left` = packets −
/// 1); after their first link they travel as single packets that carry their
/// own size, so a hop reads no message component: only a train's first hop
/// and the arrival do. Packets of one message keep their order (one route,
/// FIFO links), so only the last packet's arrival is an event. 32 bytes.
#[derive(Debug, Clone, Copy)]
pub struct HopEvent {
    pub msg: MsgId,
    pub entity: Entity,
    /// Packets of the message after this one (0: the last packet).
    pub left: u32,
    pub route: RouteId,
    pub seg: u32,
    /// Bytes of this packet past the first segment (`inject` refuses
    /// messages whose packets would not fit in 32 bits).
    pub size: u32,
}

/// Packets waiting to enter their next link, by tick.
#[derive(Resource, Default, Debug)]
pub struct NetCalendar(pub Calendar<HopEvent>);

/// Entities of delivered messages, ready for reuse.
#[derive(Resource, Default, Debug)]
pub struct MessagePool(pub Vec<Entity>);

/// Counters of the network stage.
#[derive(Resource, Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetCounters {
    /// Packet-hops taken (every link of every route, ideal ones included).
    pub hops: u64,
    /// The part of `hops` on ideal links.
    pub ideal_hops: u64,
    /// Messages whose last packet has arrived.
    pub delivered: u64,
}

/// Queues the packets of a new message at its source at tick `at`.
pub fn schedule_packets(
    cal: &mut NetCalendar,
    msg: MsgId,
    packets: u32,
    route: RouteId,
    entity: Entity,
    at: Tick,
) {
    cal.0.push(
        at,
        HopEvent {
            msg,
            entity,
            left: packets - 1,
            route,
            seg: 0,
            size: 0,
        },
    );
}

/// Spawns the outbox's messages: each gets a route (computed and cached on
/// first use), a message entity (a parked one if any) and, in packet mode,
/// one train event for all its packets at its start tick; in flow mode a
/// [`flow::Flow`] and its start event, its link statistics and hop counts
/// added at once. Runs at the start of `routing`, so messages sent by
/// `kernel_step` and `dma` move this tick, and again before `advance`, so
/// the clock sees what later stages sent.
pub fn inject(mut outbox: ResMut<Outbox>, mut net: InjectAccess, mut commands: Commands) {
    if outbox.pending.is_empty() {
        return;
    }
    let mut pending = std::mem::take(&mut outbox.pending);
    for (id, s) in pending.drain(..) {
        let msg = match new_message(id, &s, &mut net.routes, &net.links) {
            Ok(m) => m,
            Err(e) => {
                net.errors.report(e);
                continue;
            }
        };
        let (packets, route, at) = (msg.packets, msg.route, s.at);
        let parked = net.pool.0.pop();
        if *net.model == NetworkModel::Flow {
            let flow = flow::Flow::of(&net.links, &net.routes, &msg);
            flow::account(&mut net.links, &mut net.counters, &net.routes, &msg);
            let entity = match parked.map(|e| (e, net.msgs.get_mut(e))) {
                Some((e, Ok((mut m, Some(mut f))))) => {
                    (*m, *f) = (msg, flow);
                    e
                }
                Some((e, _)) => commands.entity(e).insert((msg, flow)).id(),
                None => commands.spawn((msg, flow)).id(),
            };
            flow::schedule_start(&mut net.flow_cal, id, entity, at);
        } else {
            let entity = match parked {
                Some(e) => {
                    *net.msgs.get_mut(e).expect("parked message entity exists").0 = msg;
                    e
                }
                None => commands.spawn(msg).id(),
            };
            schedule_packets(&mut net.cal, id, packets, route, entity, at);
        }
    }
    outbox.pending = pending;
}

/// What injection touches.
#[derive(bevy_ecs::system::SystemParam)]
pub struct InjectAccess<'w, 's> {
    routes: ResMut<'w, Routes>,
    links: ResMut<'w, LinkTable>,
    cal: ResMut<'w, NetCalendar>,
    flow_cal: ResMut<'w, flow::FlowCalendar>,
    model: Res<'w, NetworkModel>,
    pool: ResMut<'w, MessagePool>,
    counters: ResMut<'w, NetCounters>,
    msgs: Query<'w, 's, (&'static mut Message, Option<&'static mut flow::Flow>)>,
    errors: ResMut<'w, crate::RunErrors>,
}

/// The message entity's data of sent message `id`: its route and packets,
/// or why it cannot travel (no route, packets too large or too many).
fn new_message(
    id: MsgId,
    s: &NewMessage,
    routes: &mut Routes,
    links: &LinkTable,
) -> Result<Message, String> {
    let route = s
        .route
        .map_or_else(|| routes.get(links, s.src, s.dst), Ok)?;
    let packet_bytes = routes.packet_bytes(route).min(s.bytes.max(1));
    if packet_bytes > u64::from(u32::MAX) && routes.has_segments(route) {
        return Err(format!(
            "a message of {} B from node {} to node {} would travel in packets of {packet_bytes} B; at most {} B fit a packet: use a smaller packet_bytes",
            s.bytes,
            s.src,
            s.dst,
            u32::MAX
        ));
    }
    let Ok(packets) = u32::try_from(s.bytes.div_ceil(packet_bytes).max(1)) else {
        return Err(format!(
            "a message of {} B from node {} to node {} would need more than {} packets of {packet_bytes} B; use larger packet_bytes or smaller transfers",
            s.bytes,
            s.src,
            s.dst,
            u32::MAX
        ));
    };
    Ok(Message {
        id,
        src: s.src,
        dst: s.dst,
        bytes: s.bytes,
        route,
        packet_bytes,
        packets,
        delivered: 0,
        injected_at: s.at,
        purpose: s.purpose,
        tag: s.tag,
    })
}

/// The `routing` stage: every packet due now crosses the ideal links ahead of
/// it and enters its next non-ideal link or, at the end of its route, arrives;
/// a message whose last packet arrives goes to the [`Inbox`] of its purpose
/// and its entity is parked for reuse.
pub fn routing(clock: Res<Clock>, mut net: RoutingAccess) {
    route_tick(clock.now, &mut net);
}

/// What routing a tick touches.
#[derive(bevy_ecs::system::SystemParam)]
pub struct RoutingAccess<'w, 's> {
    cal: ResMut<'w, NetCalendar>,
    links: ResMut<'w, LinkTable>,
    routes: Res<'w, Routes>,
    msgs: Query<'w, 's, &'static mut Message>,
    inbox: ResMut<'w, Inbox>,
    pool: ResMut<'w, MessagePool>,
    counters: ResMut<'w, NetCounters>,
    trace: ResMut<'w, crate::trace::Trace>,
}

/// Where [`routing_ahead`] must stop: before `horizon`, the next tick at
/// which another module has work, and past `max_ticks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AheadLimit {
    pub horizon: Option<Tick>,
    pub max_ticks: Option<Tick>,
}

/// Routing run by the engine over ticks where only packets move, tick after
/// tick in one system run: each tick is routed as the schedule would route
/// it, and the clock moves to the network's next tick while nothing arrives
/// and that tick is within `limit`. The tick it stops at runs the whole
/// schedule, whose routing stage knows it already ran ([`RoutedAhead`]).
/// Routing sends nothing and reports no error, so an arrival is the only
/// work it can leave for the other stages.
pub fn routing_ahead(
    In(limit): In<AheadLimit>,
    mut clock: ResMut<Clock>,
    mut ahead: ResMut<RoutedAhead>,
    mut net: RoutingAccess,
) {
    loop {
        let at = clock.now;
        route_tick(at, &mut net);
        let next = net.cal.0.next_due().filter(|&t| {
            t > at && limit.horizon.is_none_or(|h| t < h) && limit.max_ticks.is_none_or(|m| t <= m)
        });
        let Some(next) = next.filter(|_| net.inbox.is_empty()) else {
            ahead.0 = true;
            return;
        };
        // What the rest of this tick's schedule would do: nothing but
        // `advance` to the network's next tick.
        clock.steps += 1;
        clock.now = next;
    }
}

/// Routes the packets due at `now`.
fn route_tick(now: Tick, net: &mut RoutingAccess) {
    let RoutingAccess {
        cal,
        links,
        routes,
        msgs,
        inbox,
        pool,
        counters,
        trace,
    } = net;
    let Some(mut due) = cal.0.take_due(now) else {
        return;
    };
    // Same-tick ties: message id, then packet index (a train sorts as its first packet).
    due.sort_unstable_by_key(|e| (e.msg, std::cmp::Reverse(e.left)));
    let (mut hops, mut ideal_hops) = (0, 0);
    for ev in &due {
        let (segs, ideal_after, full) = routes.segments(ev.route);
        // A train (seg 0) reads its message once, for the packet count and sizes.
        let train = (ev.seg == 0).then(|| {
            let m = msgs.get(ev.entity).expect("message of a train");
            (m.packets, m.packet_bytes, m.bytes)
        });
        let count = train.map_or(1, |t| t.0);
        let Some(seg) = segs.get(ev.seg as usize) else {
            // The whole message is in: a train over an all-ideal route, or its last packet.
            ideal_hops += (ideal_after * count) as u64;
            hops += (ideal_after * count) as u64;
            let Ok(mut msg) = msgs.get_mut(ev.entity) else {
                unreachable!("hop event for a message entity that no longer exists");
            };
            msg.delivered = msg.packets;
            let arrival = msg.arrival(now);
            trace.message(&arrival);
            inbox.lists[msg.purpose as usize].push(arrival);
            pool.0.push(ev.entity);
            counters.delivered += 1;
            continue;
        };
        ideal_hops += (seg.ideal_before * count) as u64;
        hops += ((seg.ideal_before + 1) * count) as u64;
        let last_segment = ev.seg as usize + 1 == segs.len();
        for k in 0..count {
            let (left, size) = match train {
                Some((packets, packet_bytes, bytes)) => (
                    packets - 1 - k,
                    Message::size_of_packet(k, packets, packet_bytes, bytes),
                ),
                None => (ev.left, u64::from(ev.size)),
            };
            let ser = if size == full {
                seg.ser_full
            } else {
                links.class(seg.link).ser_ticks(size)
            };
            let left_link = links.reserve(seg.link, now, size, ser);
            if trace.enabled() {
                trace.packet(crate::trace::PacketSpan {
                    link: seg.link,
                    start: left_link - ser,
                    end: left_link,
                    msg: ev.msg,
                    bytes: size,
                });
            }
            let at = left_link + seg.latency;
            if last_segment && left > 0 {
                // Arrives before the last packet: no event, only its hops.
                ideal_hops += ideal_after as u64;
                hops += ideal_after as u64;
                continue;
            }
            let next = HopEvent {
                left,
                seg: ev.seg + 1,
                // Fits: packets are at most u32::MAX bytes (checked at inject).
                size: size as u32,
                ..*ev
            };
            cal.0.push(at, next);
        }
    }
    counters.hops += hops;
    counters.ideal_hops += ideal_hops;
    cal.0.recycle(due);
}

/// The network module: packet and flow calendars, outbox and inbox, message
/// pool and counters, the [`NetworkModel`] (packet unless set); injection,
/// packet routing and the flow stage; its calendar.
pub struct NetworkPlugin;

impl crate::plugin::Plugin for NetworkPlugin {
    fn build(&self, world: &mut World, schedule: &mut Schedule) {
        world.init_resource::<NetCalendar>();
        world.init_resource::<Inbox>();
        world.init_resource::<Outbox>();
        world.init_resource::<MessagePool>();
        world.init_resource::<NetCounters>();
        world.init_resource::<NetworkModel>();
        world.init_resource::<flow::FlowCalendar>();
        world.init_resource::<flow::FlowLinks>();
        schedule.add_systems(
            (
                inject.run_if(outbox_pending),
                routing.run_if(net_due),
                flow::flow_routing.run_if(flow::flow_due),
            )
                .chain()
                .in_set(crate::Stage::Routing),
        );
        // Messages sent by the stages after routing enter before the clock moves.
        schedule.add_systems(inject.run_if(outbox_pending).in_set(crate::Stage::Inject));
        world.init_resource::<RoutedAhead>();
        crate::plugin::register_network_calendar(world, |w, now| {
            if !w.resource::<Outbox>().is_empty() || !w.resource::<Inbox>().is_empty() {
                return Some(now);
            }
            let packets = w.resource::<NetCalendar>().0.next_due();
            let flows = w.resource::<flow::FlowCalendar>().0.next_due();
            packets.into_iter().chain(flows).min()
        });
    }
}

fn net_due(clock: Res<Clock>, cal: Res<NetCalendar>, ahead: Res<RoutedAhead>) -> bool {
    !ahead.0 && crate::plugin::due(cal.0.next_due(), clock.now)
}

/// Set when the engine has already run [`routing`] for the current tick
/// outside the schedule (it runs ahead over ticks where only packets move);
/// the schedule's routing then waits for the next run at this tick, as it
/// would have, and `advance` clears it.
#[derive(Resource, Default)]
pub struct RoutedAhead(pub bool);

fn outbox_pending(outbox: Res<Outbox>) -> bool {
    !outbox.is_empty()
}
