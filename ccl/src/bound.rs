//! The α-β lower bound of a collective on a system (docs/model.md §Bounds):
//! the largest of several terms, each a time no algorithm can beat.
//!
//! * bandwidth terms: bytes a participant, its cube, or its SIP must receive,
//!   over the bandwidth of the links that enter it (2(n−1)/n·S for all-reduce
//!   and (n−1)/n·S for reduce-scatter, all-gather and all-to-all, S for a
//!   broadcast receiver or the reduce root), with n counted at that level;
//! * memory term: bytes the cube's HBM port must read and write;
//! * bisection term (all-to-all only): bytes one half of the SIP grid must
//!   send the other, over the inter-SIP links that cross the cut;
//! * latency term: the summed link latency between participant 0 and the
//!   participant farthest from it (every result depends on both);
//! * latency + links term (broadcast and reduce): every byte a cube must
//!   receive comes from participant 0 (broadcast), or every byte it must
//!   send goes there (reduce): each of its links opens at the least summed
//!   latency from there (to there), and the term is when the open links can
//!   have carried all S.
//!
//! Ideal links or memories make their terms vanish.

use super::{Collective, Group, Job};
use kernbench_runtime::machine::Machine;
use kernbench_spec::spec::System;
use kernbench_spec::topology::{Dir, INTER_SIP, NOC, Node, PCIE, UCIE, edge_kind};
use kernbench_systems::{LinkId, LinkTable, NodeId, RouteSource, Tick};

/// The bound and the terms it is the maximum of.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    pub ticks: Tick,
    pub terms: Vec<(&'static str, Tick)>,
}

impl Bound {
    /// The term that sets the bound (the first of the largest), or "none"
    /// for a single participant.
    pub fn limiting(&self) -> &'static str {
        let mut best: Option<(&'static str, Tick)> = None;
        for &(name, t) in &self.terms {
            if best.is_none_or(|b| t > b.1) {
                best = Some((name, t));
            }
        }
        best.map_or("none", |b| b.0)
    }
}

/// Bytes that must enter a set of `k` of the `n` participants from outside it:
/// one participant (`k` = 1), a cube's participants or a SIP's. Participants
/// inside the set can share what enters, so a set is one participant of `n / k`
/// for every collective but all-to-all, whose blocks are distinct per receiver:
/// each of the `k` receives a block of `S/n` from each of the `n − k` outside.
fn inbound(job: &Job, n: usize, k: usize) -> f64 {
    if k >= n {
        return 0.0;
    }
    let (s, sets) = (job.bytes() as f64, (n / k) as f64);
    match job.collective {
        Collective::AllToAll => (k * (n - k)) as f64 * s / n as f64,
        Collective::AllReduce => 2.0 * (sets - 1.0) / sets * s,
        Collective::ReduceScatter | Collective::AllGather => (sets - 1.0) / sets * s,
        Collective::Broadcast | Collective::Reduce => s,
    }
}

/// Bytes per tick of the links entering `node` of the kinds `kinds`
/// selects; None if one of them is ideal (unbounded).
fn inbound_rate(links: &LinkTable, node: NodeId, kinds: impl Fn(u8) -> bool) -> Option<f64> {
    let mut rate = 0.0;
    for out in links.out_links(node) {
        let (_, peer) = links.endpoints(out);
        let Some(l) = links.find(peer, node) else {
            continue;
        };
        if !kinds(edge_kind(links.class_index(l))) {
            continue;
        }
        let c = links.class(l);
        if c.ideal {
            return None;
        }
        rate += c.rate_num as f64 / c.rate_den as f64;
    }
    Some(rate)
}

/// Bytes per tick of the links of the kinds `kinds` selects into a cube's
/// UCIe and inter-SIP ports; None if one is ideal.
fn cube_rate(m: &Machine, sip: u32, cube: u32, kinds: &dyn Fn(u8) -> bool) -> Option<f64> {
    let t = &m.topology;
    let mut total = 0.0;
    for dir in Dir::ALL {
        for port in [Node::Ucie { sip, cube, dir }, Node::XSip { sip, cube, dir }] {
            if t.present(port) {
                total += inbound_rate(m.engine.links(), t.id(port), kinds)?;
            }
        }
    }
    Some(total)
}

/// The smallest rate; None if any is unbounded (an ideal link) or none is
/// finite.
fn min_rate(mut rates: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    rates
        .try_fold(f64::INFINITY, |a, r| r.map(|r| a.min(r)))
        .filter(|r| r.is_finite())
}

