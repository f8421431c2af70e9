//! Point-to-point calls and what is built on them: send/recv timed against
//! the closed form of their route, a ring of messages, unmatched messages
//! named, scatter/gather from every root, uneven all_to_all_single, and a
//! barrier that costs its dissemination rounds.

use crate::common;
use kernbench::ccl::CclConfig;
use kernbench::ccl::verify::value;
use kernbench::dist::{
    DPPolicy, DistError, ProcessGroup, Rank, Split, Tensor, TurnOrder, WORLD, init_process_group,
};
use kernbench::spec::System;
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

const B: u64 = 64; // inter-SIP bytes per tick
const L: u64 = 100; // inter-SIP latency, ticks

fn pg(sys: &System, mode: DataMode) -> ProcessGroup {
    init_process_group(sys, &CclConfig::embedded_default(), "ring", mode).unwrap()
}

/// `n` SIPs of `w`x`h` cubes on a ring (the default spec otherwise).
fn sips(n: u32, w: u32, h: u32) -> System {
    common::system(|s| {
        s.system.sips.count = n;
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (w, h);
    })
}

/// Runs `f` on another thread and fails the test if it takes longer than a minute (a hang).
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the distributed program hung")
}

/// Rank `r`'s input: element i of its tensor is `value(r, i)` (0 to 3) plus
/// 4 × (i mod 64), so every element of every rank differs from its
/// neighbours' and stays exact in f16.
fn input_of(r: u32, elems: usize) -> Vec<f32> {
    (0..elems)
        .map(|i| value(r as usize, i) + 4.0 * (i % 64) as f32)
        .collect()
}

/// A rank's tensor of `rows` x `cols`, row-wise over every cube of its SIP,
/// filled with its input.
fn filled(ctx: &mut Rank, rows: usize, cols: usize) -> Result<Tensor, DistError> {
    let cubes = ctx.sip_shape().0;
    let t = ctx.empty((rows, cols), DPPolicy::cube_rows(cubes))?;
    ctx.write(&t, &input_of(ctx.rank(), rows * cols))?;
    Ok(t)
}

/// docs/model.md §Kernels, *Point to point*: a message of `b` bytes in `c` chunks
/// of a slot `S` over `k` hops, with enough slots, takes
/// `k·L + (c − 1)·⌈S/B⌉ + ⌈S_last/B⌉ + (k − 1)·⌈min(S, b)/B⌉`, from the
/// first PE's start to the last store; the receiver gets the data.
#[test]
fn one_message_takes_the_closed_form_of_its_route() {
    let sys = common::lean_links(4, B, L);
    let slot = CclConfig::embedded_default()
        .entry("ring")
        .unwrap()
        .slot_size;
    for (dst, hops) in [(1u32, 1u64), (2, 2)] {
        for bytes in [128u64, slot, 3 * slot + 200] {
            let c = bytes.div_ceil(slot);
            let last = bytes - (c - 1) * slot;
            let want = hops * L
                + (c - 1) * slot.div_ceil(B)
                + last.div_ceil(B)
                + (hops - 1) * slot.min(bytes).div_ceil(B);
            let elems = (bytes / 2) as usize;
            let mut pg = pg(&sys, DataMode::Functional);
            let ticks = Mutex::new(Vec::new());
            pg.spawn(4, |ctx| {
                let t = ctx.empty((1, elems), DPPolicy::cube_rows(1))?;
                let r = match ctx.rank() {
                    0 => {
                        ctx.write(&t, &input_of(0, elems))?;
                        ctx.send(&t, dst)?
                    }
                    r if r == dst => {
                        let got = ctx.recv(&t, 0)?;
                        assert_eq!(ctx.read(&t)?, input_of(0, elems), "{bytes} B to {dst}");
                        got
                    }
                    _ => return Ok(()),
                };
                ticks.lock().unwrap().push(r.ticks());
                Ok(())
            })
            .unwrap();
            assert_eq!(
                ticks.into_inner().unwrap(),
                [want, want],
                "{bytes} B over {hops} hop(s)"
            );
        }
    }
}

