//! Streams, asynchronous collectives and compute placement: a rank's order
//! on every PE, a stream in order, overlap across streams, `Work`, and the
//! DDP backward whose overlap used to make it slower.

use crate::common::system;
use kernbench::ccl::{CclConfig, Collective, ReduceOp};
use kernbench::ddp::{DdpStep, ddp_step};
use kernbench::dist::{
    DPPolicy, DistError, ProcessGroup, StreamKind, TurnOrder, WORLD, Work, WorkReport,
    init_process_group,
};
use kernbench::gemm::Placement;
use kernbench::kernel::{Addr, Tl};
use kernbench::spec::System;
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;
use kernbench_systems::trace::OpRecord;
use std::sync::Mutex;

/// `n` SIPs on a ring, each of `cubes` cubes in a row.
fn sips(n: u32, cubes: u32) -> System {
    system(|s| {
        s.system.sips.count = n;
        s.sip.cube_mesh.w = cubes;
        s.sip.cube_mesh.h = 1;
    })
}

fn pg(sys: &System, mode: DataMode) -> ProcessGroup {
    init_process_group(sys, &CclConfig::embedded_default(), "ring", mode).unwrap()
}

/// A compute kernel: `rounds` elementwise adds over `n` elements in TCM
/// from offset `at`.
fn busy(tl: &mut Tl, &(at, n, rounds): &(u64, usize, usize)) {
    let x = tl.load(Addr::tcm(at), n);
    let acc = tl.repeat(rounds, &[x], |tl, _, acc| vec![tl.add(acc[0], acc[0])]);
    tl.store(Addr::tcm(at), acc[0]);
}

fn ddp(placement: Placement, overlap: bool) -> Run {
    let sys = System::embedded_default();
    let mut pg = pg(&sys, DataMode::TimingOnly);
    let step = DdpStep {
        buckets: 4,
        bucket_bytes: 512 << 10,
        k: 2048,
        placement,
        overlap,
    };
    let r = ddp_step(&mut pg, &step).unwrap();
    (r.step, r.ranks[0].hidden)
}

/// The DDP backward of 4 ranks, 512 KiB buckets all-reduced as their GEMMs
/// finish: overlapping never costs time (a collective no longer jumps a
/// rank's earlier GEMMs on pe0), and wins once the GEMMs leave pe0 to the
/// collectives; the hidden communication is measured, not zero by
/// construction.
#[test]
fn ddp_overlap_never_loses_and_wins_off_the_leader() {
    let ppc = System::embedded_default().pes_per_cube();
    let owners = (ddp(Placement::Owners, false), ddp(Placement::Owners, true));
    let off = (
        ddp(Placement::off_leader(ppc), false),
        ddp(Placement::off_leader(ppc), true),
    );
    println!("owners {owners:?}, off the leader {off:?}");
    assert!(owners.1.0 <= owners.0.0, "{owners:?}");
    assert!(off.1.0 < off.0.0, "{off:?}");
    assert_eq!(owners.0.1, 0);
    assert!(off.1.1 > 0);
    assert_eq!((owners, off), PINNED_DDP);
}

/// ((serialized, overlapped) on the owners, the same off the leader):
/// (step ticks, rank 0's hidden communication ticks).
/// (step ticks, rank 0's hidden communication ticks) of one run.
type Run = (u64, u64);

/// The GEMMs sum their K steps in f32 (448-wide tiles); with f16
/// accumulation (544-wide tiles) the same runs took
/// (((73301, 0), (70655, 1448)), ((71829, 0), (60273, 35989))). While a
/// worker's launch left at the engine's next event after the work it waited
/// for ended, not at that end, the serialized steps took 138 ticks more
/// (72653, 71097) and the overlapped ones up to 94 (70187).
const PINNED_DDP: ((Run, Run), (Run, Run)) =
    (((67687, 0), (64725, 1734)), ((67687, 0), (56653, 28814)));

/// What each rank saw of the interleaved program below.
type Seen = (u32, [WorkReport; 5]);