fn term(bytes: f64, rate: Option<f64>) -> Tick {
    match rate {
        Some(r) if r > 0.0 => (bytes / r).floor() as Tick,
        _ => 0,
    }
}

pub fn lower_bound(m: &Machine, sys: &System, g: &Group, job: &Job) -> Bound {
    let (t, links) = (&m.topology, m.engine.links());
    let n = g.size();
    let mut terms = Vec::new();
    if n < 2 {
        return Bound { ticks: 0, terms };
    }
    // Participant: the PE's own NoC port.
    let pe0 = t.id(Node::Pe {
        sip: g.sip(0),
        cube: 0,
        pe: 0,
    });
    terms.push((
        "participant port",
        term(inbound(job, n, 1), inbound_rate(links, pe0, |_| true)),
    ));
    // Cube: UCIe and inter-SIP links into its ports; the worst-connected cube.
    let cubes = g.cubes_per_sip();
    let port_rate = |sip, cube, kinds: &dyn Fn(u8) -> bool| cube_rate(m, sip, cube, kinds);
    let all_links = |k: u8| k == UCIE || k == INTER_SIP;
    let worst_cube = min_rate((0..cubes).map(|c| port_rate(g.sip(0), c, &all_links)));
    let per_cube = g.pes as usize;
    terms.push(("cube links", term(inbound(job, n, per_cube), worst_cube)));
    // SIP: inter-SIP lanes into it; the worst-connected SIP.
    if g.sip_count() > 1 {
        let lanes = |k: u8| k == INTER_SIP;
        let sip_rate = |sip: u32| {
            (0..cubes)
                .map(|c| port_rate(sip, c, &lanes))
                .try_fold(0.0, |a, r| r.map(|r| a + r))
        };
        let worst_sip = min_rate((0..g.sip_count()).map(|m| sip_rate(g.sip(m))));
        let per_sip = per_cube * cubes as usize;
        terms.push(("SIP lanes", term(inbound(job, n, per_sip), worst_sip)));
    }
    // Memory: the cube's HBM port reads its input and writes its output.
    // Participant 0's cube must do it; its SIP's kind sets the port.
    let hbm = &sys.kinds.of(g.sip(0)).memory.hbm;
    if !hbm.ideal {
        let s = job.bytes() as f64;
        let moved = match job.collective {
            Collective::AllReduce | Collective::Reduce | Collective::AllToAll => 2.0 * s,
            Collective::ReduceScatter | Collective::AllGather => s + s / n as f64,
            Collective::Broadcast => s,
        };
        let rate = hbm.bandwidth_gbps * sys.spec.system.tick_ns;
        terms.push(("HBM port", term(moved, Some(rate))));
    }
    if job.collective == Collective::AllToAll
        && let Some(t) = bisection(m, g, job)
    {
        terms.push(("bisection", t));
    }
    // Latency: participant 0 to the farthest SIP's farthest cube (in a
    // folded group, the farthest simulated one's, and the hops beyond it).
    let (w, h) = g.grid;
    let (pw, ph) = g.simulated_grid();
    let far_sip = match g.topology {
        kernbench_spec::spec::SipTopology::Mesh2dNoWrap => w * h - 1,
        _ => (ph / 2) * w + pw / 2,
    };
    let far = t.id(Node::Pe {
        sip: g.sip(far_sip),
        cube: cubes - 1,
        pe: 0,
    });
    let mut path = Vec::new();
    if t.route(pe0, far, &mut path).is_ok() {
        let lat = path_latency(links, &path) + folded_latency(m, g, &path);
        terms.push(("latency", lat));
    }
    if matches!(job.collective, Collective::Broadcast | Collective::Reduce)
        && let Some(t) = latency_and_links(m, g, job)
    {
        terms.push(("latency + links", t));
    }
    let ticks = terms.iter().map(|t| t.1).max().unwrap_or(0);
    Bound { ticks, terms }
}

/// Summed latency of the links along `path` (ideal links take none).
fn path_latency(links: &LinkTable, path: &[NodeId]) -> Tick {
    path.windows(2)
        .filter_map(|p| links.find(p[0], p[1]))
        .filter(|&l| !links.class(l).ideal)
        .map(|l| links.class(l).latency)
        .sum()
}

