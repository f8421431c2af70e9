//! What a run will cost the simulator, computed from the spec and the job
//! without building anything, so a run the machine cannot afford is refused
//! at once with the numbers and the knobs that shrink it.
//!
//! The model (constants and their calibration: docs/model.md §Cost estimate):
//! - build: per directed link, PE and cube (the link table, the hardware
//!   entities and their components);
//! - run: ops held in programs (shared and looped: they grow with the
//!   program's length, not with participants × steps), register files,
//!   messages (chunks, credits, local loads and stores) and packet-hops;
//!   routes cached for the queues (a way there and back per neighbour-table
//!   entry, each holding its non-ideal links: an all-to-all on a long ring
//!   caches a GiB of them), messages in flight; values in functional mode;
//!   trace events (streamed to the file: they
//!   cost time and disk, not memory). In packet mode the network costs its
//!   packet-hops; in flow mode each message drains as one flow per leg of
//!   its route (each leg its own start, join, drain and rate), each flow
//!   touches every link of its leg when it starts and when it ends (its
//!   rate updates), and where a participant sends on many routes at once,
//!   each rate pass reaches the flows draining on all of them.

use crate::cost::CostTerms;
use crate::{AlgoConfig, Algorithm, Collective, Group, Job, algorithms};
use kernbench_spec::spec::System;
use kernbench_systems::network::{NetworkModel, NodeId};
use std::collections::HashMap;

/// Bytes per directed link, PE and cube of a built machine, plus a base.
const BUILD_BASE: f64 = 16e6;
const BYTES_PER_LINK: f64 = 56.0;
const BYTES_PER_PE: f64 = 160.0;
const BYTES_PER_CUBE: f64 = 200.0;
/// Bytes per traced op (an `Op` in its program).
const BYTES_PER_OP: f64 = 32.0;
/// A PE's register: ready tick, size and an (empty when timing-only) value vector.
const BYTES_PER_REGISTER: f64 = 40.0;
/// Bytes per element of a value held with `--verify` (an f32).
const VALUE_BYTES: f64 = 4.0;
/// A cached route: each non-ideal link it crosses, and its span, hash
/// entry and allocation.
const BYTES_PER_ROUTE_LINK: f64 = 24.0;
const BYTES_PER_ROUTE: f64 = 80.0;
/// A message in flight: its record, payload and pending events; in flow
/// mode also a flow per leg of its route (measured on trees of 256
/// participants, 1 MiB: 0.44-0.66 KB in packet mode, 2.5-3.5 KB in flow
/// mode, docs/model.md §Cost estimate).
const BYTES_PER_MESSAGE_IN_FLIGHT: f64 = 1024.0;
const BYTES_PER_FLOW_MESSAGE_IN_FLIGHT: f64 = 4096.0;
/// Participants past which the estimate does not build the wiring to count
/// its entries (a dims exchange on 65,536 participants of a ring wires
/// 2.7e8): it takes `fanout` peers a participant instead.
const WIRING_PARTICIPANTS: usize = 1024;
/// Nodes the estimate walks on routes to measure their lengths, at most
/// (a route or two past it).
const ROUTE_WALK_NODES: usize = 1 << 20;
/// Queue entries whose routes are walked to measure their length; a
/// wiring with more is measured on that many spread evenly over it.
const ROUTE_SAMPLE: usize = 2048;
/// Traced ops per IPCQ send of a step (send, recv, combine, load/store share).
const OPS_PER_SEND: f64 = 3.5;
/// Bytes per trace event in the written file (measured on mesh_16,
/// hier_lanes, 1 MiB: 2.02 GB for 17.8 M events).
pub const TRACE_FILE_BYTES_PER_EVENT: f64 = 114.0;
/// Wall time to write one trace event (same run: 25.5 s traced, 3.1 s not).
const SECONDS_PER_TRACE_EVENT: f64 = 1.3e-6;
/// Wall time per message (chunk, credit, load, store), per packet-hop and
/// per schedule run (a visited tick where more than packets move: every
/// stage's run condition, parameters and `advance`), fitted to 231 points of
/// the default sweep with their counted messages, hops and runs (docs/model.md
/// §Cost estimate).
pub const SECONDS_PER_MESSAGE: f64 = 460e-9;
pub const SECONDS_PER_PACKET_HOP: f64 = 18e-9;
pub const SECONDS_PER_SCHEDULE_RUN: f64 = 2.4e-6;
/// Schedule runs per message when the participants do not act in lockstep
/// (its send, arrival, receive and credit mostly fall on ticks of their own).
pub const SCHEDULE_RUNS_PER_MESSAGE: f64 = 2.5;
/// Flow mode: wall time per link a flow touches at its start or end (the
/// max-min update over the flows sharing it): the median over seven runs of
/// (measured − the message and schedule-run terms) / links touched
/// (docs/model.md §Cost estimate).
pub const SECONDS_PER_FLOW_LINK: f64 = 56e-9;
/// Flow mode: wall time per leg of a message beyond its first (a leg's
/// entity, its join and drained events and its rate, routed ahead), fitted
/// to a hier_lanes all-reduce and a tree reduce of 64 MiB on 256 SIPs where
/// messages cross 5 to 16 legs (docs/model.md §Cost estimate).
pub const SECONDS_PER_EXTRA_LEG: f64 = 1.0e-6;
/// Flow mode: wall time per flow a rate pass reaches besides the message's
/// own: 0.45 µs on 64 participants, 1.8 µs on 256 (all-to-all, pairwise),
/// where the flows outgrow the caches.
pub const SECONDS_PER_REACHED_FLOW: f64 = 1.0e-6;
/// Flow mode: of the routes that send at once ([`CostTerms::fanout`] per
/// participant), the share draining at a message's start or end when each
/// sends one slot per message (fitted to pairwise all-to-alls of 64 and 256
/// participants, 64 B to 64 KiB per peer).
const DRAINING_SHARE: f64 = 0.088;

