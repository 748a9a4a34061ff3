//! How a BIO ends: its callback, or the blocking caller waiting for it. Completions
//! are run outside every lock; a callback completed on a thread that is already
//! inside one (a chain of submissions refused inline) is queued and run when that
//! one returns, so that chains run as a loop instead of nesting on the stack.
//!
//! A caller that keeps many I/Os in flight (a server's queue, a benchmark) names
//! each by a token and hands all their ends to one [`Completion`]: an I/O then costs
//! no boxed callback (an allocation and a free per request), as a kernel driver's
//! request carries its tag rather than a closure.

use crate::io::IoDone;
use std::sync::{Arc, Condvar, Mutex};
use zblk_core::bio::Status;
use zblk_core::units::Sector;
use zblk_dev::buf::Buffer;

/// Where the ends of I/Os named by a token go
/// ([`Submitter::submit_to`](crate::Submitter::submit_to)): one object for all of
/// them, told which ended by its token.
pub trait Completion: Send + Sync {
    /// I/O `token` ended: its result and its buffer back. Called once per I/O, from
    /// any thread of the runtime or the submitting one, outside every lock of the
    /// runtime (as a callback of [`Submitter::submit`](crate::Submitter::submit)).
    fn complete(&self, token: u64, done: IoDone);
}

/// A caller's end of a BIO.
pub(crate) enum Callback {
    /// A boxed callback.
    Boxed(Box<dyn FnOnce(Result<Sector, Status>) + Send>),
    /// Token `token` to `sink`, with the buffer the I/O owned.
    To { sink: Arc<dyn Completion>, token: u64, buf: Option<Buffer> },
}

impl Callback {
    fn call(self, r: Result<Sector, Status>) {
        match self {
            Callback::Boxed(f) => f(r),
            Callback::To { sink, token, buf } => sink.complete(token, IoDone { result: r, buf }),
        }
    }
}

/// What ends a BIO: called once, outside every lock.
pub(crate) enum Done {
    /// A caller's callback: run by [`deliver`], never inside another callback.
    Call(Callback),
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
type Delivery = (Callback, Result<Sector, Status>);

thread_local! {
    /// Callbacks completed on this thread while one of its callbacks runs: they run
    /// when it returns, in order.
    static DEFERRED: std::cell::RefCell<std::collections::VecDeque<Delivery>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
    /// A callback runs on this thread.
    static DELIVERING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs a completion callback, or queues it when this thread is already inside one.
/// A callback that submits an I/O the engine refuses inline (or one submitted after
/// the runtime closed) gets that completion within its own submission: run there, a
/// chain of such I/Os nests one call per I/O until the stack overflows. Queued, the
/// outermost delivery runs the chain as a loop, in completion order.
pub(crate) fn deliver(f: Callback, r: Result<Sector, Status>) {
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
    f.call(r);
    while let Some((f, r)) = DEFERRED.with(|q| q.borrow_mut().pop_front()) {
        f.call(r);
    }
}

/// A blocking caller's wait for its BIO: the result, set once, and the condition
/// variable that says it is there.
#[derive(Default)]
pub(crate) struct Waiter {
    pub(crate) result: Mutex<Option<Result<Sector, Status>>>,
    pub(crate) cv: Condvar,
}
