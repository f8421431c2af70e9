//! `configs/ccl.yaml`: defaults plus named algorithm entries.
//!
//! ```yaml
//! defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 65536,
//! chunks: auto } algorithms:
//!   ring_sram: { algorithm: ring, buffer_kind: sram }
//! ```
//! An entry inherits every field it omits from `defaults`.

use super::algorithms;
use kernbench_runtime::kernel::wiring::QueueConfig;
use kernbench_spec::spec::{SpecError, line_of, parse_yaml};
use kernbench_spec::topology::address::Space;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The embedded default (`configs/ccl.yaml`).
pub const DEFAULT_CCL_YAML: &str = include_str!("../../../configs/ccl.yaml");

/// Mapper names, as ccl.yaml's `mapper:` takes them (`dist::layout`
/// implements each).
pub const MAPPERS: &[&str] = &["leader_only", "all_pes"];

/// Validator names, as ccl.yaml's `validator:` takes them (`dist::layout`
/// implements each).
pub const VALIDATORS: &[&str] = &[
    "cube_leaders",
    "single_shard_per_rank",
    "multi_pe_sip_local",
];

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

/// `chunks` as written: a number or a word (only `auto` is valid; the
/// resolver names the field when it is not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ChunksSpec {
    Number(u64),
    Word(String),
}

impl<'de> Deserialize<'de> for ChunksSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = ChunksSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a whole number in digits (no sign, fraction or unit suffix such as K), or auto")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ChunksSpec, E> {
                Ok(ChunksSpec::Number(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ChunksSpec, E> {
                u64::try_from(v)
                    .map(ChunksSpec::Number)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ChunksSpec, E> {
                Ok(ChunksSpec::Word(v.into()))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// One entry: every field optional, missing ones come from `defaults`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    /// A registered algorithm (see `kernbench run --help`).
    pub algorithm: Option<String>,
    /// Memory holding each queue's receive slots.
    pub buffer_kind: Option<Space>,
    /// Slots per queue (credits a sender starts with).
    pub n_slots: Option<u64>,
    /// Bytes per slot: the largest chunk one message carries.
    pub slot_size: Option<u64>,
    /// Pipeline depth: each transfer of the algorithm is cut into this many
    /// pieces, or `auto` (chosen from the size and the system).
    pub chunks: Option<ChunksSpec>,
    /// Ranks of the process group (default: one per SIP).
    pub world_size: Option<u32>,
    /// Which PEs of a rank's SIP take part (`leader_only`, `all_pes`).
    pub mapper: Option<String>,
    /// The shard layout a collective's tensor must have (`cube_leaders`,
    /// `single_shard_per_rank`, `multi_pe_sip_local`; default: the mapper's
    /// own).
    pub validator: Option<String>,
}

/// The file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CclFile {
    pub defaults: EntrySpec,
    #[serde(default)]
    pub algorithms: BTreeMap<String, EntrySpec>,
    /// What `algorithm: auto` chooses among (the autotuner above this crate decides).
    #[serde(default)]
    pub autotune: Option<TuneSpaceSpec>,
}

/// `autotune:` as written: entries to try and optional axes that replace a
/// field of every entry, making a grid (entries × buffer kinds × slots ×
/// slot sizes × chunks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuneSpaceSpec {
    pub configs: Vec<String>,
    pub buffer_kind: Option<Vec<Space>>,
    pub n_slots: Option<Vec<u64>>,
    pub slot_size: Option<Vec<u64>>,
    pub chunks: Option<Vec<ChunksSpec>>,
}

/// The algorithm name that asks the autotuner to choose per size bucket.
pub const AUTO: &str = "auto";

/// A resolved, validated algorithm configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlgoConfig {
    /// The entry's name in ccl.yaml (what reports show).
    pub name: String,
    /// The registered algorithm it runs.
    pub algorithm: String,
    pub buffer_kind: Space,
    pub n_slots: u32,
    pub slot_size: u64,
    pub chunks: Chunks,
    /// Process-group settings (see `dist`): ranks (None: one per SIP), the
    /// mapper and validator names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    #[serde(default = "leader_only", skip_serializing_if = "is_leader_only")]
    pub mapper: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<String>,
}

fn leader_only() -> String {
    "leader_only".into()
}

fn is_leader_only(s: &String) -> bool {
    s == "leader_only"
}

/// Most slots per queue (credits a sender starts with).
pub const MAX_N_SLOTS: u64 = 1 << 16;
/// Largest slot, bytes (4 GiB): one chunk message.
pub const MAX_SLOT_SIZE: u64 = 1 << 32;
/// Deepest pipeline: pieces per transfer.
pub const MAX_CHUNKS: u64 = 1 << 20;