/// The estimate of one run (or of a build alone).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub pes: u64,
    pub links: u64,
    pub ops: f64,
    pub messages: f64,
    pub packet_hops: f64,
    /// Visited ticks that run the whole schedule.
    pub schedule_runs: f64,
    pub trace_events: f64,
    pub peak_bytes: f64,
    pub seconds: f64,
    /// The network model the estimate is for.
    pub model: NetworkModel,
    /// Links touched by flow starts and ends (flow mode's network work).
    pub flow_links: f64,
    /// Legs beyond each message's first (flow mode: a flow each).
    pub flow_extra_legs: f64,
    /// Other flows the rate passes of flow mode reach, where many routes
    /// drain at once (every flow shares links with every other).
    pub flow_reached: f64,
    /// In packet mode, what the same run would take in flow mode.
    pub flow_seconds: Option<f64>,
    /// Routes the run caches, and the non-ideal links they hold.
    pub routes: f64,
    pub route_links: f64,
    /// Messages in flight at the peak.
    pub in_flight: f64,
}

/// Sends per participant and bytes per send of one run of an algorithm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkCounts {
    pub sends: f64,
    pub bytes_per_send: f64,
    /// Pipeline depth of each send.
    pub pieces: f64,
}

/// Sends per participant and their size for one run of `algorithm` over
/// `bytes` in pieces of at most `max_piece`, as pipelined: `depth(bytes per
/// send, stages)` is the pipeline depth of such a send.
pub fn work(
    algorithm: &dyn Algorithm,
    g: &Group,
    c: Collective,
    (bytes, max_piece): (f64, f64),
    depth: impl Fn(f64, usize) -> f64,
) -> WorkCounts {
    pipelined(&algorithm.cost_terms(g, c, bytes, max_piece), depth)
}

/// `terms`' sends cut into the pieces `depth` gives them.
fn pipelined(terms: &CostTerms, depth: impl Fn(f64, usize) -> f64) -> WorkCounts {
    let pieces = depth(terms.bytes_per_send, terms.stages);
    WorkCounts {
        sends: terms.sends.max(1.0) * pieces,
        bytes_per_send: (terms.bytes_per_send / pieces).max(2.0),
        pieces,
    }
}

