//! SIP kinds: a heterogeneous system gives some SIPs other PE,
//! memory and link parameters, and a capability set naming the ccl.yaml
//! configs that kind can run.
//!
//! ```yaml
//! system:
//!   sips: { count: 4, topology: ring_1d, kinds: { big: [0, 1], small: ["2..4"] } }
//! sip_kinds:
//!   big:   { capabilities: [ring_hbm, ring_sram] }
//!   small: { links: { inter_sip: { bandwidth_gbps: 50.0 } }, capabilities: [ring_hbm] }
//! ```
//! A kind overrides only what it names; everything else is the spec's own
//! section. SIPs no kind lists have the spec's parameters (kind `base`) and
//! every capability. Memory sizes and packet sizes stay the spec's: the
//! collective library places each rank's buffers at the same offsets and
//! cuts the same pieces on every rank.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::rules::{Issue, check_bandwidth, check_duration, check_pe_at, issue};
use super::types::{LinkKinds, LinkSpec, MemSpec, Memories, PeSpec, SystemSpec};

/// The name of the kind of SIPs that no `system.sips.kinds` entry lists.
pub const BASE_KIND: &str = "base";

/// Most kinds besides the base: each kind has its own four link classes,
/// and a link's class index is one byte.
pub const MAX_SIP_KINDS: usize = 62;

/// One entry of `sip_kinds:`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SipKindSpec {
    #[serde(default)]
    pub pe: PeOverride,
    #[serde(default)]
    pub memory: MemOverrides,
    #[serde(default)]
    pub links: LinkOverrides,
    /// Names of ccl.yaml configs (entries of `algorithms:`) this kind runs;
    /// omitted = every config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
}

/// PE throughput fields a kind may change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector_lanes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub macs_per_tick: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_overhead_ns: Option<f64>,
}

/// Timing fields of a memory or link a kind may change (not its size).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ideal: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcm: Option<RateOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sram: Option<RateOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hbm: Option<RateOverride>,
}

/// Link kinds a SIP kind may change. A link takes the kind of the SIP that
/// owns it: links inside a SIP and its PCIe link that SIP's, an inter-SIP
/// link its sending port's SIP's (each port owns its outgoing link).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noc: Option<RateOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ucie: Option<RateOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_sip: Option<RateOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<RateOverride>,
}

/// A SIP id or a half-open range `"a..b"` in `system.sips.kinds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SipIds {
    One(u32),
    Range(String),
}

impl SipIds {
    fn ids(&self) -> Option<std::ops::Range<u32>> {
        match self {
            SipIds::One(s) => Some(*s..s.saturating_add(1)),
            SipIds::Range(r) => {
                let (a, b) = r.trim().split_once("..")?;
                let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                (a < b).then_some(a..b)
            }
        }
    }
}

/// Keeps the SIPs of `system.sips.kinds` that a system of `count` SIPs
/// has: a copy of a system with fewer SIPs (one SIP of it for a GEMM, a
/// TP group's SIPs) keeps each remaining SIP's kind and drops the rest;
/// added SIPs are of the base kind. Entries that are not ids or ranges
/// stay, for validation to name.
pub fn keep_sips_below(listed: &mut BTreeMap<String, Vec<SipIds>>, count: u32) {
    for ids in listed.values_mut() {
        ids.retain_mut(|entry| match entry.ids() {
            None => true,
            Some(r) if r.start >= count => false,
            Some(r) => {
                if r.end > count {
                    *entry = SipIds::Range(format!("{}..{count}", r.start));
                }
                true
            }
        });
    }
    listed.retain(|_, ids| !ids.is_empty());
}

/// A kind's full parameters: the spec's sections with its overrides applied.
#[derive(Debug, Clone, PartialEq)]
pub struct KindParams {
    pub name: String,
    pub pe: PeSpec,
    pub memory: Memories,
    pub links: LinkKinds,
    /// None = every config.
    pub capabilities: Option<Vec<String>>,
}

