//! Handing freed memory back to the operating system.
//!
//! glibc's allocator keeps what a program frees in its arenas for reuse and
//! returns to the system only free space at the top of a heap. Memory freed
//! in the middle (a million forgotten quota buckets among a few live ones)
//! stays resident, so resident memory would follow the busiest hour, not
//! what is held now. `malloc_trim` gives the free pages of every arena back
//! (`madvise(MADV_DONTNEED)`); the next allocations reuse the address space.
//! Other allocators and systems: nothing to do here.
//!
//! The `sluice` binary puts Rust's allocations on jemalloc, which returns
//! freed pages by itself (docs/decisions.md); there this reaches what is
//! still on glibc's heap, C code's allocations (SQLite's page caches). A
//! library user on the system allocator gets the full effect.

/// Give memory already freed back to the operating system. Blocking: it
/// walks the allocator's free lists (milliseconds for hundreds of MB), so
/// call it off the async workers, after freeing much at once.
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim takes no pointers and only reorganises the
    // allocator's own free lists, under the allocator's locks; it is safe
    // to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
