//! Trace export streams: events go to the file as the run makes them, so a
//! trace of any size costs only what is in flight. The file is valid JSON, no
//! two slices on one track partially overlap, and every flow that starts
//! (a send, a message's first packet) finishes (its recv, its last packet)
//! no earlier.

use crate::{HEAP, common};
use kernbench::ccl::{CclConfig, Collective, Job, ReduceOp};
use kernbench::spec::System;
use kernbench::trace::ChromeTrace;
use kernbench_systems::memory::DataMode;
use std::collections::BTreeMap;

/// Heap a traced run may add to the untraced one: the ops waiting for an
/// earlier op of their PE, messages in flight, a track list per PE and the
/// write buffer: 0.13 MB measured. Holding the whole trace took ~64 B per
/// event (18 MB here).
const TRACE_HEAP_BOUND: usize = 512 << 10;

#[test]
fn a_large_trace_streams_with_bounded_heap_and_is_well_formed() {
    let _alone = crate::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let sys = System::embedded_default();
    let config = CclConfig::embedded_default().entry("ring").unwrap().clone();
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: 2 << 10,
    };
    let peak_of_run = |trace: bool| {
        let (mut m, comm) = common::communicator(&sys, &config, DataMode::TimingOnly).unwrap();
        if trace {
            let sink = ChromeTrace::create(&path, sys.spec.system.tick_ns).unwrap();
            m.trace_to(Box::new(sink));
        }
        HEAP.reset_peak_usage();
        let ticks = comm.run(&mut m, job).unwrap().ticks;
        let peak = HEAP.peak_usage();
        let n = trace.then(|| {
            let sink = m.take_trace().unwrap();
            let sink = sink.into_any().downcast::<ChromeTrace>().unwrap();
            sink.finish(&m).unwrap()
        });
        (peak, ticks, n)
    };
    let (untraced, ticks, _) = peak_of_run(false);
    let (traced, traced_ticks, n) = peak_of_run(true);
    let n = n.unwrap() as usize;
    assert_eq!(traced_ticks, ticks, "tracing changes nothing simulated");
    assert!(n > 100_000, "{n} events");
    assert!(
        traced <= untraced + TRACE_HEAP_BOUND,
        "traced run peaked at {traced} B, untraced at {untraced} B ({n} events)"
    );

    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), n);
    let mut tracks: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    let (mut starts, mut finishes) = (BTreeMap::new(), BTreeMap::new());
    for e in events {
        match e["ph"].as_str().unwrap() {
            "X" => {
                let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
                let ts = e["ts"].as_f64().unwrap();
                tracks
                    .entry(key)
                    .or_default()
                    .push((ts, ts + e["dur"].as_f64().unwrap()));
            }
            "s" => {
                let (key, ts) = flow_end(e);
                assert!(starts.insert(key, ts).is_none(), "a flow starts twice");
            }
            "f" => {
                let (key, ts) = flow_end(e);
                assert!(finishes.insert(key, ts).is_none(), "a flow finishes twice");
            }
            _ => {}
        }
    }
    let ids = |ends: &BTreeMap<(String, String), f64>| ends.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        ids(&starts),
        ids(&finishes),
        "every flow start has its finish"
    );
    for cat in ["ipcq", "message"] {
        assert!(starts.keys().any(|k| k.0 == cat), "no {cat} flows");
    }
    for (key, t) in &finishes {
        assert!(*t >= starts[key], "flow {key:?} finishes before it starts");
    }
    for (track, mut slices) in tracks {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        // A stack of open slices: each new one must end inside its parent.
        // Times are µs as floats: a picosecond of rounding is not an overlap.
        const EPS: f64 = 1e-6;
        let mut open: Vec<f64> = Vec::new();
        for (s, e) in slices {
            while open.last().is_some_and(|&end| end <= s + EPS) {
                open.pop();
            }
            if let Some(&parent_end) = open.last() {
                assert!(
                    e <= parent_end + EPS,
                    "partial overlap on track {track:?} at {s}"
                );
            }
            open.push(e);
        }
    }
}

/// A flow end's (category, id) and time.
fn flow_end(e: &serde_json::Value) -> ((String, String), f64) {
    let key = (
        e["cat"].as_str().unwrap().to_string(),
        e["id"].as_str().unwrap().to_string(),
    );
    (key, e["ts"].as_f64().unwrap())
}
