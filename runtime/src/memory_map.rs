//! The allocator of a machine's memories: one per memory instance (TCM per
//! PE, SRAM and HBM per cube), so that nothing placed in memory overlaps or
//! runs past the memory's `size_bytes`.
//!
//! Tensors and scratch are allocated from the bottom up (first fit, aligned),
//! IPCQ slot areas from the top down, so the two meet only when the memory is
//! full. A collective run straight from `kernbench run` places its buffer at
//! offset 0 without allocating: it must fit below the lowest allocation.
//! Running out is an error that names the memory instance, the request and
//! what is free.

use kernbench_spec::spec::System;
use kernbench_systems::PeIdx;
use kernbench_systems::program::Space;
use std::collections::BTreeMap;

/// Alignment of tensor shards and of the collective buffers a run places
/// itself, bytes.
pub const BUFFER_ALIGN: u64 = 64;

/// Which end of a memory an allocation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Tensors and scratch: the lowest free range that fits.
    Bottom,
    /// IPCQ slot areas: the highest free range that fits.
    Top,
}

/// Per memory instance: what is allocated where.
#[derive(Debug, Clone)]
pub struct MemoryMap {
    /// `memory.{tcm,sram,hbm}.size_bytes`.
    sizes: [u64; 3],
    cubes_per_sip: u32,
    pes_per_cube: u32,
    /// (space, instance) → allocations, offset → bytes.
    used: BTreeMap<(Space, u32), BTreeMap<u64, u64>>,
}

impl MemoryMap {
    pub fn new(sys: &System) -> Self {
        let m = &sys.spec.memory;
        Self {
            sizes: [m.tcm.size_bytes, m.sram.size_bytes, m.hbm.size_bytes],
            cubes_per_sip: sys.cubes_per_sip(),
            pes_per_cube: sys.pes_per_cube(),
            used: BTreeMap::new(),
        }
    }

    /// `memory.<space>.size_bytes`.
    pub fn size(&self, space: Space) -> u64 {
        self.sizes[space as usize]
    }

    /// The instance of `space` that PE `pe` (global index) uses: its own TCM,
    /// its cube's SRAM or HBM.
    pub fn instance_of(&self, space: Space, pe: PeIdx) -> u32 {
        match space {
            Space::Tcm => pe.0,
            Space::Sram | Space::Hbm => pe.0 / self.pes_per_cube,
        }
    }

    /// `tcm of sip0.cube1.pe3`, `hbm of sip2.cube0`.
    pub fn instance_name(&self, space: Space, instance: u32) -> String {
        let cube_of = |c: u32| {
            format!(
                "sip{}.cube{}",
                c / self.cubes_per_sip,
                c % self.cubes_per_sip
            )
        };
        match space {
            Space::Tcm => format!(
                "tcm of {}.pe{}",
                cube_of(instance / self.pes_per_cube),
                instance % self.pes_per_cube
            ),
            Space::Sram | Space::Hbm => format!("{} of {}", space.name(), cube_of(instance)),
        }
    }

    /// Bytes free from offset 0 up to the lowest allocation of an instance:
    /// what a buffer placed at offset 0 may use.
    pub fn free_below(&self, space: Space, instance: u32) -> u64 {
        self.used
            .get(&(space, instance))
            .and_then(|m| m.keys().next().copied())
            .unwrap_or(self.size(space))
    }

