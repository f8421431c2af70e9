//! Pipeline depth: [`Chunks`] (a fixed depth or `auto`), its one check of a
//! written value, and the piece sizes `auto` chooses between on a system
//! ([`PieceLimits`]).

use super::algo_config::AlgoConfig;
use super::file::ChunksSpec;
use serde::{Deserialize, Serialize};

/// Pipeline depth of an algorithm's transfers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Chunks {
    /// Chosen per transfer from its size, the slot size and how many
    /// forwarding stages it crosses ([`Chunks::pieces`]).
    Auto,
    /// Every transfer in this many pieces.
    Fixed(u32),
}

/// The smallest piece `auto` cuts: below it, per-message costs outweigh
/// what the extra pipelining gains.
pub const AUTO_MIN_PIECE_BYTES: u64 = 1024;
/// The deepest pipeline `auto` chooses (bounds the traced program).
pub const AUTO_MAX_PIECES: u64 = 4096;
/// `auto` cuts a transfer that crosses several forwarding stages in a row
/// (a chain) into at least this many pieces per stage, so filling the
/// pipeline costs about 1/8 of the transfer or less.
pub const AUTO_PIECES_PER_STAGE: u64 = 8;

/// Deepest pipeline: pieces per transfer.
pub const MAX_CHUNKS: u64 = 1 << 20;

/// The piece sizes `auto` chooses between on a system: at most one slot,
/// and at least what keeps a queue's credits covering a link's round trip
/// and two crossing chains' offsets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PieceLimits {
    /// The smallest piece whose `n_slots` credits cover a link's round
    /// trip: bandwidth × twice its and a NoC hop's latency, over `n_slots`.
    pub min_bytes: u64,
    /// The smallest piece for chains that cross a link pair in opposite
    /// directions ([`Self::least_busy_piece`]).
    pub crossing_min_bytes: u64,
    pub max_bytes: u64,
    /// That link's latency plus a NoC hop's, ns, and its bandwidth, bytes
    /// per ns (0 for an ideal link): what one chain hop costs besides the
    /// piece's own transfer.
    pub hop_latency_ns: f64,
    pub link_bytes_per_ns: f64,
    /// Ns per byte of a piece's NoC crossings at both ends of a hop over
    /// that link (0 when the link is the NoC or the NoC is ideal).
    pub ends_ns_per_byte: f64,
}

impl PieceLimits {
    /// A piece occupies a slot until its receiver takes it, so a queue has
    /// at most `n_slots` pieces in flight: to keep the slowest link the
    /// collective crosses (inter-SIP, else UCIe, else NoC) busy, pieces may
    /// not be smaller than `min_bytes` (`crossing_min_bytes` where chains
    /// cross).
    pub fn of(sys: &kernbench_spec::spec::System, config: &AlgoConfig) -> Self {
        let s = &sys.spec;
        let link = if s.system.sips.count > 1 {
            &s.links.inter_sip
        } else if s.sip.cube_mesh.w * s.sip.cube_mesh.h > 1 {
            &s.links.ucie
        } else {
            &s.links.noc
        };
        let (hop_latency_ns, link_bytes_per_ns) = if link.ideal {
            (0.0, 0.0)
        } else {
            (
                link.latency_ns + s.links.noc.latency_ns,
                link.bandwidth_gbps,
            )
        };
        let noc = &s.links.noc;
        let ends_ns_per_byte = if std::ptr::eq(link, noc) || noc.ideal || link.ideal {
            0.0
        } else {
            2.0 / noc.bandwidth_gbps
        };
        let max_bytes = config.slot_size.max(2);
        let clamp = |bytes: f64| {
            (bytes.ceil().min(max_bytes as f64) as u64)
                .clamp(AUTO_MIN_PIECE_BYTES, max_bytes.max(AUTO_MIN_PIECE_BYTES))
        };
        let window = link_bytes_per_ns * 2.0 * hop_latency_ns;
        let mut limits = Self {
            min_bytes: clamp(window / f64::from(config.n_slots.max(1))),
            crossing_min_bytes: 0,
            max_bytes,
            hop_latency_ns,
            link_bytes_per_ns,
            ends_ns_per_byte,
        };
        let crossing = limits.least_busy_piece(config.n_slots);
        limits.crossing_min_bytes = clamp(crossing.unwrap_or(f64::INFINITY));
        limits
    }

    /// These limits for chains that cross links in opposite directions:
    /// pieces of at least `crossing_min_bytes`.
    pub fn crossing(self) -> Self {
        Self {
            min_bytes: self.crossing_min_bytes,
            ..self
        }
    }

