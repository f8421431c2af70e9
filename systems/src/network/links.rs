//! Links: their classes (exact bandwidth fractions, latency, packet size),
//! the dense table of every directed link, and what each carried.

use crate::ids::{LinkId, NodeId};
use crate::time::Tick;
use bevy_ecs::prelude::*;

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

/// The contention state and statistics of one non-ideal link, aligned so
/// that it never straddles two cache lines.
#[derive(Debug, Default, Clone, Copy)]
#[repr(align(32))]
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
        debug_assert!(
            a.index() < self.nodes as usize
                && b.index() < self.nodes as usize
                && (class as usize) < self.classes.len()
        );
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
            links_from[a.index() + 1] += 1;
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
        self.out_links(a).find(|&l| self.dst[l.index()] == b)
    }

    /// Links leaving node `a`.
    pub fn out_links(&self, a: NodeId) -> impl Iterator<Item = LinkId> + use<> {
        let (lo, hi) = (self.links_from[a.index()], self.links_from[a.index() + 1]);
        (lo..hi).map(LinkId)
    }

    /// Every link, in id order.
    pub fn ids(&self) -> impl Iterator<Item = LinkId> + use<> {
        (0..self.len() as u32).map(LinkId)
    }

    pub fn endpoints(&self, l: LinkId) -> (NodeId, NodeId) {
        (self.src[l.index()], self.dst[l.index()])
    }

    pub fn class(&self, l: LinkId) -> &LinkClass {
        &self.classes[self.class_of[l.index()] as usize]
    }

    pub fn class_index(&self, l: LinkId) -> u8 {
        self.class_of[l.index()]
    }

    /// Adds what a whole message carried over link `l` (flow mode, which
    /// keeps the statistics packet mode would).
    pub(super) fn record(&mut self, l: LinkId, bytes: u64, packets: u64, busy: Tick) {
        let st = &mut self.state[l.index()].stats;
        st.bytes += bytes;
        st.packets += packets;
        st.busy += busy;
    }

    pub fn stats(&self, l: LinkId) -> LinkStats {
        self.state[l.index()].stats
    }

    /// For the fast-forward: when each link is free.
    pub(crate) fn steady_words(&self, sig: &mut crate::steady::Sig) {
        self.state.iter().for_each(|s| sig.from(s.free_at));
    }

    /// For the fast-forward: what each link carried.
    pub(crate) fn steady_counters(&mut self, f: &mut impl FnMut(&mut u64)) {
        for s in &mut self.state {
            f(&mut s.stats.busy);
            f(&mut s.stats.bytes);
            f(&mut s.stats.packets);
        }
    }

    /// For the fast-forward: every link free `d` ticks later.
    pub(crate) fn steady_shift(&mut self, d: Tick) {
        self.state.iter_mut().for_each(|s| s.free_at += d);
    }

    /// Prefetch hint for link `l`'s state.
    #[inline]
    pub fn prefetch(&self, l: LinkId) {
        if let Some(s) = self.state.get(l.index()) {
            crate::prefetch::prefetch(s);
        }
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
        let st = &mut self.state[l.index()];
        let start = t.max(st.free_at);
        st.free_at = start + ser;
        st.stats.bytes += bytes;
        st.stats.packets += 1;
        st.stats.busy += ser;
        start + ser
    }
}
