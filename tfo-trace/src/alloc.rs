//! The allocator of the static (musl) builds: mimalloc for everything below [`HUGE`]
//! bytes, and pages of their own (mmap, grown in place or moved by mremap, munmap) for
//! blocks of at least [`HUGE`]: the tables of a million destinations that `report` and
//! `top` grow by doubling.
//!
//! Why (BENCHMARKS.md, "Static binaries"): musl's malloc made start-up and the replays slower
//! than the glibc build; mimalloc fixed start-up, but it grows a huge block by copying it
//! into fresh pages (musl's memcpy and the kernel zeroing pages were 30 % of a replay),
//! where glibc's malloc moves the pages with mremap. This does what glibc does for those.
//! The glibc build keeps glibc's malloc.
use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc;

/// From this size on a block gets pages of its own (glibc's largest mmap threshold is 32 MiB;
/// 1 MiB keeps only the few large tables there, never the many small allocations).
const HUGE: usize = 1 << 20;
/// Blocks of their own are page-aligned: any alignment up to a page is met.
const PAGE: usize = 4096;

pub struct Allocator;

/// Whether a block of this layout has pages of its own. Decided by the layout alone, which
/// Rust passes unchanged to `dealloc` and `realloc`, so each block goes back where it came
/// from.
fn own_pages(layout: Layout) -> bool {
    layout.size() >= HUGE && layout.align() <= PAGE
}

// SAFETY: every method meets GlobalAlloc's contract: small blocks are mimalloc's (itself a
// GlobalAlloc); a huge one is a private anonymous mapping of at least `size` bytes, page
// aligned (so aligned for any `align <= PAGE`), zeroed by the kernel, released only by
// `dealloc`/`realloc` with the same layout. A failed mmap or mremap returns null, as the
// contract asks.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if own_pages(layout) {
            map(layout.size())
        } else {
            // SAFETY: the caller's guarantees for `layout` are mimalloc's.
            unsafe { MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if own_pages(layout) {
            map(layout.size()) // fresh anonymous pages are zero
        } else {
            // SAFETY: as in alloc.
            unsafe { MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if own_pages(layout) {
            // SAFETY: `ptr` is a mapping of `layout.size()` bytes made by `map` or `remap`.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            // SAFETY: `ptr` came from mimalloc with this layout.
            unsafe { MiMalloc.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc::realloc's contract: `new_size` > 0 and, rounded up to the
        // alignment, does not overflow isize.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (own_pages(layout), own_pages(new)) {
            // SAFETY: `ptr` is our mapping of `layout.size()` bytes.
            (true, true) => unsafe { remap(ptr, layout.size(), new_size) },
            // SAFETY: `ptr` came from mimalloc with `layout`.
            (false, false) => unsafe { MiMalloc.realloc(ptr, layout, new_size) },
            // Crossing the threshold: a new block, the bytes both hold, the old one freed.
            _ => {
                // SAFETY: `new` is a valid non-zero layout (above).
                let to = unsafe { self.alloc(new) };
                if !to.is_null() {
                    // SAFETY: both blocks hold at least the smaller size and do not overlap.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, to, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                to
            }
        }
    }
}

/// A private anonymous mapping of `size` bytes, or null.
fn map(size: usize) -> *mut u8 {
    // SAFETY: a new anonymous mapping touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

/// Grows or shrinks our mapping, moving its pages (not its bytes) when it cannot stay; null
/// (the old mapping intact) on failure.
///
/// # Safety
/// `ptr` must be a mapping of `old` bytes made by [`map`] or `remap`.
unsafe fn remap(ptr: *mut u8, old: usize, new: usize) -> *mut u8 {
    // SAFETY: the caller's guarantee; MREMAP_MAYMOVE lets the kernel pick the new address.
    let p = unsafe { libc::mremap(ptr.cast(), old, new, libc::MREMAP_MAYMOVE) };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cross_the_threshold_both_ways_with_their_bytes() {
        let a = Allocator;
        let small = Layout::from_size_align(1000, 8).unwrap();
        // SAFETY: valid layouts; each block is used within its size and freed once, with
        // the layout it has at that moment.
        unsafe {
            let p = a.alloc(small);
            assert!(!p.is_null());
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            let big = a.realloc(p, small, 3 * HUGE);
            assert!(!big.is_null() && (big as usize).is_multiple_of(PAGE));
            *big.add(3 * HUGE - 1) = 7;
            let bigger = a.realloc(big, Layout::from_size_align(3 * HUGE, 8).unwrap(), 9 * HUGE);
            assert!(!bigger.is_null());
            assert_eq!(*bigger.add(3 * HUGE - 1), 7);
            let back = a.realloc(bigger, Layout::from_size_align(9 * HUGE, 8).unwrap(), 500);
            for i in 0..500 {
                assert_eq!(*back.add(i), (i % 251) as u8, "byte {i} kept");
            }
            a.dealloc(back, Layout::from_size_align(500, 8).unwrap());
            let z = a.alloc_zeroed(Layout::from_size_align(2 * HUGE, 64).unwrap());
            assert!((0..2 * HUGE).step_by(4096).all(|i| *z.add(i) == 0));
            a.dealloc(z, Layout::from_size_align(2 * HUGE, 64).unwrap());
        }
    }
}