/// Flows draining besides a message's own when it starts or ends, which
/// the max-min rate pass then reaches: none unless a participant sends on
/// several routes at once; else a share of all those routes that grows with
/// the slots each route's send fills (`slots`: short sends drain before the
/// next start), more slowly past one.
fn draining_flows(terms: &CostTerms, participants: f64, slots: f64) -> f64 {
    if terms.fanout <= 1.0 {
        return 0.0;
    }
    let filled = if slots <= 1.0 {
        slots.powf(1.4)
    } else {
        slots.powf(0.6)
    };
    DRAINING_SHARE * participants * (terms.fanout - 1.0) * filled
}

/// How many legs a message's route falls into in flow mode, from the
/// first-packet ticks (serialisation of a packet plus latency) of each
/// link kind it crosses: a leg closes once its links' ticks reach the leg
/// span, so a link that long is a leg of its own and a short last stretch
/// joins the leg before.
struct RouteLegs {
    span: f64,
    noc: f64,
    /// The farthest link kind a chunk crosses: die-to-die on SIPs of
    /// several cubes, else chip-to-chip, else none.
    far: Option<f64>,
}

impl RouteLegs {
    fn of(sys: &System) -> RouteLegs {
        let spec = &sys.spec;
        let tick_ps = (spec.system.tick_ns * 1000.0).round() as u64;
        // In engine ticks, as the built link table has them (a validated
        // spec always converts; an ideal link takes none).
        let first_packet = |l: &kernbench_spec::spec::types::LinkSpec| {
            let class = kernbench_spec::topology::link_class("", "", l, tick_ps, "");
            class
                .ok()
                .filter(|c| !c.ideal)
                .map_or(0.0, |c| (c.ser_ticks(c.packet_bytes) + c.latency) as f64)
        };
        let span = spec
            .network
            .leg_span_ticks
            .unwrap_or(kernbench_systems::network::flow::LegSpan::DEFAULT.0);
        let far = if sys.cubes_per_sip() > 1 {
            Some(first_packet(&spec.links.ucie))
        } else {
            (sys.n_sips() > 1).then(|| first_packet(&spec.links.inter_sip))
        };
        RouteLegs {
            span: (span as f64).max(1.0),
            noc: first_packet(&spec.links.noc),
            far,
        }
    }

    /// Legs of a route of `noc_hops` NoC links, and the far link if `far`.
    fn route(&self, noc_hops: f64, far: bool) -> f64 {
        let far = self.far.filter(|_| far).map_or(0.0, |t| t.min(self.span));
        ((noc_hops * self.noc.min(self.span) + far) / self.span)
            .floor()
            .max(1.0)
    }
}

