//! The conformance suite against the memory store.

use crate::conformance;

use std::time::Duration;

use conformance::Harness;
use tollgate::{Clock, ManualClock, MemoryStore, Nanos};

struct Memory {
    clock: ManualClock,
    store: MemoryStore<ManualClock>,
}

impl Memory {
    fn new() -> Memory {
        let clock = ManualClock::new(Nanos::new(1_700_000_000_000_000_000));
        let store = MemoryStore::builder().clock(clock.clone()).build();
        Memory { clock, store }
    }
}

impl Harness for Memory {
    type S = MemoryStore<ManualClock>;

    fn store(&self) -> &Self::S {
        &self.store
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn now(&self) -> Nanos {
        self.clock.now()
    }
}

conformance_tests!(Memory::new());
