//! The op log: one record per issued op (ADR-0052), for traces and CSV.

use crate::hierarchy::Hardware;
use crate::time::Tick;
use bevy_ecs::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    pub op: &'static str,
    pub sip: u32,
    pub cube: u32,
    pub pe: u32,
    pub start: Tick,
    /// `PENDING` until an asynchronous op completes.
    pub end: Tick,
    pub bytes: u64,
    pub params: String,
}

/// The op log; off for large runs.
#[derive(Resource, Debug, Default)]
pub struct OpLog {
    pub enabled: bool,
    pub records: Vec<OpRecord>,
}

impl OpLog {
    pub(crate) fn record(
        &mut self,
        hw: &Hardware,
        pe: u32,
        op: &'static str,
        start: Tick,
        end: Tick,
        bytes: u64,
        params: impl FnOnce() -> String,
    ) -> Option<u32> {
        if !self.enabled {
            return None;
        }
        let (sip, cube, local) = hw.coords(pe);
        self.records.push(OpRecord {
            op,
            sip,
            cube,
            pe: local,
            start,
            end,
            bytes,
            params: params(),
        });
        Some(self.records.len() as u32 - 1)
    }

    /// Sets the end of an asynchronous op's record.
    pub fn finish(&mut self, idx: Option<u32>, end: Tick) {
        if let Some(i) = idx {
            self.records[i as usize].end = end;
        }
    }

    /// The log as CSV (header + one line per op).
    pub fn to_csv(&self) -> String {
        let mut s = String::from("op,sip,cube,pe,start,end,bytes,params\n");
        for r in &self.records {
            s.push_str(&format!(
                "{},{},{},{},{},{},{},\"{}\"\n",
                r.op,
                r.sip,
                r.cube,
                r.pe,
                r.start,
                r.end,
                r.bytes,
                r.params.replace('"', "'")
            ));
        }
        s
    }
}