/// Routes the queues of `algorithm`'s wiring on `g` cache, and the
/// non-ideal links they hold: each neighbour-table entry's way to its peer
/// (chunks) and, unless the slots are in the PE's own TCM (where the
/// peer's entry has the way back), from the slots back (credits); and each
/// participant's ways to and from its memory and the host. Lengths are
/// walked on the topology, on up to [`ROUTE_SAMPLE`] entries and
/// participants spread evenly over the wiring. An algorithm whose wiring
/// serves every root (a binomial tree's partners at each level) uses
/// fewer: the count is a bound. Past [`WIRING_PARTICIPANTS`] the wiring is
/// not built: each participant has `fanout` peers (an all-to-all's every
/// other participant; else its next one, which undercounts exchanges such
/// as dims' and bruck's there).
fn cached_routes(
    sys: &System,
    algorithm: &dyn Algorithm,
    g: &Group,
    config: &AlgoConfig,
    fanout: f64,
) -> (f64, f64) {
    use kernbench_spec::topology::address::Space;
    use kernbench_spec::topology::{Node, Topology};
    let n = g.size();
    // Pairs of participants: each wiring entry's, or sampled ones.
    let (entries, pairs): (f64, Vec<(usize, usize)>) = if n <= WIRING_PARTICIPANTS {
        let participant: HashMap<u32, usize> = (0..n).map(|p| (g.pe(p).0, p)).collect();
        let pairs: Vec<(usize, usize)> = algorithm
            .wiring(g, &config.queues())
            .iter()
            .flat_map(|(pe, entries)| entries.iter().map(move |e| (pe.0, e.peer.0)))
            .filter_map(|(a, b)| Some((*participant.get(&a)?, *participant.get(&b)?)))
            .collect();
        (pairs.len() as f64, pairs)
    } else {
        // Participant i and its next one, or one spread over the rest (a
        // stride coprime to n in most groups), for each sampled i.
        let spread = fanout > 1.0;
        let pairs = (0..ROUTE_SAMPLE)
            .map(|k| {
                let i = k * n / ROUTE_SAMPLE;
                let step = if spread { 1 + k * 7919 % n } else { 1 };
                (i, (i + step) % n)
            })
            .collect();
        (n as f64 * fanout.clamp(1.0, n as f64 - 1.0), pairs)
    };
    let t = Topology::new(sys);
    let node = |p: usize| {
        let (sip, cube, pe) = g.coords(p);
        t.id(Node::Pe { sip, cube, pe })
    };
    let hbm = |p: usize| {
        let (sip, cube, _) = g.coords(p);
        t.id(Node::Hbm { sip, cube })
    };
    let host = t.id(Node::Host);
    let peer_links = mean_route_links(
        &t,
        sys,
        sample(pairs.iter()).map(|&(a, b)| (node(a), node(b))),
    );
    let host_links = mean_route_links(&t, sys, sample(0..n).map(|p| (host, node(p))));
    let memory_links = mean_route_links(&t, sys, sample(0..n).map(|p| (node(p), hbm(p))));
    let ways = if config.buffer_kind == Space::Tcm {
        1.0
    } else {
        2.0
    };
    let routes = ways * entries;
    let p = g.simulated_size() as f64;
    (
        routes + 4.0 * p,
        routes * peer_links + 2.0 * p * (host_links + memory_links),
    )
}

/// Up to [`ROUTE_SAMPLE`] of `items`, spread evenly.
fn sample<I: ExactSizeIterator>(items: I) -> std::iter::StepBy<I> {
    let step = items.len().div_ceil(ROUTE_SAMPLE).max(1);
    items.step_by(step)
}

/// Mean non-ideal links of the routes between `pairs` of nodes of `t`,
/// over those walked before [`ROUTE_WALK_NODES`] nodes (routes across a
/// ring of 65,536 SIPs cross a million).
fn mean_route_links(
    t: &kernbench_spec::topology::Topology,
    sys: &System,
    pairs: impl Iterator<Item = (NodeId, NodeId)>,
) -> f64 {
    use kernbench_systems::network::RouteSource;
    let (mut walked, mut held) = (0usize, 0usize);
    let mut path = Vec::new();
    let mut visited = 0;
    for (a, b) in pairs {
        if visited > ROUTE_WALK_NODES {
            break;
        }
        path.clear();
        if t.route(a, b, &mut path).is_ok() {
            held += path
                .windows(2)
                .filter(|w| !t.hop_spec(sys, w[0], w[1]).ideal)
                .count();
            walked += 1;
            visited += path.len();
        }
    }
    held as f64 / walked.max(1) as f64
}

/// Directed links of a system, counted from its node counts without
/// building the link table: every endpoint has a duplex link to its router,
/// routers form a mesh, each UCIe port pair one duplex link, each inter-SIP
/// port one outgoing link, each SIP a duplex PCIe link and an I/O link.
pub fn links(sys: &System) -> u64 {
    use kernbench_spec::topology::{NodeKind, Topology};
    let t = Topology::new(sys);
    let (nw, nh) = (u64::from(t.noc.0), u64::from(t.noc.1));
    let mut links = 4 * u64::from(t.sips);
    for (kind, n) in t.node_counts() {
        links += match kind {
            NodeKind::Host | NodeKind::SipIo => 0,
            NodeKind::Router => n / (nw * nh) * 2 * ((nw - 1) * nh + nw * (nh - 1)),
            NodeKind::UciePort | NodeKind::XSipPort => 3 * n,
            _ => 2 * n,
        };
    }
    links
}

