//! Routes cached per (source, destination) pair, kept as segments: each
//! non-ideal link with the ideal links crossed before it.
//!
//! Each route owns its segments: an all-to-all on a long ring caches one
//! route per pair, hundreds of segments each (a GiB on 256 SIPs), and one
//! growing table of them would hold up to twice that in spare capacity and
//! copy it all at every doubling.

use super::LinkTable;
use crate::ids::{LinkId, NodeId};
use crate::time::Tick;
use bevy_ecs::prelude::*;
use rustc_hash::FxHashMap;

/// Produces the node path between two nodes; implemented by the topology layer,
/// which knows coordinates. The engine only caches what it returns.
pub trait RouteSource: Send + Sync + 'static {
    /// Appends the nodes from `src` to `dst` inclusive to `out`.
    fn route(&self, src: NodeId, dst: NodeId, out: &mut Vec<NodeId>) -> Result<(), String>;
}

/// Index of a cached route.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteId(pub u32);

impl RouteId {
    /// Its position in the route table.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Routes cached per (src, dst) pair on first use; no all-pairs table.
///
/// A route is kept as its *segments*: each
/// non-ideal link with the number of ideal links crossed (in zero time) just
/// before it. Packets take one calendar event per segment.
#[derive(Resource)]
pub struct Routes {
    source: Box<dyn RouteSource>,
    cache: FxHashMap<(NodeId, NodeId), RouteId>,
    spans: Vec<RouteSpan>,
    scratch: Vec<NodeId>,
    /// The segments of the route being built, before it is boxed.
    building: Vec<Segment>,
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

#[derive(Debug, Clone)]
struct RouteSpan {
    segments: Box<[Segment]>,
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
            spans: Vec::new(),
            scratch: Vec::new(),
            building: Vec::new(),
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
        self.building.clear();
        let mut packet_bytes = u64::MAX;
        let mut ideal = 0;
        for w in self.scratch.windows(2) {
            let Some(l) = links.find(w[0], w[1]) else {
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
                self.building.push(Segment {
                    link: l,
                    ideal_before: ideal,
                    ser_full: 0,
                    latency: class.latency,
                });
                ideal = 0;
            }
        }
        for seg in &mut self.building {
            seg.ser_full = links.class(seg.link).ser_ticks(packet_bytes);
        }
        let id = RouteId(self.spans.len() as u32);
        self.spans.push(RouteSpan {
            segments: self.building.as_slice().into(),
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
        let s = &self.spans[r.index()];
        (&s.segments, s.ideal_after, s.packet_bytes)
    }

    /// Prefetch hint for route `r`'s span.
    #[inline]
    pub fn prefetch_span(&self, r: RouteId) {
        if let Some(s) = self.spans.get(r.index()) {
            crate::prefetch::prefetch(s);
        }
    }

    /// Prefetch hint for segment `seg` of route `r` (reads the span).
    #[inline]
    pub fn prefetch_segment(&self, r: RouteId, seg: u32) {
        if let Some(s) = self.segments(r).0.get(seg as usize) {
            crate::prefetch::prefetch(s);
        }
    }

    pub fn packet_bytes(&self, r: RouteId) -> u64 {
        self.spans[r.index()].packet_bytes
    }

    /// Whether the route crosses any non-ideal link.
    pub fn has_segments(&self, r: RouteId) -> bool {
        !self.spans[r.index()].segments.is_empty()
    }

    /// Routes cached so far.
    pub fn cached(&self) -> usize {
        self.spans.len()
    }

    /// Segments the cached routes hold.
    pub fn segments_held(&self) -> usize {
        self.spans.iter().map(|s| s.segments.len()).sum()
    }
}
