//! Memories: contended ports with the timing of a link (bandwidth, latency),
//! and, in functional mode, the values they hold (f16, bf16 or f32).
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

use crate::dtype::DType;
use crate::network::LinkClass;
use crate::program::{MemLoc, Space};
use crate::time::Tick;
use bevy_ecs::prelude::*;
use std::collections::BTreeMap;

/// Whether values travel with the timing.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataMode {
    /// Values are computed, stored and carried in messages.
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
/// values): tensors keyed by the location of their first element, each of
/// one dtype, its values held as f32 (each exact in the dtype). A read may
/// address any sub-range of one stored tensor; a write patches a tensor of
/// its dtype that contains it or replaces the tensors it covers.
#[derive(Resource, Debug, Default)]
pub struct MemoryStore {
    tensors: BTreeMap<MemLoc, Stored>,
}

/// One stored run of elements.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    dtype: DType,
    values: Vec<f32>,
}

impl Stored {
    /// The byte offset just past its last element, if it starts at `base`.
    fn end(&self, base: u64) -> u64 {
        base + self.values.len() as u64 * self.dtype.bytes()
    }
}

impl MemoryStore {
    /// The stored tensor that starts at or before `at` in the same memory.
    fn containing(&self, at: MemLoc) -> Option<(MemLoc, &Stored)> {
        let first = MemLoc { offset: 0, ..at };
        self.tensors
            .range(first..=at)
            .next_back()
            .map(|(&k, v)| (k, v))
    }

    /// Writes `data`, values of `dtype`, at `at`; writing nothing changes
    /// nothing (a zero-element register stored in timing-only runs costs no
    /// map lookup).
    pub fn write(&mut self, at: MemLoc, dtype: DType, data: &[f32]) -> Result<(), String> {
        if data.is_empty() {
            return Ok(());
        }
        let end = at.offset + data.len() as u64 * dtype.bytes();
        let where_ = |base: u64| format!("{} {}+{base:#x}", at.space.name(), at.instance);
        if let Some((base, t)) = self.containing(at) {
            let t_end = t.end(base.offset);
            // A tensor of another dtype is replaced only when the write covers it exactly.
            let replaces = t.dtype != dtype && base.offset == at.offset && end == t_end;
            if end <= t_end && !replaces {
                if t.dtype != dtype {
                    return Err(format!(
                        "write of {dtype} values at {} into the {} tensor at +{:#x}: a tensor holds one dtype; cast the values to {} first",
                        where_(at.offset),
                        t.dtype,
                        base.offset,
                        t.dtype
                    ));
                }
                let off = ((at.offset - base.offset) / dtype.bytes()) as usize;
                let t = self.tensors.get_mut(&base).expect("found above");
                t.values[off..off + data.len()].copy_from_slice(data);
                return Ok(());
            }
            // A tensor that starts before the write keeps what lies before it.
            if base.offset < at.offset && at.offset < t_end {
                self.cut(base, at.offset);
            }
        }
        let covered: Vec<MemLoc> = self
            .tensors
            .range(at..MemLoc { offset: end, ..at })
            .map(|(&k, _)| k)
            .collect();
        for k in covered {
            // A tensor that ends past the write keeps what lies after it.
            if self.tensors[&k].end(k.offset) > end {
                self.cut(k, end);
            }
            self.tensors.remove(&k);
        }
        let values = data.to_vec();
        self.tensors.insert(at, Stored { dtype, values });
        self.merge_around(at);
        Ok(())
    }

    /// Cuts the stored tensor at `base` in two at byte offset `at` (inside
    /// it, on an element boundary): rows of a wider tensor written by
    /// strided stores overwrite part of what was stored there before.
    fn cut(&mut self, base: MemLoc, at: u64) {
        let t = self.tensors.get_mut(&base).expect("a stored tensor");
        let keep = ((at - base.offset) / t.dtype.bytes()) as usize;
        let tail = Stored {
            dtype: t.dtype,
            values: t.values.split_off(keep),
        };
        self.tensors.insert(MemLoc { offset: at, ..base }, tail);
    }

