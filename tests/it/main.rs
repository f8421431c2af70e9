//! The system-level tests of the `kernbench` crate, one module per subject,
//! built as one binary so the library is linked once.

mod all_to_all;
mod autotune;
mod bad_inputs;
mod bounds16;
mod ccl;
mod ccl_config;
mod cli;
mod cli_autotune;
mod common;
mod compact_programs;
mod dist;
mod doc_examples;
mod estimate;
mod flow;
mod gemm;
mod ipcq;
mod lanes;
mod layers;
mod mutants;
mod mutated_inputs;
mod network;
mod network_model;
mod p2p;
mod registry;
mod result_sets;
mod sip_kinds;
mod spec_errors;
mod steady;
mod streams;
mod sweep;
mod topology;
mod tp;
mod train;
mod validate;
mod vector_ops;
