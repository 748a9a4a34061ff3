//! The calling thread's own ring: an event loop that owns an io_uring (a ublk queue's,
//! whose ring also carries the kernel's commands) can take the runtime's data
//! transfers for the BIOs it submits onto that ring, and give their completions back,
//! so that a request is started, moved and completed by one thread without a hand-off
//! to the runtime's completion thread ([`Submitter::on_local_ring`]).
//!
//! Requests the engine issues while the thread is inside
//! [`Submitter::on_local_ring`] (its own, or others' that its completions unplug) go
//! to the thread's ring; those issued elsewhere (a worker finishing a flush) go to the
//! runtime's ring as before. The ring only carries reads and writes of the device's
//! data descriptors: every device-side check and all bookkeeping stay the runtime's.

use crate::io::Submitter;
use crate::shared::Shared;
use crate::uring::Inflight;
use std::cell::RefCell;
use std::sync::Weak;

/// Transfers taken by the thread inside [`Submitter::on_local_ring`], for the runtime
/// at `owner`.
struct Sink {
    owner: *const Shared,
    taken: Vec<Inflight>,
}

thread_local! {
    static LOCAL: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

/// What became of a transfer offered to the calling thread's ring.
pub(super) enum Taken {
    /// Queued for the thread's ring.
    Queued,
    /// Carried out on the spot (a file in memory): the completion's result.
    Done(Inflight, i32),
    /// Not inside [`Submitter::on_local_ring`] for this runtime: the transfer back.
    No(Inflight),
}

/// Takes `r` for the calling thread's ring when it is inside
/// [`Submitter::on_local_ring`] for the runtime `sh`; gives it back otherwise. A
/// transfer of a file in memory is done there and then instead: the thread would
/// otherwise wait for io_uring's worker to do the same copy; it copies from or into
/// the file's mapping ([`crate::mapped`]), without a system call.
pub(super) fn take(sh: &Shared, r: Inflight) -> Taken {
    LOCAL.with(|l| match &mut *l.borrow_mut() {
        Some(sink) if std::ptr::eq(sink.owner, sh) && sh.memory_file => {
            let res = on_the_spot(sh, &r);
            Taken::Done(r, res)
        }
        Some(sink) if std::ptr::eq(sink.owner, sh) => {
            sink.taken.push(r);
            Taken::Queued
        }
        _ => Taken::No(r),
    })
}

/// Carries out `r` on the calling thread, for a file in memory: a transfer that lies
/// within the file's mapping copies from or into it (a write only if the mapping is
/// writable); anything else is one `pread`/`pwrite`. Returns what a ring's completion
/// would (bytes moved, or a negative errno).
fn on_the_spot(sh: &Shared, r: &Inflight) -> i32 {
    if let Some(m) = &sh.mapped {
        // The request's part of its BIO's buffer is lent until the request completes
        // and moved by this request alone, on this thread (as for the ring's entry).
        let done = if r.t.write {
            // SAFETY: lent as above; a write only reads it (a `&mut` of a write's
            // buffer, which the caller lent as `&[u8]`, would be undefined behaviour).
            let data = unsafe { r.buf.bytes() };
            m.write(r.t.offset, data, sh.device.data_fds().holes_punched)
        } else {
            // SAFETY: lent as above, writable (a read's).
            let data = unsafe { r.buf.bytes_mut() };
            m.read(r.t.offset, data)
        };
        if done {
            return i32::try_from(r.buf.len).expect("a request moves less than 2 GiB");
        }
    }
    r.run_sync()
}

/// A data transfer of the runtime that the calling thread carries on its own ring:
/// queue [`LocalIo::entry`] with a user data of the thread's choosing, and give the
/// completion's result back with [`LocalIo::complete`].
///
/// The transfer's buffer belongs to its BIO, which cannot complete before this does.
/// Dropped without being completed, it completes with ECANCELED: drop one only when
/// its entry was never submitted or its completion has arrived.
#[must_use = "a transfer that is never completed keeps its BIO in flight"]
pub struct LocalIo {
    inflight: Option<Inflight>,
    shared: Weak<Shared>,
}

impl std::fmt::Debug for LocalIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inflight {
            Some(r) => write!(f, "LocalIo({:?} at byte {})", r.req.op, r.t.offset),
            None => f.write_str("LocalIo(done)"),
        }
    }
}

impl LocalIo {
    /// The read or write to queue on the thread's ring (set its user data). The entry
    /// points into the BIO's buffer, valid until the transfer is completed.
    pub fn entry(&self) -> io_uring::squeue::Entry {
        // (Not with the runtime's registered region: that is registered with the
        // runtime's ring, not this one.)
        self.inflight.as_ref().expect("a pending transfer").entry(None).0
    }

    /// Gives back the result of the entry (the completion's `res`: bytes moved, or a
    /// negative errno): the device records it and the engine completes the request.
    /// Call it inside [`Submitter::on_local_ring`] so that what it unplugs goes to the
    /// same ring.
    pub fn complete(mut self, res: i32) {
        self.finish(res);
    }

    fn finish(&mut self, res: i32) {
        let Some(r) = self.inflight.take() else { return };
        // With the runtime gone, nothing waits for the BIO any more.
        if let Some(sh) = self.shared.upgrade() {
            let result = sh.finish_transfer(&r, res);
            sh.complete_one(r.req.id, result);
        }
    }
}

impl Drop for LocalIo {
    fn drop(&mut self) {
        self.finish(-rustix::io::Errno::CANCELED.raw_os_error());
    }
}

impl Submitter {
    /// Runs `f`, in which this thread submits to the runtime, with this thread's own
    /// ring standing in for the runtime's: the data transfers the engine issues
    /// meanwhile on this thread are appended to `out` instead of going to the
    /// runtime's ring, for the caller to queue on its ring. Devices without data
    /// descriptors are unaffected. Nested calls for the same runtime share the
    /// outermost `out`.
    pub fn on_local_ring<R>(&self, out: &mut Vec<LocalIo>, f: impl FnOnce() -> R) -> R {
        let Some(sh) = self.shared.upgrade() else { return f() };
        let owner: *const Shared = &*sh;
        let outer = LOCAL.with(|l| {
            let mut l = l.borrow_mut();
            match &*l {
                Some(sink) if std::ptr::eq(sink.owner, owner) => false,
                _ => {
                    let prev = l.replace(Sink { owner, taken: Vec::new() });
                    assert!(prev.is_none(), "one runtime's local ring at a time per thread");
                    true
                }
            }
        });
        /// Puts the thread back outside the local ring even when `f` panics.
        struct Leave(bool);
        impl Drop for Leave {
            fn drop(&mut self) {
                if self.0 {
                    LOCAL.with(|l| l.borrow_mut().take());
                }
            }
        }
        let leave = Leave(outer);
        let r = f();
        if outer {
            let taken = LOCAL.with(|l| l.borrow_mut().take()).map(|s| s.taken).unwrap_or_default();
            out.extend(taken.into_iter().map(|r| LocalIo { inflight: Some(r), shared: self.shared.clone() }));
        }
        drop(leave);
        r
    }
}
