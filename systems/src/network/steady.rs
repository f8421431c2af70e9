//! The network's part of the fast-forward (`crate::steady`): messages in
//! flight, packet and flow events, the flows on each link, encoded relative
//! to now and moved on by whole periods.

use super::flow::{Flow, FlowCalendar, FlowLinks, FlowStep};
use super::{Message, NetCalendar};
use crate::ids::MsgId;
use crate::steady::{Sig, later};
use crate::time::Tick;
use bevy_ecs::prelude::*;
use rustc_hash::FxHashMap;

/// Every message entity with its flow (flow mode).
pub(crate) type MessageQuery = QueryState<(Entity, &'static Message, Option<&'static Flow>)>;
pub(crate) type MessageQueryMut = QueryState<(&'static mut Message, Option<&'static mut Flow>)>;

/// Encodes the messages in flight (by id), the packet and flow calendars
/// and the flows on each link and route.
pub(crate) fn steady_words(world: &World, query: &mut MessageQuery, sig: &mut Sig) {
    let mut live: Vec<(&Message, Option<&Flow>)> = Vec::new();
    let mut ids: FxHashMap<Entity, MsgId> = FxHashMap::default();
    for (e, m, f) in query.iter(world) {
        if m.delivered < m.packets {
            ids.insert(e, m.id);
            live.push((m, f));
        }
    }
    live.sort_unstable_by_key(|(m, f)| (m.id, f.map_or(0, |f| f.leg)));
    sig.word(live.len() as u64);
    let host = world.resource::<crate::exec::HostQueue>();
    for (m, f) in live {
        message_words(m, host.steady_job(m.purpose, m.tag), sig);
        if let Some(f) = f {
            flow_words(f, sig);
        }
    }
    for (t, ev) in world.resource::<NetCalendar>().0.iter() {
        sig.at(t);
        sig.msg(ev.msg);
        for w in [ev.left, ev.route.0, ev.seg, ev.size] {
            sig.word(w.into());
        }
    }
    sig.word(u64::MAX);
    for (t, ev) in world.resource::<FlowCalendar>().0.iter() {
        sig.at(t);
        let stale = match ev.step {
            FlowStep::Drained(g) => !query
                .get(world, ev.entity)
                .is_ok_and(|(_, m, f)| m.id == ev.msg && f.is_some_and(|f| f.generation == g)),
            _ => false,
        };
        if stale {
            sig.word(u64::MAX);
        } else {
            sig.msg(ev.msg);
            sig.word(ev.leg.into());
            sig.word(match ev.step {
                FlowStep::Start => 0,
                FlowStep::Join => 1,
                FlowStep::Drained(_) => 2,
                FlowStep::Arrive => 3,
            });
        }
    }
    sig.word(u64::MAX);
    let id_of = |e: Entity| ids.get(&e).copied().unwrap_or(MsgId(u64::MAX));
    world.resource::<FlowLinks>().steady_words(&id_of, sig);
}

/// A message; a remote load or store by what it carries, not its tag.
fn message_words(m: &Message, job: Option<[u64; 4]>, sig: &mut Sig) {
    sig.msg(m.id);
    for w in [m.src.0, m.dst.0, m.route.0] {
        sig.word(w.into());
    }
    for w in [m.bytes, m.packet_bytes] {
        sig.word(w);
    }
    match job {
        Some(words) => words.into_iter().for_each(|w| sig.word(w)),
        None => sig.word(m.tag),
    }
    sig.word(m.packets.into());
    sig.word(m.delivered.into());
    sig.word(m.purpose as u64);
    sig.at(m.injected_at);
}

/// A flow; a start or update at tick 0 is one that has not happened yet.
fn flow_words(f: &Flow, sig: &mut Sig) {
    sig.word(f.alone);
    sig.word(f.latency);
    for x in [f.tail, f.bottleneck, f.left, f.rate] {
        sig.float(x);
    }
    f.turn.steady_words(sig);
    sig.at_if_set(f.start);
    sig.at_if_set(f.updated_at);
    sig.word(f.generation.into());
    sig.word(u64::from(f.shared) << 1 | u64::from(f.queued) | u64::from(f.awaiting) << 2);
    sig.word(u64::from(f.segs.0) | u64::from(f.segs.1) << 16 | u64::from(f.leg) << 32);
    sig.word(f.leg_end);
    sig.word(u64::from(f.last_leg.is_some()) << 8 | u64::from(f.pending));
    sig.at_if_set(f.not_before);
}

/// Moves every message, packet and flow `d` ticks later and every message
/// id `msgs` on (parked ones too, so a stale event stays stale).
pub(crate) fn steady_shift(world: &mut World, query: &mut MessageQueryMut, d: Tick, msgs: u64) {
    for (mut m, f) in query.iter_mut(world) {
        m.id = m.id.later(msgs);
        later(&mut m.injected_at, d);
        if let Some(mut f) = f {
            later(&mut f.start, d);
            f.turn.shift(d, msgs);
            later(&mut f.updated_at, d);
            if f.not_before != 0 {
                later(&mut f.not_before, d);
            }
        }
    }
    let mut cal = world.resource_mut::<NetCalendar>();
    cal.0.shift(d);
    cal.0.for_each_mut(|ev| ev.msg = ev.msg.later(msgs));
    world.resource_mut::<FlowLinks>().steady_shift(d, msgs);
    let mut cal = world.resource_mut::<FlowCalendar>();
    cal.0.shift(d);
    cal.0.for_each_mut(|ev| ev.msg = ev.msg.later(msgs));
}