    /// The smallest piece with which `n_slots` credits keep the link busy
    /// even where two chains cross it in opposite directions (a
    /// bidirectional ring's, two trees'): each chain's offset per hop is a
    /// whole `⌈hop_in_pieces⌉` piece times, and a cycle through both
    /// participants' in-order steps holds the two offsets plus the credits'
    /// return in the slots of both queues: 2δ + 2·L·B/x ≤ 2k with
    /// δ = ⌈hop_in_pieces(x)⌉ (docs/model.md §Pipelining). None when no
    /// piece size fits (fewer than 3 slots); 0 for an ideal link.
    fn least_busy_piece(&self, n_slots: u32) -> Option<f64> {
        let (lb, k) = (
            self.hop_latency_ns * self.link_bytes_per_ns,
            f64::from(n_slots),
        );
        if lb <= 0.0 {
            return Some(0.0);
        }
        let ends = self.ends_ns_per_byte * self.link_bytes_per_ns;
        (2..n_slots)
            .filter_map(|delta| {
                let d = f64::from(delta);
                let per_hop = lb / (d - 1.0 - ends);
                (d - 1.0 - ends > 0.0).then(|| per_hop.max(lb / (k - d)))
            })
            .min_by(f64::total_cmp)
    }

    /// How many piece transfers of `piece_bytes` one chain hop lasts (at
    /// least 1): piece i reaches the participant `d` hops down a chain about
    /// `d ×` this after the head sends it: the link's transfer and latency,
    /// a NoC hop's latency and the piece's NoC crossings at both ends.
    pub fn hop_in_pieces(&self, piece_bytes: u64) -> f64 {
        if self.link_bytes_per_ns <= 0.0 || piece_bytes == 0 {
            return 1.0;
        }
        let transfer_ns = piece_bytes as f64 / self.link_bytes_per_ns;
        let ends_ns = piece_bytes as f64 * self.ends_ns_per_byte;
        1.0 + (self.hop_latency_ns + ends_ns) / transfer_ns
    }
}

impl Chunks {
    /// Pieces to cut a transfer of `elems` f16 into when it crosses `stages`
    /// store-and-forward stages one after another (a chain of n participants:
    /// n − 1; one ring step: 1). `auto` takes the more of one piece per slot
    /// and, for a chain, [`AUTO_PIECES_PER_STAGE`] per stage; then keeps
    /// pieces at least `limits.min_bytes` and at most [`AUTO_MAX_PIECES`]
    /// (docs/model.md §Pipelining). Never more pieces than elements.
    pub fn pieces(self, elems: usize, stages: usize, limits: PieceLimits) -> usize {
        let elems = elems.max(1) as u64;
        let k = match self {
            Chunks::Fixed(k) => u64::from(k),
            Chunks::Auto => {
                let bytes = elems * 2;
                let per_stage = if stages > 1 {
                    AUTO_PIECES_PER_STAGE * stages as u64
                } else {
                    1
                };
                let wanted = bytes.div_ceil(limits.max_bytes).max(per_stage);
                wanted
                    .min((bytes / limits.min_bytes).max(1))
                    .min(AUTO_MAX_PIECES)
            }
        };
        k.clamp(1, elems) as usize
    }

    /// The fixed depth, if any (`auto` is None).
    pub fn fixed(self) -> Option<u32> {
        match self {
            Chunks::Fixed(k) => Some(k),
            Chunks::Auto => None,
        }
    }
}

impl std::fmt::Display for Chunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Chunks::Auto => f.write_str("auto"),
            Chunks::Fixed(k) => write!(f, "{k}"),
        }
    }
}

impl Serialize for Chunks {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        match self {
            Chunks::Auto => ser.serialize_str("auto"),
            Chunks::Fixed(k) => ser.serialize_u32(*k),
        }
    }
}

impl TryFrom<&ChunksSpec> for Chunks {
    /// (problem, allowed)
    type Error = (String, String);

    /// The one check of a written depth: `auto`, or 1 to [`MAX_CHUNKS`].
    fn try_from(spec: &ChunksSpec) -> Result<Self, Self::Error> {
        let allowed = || format!("a whole number from 1 to {MAX_CHUNKS}, or auto");
        match spec {
            ChunksSpec::Number(k) if (1..=MAX_CHUNKS).contains(k) => Ok(Chunks::Fixed(*k as u32)),
            ChunksSpec::Number(k) => Err((format!("chunks is {k}"), allowed())),
            ChunksSpec::Word(w) if w == "auto" => Ok(Chunks::Auto),
            ChunksSpec::Word(w) => Err((format!("chunks is '{w}'"), allowed())),
        }
    }
}

impl<'de> Deserialize<'de> for Chunks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Chunks::try_from(&ChunksSpec::deserialize(d)?).map_err(|(problem, allowed)| {
            serde::de::Error::custom(format!("{problem}; allowed: {allowed}"))
        })
    }
}