    /// The free ranges of an instance, (offset, bytes), lowest first.
    pub fn free_ranges(&self, space: Space, instance: u32) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = 0;
        if let Some(m) = self.used.get(&(space, instance)) {
            for (&off, &len) in m {
                if off > at {
                    out.push((at, off - at));
                }
                at = at.max(off + len);
            }
        }
        let size = self.size(space);
        if size > at {
            out.push((at, size - at));
        }
        out
    }

    /// Allocates `bytes` (aligned to `align`, a power of two) at one end of
    /// an instance; returns the offset. `what` names the request for the
    /// error message.
    pub fn alloc(
        &mut self,
        space: Space,
        instance: u32,
        bytes: u64,
        align: u64,
        end: End,
        what: &dyn Fn() -> String,
    ) -> Result<u64, String> {
        let align = align.max(1);
        let free = self.free_ranges(space, instance);
        let fits = |&(off, len): &(u64, u64)| -> Option<u64> {
            match end {
                End::Bottom => {
                    let start = off.next_multiple_of(align);
                    (start.checked_add(bytes)? <= off + len).then_some(start)
                }
                End::Top => {
                    let start = (off + len).checked_sub(bytes)? / align * align;
                    (start >= off).then_some(start)
                }
            }
        };
        let found = match end {
            End::Bottom => free.iter().find_map(fits),
            End::Top => free.iter().rev().find_map(fits),
        };
        let Some(offset) = found else {
            return Err(self.out_of_memory(space, instance, bytes, &free, what));
        };
        self.used
            .entry((space, instance))
            .or_default()
            .insert(offset, bytes);
        Ok(offset)
    }

    /// Allocates `bytes` from the top of an instance (IPCQ slot areas).
    pub fn alloc_top(
        &mut self,
        space: Space,
        instance: u32,
        bytes: u64,
        what: &dyn Fn() -> String,
    ) -> Result<u64, String> {
        self.alloc(space, instance, bytes, 1, End::Top, what)
    }

    /// The bytes of the allocation at `offset` (0 when there is none).
    pub fn allocation(&self, space: Space, instance: u32, offset: u64) -> u64 {
        self.used
            .get(&(space, instance))
            .and_then(|m| m.get(&offset))
            .copied()
            .unwrap_or(0)
    }

    /// Frees the allocation at `offset`; an offset that holds no allocation
    /// is an error naming the instance.
    pub fn free(&mut self, space: Space, instance: u32, offset: u64) -> Result<(), String> {
        let removed = self
            .used
            .get_mut(&(space, instance))
            .and_then(|m| m.remove(&offset));
        match removed {
            Some(_) => Ok(()),
            None => Err(format!(
                "{} holds no allocation at offset {offset}: free only what alloc returned, once",
                self.instance_name(space, instance)
            )),
        }
    }

    fn out_of_memory(
        &self,
        space: Space,
        instance: u32,
        bytes: u64,
        free: &[(u64, u64)],
        what: &dyn Fn() -> String,
    ) -> String {
        let size = self.size(space);
        let total: u64 = free.iter().map(|f| f.1).sum();
        let largest = free.iter().map(|f| f.1).max().unwrap_or(0);
        let count = self.used.get(&(space, instance)).map_or(0, |m| m.len());
        format!(
            "{} cannot hold {}: {bytes} B requested, {total} B free of memory.{}.size_bytes = {size} B (largest free range {largest} B; {} B already hold {count} earlier allocation(s)); allowed: at most {largest} B here: free earlier allocations, fewer or smaller IPCQ slots (ccl n_slots, slot_size), another buffer_kind (tcm, sram, hbm), or a larger memory.{}.size_bytes",
            self.instance_name(space, instance),
            what(),
            space.name(),
            size - total,
            space.name(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> MemoryMap {
        MemoryMap::new(&System::embedded_default())
    }

    #[test]
    fn allocations_go_down_from_the_top_and_never_overlap() {
        let mut m = map();
        let tcm = m.size(Space::Tcm);
        let a = m.alloc_top(Space::Tcm, 9, 1000, &|| "a".into()).unwrap();
        let b = m.alloc_top(Space::Tcm, 9, 24, &|| "b".into()).unwrap();
        assert_eq!((a, b), (tcm - 1000, tcm - 1024));
        assert_eq!(m.free_below(Space::Tcm, 9), tcm - 1024);
        // Other instances are untouched.
        assert_eq!(m.free_below(Space::Tcm, 8), tcm);
        assert_eq!(m.free_below(Space::Hbm, 1), m.size(Space::Hbm));
    }

    #[test]
    fn running_out_names_the_instance_request_and_free_bytes() {
        let mut m = map();
        let tcm = m.size(Space::Tcm);
        m.alloc_top(Space::Tcm, 9, tcm - 100, &|| "x".into())
            .unwrap();
        let e = m
            .alloc_top(Space::Tcm, 9, 101, &|| "the queue for E".into())
            .unwrap_err();
        assert!(
            e.starts_with("tcm of sip0.cube1.pe1 cannot hold the queue for E: 101 B requested, 100 B free of memory.tcm.size_bytes"),
            "{e}"
        );
        assert!(e.contains("largest free range 100 B"), "{e}");
        assert!(e.contains("1 earlier allocation(s)"), "{e}");
        assert!(e.contains("a larger memory.tcm.size_bytes"), "{e}");
        assert_eq!(m.instance_name(Space::Hbm, 17), "hbm of sip1.cube1");
    }

    #[test]
    fn bottom_allocations_fill_gaps_first_fit_and_align() {
        let mut m = map();
        let hbm = m.size(Space::Hbm);
        let w = |s: &'static str| move || s.to_string();
        let a = m
            .alloc(Space::Hbm, 0, 100, 64, End::Bottom, &w("a"))
            .unwrap();
        let b = m
            .alloc(Space::Hbm, 0, 100, 64, End::Bottom, &w("b"))
            .unwrap();
        let top = m.alloc_top(Space::Hbm, 0, 1000, &w("slots")).unwrap();
        assert_eq!((a, b, top), (0, 128, hbm - 1000));
        m.free(Space::Hbm, 0, a).unwrap();
        // The freed range at 0 takes the next request that fits it.
        let c = m
            .alloc(Space::Hbm, 0, 64, 64, End::Bottom, &w("c"))
            .unwrap();
        assert_eq!(c, 0);
        let d = m
            .alloc(Space::Hbm, 0, 65, 64, End::Bottom, &w("d"))
            .unwrap();
        assert_eq!(d, 256);
        assert_eq!(
            m.free_ranges(Space::Hbm, 0),
            vec![(64, 64), (228, 28), (321, hbm - 1000 - 321)]
        );
        let e = m.free(Space::Hbm, 0, 5).unwrap_err();
        assert_eq!(
            e,
            "hbm of sip0.cube0 holds no allocation at offset 5: free only what alloc returned, once"
        );
    }
}
