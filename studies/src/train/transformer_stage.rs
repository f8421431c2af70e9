//! The transformer stage: a [`LayerStack`] of GPT layers on the rank's TP
//! group as a pipeline [`Stage`].

use super::stage::{GradReady, Stage};
use crate::transformer::LayerStack;
use kernbench_dist::{DPPolicy, DistError, Rank, Tensor};

/// `LayerStack` under the schedule; `tp` divides its whole-group FLOPs
/// into this rank's share.
pub struct TransformerStage {
    pub stack: LayerStack,
    pub tp: u32,
}

impl Stage for TransformerStage {
    fn activation(&self) -> ((usize, usize), DPPolicy) {
        self.stack.activation_layout()
    }

    fn forward(&mut self, ctx: &mut Rank, micro: usize, x: &Tensor) -> Result<Tensor, DistError> {
        self.stack.forward(ctx, micro, x)
    }

    /// The stack's backward; on the last micro-batch each layer's weight
    /// gradients go to `ready` as that layer's backward ends, so
    /// their DP reduction overlaps the layers below.
    fn backward(
        &mut self,
        ctx: &mut Rank,
        micro: usize,
        dy: &Tensor,
        ready: Option<&mut GradReady>,
    ) -> Result<Tensor, DistError> {
        let Some(ready) = ready else {
            return self.stack.backward(ctx, micro, dy);
        };
        let mut each = |c: &mut Rank, grads: &[Tensor]| grads.iter().try_for_each(|g| ready(c, g));
        self.stack.backward_with(ctx, micro, dy, Some(&mut each))
    }

    fn grads(&self) -> Vec<Tensor> {
        self.stack.grads()
    }

    fn forward_flops(&self) -> u64 {
        self.stack.forward_flops() / u64::from(self.tp.max(1))
    }

    fn free(self: Box<Self>, ctx: &mut Rank) -> Result<(), DistError> {
        self.stack.free(ctx)
    }
}
