//! The subcommands of the kernbench binary, one module each (its `Args`
//! and its `run`), with the argument groups and parsers they share
//! (`args`) and the checks of the paths they write (`paths`).

pub mod args;
pub mod autotune;
pub mod bench;
pub mod gemm_sweep;
pub mod list;
pub mod merge;
pub mod paths;
pub mod run;
pub mod sweep;
pub mod topo;
pub mod tp_mlp;
pub mod train_step;
pub mod validate;

/// After everything is written: a result set with failed points exits 1,
/// naming them (the first ten).
pub fn exit_if_failed(rows: &[kernbench::sweep::Row]) {
    let failed: Vec<&kernbench::sweep::Row> = rows.iter().filter(|r| !r.error.is_empty()).collect();
    if failed.is_empty() {
        return;
    }
    eprintln!("\n{} point(s) failed:", failed.len());
    for r in failed.iter().take(10) {
        eprintln!("  [{}] {}: {}", r.index, r.point, r.error);
    }
    if failed.len() > 10 {
        eprintln!(
            "  and {} more (see the error column of results.csv)",
            failed.len() - 10
        );
    }
    std::process::exit(1);
}
