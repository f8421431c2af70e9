//! Traffic sources: what injects messages into the network and hears of their
//! arrival. Tests and benches drive the engine through this seam; later the
//! IPCQ and DMA models inject their chunks and credits the same way.

use crate::network::{
    Arrived, LinkTable, Message, MessagePool, MsgId, NetCalendar, NodeId, Routes, schedule_packets,
};
use crate::time::{Clock, Tick};
use bevy_ecs::prelude::*;

/// A message to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Send {
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
    /// Tick at which the message is at its source, ready to enter the first link.
    pub at: Tick,
    /// Handed back in [`Arrival::tag`].
    pub tag: u64,
}

/// A delivered message, as reported to its traffic source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub id: MsgId,
    pub tag: u64,
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
    pub injected_at: Tick,
    /// Tick at which the last packet reached `dst`.
    pub at: Tick,
}

/// Collects the sends of a traffic source; ids are assigned in call order.
pub struct Injector<'a> {
    now: Tick,
    next_id: &'a mut MsgId,
    out: &'a mut Vec<(MsgId, Send)>,
}

impl Injector<'_> {
    /// Current tick; sends may not be scheduled before it.
    pub fn now(&self) -> Tick {
        self.now
    }

    /// Queues a message and returns its id. `at` earlier than now is treated as now.
    pub fn send(&mut self, mut s: Send) -> MsgId {
        s.at = s.at.max(self.now);
        let id = *self.next_id;
        *self.next_id += 1;
        self.out.push((id, s));
        id
    }
}

/// A workload: injects messages at start and in reaction to arrivals.
pub trait Traffic: std::any::Any + std::marker::Send + Sync {
    fn start(&mut self, net: &mut Injector);
    fn on_arrival(&mut self, arrival: Arrival, net: &mut Injector);
}

/// The installed workload and the message-id counter.
#[derive(Resource, Default)]
pub struct TrafficState {
    pub source: Option<Box<dyn Traffic>>,
    pub next_id: MsgId,
    pending: Vec<(MsgId, Send)>,
    /// First route error met; the run stops with it.
    pub error: Option<String>,
    started: bool,
}

impl TrafficState {
    /// Runs `f` with an injector; the sends wait in `pending` until [`spawn_pending`].
    pub fn inject(&mut self, now: Tick, f: impl FnOnce(&mut dyn Traffic, &mut Injector)) {
        let Some(mut source) = self.source.take() else {
            return;
        };
        let mut inj = Injector {
            now,
            next_id: &mut self.next_id,
            out: &mut self.pending,
        };
        f(source.as_mut(), &mut inj);
        self.source = Some(source);
    }
}

/// Turns pending sends into message entities with packets on the calendar.
pub fn spawn_pending(
    traffic: &mut TrafficState,
    mut spawn: impl FnMut(Message) -> Entity,
    routes: &mut Routes,
    links: &LinkTable,
    cal: &mut NetCalendar,
) {
    for (id, s) in traffic.pending.drain(..) {
        let route = match routes.get(links, s.src, s.dst) {
            Ok(r) => r,
            Err(e) => {
                traffic.error.get_or_insert(e);
                continue;
            }
        };
        let packet_bytes = routes.packet_bytes(route).min(s.bytes.max(1));
        let packets = s.bytes.div_ceil(packet_bytes).max(1) as u32;
        let msg = Message {
            id,
            src: s.src,
            dst: s.dst,
            bytes: s.bytes,
            route,
            packet_bytes,
            packets,
            delivered: 0,
            injected_at: s.at,
            tag: s.tag,
        };
        let entity = spawn(msg);
        schedule_packets(cal, id, packets, entity, s.at);
    }
}

/// The network side of the delivery stage.
#[derive(bevy_ecs::system::SystemParam)]
pub struct NetAccess<'w> {
    pub routes: ResMut<'w, Routes>,
    pub links: Res<'w, LinkTable>,
    pub cal: ResMut<'w, NetCalendar>,
    pub pool: ResMut<'w, MessagePool>,
}

/// The `delivery` stage: reports arrived messages to the workload, parks
/// their entities for reuse, and injects whatever the workload sends in
/// reaction.
pub fn delivery(
    clock: Res<Clock>,
    mut arrived: ResMut<Arrived>,
    mut msgs: Query<&mut Message>,
    mut traffic: ResMut<TrafficState>,
    mut net: NetAccess,
    mut commands: Commands,
) {
    let now = clock.now;
    let traffic = &mut *traffic;
    if !traffic.started {
        traffic.started = true;
        traffic.inject(now, |t, inj| t.start(inj));
    }
    for entity in arrived.0.drain(..) {
        let m = msgs.get(entity).expect("arrived message entity exists");
        let arrival = Arrival {
            id: m.id,
            tag: m.tag,
            src: m.src,
            dst: m.dst,
            bytes: m.bytes,
            injected_at: m.injected_at,
            at: now,
        };
        traffic.inject(now, |t, inj| t.on_arrival(arrival, inj));
        net.pool.0.push(entity);
    }
    // New messages reuse parked entities first.
    let pool = &mut net.pool.0;
    let spawn = |msg: Message| match pool.pop() {
        Some(e) => {
            *msgs.get_mut(e).expect("parked message entity exists") = msg;
            e
        }
        None => commands.spawn(msg).id(),
    };
    spawn_pending(traffic, spawn, &mut net.routes, &net.links, &mut net.cal);
}

/// When a scheduled message enters the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At this tick.
    At(Tick),
    /// When message number `after` (index in the schedule) has arrived, plus `delay` ticks.
    After { after: usize, delay: Tick },
}

/// A fixed list of messages with start ticks or arrival dependencies; records
/// every message's arrival tick. The injection seam for tests and benches.
#[derive(Debug, Default, Clone)]
pub struct ScheduledTraffic {
    messages: Vec<(NodeId, NodeId, u64, Start)>,
    dependents: Vec<Vec<usize>>,
    arrivals: Vec<Option<Tick>>,
}

impl ScheduledTraffic {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a message and returns its index; `Start::After` must name an earlier index.
    pub fn add(&mut self, src: NodeId, dst: NodeId, bytes: u64, start: Start) -> usize {
        let i = self.messages.len();
        if let Start::After { after, .. } = start {
            assert!(after < i, "Start::After must name an earlier message");
            self.dependents[after].push(i);
        }
        self.messages.push((src, dst, bytes, start));
        self.dependents.push(Vec::new());
        self.arrivals.push(None);
        i
    }

    /// Arrival tick of message `i` (None if it never arrived).
    pub fn arrival(&self, i: usize) -> Option<Tick> {
        self.arrivals[i]
    }

    pub fn arrivals(&self) -> &[Option<Tick>] {
        &self.arrivals
    }

    fn send(&self, i: usize, at: Tick, net: &mut Injector) {
        let (src, dst, bytes, _) = self.messages[i];
        net.send(Send {
            src,
            dst,
            bytes,
            at,
            tag: i as u64,
        });
    }
}

impl Traffic for ScheduledTraffic {
    fn start(&mut self, net: &mut Injector) {
        for i in 0..self.messages.len() {
            if let Start::At(t) = self.messages[i].3 {
                self.send(i, t, net);
            }
        }
    }

    fn on_arrival(&mut self, a: Arrival, net: &mut Injector) {
        let i = a.tag as usize;
        self.arrivals[i] = Some(a.at);
        for k in 0..self.dependents[i].len() {
            let d = self.dependents[i][k];
            if let Start::After { delay, .. } = self.messages[d].3 {
                self.send(d, a.at + delay, net);
            }
        }
    }
}
