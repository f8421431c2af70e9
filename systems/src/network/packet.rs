//! Packet mode: store-and-forward packets, each reserving each non-ideal
//! link first come first served; one calendar event per packet per segment.
//!
//! Timing (docs/model.md §Links): a packet of `s` bytes that reaches a link at
//! tick `t` starts at `max(t, free_at)`, holds the link for `ser(s) = ⌈s/B⌉`
//! ticks and reaches the far node `L` ticks after it leaves the link. A link
//! serves packets first-come first-served; packets that reach it in the same
//! tick are served in (message id, packet index) order. Because the calendar
//! hands out events in tick order, reserving the link on arrival *is* that
//! FIFO queue, so no explicit queue is kept.

use super::{
    AheadLimit, Inbox, LinkTable, Message, MessagePool, NetCounters, RouteId, RoutedAhead, Routes,
};
use crate::ids::MsgId;
use crate::time::{Calendar, Clock, Tick};
use bevy_ecs::prelude::*;

/// "A packet of message `entity` with `left` packets behind it is at the
/// near end of segment `seg` of route `route` now." A message's packets enter
/// the network as one train event (`seg` 0, every packet, `left` = packets −
/// 1); after their first link they travel as single packets that carry their
/// own size. A train carries its last packet's size (the others are full:
/// the route's packet size), so a hop reads no message component: only the
/// arrival does. Packets of one message keep their order (one route, FIFO
/// links), so only the last packet's arrival is an event. 32 bytes.
#[derive(Debug, Clone, Copy)]
pub struct HopEvent {
    pub msg: MsgId,
    pub entity: Entity,
    /// Packets of the message after this one (0: the last packet).
    pub left: u32,
    pub route: RouteId,
    pub seg: u32,
    /// Bytes of this packet; of a train, of its last packet (`inject`
    /// refuses messages whose packets would not fit in 32 bits).
    pub size: u32,
}

/// Packets waiting to enter their next link, by tick.
#[derive(Resource, Default, Debug)]
pub struct NetCalendar(pub Calendar<HopEvent>);

/// Queues the packets of a new message at its source at tick `at`.
pub fn schedule_packets(
    cal: &mut NetCalendar,
    msg: MsgId,
    (packets, last_packet): (u32, u64),
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
            // Only a route with links uses it, whose packets fit 32 bits.
            size: last_packet.min(u64::from(u32::MAX)) as u32,
        },
    );
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

impl super::RouteAhead for RoutingAccess<'_, '_> {
    fn route(&mut self, now: Tick) {
        route_tick(now, self);
    }
    fn next_due(&self) -> Option<Tick> {
        self.cal.0.next_due()
    }
    fn delivered(&self) -> bool {
        !self.inbox.is_empty()
    }
}

/// Routing run by the engine over ticks where only packets move, tick after
/// tick in one system run ([`super::run_ahead`]). Routing sends nothing and reports
/// no error, so an arrival is the only work it can leave for the other
/// stages.
pub fn routing_ahead(
    In(limit): In<AheadLimit>,
    mut clock: ResMut<Clock>,
    mut ahead: ResMut<RoutedAhead>,
    mut net: RoutingAccess,
) {
    super::run_ahead(limit, &mut clock, &mut ahead, &mut net);
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
    sort_same_tick(&mut due);
    let (mut hops, mut ideal_hops) = (0, 0);
    for (i, ev) in due.iter().enumerate() {
        prefetch_ahead(&due, i, routes, links, msgs);
        let (segs, ideal_after, full) = routes.segments(ev.route);
        // A train (seg 0): every packet of its message, full but its last.
        let train = ev.seg == 0;
        let count = if train { ev.left + 1 } else { 1 };
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
            // A train's k-th packet has `left − k` behind it (k is 0 otherwise).
            let left = ev.left - k;
            let size = if train && left > 0 {
                full
            } else {
                u64::from(ev.size)
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

/// Asks the caches for what the events after event `i` read, in the order
/// they read it: a route 16 events ahead, its segment 8 ahead (through the
/// route fetched by then), the link's state or the arriving message 4
/// ahead. On machines whose links, routes and messages outgrow the caches,
/// each of these is a miss a hop would otherwise wait for.
fn prefetch_ahead(
    due: &[HopEvent],
    i: usize,
    routes: &Routes,
    links: &LinkTable,
    msgs: &Query<&mut Message>,
) {
    if let Some(e) = due.get(i + 16) {
        routes.prefetch_span(e.route);
    }
    if let Some(e) = due.get(i + 8) {
        routes.prefetch_segment(e.route, e.seg);
    }
    let Some(e) = due.get(i + 4) else {
        return;
    };
    match routes.segments(e.route).0.get(e.seg as usize) {
        Some(s) => links.prefetch(s.link),
        None => {
            if let Ok(m) = msgs.get(e.entity) {
                crate::prefetch::prefetch(m);
            }
        }
    }
}

/// Orders the packets due in one tick: message id, then packet index (a
/// train sorts as its first packet); keys are unique, so any sort gives the
/// same order. A bucket is a merge of runs already in order (the packets
/// routed at each earlier tick), which a run-aware sort merges cheaply; one
/// integer key compares faster than the tuple.
fn sort_same_tick(due: &mut [HopEvent]) {
    let pack = |e: &HopEvent| (u128::from(e.msg.0) << 32) | u128::from(u32::MAX - e.left);
    if due.iter().all(|e| e.msg.0 <= u64::from(u32::MAX)) {
        due.sort_by_key(|e| pack(e) as u64);
    } else {
        due.sort_by_key(pack);
    }
}

pub(super) fn net_due(clock: Res<Clock>, cal: Res<NetCalendar>, ahead: Res<RoutedAhead>) -> bool {
    !ahead.0 && crate::plugin::due(cal.0.next_due(), clock.now)
}