impl Estimate {
    /// Building the machine alone.
    pub fn build(sys: &System) -> Estimate {
        let pes = sys.total_pes();
        let links = links(sys);
        let cubes = u64::from(sys.n_sips()) * u64::from(sys.cubes_per_sip());
        let peak = BUILD_BASE
            + BYTES_PER_LINK * links as f64
            + BYTES_PER_PE * pes as f64
            + BYTES_PER_CUBE * cubes as f64;
        Estimate {
            pes,
            links,
            ops: 0.0,
            messages: 0.0,
            packet_hops: 0.0,
            schedule_runs: 0.0,
            trace_events: 0.0,
            peak_bytes: peak,
            seconds: links as f64 * 20e-9,
            model: sys.spec.network.model,
            flow_links: 0.0,
            flow_extra_legs: 0.0,
            flow_reached: 0.0,
            flow_seconds: None,
            routes: 0.0,
            route_links: 0.0,
            in_flight: 0.0,
        }
    }

    /// One collective of `job` with `config` on `sys`; `verify` carries
    /// values, `trace` writes every event to a trace file.
    pub fn collective(
        sys: &System,
        config: &AlgoConfig,
        job: &Job,
        verify: bool,
        trace: bool,
    ) -> Estimate {
        let mut e = Self::build(sys);
        // Every caller checks the entry first (Communicator::check_before_build,
        // the ccl config's validation); an unregistered name never runs.
        let Ok(algorithm) = algorithms::find(&config.algorithm) else {
            return e;
        };
        let g = Group::for_config(sys, config);
        // Participants simulated: all, or a folded group's window.
        let p = g.simulated_size() as f64;
        let limits = crate::PieceLimits::of(sys, config);
        let max_piece = limits.max_bytes as f64;
        let terms = algorithm.cost_terms(&g, job.collective, job.bytes() as f64, max_piece);
        let work = pipelined(&terms, |size, stages| {
            config.chunks.pieces((size / 2.0) as usize, stages, limits) as f64
        });
        let chunks = work.pieces;
        let slot = config.slot_size as f64;
        let chunk_messages = (work.bytes_per_send / slot).ceil().max(1.0);
        // Each chunk: data + credit; each send also loads and stores a tile.
        let per_participant = work.sends * (2.0 * chunk_messages + 2.0);
        e.messages = p * per_participant;
        e.ops = p * work.sends * OPS_PER_SEND + 4.0 * p;
        let held_ops = terms.programs.ops(e.ops / p, chunks);
        let pieces = terms.register_pieces;
        let registers = p * (4.0 * chunks * pieces + 16.0);
        let packet = sys
            .spec
            .links
            .noc
            .packet_bytes
            .min(sys.spec.links.inter_sip.packet_bytes) as f64;
        let mut hops = f64::from(sys.spec.cube.noc_mesh.w + sys.spec.cube.noc_mesh.h) + 4.0;
        if job.collective == Collective::AllToAll {
            // Blocks go to every participant, a quarter of the grid away on
            // average, about three links per SIP hop.
            hops += 3.0 * (f64::from(g.grid.0) + f64::from(g.grid.1)) / 4.0;
        }
        let packets_per_chunk = (work.bytes_per_send.min(slot) / packet).ceil().max(1.0);
        // Chunks cross the network; each send also loads and stores its tile
        // between HBM and the PE over the NoC.
        let noc_packet = sys.spec.links.noc.packet_bytes as f64;
        let tile_packets = (work.bytes_per_send / noc_packet).ceil().max(1.0);
        let noc_hops = f64::from(sys.spec.cube.noc_mesh.w + sys.spec.cube.noc_mesh.h);
        e.packet_hops = p
            * work.sends
            * (chunk_messages * packets_per_chunk * hops + 2.0 * tile_packets * noc_hops);
        e.flow_links = 2.0 * p * work.sends * (2.0 * chunk_messages * hops + 2.0 * noc_hops);
        let legs = RouteLegs::of(sys);
        // A chunk crosses its cube's NoC and the next one's; a tile goes
        // between a PE and its cube's memory.
        let chunk_legs = legs.route(noc_hops + 2.0, true);
        let tile_legs = legs.route((noc_hops - 2.0).max(2.0), false);
        e.flow_extra_legs =
            p * work.sends * (2.0 * chunk_messages * (chunk_legs - 1.0) + 2.0 * (tile_legs - 1.0));
        e.flow_reached = e.messages * draining_flows(&terms, p, terms.bytes_per_send / slot);
        e.schedule_runs = e.messages * SCHEDULE_RUNS_PER_MESSAGE / terms.lockstep;
        if trace {
            let network_events = match e.model {
                NetworkModel::Packet => e.packet_hops,
                NetworkModel::Flow => e.messages,
            };
            e.trace_events = e.ops + network_events + e.messages;
        }

        (e.routes, e.route_links) = cached_routes(sys, algorithm, &g, config, terms.fanout);
        e.in_flight = p * terms.in_flight.messages(chunks);
        let message_bytes = match e.model {
            NetworkModel::Packet => BYTES_PER_MESSAGE_IN_FLIGHT,
            NetworkModel::Flow => BYTES_PER_FLOW_MESSAGE_IN_FLIGHT,
        };
        // Memories and registers hold values as f32, whatever the dtype.
        let values = if verify {
            3.0 * p * job.elems as f64 * VALUE_BYTES
        } else {
            0.0
        };
        e.peak_bytes += held_ops * BYTES_PER_OP
            + registers * BYTES_PER_REGISTER
            + e.routes * BYTES_PER_ROUTE
            + e.route_links * BYTES_PER_ROUTE_LINK
            + e.in_flight * message_bytes
            + values;
        let common = e.seconds
            + e.messages * SECONDS_PER_MESSAGE
            + e.schedule_runs * SECONDS_PER_SCHEDULE_RUN
            + e.trace_events * SECONDS_PER_TRACE_EVENT;
        let flow = common
            + e.flow_links * SECONDS_PER_FLOW_LINK
            + e.flow_extra_legs * SECONDS_PER_EXTRA_LEG
            + e.flow_reached * SECONDS_PER_REACHED_FLOW;
        match e.model {
            NetworkModel::Packet => {
                e.seconds = common + e.packet_hops * SECONDS_PER_PACKET_HOP;
                e.flow_seconds = Some(flow);
            }
            NetworkModel::Flow => e.seconds = flow,
        }
        e
    }