/// Interleaved launches and collectives on 4 ranks, over two compute
/// streams and the communication stream: on pe0 of cube 0 every rank's
/// work runs in the rank's submission order (one at a time), while a launch
/// on another PE overlaps the collective.
fn interleaved(order: TurnOrder) -> (Vec<Seen>, Vec<Vec<f32>>, Vec<OpRecord>) {
    let sys = sips(4, 2);
    let mut pg = pg(&sys, DataMode::Functional);
    pg.turn_order = order;
    pg.machine.record_ops();
    let seen = Mutex::new(Vec::new());
    let data = Mutex::new(Vec::new());
    pg.spawn(4, |ctx| {
        let r = ctx.rank();
        let t = ctx.empty((2, 256), DPPolicy::cube_rows(2))?;
        let v: Vec<f32> = (0..512).map(|i| ((i + r as usize) % 3) as f32).collect();
        ctx.write(&t, &v)?;
        // The kernels' inputs: 1 KiB elements of TCM on PEs 0 and 1 of cube 0.
        let scratch = ctx.empty_in(Space::Tcm, (2, 1 << 10), DPPolicy::pe_rows(1, 2))?;
        ctx.write(&scratch, &vec![1.0; 2 << 10])?;
        let on = |pe: usize| scratch.shards[pe].addr;
        let side = ctx.new_stream(StreamKind::Compute)?;
        let main = ctx.current_stream(StreamKind::Compute);
        let long = ctx.launch(busy, &(on(0), 1 << 10, 40 + 10 * r as usize), &[(0, 0)])?;
        ctx.set_stream(side)?;
        let short = ctx.launch(busy, &(on(0), 1 << 10, 5), &[(0, 0)])?;
        let reduce = ctx.all_reduce_async(&t, ReduceOp::Sum)?;
        let beside = ctx.launch(busy, &(on(1), 1 << 10, 30), &[(0, 1)])?;
        ctx.set_stream(main)?;
        let after = ctx.launch(busy, &(on(0), 1 << 10, 5), &[(0, 0)])?;
        let works: Vec<Work> = vec![long, short, reduce, beside, after];
        let reports = works
            .iter()
            .map(|w| ctx.wait(w))
            .collect::<Result<Vec<_>, _>>()?;
        let reports: [WorkReport; 5] = reports.try_into().expect("five works");
        seen.lock().unwrap().push((r, reports));
        data.lock().unwrap().push((r, ctx.read(&t)?));
        Ok(())
    })
    .unwrap();
    let mut seen = seen.into_inner().unwrap();
    seen.sort_by_key(|s| s.0);
    let mut data = data.into_inner().unwrap();
    data.sort_by_key(|d| d.0);
    let ops = pg.machine.op_records();
    (seen, data.into_iter().map(|d| d.1).collect(), ops)
}

#[test]
fn a_ranks_work_reaches_each_pe_in_its_order() {
    let (seen, _, ops) = interleaved(TurnOrder::Ascending);
    for (r, [long, short, reduce, beside, after]) in &seen {
        // pe0 of cube 0 runs long, short (another stream), its part of the
        // all-reduce, then after: its ops outside the three launches are
        // the collective's, between short and after.
        assert!(short.start >= long.end, "rank {r}: {long:?} {short:?}");
        assert!(after.start > short.end, "rank {r}: {short:?} {after:?}");
        let inside = |o: &OpRecord| {
            [long, short, after]
                .iter()
                .any(|k| k.start <= o.start && o.end <= k.end)
        };
        let theirs: Vec<&OpRecord> = ops
            .iter()
            .filter(|o| (o.sip, o.cube, o.pe) == (*r, 0, 0) && !inside(o))
            .collect();
        assert!(!theirs.is_empty(), "rank {r}: no collective op on pe0");
        for o in theirs {
            assert!(
                short.end <= o.start && o.end <= after.start,
                "rank {r}: the all-reduce's {} at {}..{} is not between {short:?} and {after:?}",
                o.op,
                o.start,
                o.end
            );
        }
        // pe1 of cube 0, on the side stream after short: beside the collective.
        assert!(beside.start >= short.end, "rank {r}");
        assert!(beside.start < reduce.end, "rank {r}: {beside:?} {reduce:?}");
        let c = reduce.collective.as_ref().expect("a collective's measures");
        assert_eq!(c.ticks, reduce.ticks(), "rank {r}");
    }
    let starts: Vec<[u64; 5]> = seen
        .iter()
        .map(|(_, w)| [0, 1, 2, 3, 4].map(|i| w[i].start))
        .collect();
    assert_eq!(starts, PINNED_STARTS);
}

/// Per rank, the starts of (long, short, the all-reduce, beside, after).
/// beside leaves the host when short ends (1308 + 24 + 40·r) and starts 610
/// ticks later on every rank; the all-reduce leaves when its communicator's
/// tables land, after starts on pe0 behind the all-reduce's part. (Before
/// a launch left at the engine's next event after what it followed: the
/// all-reduce and after started 74 ticks later, beside 2 and, on rank 3,
/// 193.)
const PINNED_STARTS: [[u64; 5]; 4] = [
    [1144, 1308, 1680, 1942, 3802],
    [1144, 1348, 1680, 1982, 3802],
    [1144, 1388, 1680, 2022, 3802],
    [1144, 1428, 1680, 2062, 3802],
];

