//! The network: links (`links`), routes (`routes`), the in-flight message
//! entities with their outbox, inbox and injection (here), and the two ways
//! bytes cross: packets (`packet`) and flows (`flow`).
//!
//! Timing (docs/model.md §Links): a packet of `s` bytes that reaches a link at
//! tick `t` starts at `max(t, free_at)`, holds the link for `ser(s) = ⌈s/B⌉`
//! ticks and reaches the far node `L` ticks after it leaves the link. A link
//! serves packets first-come first-served; packets that reach it in the same
//! tick are served in (message id, packet index) order. Because the calendar
//! hands out events in tick order, reserving the link on arrival *is* that
//! FIFO queue, so no explicit queue is kept.

use crate::time::Tick;
use bevy_ecs::prelude::*;

mod ahead;
pub mod flow;
mod links;
mod packet;
mod routes;
mod steady;

pub use crate::ids::{Arrival, LinkId, MsgId, NodeId, Purpose};
pub use ahead::{AheadLimit, RoutedAhead};
use ahead::{RouteAhead, run_ahead};
pub use flow::NetworkModel;
pub use links::{LinkClass, LinkStats, LinkTable, LinkTableBuilder};
pub use packet::*;
pub use routes::{RouteId, RouteSource, Routes, Segment};
pub(crate) use steady::{steady_shift, steady_words};

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
        self.next_id = id.next();
        self.pending.push((id, s));
        id
    }

    /// Messages ever sent.
    pub fn sent(&self) -> u64 {
        // Ids are dense from 0 in send order: the next one is the count.
        self.next_id.0
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

impl Outbox {
    /// For the fast-forward: the id counter.
    pub(crate) fn steady_counters(&mut self, f: &mut impl FnMut(&mut u64)) {
        f(&mut self.next_id.0);
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
            let legs = flow::Flow::of(&net.links, &net.routes, (&msg, at), *net.leg_span);
            flow::account(&mut net.links, &mut net.counters, &net.routes, &msg);
            let mut put = |parked: Option<Entity>, flow: flow::Flow| match parked
                .map(|e| (e, net.msgs.get_mut(e)))
            {
                Some((e, Ok((mut m, Some(mut f))))) => {
                    (*m, *f) = (msg.clone(), flow);
                    e
                }
                Some((e, _)) => commands.entity(e).insert((msg.clone(), flow)).id(),
                None => commands.spawn((msg.clone(), flow)).id(),
            };
            let (last, earlier) = legs.split_last().expect("a message has a leg");
            let last_entity = put(parked, *last);
            flow::schedule_leg(&mut net.flow_cal, &msg, (last_entity, last));
            for leg in earlier {
                let flow = flow::Flow {
                    last_leg: Some(last_entity),
                    ..*leg
                };
                let e = put(net.pool.0.pop(), flow);
                flow::schedule_leg(&mut net.flow_cal, &msg, (e, &flow));
            }
        } else {
            let last = Message::size_of_packet(packets - 1, packets, msg.packet_bytes, msg.bytes);
            let entity = match parked {
                Some(e) => {
                    *net.msgs.get_mut(e).expect("parked message entity exists").0 = msg;
                    e
                }
                None => commands.spawn(msg).id(),
            };
            schedule_packets(&mut net.cal, id, (packets, last), route, entity, at);
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
    leg_span: Res<'w, flow::LegSpan>,
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
        world.init_resource::<flow::LegSpan>();
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

fn outbox_pending(outbox: Res<Outbox>) -> bool {
    !outbox.is_empty()
}