    /// In packet mode, flow mode's estimated time where it is the lower.
    pub fn faster_flow_seconds(&self) -> Option<f64> {
        self.flow_seconds.filter(|&flow| flow < self.seconds)
    }

    /// Refuses a run whose peak memory or simulation time exceeds `budget`;
    /// the message gives the estimate and the knobs that shrink it.
    pub fn check(&self, budget: &Budget, knobs: &str) -> Result<(), String> {
        let (what, over, flag) = if self.peak_bytes > budget.bytes as f64 {
            (
                format!("{} of memory", gib(self.peak_bytes)),
                format!("the budget of {}", gib(budget.bytes as f64)),
                "--max-memory if this machine really has more".into(),
            )
        } else if self.seconds > budget.seconds {
            (
                format!("{:.0} s to simulate", self.seconds),
                format!("the time budget of {:.0} s", budget.seconds),
                match self.faster_flow_seconds() {
                    Some(flow) => format!(
                        "the flow-level network (--network flow, or network.model: flow in the spec), estimated at {flow:.0} s, or --max-time if the exact packet run is worth the wait (the time estimate is good to a factor of about 4)"
                    ),
                    None => "--max-time if the wait is worth it (the time estimate is good to a factor of about 4)".into(),
                },
            )
        } else {
            return Ok(());
        };
        Err(format!(
            "this run is estimated to need {what} ({} PEs, {} links, {:.3e} traced ops, {:.3e} messages, {:.3e} messages in flight, {:.3e} route links cached, {}{}; {} and about {:.0} s), more than {over}; allowed: a run within the budget: {knobs}, or {flag}",
            self.pes,
            self.links,
            self.ops,
            self.messages,
            self.in_flight,
            self.route_links,
            match self.model {
                NetworkModel::Packet => format!("{:.3e} packet-hops", self.packet_hops),
                NetworkModel::Flow => format!(
                    "{:.3e} further legs, {:.3e} flow link updates and {:.3e} flows reached by rate passes (flow mode)",
                    self.flow_extra_legs, self.flow_links, self.flow_reached
                ),
            },
            if self.trace_events > 0.0 {
                format!(", {:.3e} trace events", self.trace_events)
            } else {
                String::new()
            },
            gib(self.peak_bytes),
            self.seconds,
        ))
    }
}

