//! The filter's allocator: the inputs the host lowers into a call bumped
//! through one static arena, which starts over whenever the last of them is
//! freed; everything the filter's own code allocates goes to the standard
//! allocator (wasi-libc's dlmalloc).
//!
//! Before each call the host lowers the call's strings and lists into the
//! guest, each through `cabi_realloc`, and the filter drops them by the
//! time it returns. With dlmalloc those mallocs and frees were a large part
//! of what the shipped filters ran (bench/README.md § "The SDK's call
//! arena"). Here each is a pointer bumped through [`ARENA_BYTES`] and a
//! counter decremented; when the count of live arena allocations falls to
//! zero, the arena is empty and starts over.
//!
//! The filter's code runs [`outside`](CallArena::outside) the arena (the
//! SDK's `export!` wraps each export in it): its working copies, its
//! answer, the config it parses on the first call, any state it keeps, and
//! the results of the WASI calls wasi-libc makes for it. Those last are
//! lowered through the same `cabi_realloc` and freed by wasi-libc's own
//! `free` (`getenv`'s environment, a file's bytes), so they must be
//! dlmalloc's: an arena block given to `free` corrupts its heap. What does
//! not fit in what is left of the arena, or is aligned more strictly than
//! it, goes to dlmalloc too. An input kept past its call (stored in a
//! static) only stops the arena starting over: it fills once and dlmalloc
//! serves the rest, as without the arena.
//!
//! The arena is a static, so it is part of the instance's memory from the
//! start: a fresh instance never grows its memory for it (what made the
//! trials of talc a loss, docs/writing-filters.md § Speed), and touches only
//! the pages its calls use.
//!
//! A component runs one thread (wasm32-wasip2 has none), so the state is
//! plain `Cell`s: [`CallArena`] is `Sync` only so that it can be the
//! `#[global_allocator]` static, which is built only for wasm32.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;

/// The arena's size: room for a request's lowered strings and the filter's
/// working copies several times over (a call of the shipped filters on the
/// bench's requests uses under 2 KiB).
pub const ARENA_BYTES: usize = 32 * 1024;

/// The strictest alignment the arena serves; a stricter one goes to the
/// standard allocator.
const ARENA_ALIGN: usize = 16;

/// The bytes an arena hands out, aligned to [`ARENA_ALIGN`].
#[repr(C, align(16))]
struct Bytes<const N: usize>(UnsafeCell<[MaybeUninit<u8>; N]>);

/// A bump allocator over `N` bytes of its own, reset when nothing in it is
/// live, with the standard allocator ([`System`]) behind it.
pub struct CallArena<const N: usize = ARENA_BYTES> {
    bytes: Bytes<N>,
    /// Offset of the first free byte.
    top: Cell<usize>,
    /// Allocations in the arena not yet freed.
    live: Cell<usize>,
    /// Depth of nested [`outside`](Self::outside) scopes: above zero,
    /// nothing is put in the arena.
    outside: Cell<u32>,
}

// SAFETY: a component runs one thread, and the global allocator is the only
// instance shared; the tests use an instance per test.
unsafe impl<const N: usize> Sync for CallArena<N> {}

impl<const N: usize> CallArena<N> {
    /// An empty arena.
    pub const fn new() -> Self {
        Self {
            bytes: Bytes(UnsafeCell::new([MaybeUninit::uninit(); N])),
            top: Cell::new(0),
            live: Cell::new(0),
            outside: Cell::new(0),
        }
    }

    /// Runs `code` with its allocations taken from the standard allocator:
    /// the filter's own code, whose allocations may outlive the call or be
    /// freed by wasi-libc.
    pub fn outside<R>(&self, code: impl FnOnce() -> R) -> R {
        self.outside.set(self.outside.get() + 1);
        let made = code();
        self.outside.set(self.outside.get() - 1);
        made
    }

    fn base(&self) -> *mut u8 {
        self.bytes.0.get().cast()
    }

    /// `ptr`'s offset in the arena, when the arena gave it out.
    fn offset_of(&self, ptr: *mut u8) -> Option<usize> {
        let offset = (ptr as usize).wrapping_sub(self.base() as usize);
        (offset < N).then_some(offset)
    }

    /// Room for `layout` at the top of the arena, or `None` when it goes to
    /// the standard allocator.
    fn bump(&self, layout: Layout) -> Option<*mut u8> {
        if self.outside.get() > 0 || layout.align() > ARENA_ALIGN {
            return None;
        }
        // An alignment is a power of two: rounding up is a mask, not the
        // division `next_multiple_of` would make.
        let start = (self.top.get() + layout.align() - 1) & !(layout.align() - 1);
        let end = start.checked_add(layout.size()).filter(|&end| end <= N)?;
        self.top.set(end);
        self.live.set(self.live.get() + 1);
        // SAFETY: start <= end <= N, inside the arena's bytes.
        Some(unsafe { self.base().add(start) })
    }

