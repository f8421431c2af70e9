//! Traffic sources: what injects messages into the network and hears of their
//! arrival. Tests and benches drive the engine through this seam; later the
//! IPCQ and DMA models inject their chunks and credits the same way.

pub use crate::network::Arrival;
use crate::network::{Inbox, MsgId, NodeId, Outbox, Purpose};
use crate::time::Tick;
use bevy_ecs::prelude::*;

/// A message a traffic source sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrafficMessage {
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
    /// Tick at which the message is at its source, ready to enter the first link.
    pub at: Tick,
    /// Handed back in [`Arrival::tag`].
    pub tag: u64,
}

/// Collects the sends of a traffic source; ids are assigned in call order.
pub struct Injector<'a> {
    now: Tick,
    out: &'a mut Outbox,
}

impl Injector<'_> {
    /// Current tick; sends may not be scheduled before it.
    pub fn now(&self) -> Tick {
        self.now
    }

    /// Queues a message and returns its id. `at` earlier than now is treated as now.
    pub fn send(&mut self, s: TrafficMessage) -> MsgId {
        self.out.send(crate::network::NewMessage {
            src: s.src,
            dst: s.dst,
            bytes: s.bytes,
            at: s.at.max(self.now),
            purpose: Purpose::Traffic,
            tag: s.tag,
            route: None,
        })
    }
}

/// A workload: injects messages at start and in reaction to arrivals.
pub trait Traffic: std::any::Any + Send + Sync {
    fn start(&mut self, net: &mut Injector);
    fn on_arrival(&mut self, arrival: Arrival, net: &mut Injector);
}

/// The installed workload.
#[derive(Resource, Default)]
pub struct TrafficState {
    pub source: Option<Box<dyn Traffic>>,
    started: bool,
}

impl TrafficState {
    /// Whether a source is installed and has not been started yet.
    pub fn needs_start(&self) -> bool {
        self.source.is_some() && !self.started
    }

    /// Runs `f` on the source with an injector into `out`.
    fn inject(
        &mut self,
        now: Tick,
        out: &mut Outbox,
        f: impl FnOnce(&mut dyn Traffic, &mut Injector),
    ) {
        if let Some(source) = self.source.as_deref_mut() {
            f(source, &mut Injector { now, out });
        }
    }
}

/// The traffic part of the `delivery` stage: starts the workload on the first
/// tick, reports arrived traffic messages to it, and queues what it sends in
/// reaction.
pub fn deliver_traffic(
    now: Tick,
    inbox: &mut Inbox,
    traffic: &mut TrafficState,
    outbox: &mut Outbox,
) {
    if !traffic.started {
        traffic.started = true;
        traffic.inject(now, outbox, |t, inj| t.start(inj));
    }
    let arrived = inbox.take(Purpose::Traffic);
    for &a in &arrived {
        traffic.inject(now, outbox, |t, inj| t.on_arrival(a, inj));
    }
    inbox.restore(Purpose::Traffic, arrived);
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
        net.send(TrafficMessage {
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

/// The traffic module: the installed workload (delivered in the delivery stage).
pub struct TrafficPlugin;

impl crate::plugin::Plugin for TrafficPlugin {
    fn build(&self, world: &mut World, _: &mut Schedule) {
        world.init_resource::<TrafficState>();
    }
}