/// Blocking sends round a ring need an order: even ranks send to r + 1
/// first, odd ranks receive first. Every rank ends with its predecessor's
/// tensor, shard by shard over two cubes; each rank's (message start, end,
/// clock) are the same whatever order the workers take turns in.
#[test]
fn a_ring_of_sends_on_8_ranks_moves_the_right_data() {
    let ring = |order: TurnOrder| {
        let mut pg = pg(&sips(8, 2, 1), DataMode::Functional);
        pg.turn_order = order;
        let (rows, cols) = (6, 40);
        let ticks = Mutex::new(Vec::new());
        pg.spawn(8, |ctx| {
            let r = ctx.rank();
            let (next, prev) = ((r + 1) % 8, (r + 7) % 8);
            let mine = filled(ctx, rows, cols)?;
            let got = ctx.empty((rows, cols), DPPolicy::cube_rows(2))?;
            let (sent, received) = if r % 2 == 0 {
                (ctx.send(&mine, next)?, ctx.recv(&got, prev)?)
            } else {
                let received = ctx.recv(&got, prev)?;
                (ctx.send(&mine, next)?, received)
            };
            assert_eq!(ctx.read(&got)?, input_of(prev, rows * cols), "rank {r}");
            assert_eq!(
                ctx.read(&mine)?,
                input_of(r, rows * cols),
                "rank {r} kept its own"
            );
            ticks.lock().unwrap().push((r, sent, received, ctx.now()));
            Ok(())
        })
        .unwrap();
        let mut ticks = ticks.into_inner().unwrap();
        ticks.sort_by_key(|t| t.0);
        ticks
    };
    assert_eq!(ring(TurnOrder::Ascending), ring(TurnOrder::Descending));
}

/// isend/irecv round a ring need no order: every rank posts both ends and
/// waits. Every rank ends with its predecessor's tensor; messages that
/// share a PE run one after another (a PE runs one launch at a time), in
/// the order they were matched; the ring ends no later than the blocking
/// one, with the same ticks in either turn order.
#[test]
fn a_ring_of_isends_on_8_ranks_needs_no_order_and_moves_the_right_data() {
    let ring = |order: TurnOrder, blocking: bool| {
        let mut pg = pg(&sips(8, 2, 1), DataMode::Functional);
        pg.turn_order = order;
        let (rows, cols) = (6, 40);
        let ends = Mutex::new(Vec::new());
        pg.spawn(8, |ctx| {
            let r = ctx.rank();
            let (next, prev) = ((r + 1) % 8, (r + 7) % 8);
            let mine = filled(ctx, rows, cols)?;
            let got = ctx.empty((rows, cols), DPPolicy::cube_rows(2))?;
            let end = if blocking {
                if r % 2 == 0 {
                    ctx.send(&mine, next)?;
                    ctx.recv(&got, prev)?.end
                } else {
                    let end = ctx.recv(&got, prev)?.end;
                    ctx.send(&mine, next)?;
                    end
                }
            } else {
                let sent = ctx.isend(&mine, next)?;
                let received = ctx.irecv(&got, prev)?;
                assert!(!ctx.is_completed(&received)?, "rank {r}: nothing ran yet");
                ctx.wait(&sent)?;
                ctx.wait(&received)?.end
            };
            assert_eq!(ctx.read(&got)?, input_of(prev, rows * cols), "rank {r}");
            ends.lock().unwrap().push((r, end));
            Ok(())
        })
        .unwrap();
        let mut ends = ends.into_inner().unwrap();
        ends.sort_by_key(|t| t.0);
        ends.into_iter().map(|e| e.1).collect::<Vec<u64>>()
    };
    let at_once = ring(TurnOrder::Ascending, false);
    assert_eq!(at_once, ring(TurnOrder::Descending, false));
    let blocking = ring(TurnOrder::Ascending, true);
    let (last, last_blocking) = (at_once.iter().max(), blocking.iter().max());
    println!("isend ring {at_once:?}, blocking {blocking:?}");
    assert!(last <= last_blocking, "{at_once:?} against {blocking:?}");
    assert_eq!(at_once, PINNED_ISEND_RING);
}

/// Each rank's receive end in the isend ring above. The messages run one
/// at a time, 0→1, 2→3, 4→5, 6→7, then 1→2, 3→4, 5→6, 7→0, each 484 ticks
/// and the next starting 50 ticks after one ends: the k-th ends at
/// 2162 + 534·k. (Before launches left at the tick the work they follow
/// ended, each waited 76 more ticks for the engine's next event: 610 apart.)
const PINNED_ISEND_RING: [u64; 8] = [5900, 2162, 4298, 2696, 4832, 3230, 5366, 3764];