impl AlgoConfig {
    /// The receive queues of this configuration.
    pub fn queues(&self) -> QueueConfig {
        QueueConfig {
            buffer: self.buffer_kind,
            n_slots: self.n_slots,
            slot_size: self.slot_size,
        }
    }

    /// Sets a numeric field after checking its range: the one check every
    /// origin of the value (ccl.yaml, a sweep plan axis) goes through.
    /// Err is (problem, allowed).
    pub fn set(&mut self, field: &str, v: u64) -> Result<(), (String, String)> {
        let range = |lo: u64, hi: u64, unit: &str| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err((
                    format!("{field} is {v}"),
                    format!("a whole number from {lo} to {hi}{unit}"),
                ))
            }
        };
        match field {
            "n_slots" => {
                range(1, MAX_N_SLOTS, "")?;
                self.n_slots = v as u32;
            }
            "slot_size" => {
                range(2, MAX_SLOT_SIZE, " bytes, even (f16 elements)")?;
                if !v.is_multiple_of(2) {
                    return Err((
                        format!("slot_size {v} is odd: data is f16 (2 bytes per element)"),
                        format!("an even number of bytes from 2 to {MAX_SLOT_SIZE}"),
                    ));
                }
                self.slot_size = v;
            }
            other => {
                return Err((
                    format!("unknown ccl field '{other}'"),
                    "algorithm, buffer_kind, n_slots, slot_size, chunks".into(),
                ));
            }
        }
        Ok(())
    }

    /// Sets `chunks` from text: `auto` or a number.
    pub fn set_chunks(&mut self, text: &str) -> Result<(), (String, String)> {
        let spec = match text.parse::<u64>() {
            Ok(k) => ChunksSpec::Number(k),
            Err(_) => ChunksSpec::Word(text.into()),
        };
        self.chunks = Chunks::try_from(&spec)?;
        Ok(())
    }

    /// Sets `buffer_kind` from its YAML name.
    pub fn set_buffer_kind(&mut self, name: &str) -> Result<(), (String, String)> {
        let Some(space) = Space::parse(name) else {
            return Err((
                format!("unknown buffer_kind '{name}'"),
                "tcm, sram or hbm".into(),
            ));
        };
        self.buffer_kind = space;
        Ok(())
    }
}

/// All entries of a ccl.yaml, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct CclConfig {
    pub origin: String,
    /// The `defaults` entry as a configuration named "defaults".
    pub defaults: AlgoConfig,
    pub entries: Vec<AlgoConfig>,
    /// The candidates `algorithm: auto` chooses among, in order (ties go to
    /// the first): the `autotune:` grid, or every entry when there is none.
    pub candidates: Vec<AlgoConfig>,
    /// `--algorithm auto` when no entry has that name: the defaults with
    /// algorithm auto.
    pub auto: AlgoConfig,
}

impl CclConfig {
    pub fn embedded_default() -> Self {
        Self::from_yaml(DEFAULT_CCL_YAML, "<embedded ccl.yaml>")
            .unwrap_or_else(|e| panic!("embedded ccl.yaml is invalid: {e}"))
    }

