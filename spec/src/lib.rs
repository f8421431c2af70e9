//! kernbench-spec: the spec layer, between the engine and everything else.
//!
//! `spec` (YAML → validated `System`), `topology` (nodes, links, routes,
//! addresses compiled from a `System`) and `names` ("did you mean"). It
//! knows the engine's plain data (`LinkTable`, `NodeId`, `RouteSource`) and
//! nothing above it: no machine, collective, kernel or study. The `kernbench`
//! crate re-exports these modules under the same names, the paths users write.
pub mod names;
pub mod spec;
pub mod topology;
