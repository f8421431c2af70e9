//! The algorithm registry. To add an algorithm: write one file here that
//! implements [`Algorithm`](super::Algorithm) (the compiler asks for every
//! answer without a default), declare it and list it in [`ALL`], and add an entry to
//! `configs/ccl.yaml`; the registry test then runs it (docs/guide.md walks
//! through it). Helpers several algorithms share live in `primitives`.
//!
//! The registry depends on `config` (it names [`AUTO`](crate::config::AUTO);
//! kernels take its `Chunks` and `PieceLimits`), never the other way: the
//! checks of a ccl.yaml entry that need the registry (a known algorithm, a
//! mapper it runs under) are in `crate::load`, above both.

mod bidir_ring;
mod bruck;
mod dbtree;
mod dims;
mod hier_lanes;
mod hier_root;
#[cfg(feature = "test-algorithms")]
mod mutants;
mod pairwise;
#[cfg(feature = "test-algorithms")]
mod panics;
mod primitives;
mod rhd;
mod ring;
#[cfg(feature = "test-algorithms")]
mod star;
mod torus_trees;
mod tree;

use super::{Algorithm, CclError};

/// Every algorithm shipped to users (each has an entry in configs/ccl.yaml).
pub static ALL: &[&dyn Algorithm] = &[
    &hier_root::HierRoot,
    &ring::RingAlgo,
    &bidir_ring::BidirRing,
    &hier_lanes::HierLanes,
    &tree::Tree,
    &rhd::Rhd,
    &dbtree::DbTree,
    &pairwise::Pairwise,
    &bruck::Bruck,
    &dims::Dims,
    &torus_trees::TorusTrees,
];

/// Correct algorithms only the project's tests run (never listed to users;
/// their ccl entries live in tests/data/ccl/test_algorithms.yaml).
#[cfg(feature = "test-algorithms")]
static TEST_ONLY: &[&dyn Algorithm] = &[&star::Star];
#[cfg(not(feature = "test-algorithms"))]
static TEST_ONLY: &[&dyn Algorithm] = &[];

/// Deliberately broken algorithms, for the tests that must catch them.
#[cfg(feature = "test-algorithms")]
static BROKEN: &[&dyn Algorithm] = &[
    &panics::Panics,
    &mutants::SKIP_STEP,
    &mutants::WRONG_BLOCK,
    &mutants::DOUBLE_COUNT,
];
#[cfg(not(feature = "test-algorithms"))]
static BROKEN: &[&dyn Algorithm] = &[];

/// Every algorithm that runs correctly: the shipped ones ([`ALL`]), then
/// the test-only ones when the `test-algorithms` feature is on.
pub fn registered() -> impl Iterator<Item = &'static dyn Algorithm> {
    ALL.iter().chain(TEST_ONLY).copied()
}

/// Earlier names of algorithms, still accepted wherever an algorithm is
/// named (ccl.yaml `algorithm:`, so every entry and plan built on them):
/// (alias, registered name). [`find`] resolves them; nothing else should.
pub static ALIASES: &[(&str, &str)] = &[("adr0032", "hier_root")];

/// The registered name `name` stands for: the target of an alias, else
/// `name` itself.
pub fn canonical(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, target)| target)
}

/// The shipped algorithms' names, for messages and listings.
pub fn names() -> Vec<&'static str> {
    ALL.iter().map(|a| a.name()).collect()
}

/// The shipped algorithms' names, an alias beside its algorithm
/// (`hier_root (alias adr0032)`), for the allowed list of a message.
pub fn allowed() -> String {
    let with_alias = |name: &'static str| match ALIASES.iter().find(|(_, t)| *t == name) {
        Some((alias, _)) => format!("{name} (alias {alias})"),
        None => name.to_string(),
    };
    names()
        .into_iter()
        .map(with_alias)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The algorithm registered as `name` or aliased by it; an unknown name
/// lists the known ones.
pub fn find(name: &str) -> Result<&'static dyn Algorithm, CclError> {
    let registered_name = canonical(name);
    registered()
        .chain(BROKEN.iter().copied())
        .find(|a| a.name() == registered_name)
        .ok_or_else(|| {
            if name == super::config::AUTO {
                return CclError::Config(format!(
                    "algorithm '{name}' is chosen per size by the autotuner (kernbench autotune, autotune::Tuner::decide), which names a registered algorithm; a communicator runs one: {}",
                    allowed()
                ));
            }
            let known = names().into_iter().chain(ALIASES.iter().map(|(a, _)| *a));
            CclError::Config(format!(
                "unknown algorithm '{name}'{}; registered: {}",
                kernbench_spec::names::did_you_mean(name, known),
                allowed()
            ))
        })
}
