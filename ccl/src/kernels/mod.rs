//! Building blocks of collective kernels, written against the tracer.
//!
//! A participant's buffer is cut into *atoms* by a list of radices: the
//! buffer splits into `radices[0]` blocks, each of those into `radices[1]`,
//! and so on; the last radix is usually the pipeline depth (`chunks`). Every
//! block of every level is then a contiguous run of atoms, and every atom is
//! one tile, so hierarchical algorithms never need to slice a tile.
//!
//! `buffer` holds the atoms, `ring` the ring phases, `chain` the pipelined
//! chains, `ranges` the element-range view rhd and dims use.

mod buffer;
mod chain;
mod ranges;
mod ring;

pub use buffer::{Atom, Buffer, block_offset, combine, split};
pub use chain::{Chain, ChainKind, LOAD_AHEAD, run_chains};
pub use ranges::{RangeIo, send_tiles};
pub use ring::{Keep, Ring, RingJob, all_gather, grid_cycle, reduce_scatter};
