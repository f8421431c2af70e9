//! What is allocated in each memory instance of a machine (TCM per PE, SRAM
//! and HBM per cube), so that nothing placed in memory overlaps or runs past
//! the memory's `size_bytes`.
//!
//! IPCQ slot areas are allocated from the top of their memory down; tensors
//! (a collective's buffer at offset 0 of each cube's HBM) grow from the bottom
//! up and must stay below the lowest allocation. Running out is an error that
//! names the memory instance, the request and what is free.

use crate::spec::System;
use kernbench_systems::program::Space;
use std::collections::BTreeMap;

/// Per memory instance: the lowest offset allocated from the top.
#[derive(Debug, Clone)]
pub struct MemoryMap {
    /// `memory.{tcm,sram,hbm}.size_bytes`.
    sizes: [u64; 3],
    cubes_per_sip: u32,
    pes_per_cube: u32,
    /// (space, instance) → (lowest allocated offset, allocations made).
    floors: BTreeMap<(Space, u32), (u64, u32)>,
}

impl MemoryMap {
    pub fn new(sys: &System) -> Self {
        let m = &sys.spec.memory;
        Self {
            sizes: [m.tcm.size_bytes, m.sram.size_bytes, m.hbm.size_bytes],
            cubes_per_sip: sys.cubes_per_sip(),
            pes_per_cube: sys.pes_per_cube(),
            floors: BTreeMap::new(),
        }
    }

    /// `memory.<space>.size_bytes`.
    pub fn size(&self, space: Space) -> u64 {
        self.sizes[space as usize]
    }

    /// The instance of `space` that PE `pe` (global index) uses: its own TCM,
    /// its cube's SRAM or HBM.
    pub fn instance_of(&self, space: Space, pe: u32) -> u32 {
        match space {
            Space::Tcm => pe,
            Space::Sram | Space::Hbm => pe / self.pes_per_cube,
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

    /// Bytes free below the lowest allocation of an instance: where tensors go.
    pub fn free_below(&self, space: Space, instance: u32) -> u64 {
        self.floors
            .get(&(space, instance))
            .map_or(self.size(space), |f| f.0)
    }

    /// Allocates `bytes` from the top of an instance; returns the offset.
    /// `what` describes the request for the error message.
    pub fn alloc_top(
        &mut self,
        space: Space,
        instance: u32,
        bytes: u64,
        what: &dyn Fn() -> String,
    ) -> Result<u64, String> {
        let size = self.size(space);
        let (floor, count) = self
            .floors
            .get(&(space, instance))
            .copied()
            .unwrap_or((size, 0));
        let Some(offset) = floor.checked_sub(bytes) else {
            return Err(format!(
                "{} cannot hold {}: {bytes} B requested, {floor} B free of memory.{}.size_bytes = {size} B ({} B already hold {count} earlier allocation(s)); allowed: at most {floor} B here: fewer or smaller IPCQ slots (ccl n_slots, slot_size), another buffer_kind (tcm, sram, hbm), or a larger memory.{}.size_bytes",
                self.instance_name(space, instance),
                what(),
                space.name(),
                size - floor,
                space.name(),
            ));
        };
        self.floors.insert((space, instance), (offset, count + 1));
        Ok(offset)
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
        assert!(e.contains("1 earlier allocation(s)"), "{e}");
        assert!(e.contains("a larger memory.tcm.size_bytes"), "{e}");
        assert_eq!(m.instance_name(Space::Hbm, 17), "hbm of sip1.cube1");
    }
}