    /// Joins the tensor at `at` with a stored tensor of its dtype that ends
    /// where it starts and one that starts where it ends, so rows written
    /// one by one (a matrix stored tile by tile) read back as one range.
    fn merge_around(&mut self, at: MemLoc) {
        let dtype = self.tensors[&at].dtype;
        let mut start = at;
        let before = self
            .tensors
            .range(MemLoc { offset: 0, ..at }..at)
            .next_back()
            .map(|(&k, v)| (k, v.end(k.offset), v.dtype));
        if let Some((k, end, d)) = before
            && end == at.offset
            && d == dtype
        {
            let tail = self.tensors.remove(&at).expect("inserted by the caller");
            let head = self.tensors.get_mut(&k).expect("found above");
            head.values.extend(tail.values);
            start = k;
        }
        let next = MemLoc {
            offset: self.tensors[&start].end(start.offset),
            ..start
        };
        if self.tensors.get(&next).is_some_and(|t| t.dtype == dtype) {
            let tail = self.tensors.remove(&next).expect("present");
            let head = self.tensors.get_mut(&start).expect("present");
            head.values.extend(tail.values);
        }
    }

    /// Reads `rows` runs of `cols` elements of `dtype`, each `pitch`
    /// elements after the one before, into one row-major tile.
    pub fn read_rect(
        &self,
        at: MemLoc,
        (rows, cols, pitch): (u64, u64, u64),
        dtype: DType,
    ) -> Result<Vec<f32>, String> {
        let mut out = Vec::with_capacity((rows * cols) as usize);
        for r in 0..rows {
            let row = MemLoc {
                offset: at.offset + r * pitch * dtype.bytes(),
                ..at
            };
            out.extend(self.read(row, cols, dtype)?);
        }
        Ok(out)
    }

    /// Writes a row-major tile of `dtype` as runs of `cols` elements, `pitch` apart.
    pub fn write_rect(
        &mut self,
        at: MemLoc,
        dtype: DType,
        data: &[f32],
        (rows, pitch): (u64, u64),
    ) -> Result<(), String> {
        if rows <= 1 {
            return self.write(at, dtype, data);
        }
        let cols = data.len() / rows as usize;
        for (r, row) in data.chunks(cols.max(1)).enumerate() {
            let at = MemLoc {
                offset: at.offset + r as u64 * pitch * dtype.bytes(),
                ..at
            };
            self.write(at, dtype, row)?;
        }
        Ok(())
    }