/// In a folded group (docs/model.md §Fold), what the route to the whole
/// machine's farthest SIP adds to `path`, the route to the simulated
/// grid's farthest SIP (pw/2, ph/2):
/// per SIP hop more along a side, one inter-SIP link and one crossing of
/// the lane cube `path` uses, from the port it enters by to the one it
/// leaves by (all SIPs alike, so any SIP's serve).
fn folded_latency(m: &Machine, g: &Group, path: &[NodeId]) -> Tick {
    let (t, links) = (&m.topology, m.engine.links());
    let (pw, ph) = g.simulated_grid();
    let more = (g.grid.0 / 2 - pw / 2, g.grid.1 / 2 - ph / 2);
    let lane = path.iter().find_map(|&n| match t.node(n) {
        Node::XSip { cube, .. } => Some(cube),
        _ => None,
    });
    let Some(cube) = lane else {
        return 0;
    };
    // SIP 0 to its neighbour `next` leaving by `out`, then across `next`.
    let hop = |next: u32, out: Dir, back: Dir| {
        let port = |sip, dir| t.id(Node::XSip { sip, cube, dir });
        let mut across = Vec::new();
        if t.route(port(next, back), port(next, out), &mut across)
            .is_err()
        {
            return 0;
        }
        path_latency(links, &[port(0, out), port(next, back)]) + path_latency(links, &across)
    };
    let mut extra = 0;
    if more.0 > 0 {
        extra += Tick::from(more.0) * hop(1, Dir::E, Dir::W);
    }
    if more.1 > 0 {
        extra += Tick::from(more.1) * hop(pw, Dir::S, Dir::N);
    }
    extra
}

/// All-to-all's bisection term: cut the machine's SIP grid in two halves
/// along its longer dimension (rows when it is taller than wide, else
/// columns; a ring is one row), so side A is `x < w/2` (or `y < h/2`).
/// Every participant on side A sends a block of `S/n` to every participant
/// on side B, and those bytes cross the inter-SIP links from A to B: their
/// summed rate bounds the time. None when one side has no participant or a
/// crossing link is ideal. The cut is of the physical grid, so a subgroup's
/// participants are counted where they sit and the term stays a valid bound.
fn bisection(m: &Machine, g: &Group, job: &Job) -> Option<Tick> {
    let (t, links) = (&m.topology, m.engine.links());
    let (w, h) = t.grid;
    let side_a = |sip: u32| {
        let (x, y) = t.sip_coord(sip);
        if h > w { y < h / 2 } else { x < w / 2 }
    };
    let per_sip = (g.cubes_per_sip() * g.pes) as f64;
    let in_a = (0..g.sip_count()).filter(|&k| side_a(g.sip(k))).count() as f64 * per_sip;
    let in_b = g.sip_count() as f64 * per_sip - in_a;
    if in_a == 0.0 || in_b == 0.0 {
        return None;
    }
    let block = job.bytes() as f64 / g.size() as f64;
    let mut rate = 0.0;
    for sip in (0..t.sips).filter(|&s| side_a(s)) {
        for cube in 0..t.cubes_per_sip() {
            for dir in Dir::ALL {
                let port = Node::XSip { sip, cube, dir };
                if !t.present(port) {
                    continue;
                }
                for l in links.out_links(t.id(port)) {
                    let crosses = edge_kind(links.class_index(l)) == INTER_SIP
                        && matches!(t.node(links.endpoints(l).1), Node::XSip { sip, .. } if !side_a(sip));
                    if !crosses {
                        continue;
                    }
                    let c = links.class(l);
                    if c.ideal {
                        return None;
                    }
                    rate += c.rate_num as f64 / c.rate_den as f64;
                }
            }
        }
    }
    Some(term(in_a * in_b * block, Some(rate)))
}

