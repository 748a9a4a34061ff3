//! How a BIO ends: its callback, or the blocking caller waiting for it. Completions
//! are run outside every lock; a callback completed on a thread that is already
//! inside one (a chain of submissions refused inline) is queued and run when that
//! one returns, so that chains run as a loop instead of nesting on the stack.

use std::sync::{Arc, Condvar, Mutex};
use zblk_core::bio::Status;
use zblk_core::units::Sector;

/// What ends a BIO: called once, outside every lock.
pub(crate) enum Done {
    /// A caller's callback: run by [`deliver`], never inside another callback.
    Call(Box<dyn FnOnce(Result<Sector, Status>) + Send>),
    /// A blocking caller waiting on its condition variable: woken at once (waking
    /// submits nothing, so it cannot nest).
    Wake(Arc<Waiter>),
}

impl Done {
    /// Ends the BIO with `r`.
    pub(crate) fn run(self, r: Result<Sector, Status>) {
        match self {
            Done::Call(f) => deliver(f, r),
            Done::Wake(w) => {
                // Recovered: the slot holds one result, assigned whole; nothing is
                // ever half done under the lock.
                *w.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                w.cv.notify_one();
            }
        }
    }
}

/// A completion callback and its result.
type Delivery = (Box<dyn FnOnce(Result<Sector, Status>) + Send>, Result<Sector, Status>);

thread_local! {
    /// Callbacks completed on this thread while one of its callbacks runs: they run
    /// when it returns, in order.
    static DEFERRED: std::cell::RefCell<std::collections::VecDeque<Delivery>> = Default::default();
    /// A callback runs on this thread.
    static DELIVERING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs a completion callback, or queues it when this thread is already inside one.
/// A callback that submits an I/O the engine refuses inline (or one submitted after
/// the runtime closed) gets that completion within its own submission: run there, a
/// chain of such I/Os nests one call per I/O until the stack overflows. Queued, the
/// outermost delivery runs the chain as a loop, in completion order.
pub(crate) fn deliver(f: Box<dyn FnOnce(Result<Sector, Status>) + Send>, r: Result<Sector, Status>) {
    if DELIVERING.with(|d| d.replace(true)) {
        DEFERRED.with(|q| q.borrow_mut().push_back((f, r)));
        return;
    }
    /// Leaves the thread out of delivery even when a callback panics.
    struct Out;
    impl Drop for Out {
        fn drop(&mut self) {
            DELIVERING.with(|d| d.set(false));
        }
    }
    let _out = Out;
    f(r);
    while let Some((f, r)) = DEFERRED.with(|q| q.borrow_mut().pop_front()) {
        f(r);
    }
}

/// A blocking caller's wait for its BIO: the result, set once, and the condition
/// variable that says it is there.
#[derive(Default)]
pub(crate) struct Waiter {
    pub(crate) result: Mutex<Option<Result<Sector, Status>>>,
    pub(crate) cv: Condvar,
}