impl KindParams {
    /// Whether this kind runs the ccl.yaml config named `config`.
    pub fn supports(&self, config: &str) -> bool {
        self.capabilities
            .as_ref()
            .is_none_or(|c| c.iter().any(|n| n == config))
    }
}

/// The kinds of a validated system and which SIP has which.
#[derive(Debug, Clone, PartialEq)]
pub struct SipKinds {
    /// Index 0 is [`BASE_KIND`], then `sip_kinds:` in name order.
    pub kinds: Vec<KindParams>,
    /// Kind index per SIP; empty when every SIP is of the base kind.
    of_sip: Vec<u16>,
}

impl SipKinds {
    /// The kind index of `sip`.
    pub fn index_of(&self, sip: u32) -> usize {
        self.of_sip.get(sip as usize).map_or(0, |&k| usize::from(k))
    }

    /// The parameters of `sip`.
    pub fn of(&self, sip: u32) -> &KindParams {
        &self.kinds[self.index_of(sip)]
    }

    /// Whether any SIP differs from the spec's own parameters.
    pub fn heterogeneous(&self) -> bool {
        !self.of_sip.is_empty()
    }

    /// The SIPs of kind index `k`, out of `count`.
    pub fn sips_of(&self, k: usize, count: u32) -> Vec<u32> {
        (0..count).filter(|&s| self.index_of(s) == k).collect()
    }
}

fn rate(base: LinkSpec, o: Option<RateOverride>) -> LinkSpec {
    let o = o.unwrap_or_default();
    LinkSpec {
        bandwidth_gbps: o.bandwidth_gbps.unwrap_or(base.bandwidth_gbps),
        latency_ns: o.latency_ns.unwrap_or(base.latency_ns),
        ideal: o.ideal.unwrap_or(base.ideal),
        ..base
    }
}

fn mem_rate(base: MemSpec, o: Option<RateOverride>) -> MemSpec {
    let o = o.unwrap_or_default();
    MemSpec {
        bandwidth_gbps: o.bandwidth_gbps.unwrap_or(base.bandwidth_gbps),
        latency_ns: o.latency_ns.unwrap_or(base.latency_ns),
        ideal: o.ideal.unwrap_or(base.ideal),
        ..base
    }
}

fn resolve(name: &str, kind: &SipKindSpec, spec: &SystemSpec) -> KindParams {
    let (p, m, l) = (&kind.pe, &kind.memory, &kind.links);
    KindParams {
        name: name.into(),
        pe: PeSpec {
            vector_lanes: p.vector_lanes.unwrap_or(spec.pe.vector_lanes),
            macs_per_tick: p.macs_per_tick.unwrap_or(spec.pe.macs_per_tick),
            launch_overhead_ns: p.launch_overhead_ns.unwrap_or(spec.pe.launch_overhead_ns),
        },
        memory: Memories {
            tcm: mem_rate(spec.memory.tcm, m.tcm),
            sram: mem_rate(spec.memory.sram, m.sram),
            hbm: mem_rate(spec.memory.hbm, m.hbm),
        },
        links: LinkKinds {
            noc: rate(spec.links.noc, l.noc),
            ucie: rate(spec.links.ucie, l.ucie),
            inter_sip: rate(spec.links.inter_sip, l.inter_sip),
            pcie: rate(spec.links.pcie, l.pcie),
        },
        capabilities: kind.capabilities.clone(),
    }
}

/// The base kind: the spec's own sections, every capability.
fn base(spec: &SystemSpec) -> KindParams {
    resolve(BASE_KIND, &SipKindSpec::default(), spec)
}

