//! Memories: contended ports with the timing of a link (bandwidth, latency),
//! and, in functional mode, the f16 values they hold.
//!
//! Layout: no entity; everything is a resource. [`MemPorts`] is a dense
//! table (per space, one `free_at` and one `busy` per instance) because a
//! port is reached by number from wherever an access happens: a chunk's
//! TCM read, slot write and slot read (three per chunk, in `ipcq`, by the
//! queue's buffer instance), loads and stores (in `exec`, by a `MemLoc`).
//! Measured: TCM ports as a component on the PE entity, reached through a
//! `Query` by the PE's entity, ran the 4096-PE kernel ring (`kernbench
//! bench --no-build --no-traffic --rounds 2000`) in 4.55 s of CPU against
//! 4.30 s for this table (median of 7, side by side): 6 % slower, so the
//! table stays. [`MemoryStore`] is keyed by location, not by instance.

use crate::network::LinkClass;
use crate::program::{MemLoc, Space};
use crate::time::Tick;
use bevy_ecs::prelude::*;
use half::f16;
use std::collections::BTreeMap;

/// Whether values travel with the timing.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataMode {
    /// f16 values are computed, stored and carried in messages.
    #[default]
    Functional,
    /// Sizes only; identical timing, no values.
    TimingOnly,
}

/// One port per memory instance (a TCM per PE, an SRAM and an HBM per cube),
/// served FIFO like a link: an access of `b` bytes that reaches a free port at
/// `t` completes at `t + ⌈b/B⌉ + L`.
#[derive(Resource, Debug)]
pub struct MemPorts {
    /// Timing per SIP kind and space: `classes[kind][Space as usize]`.
    pub classes: Vec<[LinkClass; 3]>,
    /// The SIP kind of each instance, per space (PEs for TCM, cubes for
    /// SRAM and HBM); empty when every instance is kind 0 (a homogeneous
    /// system, or ports not yet sized by a machine).
    kind: [Vec<u8>; 3],
    free_at: [Vec<Tick>; 3],
    busy: [Vec<Tick>; 3],
}

impl MemPorts {
    /// Ports of `pes` PEs and `cubes` cubes; `pe_kind` and `cube_kind` give
    /// each one's SIP kind (an index into `classes`), or are empty when all
    /// are kind 0.
    pub fn new(
        classes: Vec<[LinkClass; 3]>,
        (pes, cubes): (usize, usize),
        pe_kind: Vec<u8>,
        cube_kind: Vec<u8>,
    ) -> Self {
        Self {
            classes,
            kind: [pe_kind, cube_kind.clone(), cube_kind],
            free_at: [vec![0; pes], vec![0; cubes], vec![0; cubes]],
            busy: [vec![0; pes], vec![0; cubes], vec![0; cubes]],
        }
    }

    /// An access of `bytes` to the memory of `loc` starts no earlier than
    /// `t`; returns the tick at which it completes.
    #[inline]
    pub fn access(&mut self, space: Space, instance: u32, t: Tick, bytes: u64) -> Tick {
        let (s, i) = (space as usize, instance as usize);
        let kind = self.kind[s].get(i).map_or(0, |&k| usize::from(k));
        let class = &self.classes[kind][s];
        if class.ideal {
            return t;
        }
        let ser = class.ser_ticks(bytes);
        let start = t.max(self.free_at[s][i]);
        self.free_at[s][i] = start + ser;
        self.busy[s][i] += ser;
        start + ser + class.latency
    }

    /// Ticks the port of one memory instance spent transferring.
    pub fn busy(&self, space: Space, instance: u32) -> Tick {
        self.busy[space as usize][instance as usize]
    }
}

impl MemPorts {
    /// For the fast-forward: when each port is free.
    pub(crate) fn steady_words(&self, sig: &mut crate::steady::Sig) {
        self.free_at.iter().flatten().for_each(|&t| sig.from(t));
    }

    /// For the fast-forward: each port's busy time.
    pub(crate) fn steady_counters(&mut self, f: &mut impl FnMut(&mut u64)) {
        self.busy.iter_mut().flatten().for_each(f);
    }

    /// For the fast-forward: every port free `d` ticks later.
    pub(crate) fn steady_shift(&mut self, d: Tick) {
        self.free_at.iter_mut().flatten().for_each(|t| *t += d);
    }
}