/// What a command costs in all: its parts (simulations, phases, shapes)
/// run one after the other, so their times add up and the peak memory is
/// the largest part's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cost {
    /// Each part with what it is, e.g. "ring at 4096 B".
    pub parts: Vec<(String, Estimate)>,
}

impl Cost {
    pub fn add(&mut self, what: impl Into<String>, e: Estimate) {
        self.parts.push((what.into(), e));
    }

    pub fn seconds(&self) -> f64 {
        self.parts.iter().map(|p| p.1.seconds).sum()
    }

    pub fn peak_bytes(&self) -> f64 {
        self.parts
            .iter()
            .map(|p| p.1.peak_bytes)
            .fold(0.0, f64::max)
    }

    /// Each part's estimated seconds, for a progress bar's ETA.
    pub fn weights(&self) -> Vec<f64> {
        self.parts.iter().map(|p| p.1.seconds).collect()
    }

    /// Refuses a command whose parts together need more time, or whose
    /// largest part more memory, than `budget`; the message gives the
    /// total, the part that drives it and the knobs (`knobs`: the
    /// command's own arguments that shrink it).
    pub fn check(&self, command: &str, budget: &Budget, knobs: &str) -> Result<(), String> {
        let n = self.parts.len();
        let by = |key: fn(&Estimate) -> f64| {
            self.parts
                .iter()
                .max_by(|a, b| key(&a.1).total_cmp(&key(&b.1)))
                .map_or(String::new(), |(what, e)| {
                    format!(
                        "; the largest: {what}, {:.0} s and {}",
                        e.seconds,
                        gib(e.peak_bytes)
                    )
                })
        };
        let (need, over, drives, flag) = if self.peak_bytes() > budget.bytes as f64 {
            (
                format!("{} of memory", gib(self.peak_bytes())),
                format!("the budget of {}", gib(budget.bytes as f64)),
                by(|e| e.peak_bytes),
                "--max-memory if this machine really has more",
            )
        } else if self.seconds() > budget.seconds {
            (
                format!("{:.0} s to simulate", self.seconds()),
                format!("the time budget of {:.0} s", budget.seconds),
                by(|e| e.seconds),
                "--max-time if the wait is worth it (the time estimate is good to a factor of about 4)",
            )
        } else {
            return Ok(());
        };
        Err(format!(
            "{command} is estimated to need {need} ({n} part(s){drives}), more than {over}; allowed: work within the budget: {knobs}, or {flag}"
        ))
    }
}

/// Which network model a run uses: the spec's, one named on the command
/// line, or `auto`: the exact packet model where its estimate fits the
/// budget, the flow model otherwise if it is estimated faster (where every
/// message is one packet, each hop is a leg and flow mode is the dearer;
/// packet mode's refusal then says what would fit).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum NetworkChoice {
    /// The system spec's `network.model`.
    #[default]
    Spec,
    Fixed(NetworkModel),
    Auto(Budget),
}