/// Resolves and validates `sip_kinds:` and `system.sips.kinds`. Every error
/// names the kind, and the SIP where one is at fault.
pub(super) fn sip_kinds(spec: &SystemSpec) -> Result<SipKinds, Issue> {
    let mut kinds = vec![base(spec)];
    if spec.sip_kinds.len() > MAX_SIP_KINDS {
        return Err(issue(
            "sip_kinds",
            format!(
                "{} kinds are defined, more than the limit of {MAX_SIP_KINDS}",
                spec.sip_kinds.len()
            ),
            format!("at most {MAX_SIP_KINDS} kinds; SIPs with equal parameters can share one"),
        ));
    }
    for (name, kind) in &spec.sip_kinds {
        let path = format!("sip_kinds.{name}");
        if name == BASE_KIND {
            return Err(issue(
                path,
                format!("the kind name '{BASE_KIND}' is reserved for SIPs that no kind lists"),
                "another name, e.g. big or small",
            ));
        }
        let params = resolve(name, kind, spec);
        check_params(&path, &params)?;
        kinds.push(params);
    }
    let Some(listed) = &spec.system.sips.kinds else {
        return Ok(SipKinds {
            kinds,
            of_sip: Vec::new(),
        });
    };
    let of_sip = assign(listed, &kinds, spec.system.sips.count)?;
    Ok(SipKinds { kinds, of_sip })
}

/// Kind index per SIP from `system.sips.kinds`.
fn assign(
    listed: &BTreeMap<String, Vec<SipIds>>,
    kinds: &[KindParams],
    count: u32,
) -> Result<Vec<u16>, Issue> {
    let defined = || {
        let names: Vec<&str> = kinds[1..].iter().map(|k| k.name.as_str()).collect();
        if names.is_empty() {
            "none yet".to_string()
        } else {
            names.join(", ")
        }
    };
    let mut of_sip = vec![0u16; count as usize];
    for (name, ids) in listed {
        let path = format!("system.sips.kinds.{name}");
        let Some(k) = kinds
            .iter()
            .position(|k| &k.name == name)
            .filter(|&k| k > 0)
        else {
            return Err(issue(
                path,
                format!(
                    "kind '{name}' is not defined under sip_kinds (defined: {})",
                    defined()
                ),
                format!("define sip_kinds.{name}: {{ ... }}, or list SIPs under a defined kind"),
            ));
        };
        for (i, entry) in ids.iter().enumerate() {
            let item = format!("{path}[{i}]");
            let Some(range) = entry.ids() else {
                return Err(issue(
                    item,
                    format!("{entry:?} is neither a SIP id nor a range \"a..b\" with a < b"),
                    "a SIP id such as 3, or a half-open range such as \"0..8\" (SIPs 0 to 7)",
                ));
            };
            for sip in range {
                if sip >= count {
                    return Err(issue(
                        item,
                        format!(
                            "SIP {sip} of kind '{name}' does not exist: the system has SIPs 0..{count} (system.sips.count)"
                        ),
                        format!("SIP ids below {count}"),
                    ));
                }
                let was = &mut of_sip[sip as usize];
                if *was != 0 && usize::from(*was) != k {
                    return Err(issue(
                        item,
                        format!(
                            "SIP {sip} is listed under kind '{}' and kind '{name}'",
                            kinds[usize::from(*was)].name
                        ),
                        "each SIP under one kind at most",
                    ));
                }
                *was = k as u16;
            }
        }
    }
    Ok(of_sip)
}

/// A kind's resolved parameters obey the same rules as the spec's own.
fn check_params(path: &str, k: &KindParams) -> Result<(), Issue> {
    check_pe_at(&format!("{path}.pe"), &k.pe)?;
    for (name, mem) in k.memory.named() {
        check_bandwidth(
            &format!("{path}.memory.{name}.bandwidth_gbps"),
            mem.bandwidth_gbps,
        )?;
        check_duration(&format!("{path}.memory.{name}.latency_ns"), mem.latency_ns)?;
    }
    for (name, link) in k.links.named() {
        check_bandwidth(
            &format!("{path}.links.{name}.bandwidth_gbps"),
            link.bandwidth_gbps,
        )?;
        check_duration(&format!("{path}.links.{name}.latency_ns"), link.latency_ns)?;
    }
    Ok(())
}