/// Functional-mode memory contents (data is only kept when a run checks
/// values): tensors of f16 keyed by the location of their first element. A read
/// may address any sub-range of one stored tensor; a write patches a tensor
/// that contains it or replaces the tensors it covers.
#[derive(Resource, Debug, Default)]
pub struct MemoryStore {
    tensors: BTreeMap<MemLoc, Vec<f16>>,
}

/// Bytes per element (all data is f16).
pub const ELEM_BYTES: u64 = 2;

impl MemoryStore {
    /// The stored tensor that starts at or before `at` in the same memory.
    fn containing(&self, at: MemLoc) -> Option<(MemLoc, &Vec<f16>)> {
        let first = MemLoc { offset: 0, ..at };
        self.tensors
            .range(first..=at)
            .next_back()
            .map(|(&k, v)| (k, v))
    }

    /// Writes `data` at `at`; writing nothing changes nothing (a zero-element
    /// register stored in timing-only runs costs no map lookup).
    pub fn write(&mut self, at: MemLoc, data: &[f16]) -> Result<(), String> {
        if data.is_empty() {
            return Ok(());
        }
        let end = at.offset + data.len() as u64 * ELEM_BYTES;
        let overlap = |base: u64| {
            format!(
                "write of {} bytes at {} {}+{:#x} partly overlaps the tensor at +{base:#x}",
                end - at.offset,
                at.space.name(),
                at.instance,
                at.offset
            )
        };
        if let Some((base, t)) = self.containing(at) {
            let t_end = base.offset + t.len() as u64 * ELEM_BYTES;
            if end <= t_end {
                let off = ((at.offset - base.offset) / ELEM_BYTES) as usize;
                let t = self.tensors.get_mut(&base).expect("found above");
                t[off..off + data.len()].copy_from_slice(data);
                return Ok(());
            }
            // A tensor that starts before the write and ends inside it would
            // be cut in two; one that starts where the write starts is replaced.
            if base.offset < at.offset && at.offset < t_end {
                return Err(overlap(base.offset));
            }
        }
        let covered: Vec<MemLoc> = self
            .tensors
            .range(at..MemLoc { offset: end, ..at })
            .map(|(&k, _)| k)
            .collect();
        for k in covered {
            if k.offset + self.tensors[&k].len() as u64 * ELEM_BYTES > end {
                return Err(overlap(k.offset));
            }
            self.tensors.remove(&k);
        }
        self.tensors.insert(at, data.to_vec());
        self.merge_around(at);
        Ok(())
    }

    /// Joins the tensor at `at` with a stored tensor that ends where it
    /// starts and one that starts where it ends, so rows written one by one
    /// (a matrix stored tile by tile) read back as one range.
    fn merge_around(&mut self, at: MemLoc) {
        let end_of = |k: MemLoc, v: &Vec<f16>| k.offset + v.len() as u64 * ELEM_BYTES;
        if self.tensors[&at].is_empty() {
            return;
        }
        let mut start = at;
        let before = self
            .tensors
            .range(MemLoc { offset: 0, ..at }..at)
            .next_back()
            .map(|(&k, v)| (k, end_of(k, v)));
        if let Some((k, end)) = before
            && end == at.offset
        {
            let tail = self.tensors.remove(&at).expect("inserted by the caller");
            self.tensors.get_mut(&k).expect("found above").extend(tail);
            start = k;
        }
        let end = end_of(start, &self.tensors[&start]);
        if let Some(next) = self.tensors.remove(&MemLoc {
            offset: end,
            ..start
        }) {
            self.tensors.get_mut(&start).expect("present").extend(next);
        }
    }

    /// Reads `rows` runs of `cols` elements, each `pitch` elements after the
    /// one before, into one row-major tile.
    pub fn read_rect(
        &self,
        at: MemLoc,
        rows: u64,
        cols: u64,
        pitch: u64,
    ) -> Result<Vec<f16>, String> {
        let mut out = Vec::with_capacity((rows * cols) as usize);
        for r in 0..rows {
            let row = MemLoc {
                offset: at.offset + r * pitch * ELEM_BYTES,
                ..at
            };
            out.extend(self.read(row, cols)?);
        }
        Ok(out)
    }

    /// Writes a row-major tile as runs of `cols` elements, `pitch` apart.
    pub fn write_rect(
        &mut self,
        at: MemLoc,
        data: &[f16],
        rows: u64,
        pitch: u64,
    ) -> Result<(), String> {
        if rows <= 1 {
            return self.write(at, data);
        }
        let cols = data.len() / rows as usize;
        for (r, row) in data.chunks(cols.max(1)).enumerate() {
            let at = MemLoc {
                offset: at.offset + r as u64 * pitch * ELEM_BYTES,
                ..at
            };
            self.write(at, row)?;
        }
        Ok(())
    }