/// Same program, the workers taking turns the other way round:
/// bit-identical ticks, measures and data.
#[test]
fn streams_and_async_collectives_do_not_depend_on_turn_order() {
    let a = interleaved(TurnOrder::Ascending);
    let b = interleaved(TurnOrder::Descending);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    // An all-reduce leaves every rank the same data, not what it wrote.
    let written: Vec<f32> = (0..512).map(|i| (i % 3) as f32).collect();
    assert!(a.1.iter().all(|d| d == &a.1[0]));
    assert_ne!(a.1[0], written);
}

/// Two launches on one stream: the second leaves the host when the first
/// ends, so it starts one launch latency (host to PE, launch overhead)
/// after; on two streams the second starts with the first (one tick
/// later: its launch message leaves the host right after the first's).
#[test]
fn a_stream_runs_in_order_and_two_streams_overlap() {
    let sys = sips(2, 1);
    let mut pg = pg(&sys, DataMode::TimingOnly);
    let out = Mutex::new(Vec::new());
    pg.spawn(2, |ctx| {
        let at = ctx.now();
        let first = ctx.launch(busy, &(0, 1 << 10, 20), &[(0, 1)])?;
        let second = ctx.launch(busy, &(0, 1 << 10, 20), &[(0, 2)])?;
        let (first, second) = (ctx.wait(&first)?, ctx.wait(&second)?);
        let other = ctx.new_stream(StreamKind::Compute)?;
        let at2 = ctx.now();
        let third = ctx.launch(busy, &(0, 1 << 10, 20), &[(0, 1)])?;
        ctx.set_stream(other)?;
        let fourth = ctx.launch(busy, &(0, 1 << 10, 20), &[(0, 2)])?;
        let (third, fourth) = (ctx.wait(&third)?, ctx.wait(&fourth)?);
        out.lock()
            .unwrap()
            .push((ctx.rank(), at, first, second, at2, third, fourth));
        Ok(())
    })
    .unwrap();
    let mut out = out.into_inner().unwrap();
    out.sort_by_key(|o| o.0);
    let mut pinned = Vec::new();
    for (_, at, first, second, at2, third, fourth) in out {
        let latency = first.start - at;
        assert_eq!(second.start, first.end + latency);
        assert_eq!(second.ticks(), first.ticks());
        assert_eq!(third.start, at2 + latency);
        assert_eq!(fourth.start, third.start + 1);
        pinned.push((latency, first.start, first.end, second.start, second.end));
    }
    assert_eq!(pinned, PINNED_STREAM);
}

/// Per rank: (launch latency, first start, first end, second start, second end).
const PINNED_STREAM: [(u64, u64, u64, u64, u64); 2] = [(610, 1120, 1204, 1814, 1898); 2];

#[test]
fn a_work_is_asked_about_by_its_rank_and_waited_for_once() {
    let sys = sips(2, 1);
    let mut pg = pg(&sys, DataMode::TimingOnly);
    let handed = Mutex::new(None);
    let errors = Mutex::new(Vec::new());
    pg.spawn(2, |ctx| {
        let t = ctx.empty((1, 1024), DPPolicy::cube_rows(1))?;
        let w = ctx.all_reduce_async(&t, ReduceOp::Sum)?;
        assert!(!ctx.is_completed(&w)?);
        let done = ctx.wait(&w)?;
        assert!(ctx.is_completed(&w)?);
        assert_eq!(ctx.now(), done.end);
        let mut e = errors.lock().unwrap();
        e.push(ctx.wait(&w).unwrap_err().to_string());
        if ctx.rank() == 0 {
            *handed.lock().unwrap() = Some((w, ctx.current_stream(StreamKind::Compute)));
        }
        drop(e);
        ctx.barrier(WORLD)?;
        if ctx.rank() == 1 {
            let (w0, s0) = handed.lock().unwrap().expect("rank 0 handed its work");
            let mut e = errors.lock().unwrap();
            e.push(ctx.is_completed(&w0).unwrap_err().to_string());
            e.push(ctx.set_stream(s0).unwrap_err().to_string());
        }
        Ok(())
    })
    .unwrap();
    let e = errors.into_inner().unwrap();
    assert_eq!(
        e[0],
        "rank 0 waits a second time for all_reduce (submission 1 of rank 0); a Work is waited for once: keep the WorkReport its first wait returned"
    );
    assert_eq!(
        e[2],
        "rank 1 asked about all_reduce (submission 1 of rank 0): a Work belongs to the rank that submitted it; allowed: wait for it on rank 0"
    );
    assert_eq!(
        e[3],
        "rank 1 set_stream(compute stream 0 of rank 0): a stream belongs to the rank that made it; allowed: a stream of rank 1 (Rank::new_stream)"
    );
}

