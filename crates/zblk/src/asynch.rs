//! The handle's asynchronous calls: each submits at once and returns a future that
//! the runtime's completion path wakes, so any executor can poll it (tokio, smol, a
//! plain `block_on`); the library depends on none. A request owns its buffer while
//! in flight ([`Buffer`]: a `Vec<u8>` or an [`AlignedBuf`](crate::AlignedBuf)) and
//! hands it back when it completes.
//!
//! ```
//! use futures_lite::future::block_on;
//!
//! let h = zblk::Handle::open("sim:nullb:zone_size=4,size=64")?;
//! let zone = 2 * h.zone_size();
//! block_on(async {
//!     let (at, _buf) = h.append_async(zone, vec![1u8; 4096]).await?;
//!     let back = h.read_at_async(at, vec![0u8; 4096]).await?;
//!     assert_eq!(back.as_slice(), &[1u8; 4096][..]);
//!     h.flush_async().await
//! })?;
//! # Ok::<(), zblk::Error>(())
//! ```
//!
//! A future dropped before it completes does not cancel its request: the request
//! completes and its buffer is freed then. Requests from one task to one zone go
//! out in the order the task submitted them (its calls return their futures in
//! that order), so a task may submit several writes to a zone before awaiting them.

use crate::handle::{Handle, ZoneOp, sector};
use crate::sim::SimIo;
use crate::{Buffer, Error};
use zblk_core::bio::Op;
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_runtime::{Io, IoDone, IoFuture};

impl Handle {
    /// Writes `buf` at `offset`; the buffer comes back once the write completed.
    /// See [`Handle::write_at`].
    pub fn write_at_async(
        &self,
        offset: u64,
        buf: impl Into<Buffer>,
    ) -> impl Future<Output = Result<Buffer, Error>> + Send + 'static {
        let buf = buf.into();
        let submitted = self.submit_data(Op::Write, offset, buf);
        async move { Ok(submitted?.wait().await?.1) }
    }

    /// Appends `buf` to the zone starting at `zone`; the byte offset where it
    /// landed and the buffer come back once it completed. See [`Handle::append`].
    ///
    /// ```
    /// # let h = zblk::Handle::open("sim:nullb:zone_size=4,size=64")?;
    /// let zone = h.zone_size();
    /// let a = h.append_async(zone, vec![1u8; 512]);
    /// let b = h.append_async(zone, vec![2u8; 512]);
    /// let (at_a, _) = futures_lite::future::block_on(a)?;
    /// let (at_b, _) = futures_lite::future::block_on(b)?;
    /// assert_eq!((at_a, at_b), (zone, zone + 512), "in the order submitted");
    /// # Ok::<(), zblk::Error>(())
    /// ```
    pub fn append_async(
        &self,
        zone: u64,
        buf: impl Into<Buffer>,
    ) -> impl Future<Output = Result<(u64, Buffer), Error>> + Send + 'static {
        let buf = buf.into();
        let submitted = self.submit_data(Op::ZoneAppend, zone, buf);
        async move {
            let (at, buf) = submitted?.wait().await?;
            Ok((at.0 * SECTOR_SIZE, buf))
        }
    }

    /// Reads `buf`'s length at `offset` into `buf`, which comes back with the data.
    /// See [`Handle::read_at`].
    pub fn read_at_async(
        &self,
        offset: u64,
        buf: impl Into<Buffer>,
    ) -> impl Future<Output = Result<Buffer, Error>> + Send + 'static {
        let buf = buf.into();
        let submitted = self.submit_data(Op::Read, offset, buf);
        async move { Ok(submitted?.wait().await?.1) }
    }

    /// A zone management operation on the zone starting at `zone`. See
    /// [`Handle::zone_op`].
    pub fn zone_op_async(&self, op: ZoneOp, zone: u64) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let submitted = self.check_range(zone, self.block_size()).and_then(|()| match self.sim() {
            Some(_) => self.submit_sim(op.op(), zone, 0, None),
            None => self.submit(Io::zone(op.op(), sector(zone)), op.op(), zone, 0),
        });
        async move { submitted?.wait().await.map(drop) }
    }

    /// Makes every completed write durable. See [`Handle::flush`].
    pub fn flush_async(&self) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let submitted = match self.sim() {
            Some(_) => self.submit_sim(Op::Flush, 0, 0, None),
            None => self.submit(Io::flush(), Op::Flush, 0, 0),
        };
        async move { submitted?.wait().await.map(drop) }
    }

    /// Checks a data request and submits it.
    fn submit_data(&self, op: Op, offset: u64, buf: Buffer) -> Result<Pending, Error> {
        let len = buf.as_slice().len();
        self.check_io(offset, len)?;
        if self.sim().is_some() {
            return self.submit_sim(op, offset, len, Some(buf));
        }
        let io = match op {
            Op::Write => Io::write(sector(offset), buf),
            Op::ZoneAppend => Io::append(sector(offset), buf),
            _ => Io::read(sector(offset), buf),
        };
        self.submit(io, op, offset, len)
    }

    /// Submits `io` (`op` of `len` bytes at `offset`) now: its place in its zone's
    /// plug is taken here, not when the future is first polled.
    fn submit(&self, io: Io, op: Op, offset: u64, len: usize) -> Result<Pending, Error> {
        let rt = self.rt()?;
        let fut = Fut::Rt(rt.get().submit_async(io));
        Ok(Pending { fut, handle: self.clone(), op, offset, len })
    }

    /// Submits `op` at `offset` to the simulation the handle is on.
    fn submit_sim(&self, op: Op, offset: u64, len: usize, buf: Option<Buffer>) -> Result<Pending, Error> {
        let s = self.sim().expect("a simulated handle");
        let fut = s.submit(op, sector(offset), buf).map_err(|e| self.sim_failed(e, op, offset, len))?;
        Ok(Pending { fut: Fut::Sim(fut), handle: self.clone(), op, offset, len })
    }
}

/// A submitted request's future: the runtime's, or a simulation's.
enum Fut {
    Rt(IoFuture),
    Sim(SimIo),
}

/// A submitted request: its future, and what its error would say.
struct Pending {
    fut: Fut,
    handle: Handle,
    op: Op,
    offset: u64,
    len: usize,
}

impl Pending {
    /// Its end: where it landed and its buffer back, or its error.
    async fn wait(self) -> Result<(Sector, Buffer), Error> {
        let Pending { fut, handle, op, offset, len } = self;
        let fut = match fut {
            Fut::Rt(fut) => fut,
            Fut::Sim(fut) => {
                let (at, buf) = fut.await.map_err(|e| handle.sim_failed(e, op, offset, len))?;
                return Ok((at, buf.unwrap_or_else(|| Buffer::from(Vec::new()))));
            }
        };
        let IoDone { result, buf } = fut.await;
        match result {
            Ok(at) => Ok((at, buf.unwrap_or_else(|| Buffer::from(Vec::new())))),
            Err(st) => {
                // (A handle closed since has no device to ask for the cause: the
                // rule says it.)
                let rt = handle.rt().ok();
                Err(handle.failed(rt.as_ref().map(|r| r.get()), op, offset, len, st))
            }
        }
    }
}