    /// Reads `elems` elements at `at`; the range must lie inside one written
    /// tensor, except that reading none succeeds anywhere.
    pub fn read(&self, at: MemLoc, elems: u64) -> Result<Vec<f16>, String> {
        if elems == 0 {
            return Ok(Vec::new());
        }
        let where_ = || format!("{} {}+{:#x}", at.space.name(), at.instance, at.offset);
        let (base, t) = self
            .containing(at)
            .ok_or_else(|| format!("read at {}: nothing was written there", where_()))?;
        let off = ((at.offset - base.offset) / ELEM_BYTES) as usize;
        usize::try_from(elems)
            .ok()
            .and_then(|n| t.get(off..off.checked_add(n)?))
            .map(|s| s.to_vec())
            .ok_or_else(|| {
                format!(
                    "read of {elems} elements at {} runs past the tensor at +{:#x} ({} elements)",
                    where_(),
                    base.offset,
                    t.len()
                )
            })
    }
}

/// The memory module: ports (ideal until the machine sizes them), the data
/// mode and functional contents. It has no stage of its own: the modules
/// that move data reserve its ports.
pub struct MemoryPlugin;

impl crate::plugin::Plugin for MemoryPlugin {
    fn build(&self, world: &mut World, _: &mut Schedule) {
        let ideal = LinkClass::ideal;
        world.insert_resource(MemPorts::new(
            vec![[ideal(), ideal(), ideal()]],
            (0, 0),
            Vec::new(),
            Vec::new(),
        ));
        world.init_resource::<DataMode>();
        world.init_resource::<MemoryStore>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[f32]) -> Vec<f16> {
        xs.iter().map(|&x| f16::from_f32(x)).collect()
    }

    fn at(offset: u64) -> MemLoc {
        MemLoc {
            space: Space::Hbm,
            instance: 3,
            offset,
        }
    }

    #[test]
    fn store_reads_sub_ranges_and_patches_in_place() {
        let mut m = MemoryStore::default();
        m.write(at(100), &v(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        assert_eq!(m.read(at(102), 2).unwrap(), v(&[2.0, 3.0]));
        m.write(at(104), &v(&[9.0])).unwrap();
        assert_eq!(m.read(at(100), 4).unwrap(), v(&[1.0, 2.0, 9.0, 4.0]));
        assert!(m.read(at(106), 2).unwrap_err().contains("runs past"));
        assert!(
            m.read(at(50), 1)
                .unwrap_err()
                .contains("nothing was written")
        );
        assert!(
            m.write(at(106), &v(&[0.0, 0.0]))
                .unwrap_err()
                .contains("partly overlaps")
        );
        // A longer write at the start of a tensor replaces it.
        m.write(at(100), &v(&[7.0; 6])).unwrap();
        assert_eq!(m.read(at(100), 6).unwrap(), v(&[7.0; 6]));
        m.write(at(100), &v(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        // Other memories are separate.
        assert!(
            m.read(
                MemLoc {
                    instance: 4,
                    ..at(100)
                },
                1
            )
            .is_err()
        );
        // A write covering the whole tensor replaces it.
        m.write(at(96), &v(&[5.0; 8])).unwrap();
        assert_eq!(m.read(at(100), 2).unwrap(), v(&[5.0, 5.0]));
    }

    /// A 2x2 tile of a 3-column matrix lands in two runs; runs written next
    /// to each other, in any order, read back as one range.
    #[test]
    fn rectangles_write_rows_and_adjacent_runs_merge() {
        let mut m = MemoryStore::default();
        // Matrix at 0: rows of 3; write column 2 first, then columns 0-1.
        m.write_rect(at(4), &v(&[3.0, 6.0]), 2, 3).unwrap();
        m.write_rect(at(0), &v(&[1.0, 2.0, 4.0, 5.0]), 2, 3)
            .unwrap();
        assert_eq!(
            m.read(at(0), 6).unwrap(),
            v(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        );
        assert_eq!(
            m.read_rect(at(2), 2, 2, 3).unwrap(),
            v(&[2.0, 3.0, 5.0, 6.0])
        );
        // An empty write next to a tensor leaves it alone.
        m.write(at(12), &[]).unwrap();
        assert_eq!(m.read(at(0), 6).unwrap().len(), 6);
    }
}
