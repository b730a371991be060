//! Links a real selection into a bare-metal binary without an allocator.

#![no_std]
#![no_main]

use core::panic::PanicInfo;

use libroute_core::{DefaultKnobs, Load, Request, Row, Selector, WorkerKey};

#[panic_handler]
fn panic(_: &PanicInfo<'_>) -> ! {
    loop {}
}

static mut SELECTOR: Selector<16> = Selector::new();

/// The entry point: one seeded selection over four workers, so the whole pipeline is linked.
#[unsafe(no_mangle)]
pub extern "C" fn _start() -> ! {
    let policy = DefaultKnobs { seed: Some(42), temperature: 0.5, ..DefaultKnobs::default() }.build();
    let rows = [1u64, 2, 3, 4].map(|id| {
        Row::new(WorkerKey::new(id, 0)).with_load(Load { active_decode_blocks: id, ..Load::default() })
    });
    // SAFETY: single-threaded bare-metal entry; nothing else touches SELECTOR.
    let selector = unsafe { &mut *core::ptr::addr_of_mut!(SELECTOR) };
    if let Ok(policy) = policy {
        let _ = core::hint::black_box(policy.select(selector, &Request::new(64, 16), &rows));
    }
    loop {}
}
