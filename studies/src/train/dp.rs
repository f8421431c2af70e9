//! Data-parallel gradient reduction as Megatron's `--overlap-grad-reduce`
//! does it: the weight gradients of the last micro-batch's backward are
//! gathered into buckets in the order backward completes them, and each
//! full bucket is reduced over the DP group asynchronously on the rank's
//! communication stream while backward goes on; the step waits for every
//! bucket at its end. A bucket is the unit of launch: its gradients'
//! collectives are issued together once its last gradient is complete.
//! ZeRO-1 (`--use-distributed-optimizer`) reduce-scatters instead and
//! all-gathers the updated parameters (a buffer of each gradient's shape;
//! the optimizer's own update is not modelled) after the last bucket.

use kernbench_ccl::{Collective, ReduceOp};
use kernbench_dist::{DistError, GroupId, Rank, Tensor, Work};

/// How the DP replicas combine their gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DpReduce {
    /// All-reduce every gradient (plain DDP).
    AllReduce,
    /// Reduce-scatter the gradients, all-gather the parameters (ZeRO-1).
    ReduceScatter,
}

/// The names `DpReduce::parse` takes.
pub const DP_REDUCES: [&str; 2] = ["all-reduce", "reduce-scatter"];

impl DpReduce {
    pub fn parse(field: &str, s: &str) -> Result<DpReduce, String> {
        match s {
            "all-reduce" => Ok(DpReduce::AllReduce),
            "reduce-scatter" => Ok(DpReduce::ReduceScatter),
            _ => Err(format!(
                "{field} '{s}' is not a DP gradient reduction; allowed: {} (reduce-scatter: ZeRO-1, Megatron's --use-distributed-optimizer)",
                DP_REDUCES.join(", ")
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DpReduce::AllReduce => "all-reduce",
            DpReduce::ReduceScatter => "reduce-scatter",
        }
    }
}

/// One rank's DP reduction in progress.
pub struct DpReducer {
    group: Option<GroupId>,
    reduce: DpReduce,
    bucket_bytes: u64,
    bucket: Vec<Tensor>,
    filled: u64,
    works: Vec<Work>,
    reduced: Vec<Tensor>,
    /// Each gradient as backward completed it, before its reduction
    /// (functional mode only: read back for checks).
    pub local: Option<Vec<Vec<f32>>>,
}

impl DpReducer {
    /// A reducer over `group` (None: DP 1, nothing to reduce).
    pub fn new(
        group: Option<GroupId>,
        reduce: DpReduce,
        bucket_bytes: u64,
        keep_local: bool,
    ) -> Self {
        DpReducer {
            group,
            reduce,
            bucket_bytes,
            bucket: Vec::new(),
            filled: 0,
            works: Vec::new(),
            reduced: Vec::new(),
            local: keep_local.then(Vec::new),
        }
    }

    /// A gradient is complete: adds it to the bucket, which is reduced
    /// once it holds `bucket_bytes` or more.
    pub fn ready(&mut self, ctx: &mut Rank, g: &Tensor) -> Result<(), DistError> {
        if let Some(local) = &mut self.local {
            local.push(ctx.read(g)?);
        }
        if self.group.is_none() {
            return Ok(());
        }
        self.filled += g.elems() as u64 * 2;
        self.bucket.push(g.clone());
        if self.filled >= self.bucket_bytes {
            self.flush(ctx)?;
        }
        Ok(())
    }

    fn flush(&mut self, ctx: &mut Rank) -> Result<(), DistError> {
        let Some(group) = self.group else {
            return Ok(());
        };
        let collective = match self.reduce {
            DpReduce::AllReduce => Collective::AllReduce,
            DpReduce::ReduceScatter => Collective::ReduceScatter,
        };
        for g in std::mem::take(&mut self.bucket) {
            self.works
                .push(ctx.collective_async(group, collective, &g, ReduceOp::Sum)?);
            self.reduced.push(g);
        }
        self.filled = 0;
        Ok(())
    }

    /// Reduces what is left in the bucket and waits for every reduction
    /// (and, under ZeRO-1, the parameters' all-gather).
    pub fn finish(mut self, ctx: &mut Rank) -> Result<Option<Vec<Vec<f32>>>, DistError> {
        self.flush(ctx)?;
        for w in std::mem::take(&mut self.works) {
            ctx.wait(&w)?;
        }
        if let (Some(group), DpReduce::ReduceScatter) = (self.group, self.reduce) {
            let gathers = self
                .reduced
                .iter()
                .map(|g| ctx.collective_async(group, Collective::AllGather, g, ReduceOp::Sum))
                .collect::<Result<Vec<_>, _>>()?;
            for w in gathers {
                ctx.wait(&w)?;
            }
        }
        Ok(self.local)
    }
}