    /// Frees the arena allocation at `offset`, `size` bytes long.
    fn release(&self, offset: usize, size: usize) {
        let live = self.live.get() - 1;
        self.live.set(live);
        if live == 0 {
            self.top.set(0);
        } else if offset + size == self.top.get() {
            // The newest allocation: its bytes are reused at once, as a
            // stack's would be (a string built and dropped in a loop).
            self.top.set(offset);
        }
    }
}

impl<const N: usize> Default for CallArena<N> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every pointer handed out is either inside the arena, between `top`
// before and after the bump, aligned as asked and not handed out again until
// freed or the arena is empty; or the standard allocator's, given back to it.
unsafe impl<const N: usize> GlobalAlloc for CallArena<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            Some(ptr) => ptr,
            // SAFETY: the caller's layout, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            Some(ptr) => {
                // SAFETY: the bytes were just bumped for this layout; a reset
                // arena holds what earlier calls left there.
                unsafe { ptr.write_bytes(0, layout.size()) };
                ptr
            }
            // SAFETY: the caller's layout, passed on.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    // Out of line: inlined at every drop, it made the filters' exports half
    // as big again for no fewer instructions.
    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset_of(ptr) {
            Some(offset) => self.release(offset, layout.size()),
            // SAFETY: not the arena's, so the standard allocator's.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(offset) = self.offset_of(ptr) else {
            // SAFETY: not the arena's, so the standard allocator's.
            return unsafe { System.realloc(ptr, layout, new_size) };
        };
        // The newest allocation grows or shrinks in place while it fits (a
        // string or vector being built); any other shrinks where it is.
        if offset + layout.size() == self.top.get() && offset + new_size <= N {
            self.top.set(offset + new_size);
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: the caller guarantees new_size is a valid size for this
        // alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as alloc.
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks hold at least the smaller size, and a new
            // block never overlaps a live one.
            unsafe { ptr.copy_to_nonoverlapping(moved, layout.size().min(new_size)) };
            self.release(offset, layout.size());
        }
        moved
    }
}

/// The filter's allocator, in a component: the SDK's, unless the filter
/// turns off the crate's `call-arena` feature to bring its own.
#[cfg(all(target_arch = "wasm32", feature = "call-arena"))]
#[global_allocator]
static ALLOCATOR: CallArena = CallArena::new();