/// Broadcast's and reduce's latency + links term, the largest over every
/// cube but participant 0's. A broadcast's cube must receive S bytes, each
/// from participant 0: through each UCIe or inter-SIP link into its ports,
/// none can arrive before that link's earliest arrival (the least summed
/// latency from participant 0 to the link's far end, plus its own), and
/// after that at most the link's rate arrive per tick. The term is the
/// first time by which the links together can have delivered S. A reduce
/// is the same backwards: S bytes leave the cube, each in time to reach
/// participant 0. Like the cube links term, it counts the paths a
/// collective's data takes (NoC, UCIe, inter-SIP), not the host's PCIe.
/// None when no cube has a bounded rate.
fn latency_and_links(m: &Machine, g: &Group, job: &Job) -> Option<Tick> {
    let (t, links) = (&m.topology, m.engine.links());
    let root = t.id(Node::Pe {
        sip: g.sip(0),
        cube: 0,
        pe: 0,
    });
    let inbound = job.collective == Collective::Broadcast;
    let dist = cross_latencies(links, root, inbound);
    let lat = |l: LinkId| links.class(l).latency;
    let mut worst: Option<Tick> = None;
    'cubes: for k in 0..g.sip_count() {
        for cube in 0..g.cubes_per_sip() {
            let sip = g.sip(k);
            if k == 0 && cube == 0 {
                continue;
            }
            // (earliest tick its first byte can cross, bytes per tick).
            let mut crossings = Vec::new();
            for l in cut_links(m, sip, cube, inbound) {
                let c = links.class(l);
                if c.ideal {
                    continue 'cubes;
                }
                let (from, to) = links.endpoints(l);
                let reach = dist[if inbound { from } else { to }.index()];
                if reach != Tick::MAX {
                    crossings.push((reach + lat(l), c.rate_num as f64 / c.rate_den as f64));
                }
            }
            if let Some(at) = fill_time(job.bytes() as f64, crossings) {
                worst = Some(worst.map_or(at, |w| w.max(at)));
            }
        }
    }
    worst
}

/// The UCIe and inter-SIP links into (`inbound`) or out of a cube's ports.
fn cut_links(m: &Machine, sip: u32, cube: u32, inbound: bool) -> Vec<LinkId> {
    let (t, links) = (&m.topology, m.engine.links());
    let mut out = Vec::new();
    for dir in Dir::ALL {
        for port in [Node::Ucie { sip, cube, dir }, Node::XSip { sip, cube, dir }] {
            if !t.present(port) {
                continue;
            }
            let port = t.id(port);
            for l in links.out_links(port) {
                let (_, peer) = links.endpoints(l);
                let l = if inbound {
                    links.find(peer, port)
                } else {
                    Some(l)
                };
                out.extend(
                    l.filter(|&l| matches!(edge_kind(links.class_index(l)), UCIE | INTER_SIP)),
                );
            }
        }
    }
    out
}

/// The first tick by which links that open at their earliest ticks and then
/// carry their rates can together have carried `bytes`; None without links.
fn fill_time(bytes: f64, mut links: Vec<(Tick, f64)>) -> Option<Tick> {
    links.sort_by_key(|&(open, _)| open);
    let (mut rate, mut weighted) = (0.0, 0.0);
    let mut done = None;
    for (i, &(open, r)) in links.iter().enumerate() {
        rate += r;
        weighted += r * open as f64;
        let t = (bytes + weighted) / rate;
        done = Some(t);
        if links.get(i + 1).is_none_or(|&(next, _)| t <= next as f64) {
            break;
        }
    }
    done.filter(|_| rate > 0.0).map(|t| t.floor() as Tick)
}

/// The least summed latency of the links off the NoC (UCIe and inter-SIP;
/// NoC hops and ideal links count 0) from `root` to every node
/// (`outward`), or from every node to `root`: Dijkstra over the link table,
/// without the host's PCIe.
fn cross_latencies(links: &LinkTable, root: NodeId, outward: bool) -> Vec<Tick> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let weight = |l: LinkId| {
        let c = links.class(l);
        match edge_kind(links.class_index(l)) {
            PCIE => None,
            NOC => Some(0),
            _ if c.ideal => Some(0),
            _ => Some(c.latency),
        }
    };
    let mut dist = vec![Tick::MAX; links.nodes() as usize];
    let mut heap = BinaryHeap::from([Reverse((0, root))]);
    dist[root.index()] = 0;
    while let Some(Reverse((d, u))) = heap.pop() {
        if d > dist[u.index()] {
            continue;
        }
        for out in links.out_links(u) {
            let (_, v) = links.endpoints(out);
            // Inward, the hop taken is v → u: its link's weight counts.
            let l = if outward { Some(out) } else { links.find(v, u) };
            let Some(w) = l.and_then(weight) else {
                continue;
            };
            if d + w < dist[v.index()] {
                dist[v.index()] = d + w;
                heap.push(Reverse((d + w, v)));
            }
        }
    }
    dist
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiting_term_is_the_first_largest() {
        let b = |terms: Vec<(&'static str, Tick)>| Bound { ticks: 0, terms };
        assert_eq!(b(vec![("a", 3), ("b", 5), ("c", 5)]).limiting(), "b");
        assert_eq!(b(Vec::new()).limiting(), "none");
    }
}