/// A recv whose send never comes, or a send whose recv never comes, ends
/// the spawn naming the waiting rank, the message and its peer: never a hang.
#[test]
fn an_unmatched_message_names_both_ranks_and_never_hangs() {
    let e = within_a_minute(|| {
        let mut pg = pg(&sips(2, 1, 1), DataMode::TimingOnly);
        pg.spawn(2, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            if ctx.rank() == 1 {
                ctx.recv(&t, 0)?;
            }
            Ok(())
        })
        .unwrap_err()
    });
    let s = e.to_string();
    assert!(
        s.contains("the ranks can never go on: rank 1 waits in recv from rank 0 (64 B, message #0 from rank 0 to rank 1), but rank 0 has finished without its matching send to rank 1"),
        "{s}"
    );
    let e = within_a_minute(|| {
        let mut pg = pg(&sips(3, 1, 1), DataMode::TimingOnly);
        pg.spawn(3, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            match ctx.rank() {
                0 => {
                    ctx.send(&t, 2)?;
                    ctx.send(&t, 2)?;
                }
                2 => {
                    ctx.recv(&t, 0)?;
                    ctx.barrier(WORLD)?;
                }
                _ => {
                    ctx.barrier(WORLD)?;
                }
            }
            Ok(())
        })
        .unwrap_err()
    });
    let s = e.to_string();
    assert!(
        s.contains("rank 0 waits in send to rank 2 (64 B, message #1 from rank 0 to rank 2), but rank 2 waits elsewhere without its matching recv from rank 0")
            && s.contains("rank(s) 1, 2 joined barrier"),
        "{s}"
    );
}

