//! A cache prefetch hint for batches of random reads.

/// Asks the CPU to bring `value`'s cache line in; a hint with no effect
/// on results (a no-op off x86_64).
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and writes nothing; SSE is part of
    // every x86_64 target.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (value as *const T).cast(),
        );
    }
}