impl NetworkChoice {
    /// The command-line spellings, with what each means.
    pub const NAMES: [&'static str; 3] = ["packet", "flow", "auto"];

    /// Parses `packet`, `flow` or `auto` (`auto` decides within `budget`).
    pub fn parse(name: &str, budget: Budget) -> Result<NetworkChoice, String> {
        match name {
            "packet" => Ok(NetworkChoice::Fixed(NetworkModel::Packet)),
            "flow" => Ok(NetworkChoice::Fixed(NetworkModel::Flow)),
            "auto" => Ok(NetworkChoice::Auto(budget)),
            other => Err(format!(
                "'{other}' is not a network model; allowed: {}",
                Self::NAMES.join(", ")
            )),
        }
    }

    /// Sets `sys`'s network model for a run of `config` and `job` (the
    /// largest job when one machine runs several).
    pub fn apply(&self, sys: &mut System, config: &AlgoConfig, job: &Job, verify: bool) {
        let model = match *self {
            NetworkChoice::Spec => return,
            NetworkChoice::Fixed(model) => model,
            NetworkChoice::Auto(budget) => {
                sys.spec.network.model = NetworkModel::Packet;
                let packet = Estimate::collective(sys, config, job, verify, false);
                if packet.check(&budget, "").is_ok() || packet.faster_flow_seconds().is_none() {
                    NetworkModel::Packet
                } else {
                    NetworkModel::Flow
                }
            }
        };
        sys.spec.network.model = model;
    }
}

/// What a run may cost: peak memory and estimated simulation time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub bytes: u64,
    pub seconds: f64,
}

impl Budget {
    /// The default time budget: one hour of simulation.
    pub const DEFAULT_SECONDS: f64 = 3600.0;

    /// 80% of this machine's memory and [`Budget::DEFAULT_SECONDS`].
    pub fn of_this_machine() -> Budget {
        Budget {
            bytes: default_budget(),
            seconds: Self::DEFAULT_SECONDS,
        }
    }
}

/// Bytes as GiB for messages.
pub fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / (1u64 << 30) as f64)
}

/// The default memory budget: 80% of the machine's memory (MemTotal), or
/// 8 GiB where /proc/meminfo cannot be read.
pub fn default_budget() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    });
    total.map_or(8 << 30, |b| b / 5 * 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernbench_runtime::machine::Machine;
    use kernbench_spec::spec::presets;

    /// The largest piece of the work tests: the default slot.
    const SLOT: f64 = 65536.0;

    #[test]
    fn link_counts_match_built_machines() {
        for sys in [
            System::embedded_default(),
            presets::preset("mesh_16").unwrap(),
            presets::preset("torus_6_rect").unwrap(),
            presets::preset("ring_4096_lean").unwrap(),
        ] {
            let m = Machine::build(&sys).unwrap();
            assert_eq!(links(&sys), m.engine.links().len() as u64, "{}", sys.origin);
        }
    }

    /// rhd all-reduce on 16 participants: 2 phases of 4 + 3 + 2 + 1 ranges
    /// carrying 15/16 of the buffer each.
    #[test]
    fn rhd_work_counts_the_ranges_of_its_cuts() {
        let sys = System::embedded_default();
        let g = Group {
            sips: [0].into(),
            cubes: (4, 4),
            ..Group::new(&sys)
        };
        let rhd = algorithms::find("rhd").unwrap();
        let bytes = (16.0 * 1024.0, SLOT);
        let w = work(rhd, &g, Collective::AllReduce, bytes, |_, _| 1.0);
        assert_eq!(
            w,
            WorkCounts {
                sends: 20.0,
                bytes_per_send: 15.0 * 1024.0 / 10.0,
                pieces: 1.0
            }
        );
    }

    #[test]
    fn ring_work_is_the_nccl_ring() {
        let sys = System::embedded_default(); // 4 SIPs x 16 cubes = 64 participants
        let g = Group::new(&sys);
        let ring = algorithms::find("ring").unwrap();
        let bytes = (64.0 * 1024.0, SLOT);
        let w = work(ring, &g, Collective::AllReduce, bytes, |_, _| 2.0);
        assert_eq!(
            w,
            WorkCounts {
                sends: 2.0 * 63.0 * 2.0,
                bytes_per_send: 512.0,
                pieces: 2.0
            }
        );
    }
}