    pub fn from_file(path: &Path) -> Result<Self, SpecError> {
        let text = kernbench_spec::spec::input::read_config(path, "ccl config")?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, SpecError> {
        let file: CclFile = parse_yaml(text, origin)?;
        let err = |path: String, problem: String, allowed: String| SpecError {
            file: origin.into(),
            line: line_of(text, &path),
            path,
            problem,
            allowed,
        };
        let resolve = |name: &str,
                       path: &str,
                       e: &EntrySpec,
                       base: Option<&AlgoConfig>|
         -> Result<AlgoConfig, SpecError> {
            let pick = |v: Option<String>, d: Option<String>| v.or(d);
            let algorithm = pick(e.algorithm.clone(), base.map(|b| b.algorithm.clone()))
                .ok_or_else(|| {
                    err(
                        format!("{path}.algorithm"),
                        "no algorithm given".into(),
                        algorithms::allowed(),
                    )
                })?;
            if algorithm != AUTO && algorithms::find(&algorithm).is_err() {
                return Err(err(
                    format!("{path}.algorithm"),
                    format!("unknown algorithm '{algorithm}'"),
                    format!("{}, or {AUTO}", algorithms::allowed()),
                ));
            }
            let missing = |field: &str| {
                err(
                    format!("{path}.{field}"),
                    format!("{field} is not set here or in defaults"),
                    "set it in defaults".into(),
                )
            };
            // Numeric fields are filled below through the range-checking
            // setter.
            let mut cfg = AlgoConfig {
                name: name.into(),
                algorithm,
                buffer_kind: e
                    .buffer_kind
                    .or(base.map(|b| b.buffer_kind))
                    .ok_or_else(|| missing("buffer_kind"))?,
                n_slots: 0,
                slot_size: 0,
                chunks: Chunks::Auto,
                world_size: e.world_size.or(base.and_then(|b| b.world_size)),
                mapper: e
                    .mapper
                    .clone()
                    .or(base.map(|b| b.mapper.clone()))
                    .unwrap_or_else(leader_only),
                validator: e
                    .validator
                    .clone()
                    .or(base.and_then(|b| b.validator.clone())),
            };
            if cfg.world_size == Some(0) {
                return Err(err(
                    format!("{path}.world_size"),
                    "world_size is 0".into(),
                    "a whole number of ranks from 1 to the SIP count, or no world_size (one rank per SIP)".into(),
                ));
            }
            for (field, name, known) in [
                ("mapper", Some(&cfg.mapper), MAPPERS),
                ("validator", cfg.validator.as_ref(), VALIDATORS),
            ] {
                if let Some(n) = name
                    && !known.contains(&n.as_str())
                {
                    return Err(err(
                        format!("{path}.{field}"),
                        format!("unknown {field} '{n}'"),
                        known.join(", "),
                    ));
                }
            }
            check_mapper(name, &cfg)
                .map_err(|(problem, allowed)| err(format!("{path}.mapper"), problem, allowed))?;
            for (field, given, inherited) in [
                ("n_slots", e.n_slots, base.map(|b| u64::from(b.n_slots))),
                ("slot_size", e.slot_size, base.map(|b| b.slot_size)),
            ] {
                let v = given.or(inherited).ok_or_else(|| missing(field))?;
                cfg.set(field, v).map_err(|(problem, allowed)| {
                    err(format!("{path}.{field}"), problem, allowed)
                })?;
            }
            cfg.chunks = match (&e.chunks, base) {
                (Some(spec), _) => Chunks::try_from(spec).map_err(|(problem, allowed)| {
                    err(format!("{path}.chunks"), problem, allowed)
                })?,
                (None, Some(b)) => b.chunks,
                (None, None) => return Err(missing("chunks")),
            };
            Ok(cfg)
        };
        let defaults = resolve("defaults", "defaults", &file.defaults, None)?;
        let entries = file
            .algorithms
            .iter()
            .map(|(name, e)| {
                let path = format!("algorithms.{name}");
                check_entry_name(name)
                    .map_err(|(problem, allowed)| err(path.clone(), problem, allowed))?;
                resolve(name, &path, e, Some(&defaults))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let candidates = match &file.autotune {
            Some(space) => tune_space(space, &entries)
                .map_err(|(path, problem, allowed)| err(path, problem, allowed))?,
            None => entries
                .iter()
                .filter(|e| e.algorithm != AUTO)
                .cloned()
                .collect(),
        };
        let auto = AlgoConfig {
            name: AUTO.into(),
            algorithm: AUTO.into(),
            ..defaults.clone()
        };
        Ok(Self {
            origin: origin.into(),
            defaults,
            entries,
            candidates,
            auto,
        })
    }

    /// The entry named `name` ("defaults" is the defaults entry); Err is
    /// (problem, allowed).
    pub fn entry(&self, name: &str) -> Result<&AlgoConfig, (String, String)> {
        if name == "defaults" {
            return Ok(&self.defaults);
        }
        let found = self.entries.iter().find(|e| e.name == name);
        if found.is_none() && name == AUTO {
            return Ok(&self.auto);
        }
        found.ok_or_else(|| {
            let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
            let hint = kernbench_spec::names::did_you_mean(name, names.iter().copied());
            (
                format!(
                    "{} has no algorithm entry named '{name}'{hint}",
                    self.origin
                ),
                format!(
                    "an entry of the ccl config: defaults, {}, or {AUTO}",
                    names.join(", ")
                ),
            )
        })
    }
}

/// The `autotune:` grid: each named entry, with every given axis replacing
/// its field; a grid candidate is named `entry/buffer/n_slotsxslot_size/cK`.
/// Err is (path, problem, allowed).
fn tune_space(
    space: &TuneSpaceSpec,
    entries: &[AlgoConfig],
) -> Result<Vec<AlgoConfig>, GridProblem> {
    let names = || {
        entries
            .iter()
            .filter(|e| e.algorithm != AUTO)
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if space.configs.is_empty() {
        return Err((
            "autotune.configs".into(),
            "no configs to choose among".into(),
            format!("entries of algorithms:, e.g. [{}]", names()),
        ));
    }
    let mut bases = Vec::new();
    for (i, name) in space.configs.iter().enumerate() {
        let Some(e) = entries
            .iter()
            .find(|e| &e.name == name && e.algorithm != AUTO)
        else {
            return Err((
                format!("autotune.configs[{i}]"),
                format!("'{name}' is not an entry of algorithms: (or is itself auto)"),
                names(),
            ));
        };
        bases.push(e.clone());
    }
    let gridded = space.buffer_kind.is_some()
        || space.n_slots.is_some()
        || space.slot_size.is_some()
        || space.chunks.is_some();
    let set = |field: &'static str| {
        move |c: &mut AlgoConfig, v: &u64| {
            c.set(field, *v)
                .map_err(|(p, a)| (format!("autotune.{field}"), p, a))
        }
    };
    let mut out = cross(bases, &space.buffer_kind, |c, k| {
        c.buffer_kind = *k;
        Ok(())
    })?;
    out = cross(out, &space.n_slots, set("n_slots"))?;
    out = cross(out, &space.slot_size, set("slot_size"))?;
    out = cross(out, &space.chunks, |c, spec| {
        c.chunks =
            Chunks::try_from(spec).map_err(|(p, a)| ("autotune.chunks".to_string(), p, a))?;
        Ok(())
    })?;
    if gridded {
        for c in &mut out {
            c.name = format!(
                "{}/{}/{}x{}/c{}",
                c.name,
                c.buffer_kind.name(),
                c.n_slots,
                c.slot_size,
                c.chunks
            );
        }
    }
    Ok(out)
}

/// (path, problem, allowed) of a bad `autotune:` value.
type GridProblem = (String, String, String);

/// Every config once per value of an axis (`apply` sets it), config-major;
/// the configs unchanged when the axis is not given.
fn cross<T>(
    configs: Vec<AlgoConfig>,
    values: &Option<Vec<T>>,
    apply: impl Fn(&mut AlgoConfig, &T) -> Result<(), GridProblem>,
) -> Result<Vec<AlgoConfig>, GridProblem> {
    let Some(values) = values else {
        return Ok(configs);
    };
    let mut out = Vec::with_capacity(configs.len() * values.len());
    for c in &configs {
        for v in values {
            let mut c = c.clone();
            apply(&mut c, v)?;
            out.push(c);
        }
    }
    Ok(out)
}

/// Names the CLI gives its own meaning (`--algorithm all`, `auto`,
/// `defaults`): an entry may not take them.
pub const RESERVED_ENTRY_NAMES: [&str; 3] = ["all", AUTO, "defaults"];

/// Longest ccl entry name.
pub const MAX_ENTRY_NAME: usize = 64;

/// Refuses an entry name the CLI could not name unambiguously: a reserved
/// word, or one outside 1 to 64 letters, digits, `_`, `-` and `.`. Err is
/// (problem, allowed).
fn check_entry_name(name: &str) -> Result<(), (String, String)> {
    let pattern = format!(
        "1 to {MAX_ENTRY_NAME} letters, digits, '_', '-' or '.', other than {}",
        RESERVED_ENTRY_NAMES.join(", ")
    );
    let meaning = match name {
        "all" => Some("every entry, then the best per size"),
        AUTO => Some("the autotuned pick per size"),
        "defaults" => Some("the defaults entry"),
        _ => None,
    };
    let problem = if let Some(meaning) = meaning {
        format!("entry name '{name}' is reserved: --algorithm {name} means {meaning}")
    } else if name.is_empty() {
        "an entry has an empty name".to_string()
    } else if name.chars().count() > MAX_ENTRY_NAME {
        format!("entry name '{name}' is longer than {MAX_ENTRY_NAME} characters")
    } else if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        format!("entry name {name:?} contains {c:?}")
    } else {
        return Ok(());
    };
    Err((
        problem,
        format!("{pattern}; rename the entry, e.g. my_{}", safe_stem(name)),
    ))
}

/// `name` cut down to the entry-name pattern, for the fix of a bad name.
fn safe_stem(name: &str) -> String {
    let stem: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .take(MAX_ENTRY_NAME - 3)
        .collect();
    if stem.is_empty() {
        "entry".into()
    } else {
        stem
    }
}

/// Refuses a mapper the entry's algorithm cannot run: `all_pes` on an
/// algorithm that runs on cube leaders only. Err is (problem, allowed).
fn check_mapper(name: &str, cfg: &AlgoConfig) -> Result<(), (String, String)> {
    if cfg.mapper != "all_pes" || cfg.algorithm == AUTO {
        return Ok(());
    }
    let Ok(algorithm) = algorithms::find(&cfg.algorithm) else {
        return Ok(()); // an unknown algorithm is refused by its own field
    };
    if algorithm.every_pe() {
        return Ok(());
    }
    let every_pe: Vec<&str> = algorithms::ALL
        .iter()
        .filter(|a| a.every_pe())
        .map(|a| a.name())
        .collect();
    Err((
        format!(
            "entry '{name}' runs algorithm '{}' with mapper all_pes, but {} runs on cube leaders only",
            cfg.algorithm, cfg.algorithm
        ),
        format!(
            "the mappers {} allows: leader_only; set mapper: leader_only on the entry, or use an algorithm that runs on every PE ({})",
            cfg.algorithm,
            every_pe.join(", ")
        ),
    ))
}