/// A peer that is not another rank, or ends that disagree on the shape,
/// are refused naming both and the fix.
#[test]
fn bad_messages_name_the_ranks_and_the_fix() {
    let mut pg = pg(&sips(2, 1, 1), DataMode::TimingOnly);
    let e = pg
        .spawn(2, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            ctx.send(&t, ctx.rank())?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("send of rank 0 with rank 0: the peer must be another rank of the world's 0..2; allowed: a rank below 2 other than 0"),
        "{e}"
    );
    let e = pg
        .spawn(2, |ctx| {
            let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            ctx.recv(&t, 7)?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("recv of rank 0 with rank 7"), "{e}");
    let e = pg
        .spawn(2, |ctx| {
            let mut t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
            t.rank = 1 - ctx.rank();
            ctx.send(&t, 1 - ctx.rank())?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("send on rank 0 with a 1x32 tensor of rank 1: a rank moves only its own tensors; allowed: a tensor this rank allocated (ctx.empty)"),
        "{e}"
    );
    let e = pg
        .spawn(2, |ctx| {
            if ctx.rank() == 0 {
                let t = ctx.empty((1, 32), DPPolicy::cube_rows(1))?;
                ctx.send(&t, 1)?;
            } else {
                let t = ctx.empty((2, 16), DPPolicy::cube_rows(1))?;
                ctx.recv(&t, 0)?;
            }
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("message #0 from rank 0 to rank 1: rank 0 sends a 1x32 tensor but rank 1 receives into a 2x16 one; allowed: the same shape on both ends"),
        "{e}"
    );
    // Columns split over two cubes on the sender, rows on the receiver.
    let mut pg = self::pg(&sips(2, 2, 1), DataMode::TimingOnly);
    let e = pg
        .spawn(2, |ctx| {
            if ctx.rank() == 0 {
                let by_columns = DPPolicy {
                    cube: Split::ColumnWise,
                    ..DPPolicy::cube_rows(2)
                };
                let t = ctx.empty((2, 16), by_columns)?;
                ctx.send(&t, 1)?;
            } else {
                let t = ctx.empty((2, 16), DPPolicy::cube_rows(2))?;
                ctx.recv(&t, 0)?;
            }
            Ok(())
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("message #0 from rank 0 to rank 1: rank 0's 2x16 tensor has no shard holding row 0 with columns 0..16 together, as rank 1's does on cube 0 pe 0; allowed: tensors split the same way across columns on both ranks (the same DPPolicy)"),
        "{e}"
    );
}

/// Scatter and gather from every root, on 2 and 5 ranks of two cubes (a
/// tensor's rows split over both cubes, so blocks straddle shards) and on
/// a subgroup in its own order: checked element by element against the
/// inputs.
#[test]
fn scatter_and_gather_run_from_every_root() {
    let cols = 8;
    for n in [2u32, 5] {
        let mut pg = pg(&sips(n, 2, 1), DataMode::Functional);
        let rows = 3 * n as usize;
        let block =
            |r: u32, i: usize| input_of(r, rows * cols)[i * 3 * cols..(i + 1) * 3 * cols].to_vec();
        pg.spawn(n, |ctx| {
            let r = ctx.rank();
            for root in 0..n {
                let at = format!("{n} ranks, root {root}, rank {r}");
                let t = filled(ctx, rows, cols)?;
                ctx.scatter(WORLD, &t, root)?;
                let mut want = input_of(r, rows * cols);
                want[r as usize * 3 * cols..(r as usize + 1) * 3 * cols]
                    .copy_from_slice(&block(root, r as usize));
                assert_eq!(ctx.read(&t)?, want, "scatter: {at}");
                ctx.write(&t, &input_of(r, rows * cols))?;
                ctx.gather(WORLD, &t, root)?;
                let want: Vec<f32> = if r == root {
                    (0..n).flat_map(|i| block(i, i as usize)).collect()
                } else {
                    input_of(r, rows * cols)
                };
                assert_eq!(ctx.read(&t)?, want, "gather: {at}");
                ctx.free(t)?;
            }
            Ok(())
        })
        .unwrap();
    }
    // Group [2, 0, 4]: member 0 is rank 2, so rank 2 gets block 0.
    let mut pg = pg(&sips(5, 1, 1), DataMode::Functional);
    let g = pg.new_group(&[2, 0, 4]).unwrap();
    pg.spawn(5, |ctx| {
        let r = ctx.rank();
        let t = filled(ctx, 3, cols)?;
        if let Some(m) = [2, 0, 4].iter().position(|&q| q == r) {
            ctx.scatter(g, &t, 4)?;
            let mut want = input_of(r, 3 * cols);
            want[m * cols..(m + 1) * cols]
                .copy_from_slice(&input_of(4, 3 * cols)[m * cols..(m + 1) * cols]);
            assert_eq!(ctx.read(&t)?, want, "rank {r} of [2, 0, 4]");
        }
        Ok(())
    })
    .unwrap();
}

/// Rows rank r sends rank j in the uneven all_to_all_single test.
const SPLITS: [[usize; 3]; 3] = [[1, 2, 0], [3, 1, 2], [0, 2, 1]];

/// all_to_all_single with uneven splits: rank j's output is, rank by rank,
/// the rows each sends it (a zero-row block included), element by element;
/// without splits the blocks are equal.
#[test]
fn uneven_all_to_all_single_moves_each_block() {
    let cols = 8;
    let mut pg = pg(&sips(3, 2, 1), DataMode::Functional);
    pg.spawn(3, |ctx| {
        let r = ctx.rank() as usize;
        let in_splits = SPLITS[r];
        let out_splits: Vec<usize> = (0..3).map(|q| SPLITS[q][r]).collect();
        let (rows_in, rows_out) = (
            in_splits.iter().sum::<usize>(),
            out_splits.iter().sum::<usize>(),
        );
        let input = filled(ctx, rows_in, cols)?;
        let output = ctx.empty((rows_out, cols), DPPolicy::cube_rows(2))?;
        ctx.all_to_all_single(WORLD, &output, &input, Some(&out_splits), Some(&in_splits))?;
        let want: Vec<f32> = (0..3)
            .flat_map(|q| {
                let first: usize = SPLITS[q][..r].iter().sum();
                let theirs = input_of(q as u32, SPLITS[q].iter().sum::<usize>() * cols);
                theirs[first * cols..(first + SPLITS[q][r]) * cols].to_vec()
            })
            .collect();
        assert_eq!(ctx.read(&output)?, want, "rank {r}");
        // Equal blocks: 2 rows from every rank.
        let input = filled(ctx, 6, cols)?;
        let output = ctx.empty((6, cols), DPPolicy::cube_rows(2))?;
        ctx.all_to_all_single(WORLD, &output, &input, None, None)?;
        let want: Vec<f32> = (0..3)
            .flat_map(|q| input_of(q, 6 * cols)[r * 2 * cols..(r + 1) * 2 * cols].to_vec())
            .collect();
        assert_eq!(ctx.read(&output)?, want, "rank {r}, equal blocks");
        Ok(())
    })
    .unwrap();
}

/// The error of a spawn on 3 one-cube ranks whose every rank runs `f`.
fn refusal(f: impl Fn(&mut Rank) -> Result<(), DistError> + Sync + Send + 'static) -> String {
    within_a_minute(move || {
        let mut pg = pg(&sips(3, 1, 1), DataMode::TimingOnly);
        pg.spawn(3, f).unwrap_err().to_string()
    })
}

/// Every bad input of scatter, gather and all_to_all_single is refused
/// naming the value, what is allowed and the fix.
#[test]
fn bad_scatter_gather_and_split_inputs_are_named() {
    let e = refusal(|ctx| {
        let t = ctx.empty((4, 8), DPPolicy::cube_rows(1))?;
        ctx.scatter(WORLD, &t, 0)?;
        Ok(())
    });
    assert!(
        e.contains("scatter of rank 0's 4x8 tensor over group 'world' of 3 ranks: its rows are one equal block per rank; allowed: rows a multiple of 3 (e.g. 3 or 6)"),
        "{e}"
    );
    let e = refusal(|ctx| {
        let t = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        ctx.gather(WORLD, &t, 3)?;
        Ok(())
    });
    assert!(
        e.contains("gather root 3 is not a rank of group 'world' (ranks [0, 1, 2]); allowed: one of its ranks"),
        "{e}"
    );
    let e = refusal(|ctx| {
        let rows = if ctx.rank() == 1 { 6 } else { 3 };
        let t = ctx.empty((rows, 8 * 3 / rows), DPPolicy::cube_rows(1))?;
        ctx.scatter(WORLD, &t, 0)?;
        Ok(())
    });
    assert!(
        e.contains("scatter: rank 1's tensor is 6x4 but the root rank 0's is 3x8; allowed: the same shape on every rank"),
        "{e}"
    );
    let e = refusal(|ctx| {
        let t = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        let o = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        ctx.all_to_all_single(WORLD, &o, &t, None, Some(&[1, 2]))?;
        Ok(())
    });
    assert!(
        e.contains("all_to_all_single: input_split_sizes [1, 2] of rank 0 has 2 entries summing to 3 rows; allowed: one entry per rank of group 'world' (3) summing to the tensor's 3 rows"),
        "{e}"
    );
    let e = refusal(|ctx| {
        let t = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        let o = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        ctx.all_to_all_single(WORLD, &o, &t, Some(&[1, 1, 2]), None)?;
        Ok(())
    });
    assert!(
        e.contains("output_split_sizes [1, 1, 2] of rank 0 has 3 entries summing to 4 rows; allowed: one entry per rank of group 'world' (3) summing to the tensor's 3 rows"),
        "{e}"
    );
    let e = refusal(|ctx| {
        let t = ctx.empty((4, 8), DPPolicy::cube_rows(1))?;
        let o = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        ctx.all_to_all_single(WORLD, &o, &t, None, None)?;
        Ok(())
    });
    assert!(
        e.contains("all_to_all_single without input_split_sizes cuts rank 0's 4 rows into 3 equal blocks (group 'world'); allowed: rows a multiple of 3, or input_split_sizes giving each rank's rows"),
        "{e}"
    );
    let e = refusal(|ctx| {
        let t = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        ctx.all_to_all_single(WORLD, &t, &t, None, None)?;
        Ok(())
    });
    assert!(
        e.contains("all_to_all_single on rank 0: the input (3x8) and output (3x8) must be two tensors with the same columns; allowed: an output allocated apart from the input, 8 columns wide"),
        "{e}"
    );
    // Rank 0 sends rank 1 two rows, but rank 1 expects one from it.
    let e = refusal(|ctx| {
        let t = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        let o = ctx.empty((3, 8), DPPolicy::cube_rows(1))?;
        let sends: &[usize] = if ctx.rank() == 0 {
            &[0, 2, 1]
        } else {
            &[1, 1, 1]
        };
        ctx.all_to_all_single(WORLD, &o, &t, None, Some(sends))?;
        Ok(())
    });
    assert!(
        e.contains("all_to_all_single over group 'world': rank 0 sends 0 rows to rank 0 (its input_split_sizes[0]) but rank 0 expects 1 rows from rank 0 (its output_split_sizes[0])"),
        "{e}"
    );
}

/// docs/model.md §Kernels, *Barrier*: on idle PEs a barrier of `n` ranks
/// costs the launch overhead plus `K = ⌈log2 n⌉` rounds, round k a token of
/// 2 B over `min(2^k, n − 2^k)` ring hops of `L + ⌈2/B⌉`; when the last
/// round runs the other way round the ring (`2^(K−1) > n/2`), its token
/// leaves behind the previous round's credit on the same link
/// (`⌈credit_bytes/B⌉` more). Every rank leaves at that tick. A group of
/// one costs nothing. A barrier launched at the tick the previous one ended
/// waits, on the queue pair of the last round, for that round's credit:
/// it left the receiver at that end and is back `d·(L + ⌈credit_bytes/B⌉)`
/// later (`d` the last round's hops), while the new token is ready after
/// the launch and the earlier rounds.
#[test]
fn a_barrier_costs_its_dissemination_rounds() {
    for n in [2u32, 3, 4, 5, 6, 8] {
        let sys = common::lean_links(n, B, L);
        let overhead = sys.spec.pe.launch_overhead_ns as u64;
        let n64 = u64::from(n);
        let dists: Vec<u64> = (0..).map(|k| 1u64 << k).take_while(|&d| d < n64).collect();
        let rounds: u64 = dists
            .iter()
            .map(|&d| d.min(n64 - d) * (L + 2u64.div_ceil(B)))
            .sum();
        let last = dists[dists.len() - 1];
        let turns = dists.len() > 1 && 2 * last > n64;
        let credit_hop = sys.spec.control.credit_bytes.div_ceil(B);
        let credit = u64::from(turns) * credit_hop;
        let mut pg = pg(&sys, DataMode::TimingOnly);
        // The first barrier also installs its links; its last credits are
        // back once the machine is idle.
        pg.spawn(n, |ctx| ctx.barrier(WORLD).map(drop)).unwrap();
        pg.machine.synchronize().unwrap();
        let left = Mutex::new(Vec::new());
        pg.spawn(n, |ctx| {
            let from = ctx.now();
            let at = ctx.barrier(WORLD)?;
            let resumed = ctx.now();
            let again = ctx.barrier(WORLD)?;
            left.lock()
                .unwrap()
                .push((at - from, resumed - from, again - at));
            Ok(())
        })
        .unwrap();
        let want = overhead + rounds + credit;
        // Back to back: the last round's credit is back d·(L + ⌈c/B⌉) after
        // the end, the new token ready overhead + Σ earlier rounds after it.
        // With c = 16 B, B = 64, L = overhead = 100 that is 1 tick when n is
        // a power of two (d = n/2: (n/2)·101 − 100 − (n/2 − 1)·101) and none
        // otherwise.
        let d = last.min(n64 - last);
        let earlier = rounds - d * (L + 2u64.div_ceil(B));
        let wait = (d * (L + credit_hop)).saturating_sub(overhead + earlier);
        assert_eq!(wait, u64::from(n.is_power_of_two()), "{n} ranks");
        assert_eq!(
            left.into_inner().unwrap(),
            vec![(want, want, want + wait); n as usize],
            "{n} ranks"
        );
    }
    let mut pg = pg(&common::lean_links(2, B, L), DataMode::TimingOnly);
    let alone = pg.new_group(&[1]).unwrap();
    pg.spawn(2, |ctx| {
        if ctx.rank() == 1 {
            let from = ctx.now();
            assert_eq!(ctx.barrier(alone)?, from);
        }
        Ok(())
    })
    .unwrap();
}

/// On two ranks a scatter or a gather is one message of a block: its time
/// is that message's closed form, `L + ⌈b/B⌉` for a block of one slot or less.
#[test]
fn scatter_and_gather_on_two_ranks_take_one_message() {
    let sys = common::lean_links(2, B, L);
    let (rows, cols) = (2, 300);
    let want = L + (cols as u64 * 2).div_ceil(B);
    let mut pg = pg(&sys, DataMode::TimingOnly);
    let ticks = Mutex::new(Vec::new());
    pg.spawn(2, |ctx| {
        let t = ctx.empty((rows, cols), DPPolicy::cube_rows(1))?;
        let scatter = ctx.scatter(WORLD, &t, 1)?.ticks();
        let gather = ctx.gather(WORLD, &t, 0)?.ticks();
        ticks.lock().unwrap().push((scatter, gather));
        Ok(())
    })
    .unwrap();
    assert_eq!(ticks.into_inner().unwrap(), [(want, want); 2]);
}