/// Runs `code` outside the call arena, on the standard allocator; the
/// SDK's `export!` runs each export's function so. Without the SDK's
/// allocator (a host build, or the `call-arena` feature off) it just runs
/// `code`.
#[doc(hidden)]
pub fn outside_arena<R>(code: impl FnOnce() -> R) -> R {
    #[cfg(all(target_arch = "wasm32", feature = "call-arena"))]
    return ALLOCATOR.outside(code);
    #[cfg(not(all(target_arch = "wasm32", feature = "call-arena")))]
    code()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).expect("a valid layout")
    }

    fn in_arena<const N: usize>(arena: &CallArena<N>, ptr: *mut u8) -> bool {
        arena.offset_of(ptr).is_some()
    }

    #[test]
    fn allocations_are_bumped_and_aligned_and_the_arena_starts_over_when_all_are_freed() {
        let arena = CallArena::<256>::new();
        unsafe {
            let a = arena.alloc(layout(3, 1));
            let b = arena.alloc(layout(8, 8));
            assert!(in_arena(&arena, a) && in_arena(&arena, b));
            assert_eq!(b as usize % 8, 0);
            assert!(b as usize >= a as usize + 3, "b does not overlap a");
            a.write_bytes(0xAA, 3);
            b.write_bytes(0xBB, 8);
            assert_eq!(*a.add(2), 0xAA);
            arena.dealloc(a, layout(3, 1));
            assert_ne!(arena.top.get(), 0, "b is still live");
            arena.dealloc(b, layout(8, 8));
            assert_eq!((arena.top.get(), arena.live.get()), (0, 0));
            assert_eq!(arena.alloc(layout(3, 1)), a, "the arena starts over");
        }
    }

    #[test]
    fn the_newest_allocation_frees_its_bytes_at_once() {
        let arena = CallArena::<256>::new();
        unsafe {
            let kept = arena.alloc(layout(10, 1));
            for _ in 0..100 {
                let scratch = arena.alloc(layout(64, 1));
                assert!(in_arena(&arena, scratch));
                arena.dealloc(scratch, layout(64, 1));
            }
            assert_eq!(arena.top.get(), 10);
            arena.dealloc(kept, layout(10, 1));
        }
    }

    #[test]
    fn what_does_not_fit_or_is_aligned_more_strictly_goes_to_the_standard_allocator() {
        let arena = CallArena::<64>::new();
        unsafe {
            let big = arena.alloc(layout(65, 1));
            let strict = arena.alloc(layout(8, 32));
            assert!(!in_arena(&arena, big) && !in_arena(&arena, strict));
            assert_eq!(strict as usize % 32, 0);
            let fits = arena.alloc(layout(60, 1));
            let over = arena.alloc(layout(8, 1));
            assert!(in_arena(&arena, fits) && !in_arena(&arena, over));
            for (ptr, layout) in [
                (big, layout(65, 1)),
                (strict, layout(8, 32)),
                (over, layout(8, 1)),
            ] {
                arena.dealloc(ptr, layout);
            }
            assert_eq!(
                arena.live.get(),
                1,
                "the standard allocator's frees leave the count"
            );
            arena.dealloc(fits, layout(60, 1));
            assert_eq!(arena.top.get(), 0);
        }
    }

    #[test]
    fn code_run_outside_keeps_its_allocations_out_of_the_arena() {
        let arena = CallArena::<256>::new();
        let kept = arena.outside(|| unsafe { arena.alloc(layout(16, 8)) });
        assert!(!in_arena(&arena, kept));
        assert_eq!((arena.top.get(), arena.live.get()), (0, 0));
        unsafe {
            let call = arena.alloc(layout(16, 8));
            assert!(in_arena(&arena, call));
            arena.dealloc(call, layout(16, 8));
            arena.dealloc(kept, layout(16, 8));
        }
    }

    #[test]
    fn an_allocation_kept_past_the_call_only_stops_the_arena_starting_over() {
        let arena = CallArena::<64>::new();
        unsafe {
            let leaked = arena.alloc(layout(8, 1));
            let mut outside = 0;
            for _ in 0..20 {
                let ptr = arena.alloc(layout(16, 1));
                ptr.write_bytes(1, 16);
                outside += usize::from(!in_arena(&arena, ptr));
                let other = arena.alloc(layout(1, 1));
                arena.dealloc(ptr, layout(16, 1));
                arena.dealloc(other, layout(1, 1));
            }
            assert!(
                outside > 0,
                "the arena filled and the standard allocator took over"
            );
            assert_eq!(arena.live.get(), 1);
            arena.dealloc(leaked, layout(8, 1));
            assert_eq!(arena.top.get(), 0);
        }
    }

    #[test]
    fn realloc_grows_the_newest_allocation_in_place_and_moves_any_other() {
        let arena = CallArena::<128>::new();
        unsafe {
            let first = arena.alloc(layout(4, 1));
            first.copy_from_nonoverlapping(b"abcd".as_ptr(), 4);
            let grown = arena.realloc(first, layout(4, 1), 40);
            assert_eq!(grown, first, "the newest allocation grows in place");
            let second = arena.alloc(layout(4, 1));
            let moved = arena.realloc(grown, layout(40, 1), 60);
            assert_ne!(moved, grown);
            assert_eq!(std::slice::from_raw_parts(moved, 4), b"abcd");
            assert_eq!(arena.live.get(), 2, "the old block was freed");
            let outgrown = arena.realloc(moved, layout(60, 1), 1000);
            assert!(
                !in_arena(&arena, outgrown),
                "too big for the arena: moved out"
            );
            assert_eq!(std::slice::from_raw_parts(outgrown, 4), b"abcd");
            arena.dealloc(outgrown, layout(1000, 1));
            arena.dealloc(second, layout(4, 1));
            assert_eq!((arena.top.get(), arena.live.get()), (0, 0));
        }
    }

    #[test]
    fn zeroed_allocations_are_zero_after_the_arena_starts_over() {
        let arena = CallArena::<64>::new();
        unsafe {
            let dirty = arena.alloc(layout(32, 1));
            dirty.write_bytes(0xFF, 32);
            arena.dealloc(dirty, layout(32, 1));
            let zeroed = arena.alloc_zeroed(layout(32, 1));
            assert_eq!(zeroed, dirty);
            assert!(
                std::slice::from_raw_parts(zeroed, 32)
                    .iter()
                    .all(|&b| b == 0)
            );
            arena.dealloc(zeroed, layout(32, 1));
        }
    }
}
