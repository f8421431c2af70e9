//! The algorithm registry. To add an algorithm: write one file here that
//! implements [`Algorithm`](super::Algorithm) (the compiler asks for every
//! answer), declare it and list it in [`ALL`], and add an entry to
//! `configs/ccl.yaml`; the registry test then runs it (docs/guide.md walks
//! through it). Helpers several algorithms share live in `primitives`.

mod adr0032;
mod bidir_ring;
mod bruck;
mod dbtree;
mod dims;
mod hier_lanes;
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
    &adr0032::Adr0032,
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

/// The shipped algorithms' names, for messages and listings.
pub fn names() -> Vec<&'static str> {
    ALL.iter().map(|a| a.name()).collect()
}

/// The algorithm registered as `name`; an unknown name lists the known ones.
pub fn find(name: &str) -> Result<&'static dyn Algorithm, CclError> {
    registered()
        .chain(BROKEN.iter().copied())
        .find(|a| a.name() == name)
        .ok_or_else(|| {
            if name == super::config::AUTO {
                return CclError::Config(format!(
                    "algorithm '{name}' is chosen per size by the autotuner (kernbench autotune, autotune::Tuner::decide), which names a registered algorithm; a communicator runs one: {}",
                    names().join(", ")
                ));
            }
            CclError::Config(format!(
                "unknown algorithm '{name}'{}; registered: {}",
                crate::names::did_you_mean(name, names()),
                names().join(", ")
            ))
        })
}
