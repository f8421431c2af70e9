//! Tests that count heap bytes. They get a binary of their own with a
//! counting allocator, and take [`ONE_AT_A_TIME`] so no other test's
//! allocations mix into a count.

#[path = "../it/common/mod.rs"]
mod common;
mod memory_flat;
mod trace;

#[global_allocator]
static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

/// Held for the whole of each test in this binary.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
