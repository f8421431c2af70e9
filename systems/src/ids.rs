//! The ids and the delivered-message record that the network, the trace and
//! the models share: a leaf module (it imports only `time`), so `trace` can
//! name them without importing a model module.

use crate::time::Tick;

/// Dense index of a network node (host, router, PE, memory, port...). Not a
/// PE's index (that is a [`PeIdx`]) nor a link's (a [`LinkId`]).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NodeId(pub u32);

impl NodeId {
    /// Its position in a dense per-node table.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Dense index of a directed link in the [`crate::network::LinkTable`].
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct LinkId(pub u32);

impl LinkId {
    /// Its position in a dense per-link table.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Engine-assigned message id: injection order, the network's tie-break key.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MsgId(pub u64);

impl MsgId {
    /// The id after this one, in injection order.
    #[inline]
    pub fn next(self) -> MsgId {
        MsgId(self.0 + 1)
    }

    /// The id `n` sends later.
    #[inline]
    pub fn later(self, n: u64) -> MsgId {
        MsgId(self.0 + n)
    }
}

/// Ids print as their number (traces, reports and errors name them so).
macro_rules! display_as_number {
    ($($id:ty),*) => {$(
        impl std::fmt::Display for $id {
            fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}

display_as_number!(NodeId, LinkId, MsgId, PeIdx);

/// What a message is for; arrivals are sorted into one inbox per purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Synthetic traffic of a [`crate::traffic::Traffic`] source.
    Traffic,
    /// An IPCQ data chunk (tag: queue id).
    Chunk,
    /// An IPCQ credit (tag: queue id).
    Credit,
    /// A neighbour-table install from the host (tag: install index).
    Install,
    /// A kernel launch from the host (tag: global PE index).
    Launch,
    /// Data of a load from a remote memory (tag: PE << 16 | register).
    LoadData,
    /// Data of a store to a remote memory (tag: store job id).
    StoreData,
    /// A slot read from an SRAM/HBM IPCQ buffer to its PE (tag: queue id).
    SlotData,
}

impl Purpose {
    pub const COUNT: usize = 8;
}

/// A delivered message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub id: MsgId,
    pub purpose: Purpose,
    pub tag: u64,
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
    pub injected_at: Tick,
    /// Tick at which the last packet reached `dst`.
    pub at: Tick,
}

/// A PE's dense index, the engine's PE numbering: `(sip·cubes_per_sip +
/// cube)·pes_per_cube + pe`. Not its network node (that is a [`NodeId`]).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PeIdx(pub u32);

impl PeIdx {
    /// Its position in a dense per-PE table.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_their_number() {
        // Traces, CSV and reports write ids with `{}`: the bare number.
        let text = format!(
            "{} {} {} {}",
            NodeId(7),
            LinkId(12),
            MsgId(1 << 40),
            PeIdx(3)
        );
        assert_eq!(text, "7 12 1099511627776 3");
    }
}