/// Rank 0 joins X then Y, rank 1 Y then X, on one communication stream:
/// neither can start, which NCCL would hang on; here it is an error naming
/// both.
#[test]
fn collectives_joined_in_contradicting_orders_are_named_never_hung() {
    let sys = sips(2, 1);
    let mut pg = pg(&sys, DataMode::TimingOnly);
    let pair = pg.new_group(&[0, 1]).unwrap();
    let e = pg
        .spawn(2, |ctx| {
            let t = ctx.empty((1, 1024), DPPolicy::cube_rows(1))?;
            let u = ctx.empty((1, 1024), DPPolicy::cube_rows(1))?;
            let (first, second) = if ctx.rank() == 0 {
                (WORLD, pair)
            } else {
                (pair, WORLD)
            };
            let (x, y) = if ctx.rank() == 0 { (&t, &u) } else { (&u, &t) };
            let a = ctx.collective_async(first, Collective::AllReduce, x, ReduceOp::Sum)?;
            let b = ctx.collective_async(second, Collective::AllReduce, y, ReduceOp::Sum)?;
            ctx.wait(&a)?;
            ctx.wait(&b)?;
            Ok(())
        })
        .unwrap_err();
    let DistError::Aborted(why) = &e else {
        panic!("{e}")
    };
    assert_eq!(
        why,
        "the ranks' orders contradict each other, so none of these can ever start (NCCL would hang): rank 0 submitted all_reduce #0 of group 'world' before all_reduce #0 of group 'group1[0, 1]' on its stream, but rank 1 submitted all_reduce #0 of group 'group1[0, 1]' before all_reduce #0 of group 'world' on its stream; allowed: every member submits collectives that share a stream or PEs in the same order"
    );
}

/// The reproducer's ordering bug with blocking calls only: every rank
/// launches a kernel on pe0 at the same host time as the all-reduce after
/// it leaves. The collective used to carry its first member's rank and go
/// on ranks 1-3's pe0 ahead of the kernel they launched first; now each
/// rank's pe0 runs its kernel, then its part of the all-reduce.
#[test]
fn a_collective_never_jumps_a_ranks_earlier_launch() {
    let sys = sips(4, 1);
    let mut pg = pg(&sys, DataMode::TimingOnly);
    pg.machine.record_ops();
    let kernels = Mutex::new(Vec::new());
    pg.spawn(4, |ctx| {
        let first = ctx.launch(busy, &(0, 1 << 10, 10), &[(0, 0)])?;
        ctx.wait(&first)?;
        let t = ctx.empty((1, 1 << 12), DPPolicy::cube_rows(1))?;
        let k = ctx.launch(busy, &(0, 1 << 10, 10), &[(0, 0)])?;
        ctx.all_reduce(&t, ReduceOp::Sum)?;
        let k = ctx.wait(&k)?;
        kernels.lock().unwrap().push((ctx.rank(), k));
        Ok(())
    })
    .unwrap();
    let ops = pg.machine.op_records();
    for (r, k) in kernels.into_inner().unwrap() {
        let collective = ops
            .iter()
            .filter(|o| (o.sip, o.cube, o.pe) == (r, 0, 0) && o.start >= k.end)
            .count();
        let before = ops
            .iter()
            .filter(|o| (o.sip, o.cube, o.pe) == (r, 0, 0) && o.flow.is_some())
            .filter(|o| o.start < k.end)
            .count();
        assert!(collective > 0, "rank {r}: no op after its kernel");
        assert_eq!(
            before, 0,
            "rank {r}: the all-reduce sent or received before its kernel ended at {}",
            k.end
        );
    }
}

/// A rank that returns with an asynchronous collective its peer never
/// joins: spawn fails naming both, never hangs.
#[test]
fn an_async_collective_left_unjoined_is_named_at_the_end() {
    let sys = sips(2, 1);
    let mut pg = pg(&sys, DataMode::TimingOnly);
    let e = pg
        .spawn(2, |ctx| {
            let t = ctx.empty((1, 1024), DPPolicy::cube_rows(1))?;
            if ctx.rank() == 0 {
                let _unwaited = ctx.all_reduce_async(&t, ReduceOp::Sum)?;
            }
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "aborted: the ranks can never go on: rank(s) 0 joined all_reduce(2048 B, sum, buffer at offset 0) (collective #0 of group 'world'), but rank 1 has finished; every member must make the same collective calls, and every recv needs its matching send"
    );
}