    /// Reads `elems` elements of `dtype` at `at`; the range must lie inside
    /// one written tensor of that dtype, except that reading none succeeds anywhere.
    pub fn read(&self, at: MemLoc, elems: u64, dtype: DType) -> Result<Vec<f32>, String> {
        if elems == 0 {
            return Ok(Vec::new());
        }
        let where_ = || format!("{} {}+{:#x}", at.space.name(), at.instance, at.offset);
        let (base, t) = self
            .containing(at)
            .ok_or_else(|| format!("read at {}: nothing was written there", where_()))?;
        if t.dtype != dtype && at.offset < t.end(base.offset) {
            return Err(format!(
                "read of {elems} {dtype} elements at {}: the tensor at +{:#x} holds {}; read it as {} (or cast it)",
                where_(),
                base.offset,
                t.dtype,
                t.dtype
            ));
        }
        let off = ((at.offset - base.offset) / dtype.bytes()) as usize;
        usize::try_from(elems)
            .ok()
            .and_then(|n| t.values.get(off..off.checked_add(n)?))
            .map(|s| s.to_vec())
            .ok_or_else(|| {
                format!(
                    "read of {elems} elements at {} runs past the tensor at +{:#x} ({} elements)",
                    where_(),
                    base.offset,
                    t.values.len()
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

    fn v(xs: &[f32]) -> Vec<f32> {
        xs.to_vec()
    }

    const H: DType = DType::F16;

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
        m.write(at(100), H, &v(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        assert_eq!(m.read(at(102), 2, H).unwrap(), v(&[2.0, 3.0]));
        m.write(at(104), H, &v(&[9.0])).unwrap();
        assert_eq!(m.read(at(100), 4, H).unwrap(), v(&[1.0, 2.0, 9.0, 4.0]));
        assert!(m.read(at(106), 2, H).unwrap_err().contains("runs past"));
        assert!(
            m.read(at(50), 1, H)
                .unwrap_err()
                .contains("nothing was written")
        );
        // A write over a tensor's end overwrites what it covers.
        m.write(at(106), H, &v(&[5.0, 6.0])).unwrap();
        assert_eq!(
            m.read(at(100), 5, H).unwrap(),
            v(&[1.0, 2.0, 9.0, 5.0, 6.0])
        );
        // One over a tensor's start too, and the rest of it stays.
        m.write(at(98), H, &v(&[0.5, 0.25])).unwrap();
        assert_eq!(
            m.read(at(98), 6, H).unwrap(),
            v(&[0.5, 0.25, 2.0, 9.0, 5.0, 6.0])
        );
        // A longer write at the start of a tensor replaces it.
        m.write(at(100), H, &v(&[7.0; 6])).unwrap();
        assert_eq!(m.read(at(100), 6, H).unwrap(), v(&[7.0; 6]));
        m.write(at(100), H, &v(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        // Other memories are separate.
        assert!(
            m.read(
                MemLoc {
                    instance: 4,
                    ..at(100)
                },
                1,
                H
            )
            .is_err()
        );
        // A write covering the whole tensor replaces it.
        m.write(at(96), H, &v(&[5.0; 8])).unwrap();
        assert_eq!(m.read(at(100), 2, H).unwrap(), v(&[5.0, 5.0]));
    }

    /// A tensor holds one dtype: f32 elements take 4 bytes, a patch of
    /// another dtype inside it is refused, a write covering it exactly
    /// replaces it, and runs of two dtypes side by side stay apart.
    #[test]
    fn tensors_keep_their_dtype() {
        let mut m = MemoryStore::default();
        m.write(at(0), DType::F32, &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(m.read(at(4), 2, DType::F32).unwrap(), [2.0, 3.0]);
        let e = m.write(at(4), H, &[5.0]).unwrap_err();
        assert!(e.starts_with("write of f16 values at hbm 3+0x4 into the f32 tensor at +0x0: a tensor holds one dtype; cast the values to f32 first"), "{e}");
        m.write(at(12), H, &[7.0, 8.0]).unwrap();
        assert_eq!(m.read(at(0), 3, DType::F32).unwrap(), [1.0, 2.0, 3.0]);
        assert_eq!(m.read(at(12), 2, H).unwrap(), [7.0, 8.0]);
        m.write(at(0), DType::BF16, &[9.0; 6]).unwrap();
        assert_eq!(m.read(at(0), 6, DType::BF16).unwrap(), [9.0; 6]);
    }

    /// A 2x2 tile of a 3-column matrix lands in two runs; runs written next
    /// to each other, in any order, read back as one range.
    #[test]
    fn rectangles_write_rows_and_adjacent_runs_merge() {
        let mut m = MemoryStore::default();
        // Matrix at 0: rows of 3; write column 2 first, then columns 0-1.
        m.write_rect(at(4), H, &v(&[3.0, 6.0]), (2, 3)).unwrap();
        m.write_rect(at(0), H, &v(&[1.0, 2.0, 4.0, 5.0]), (2, 3))
            .unwrap();
        assert_eq!(
            m.read(at(0), 6, H).unwrap(),
            v(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        );
        assert_eq!(
            m.read_rect(at(2), (2, 2, 3), H).unwrap(),
            v(&[2.0, 3.0, 5.0, 6.0])
        );
        // An empty write next to a tensor leaves it alone.
        m.write(at(12), H, &[]).unwrap();
        assert_eq!(m.read(at(0), 6, H).unwrap().len(), 6);
    }
}
