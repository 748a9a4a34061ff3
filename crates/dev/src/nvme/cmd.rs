//! NVMe commands as the kernel's passthrough takes them: `struct nvme_uring_cmd`
//! (io_uring's `IORING_OP_URING_CMD` with `NVME_URING_CMD_IO`) and `struct
//! nvme_passthru_cmd64` (the `NVME_IOCTL_*64_CMD` ioctls), which share their first 72
//! bytes; the commands zblk sends (Identify, Read, Write, Zone Append, Zone
//! Management Send and Receive); and NVMe status codes mapped to the errnos the
//! kernel's block layer gives for them (`nvme_error_status()`).

use rustix::io::Errno;
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, opcode};
use std::ffi::c_void;
use std::os::fd::AsFd;
use zblk_core::bio::Status;

/// `struct nvme_uring_cmd` (`include/uapi/linux/nvme_ioctl.h`); with `result` after
/// it, `struct nvme_passthru_cmd64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cmd {
    /// The command's opcode.
    pub opcode: u8,
    /// Flags (none used).
    pub flags: u8,
    rsvd1: u16,
    /// The namespace.
    pub nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    /// The data buffer's address.
    pub addr: u64,
    metadata_len: u32,
    /// The data buffer's length in bytes.
    pub data_len: u32,
    /// Command dwords 10 to 15.
    pub cdw: [u32; 6],
    timeout_ms: u32,
    rsvd2: u32,
}

const _: () = assert!(std::mem::size_of::<Cmd>() == 72);

/// `struct nvme_passthru_cmd64`: a [`Cmd`] and the completion's result dwords.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Passthru64 {
    cmd: Cmd,
    result: u64,
}

/// `NVME_URING_CMD_IO`: `_IOWR('N', 0x80, struct nvme_uring_cmd)`, the `cmd_op` of an
/// I/O command on io_uring.
pub const URING_CMD_IO: u32 = opcode::read_write::<Cmd>(b'N', 0x80) as u32;
const IOCTL_ID: Opcode = opcode::none(b'N', 0x40);
const IOCTL_ADMIN64: Opcode = opcode::read_write::<Passthru64>(b'N', 0x47);
const IOCTL_IO64: Opcode = opcode::read_write::<Passthru64>(b'N', 0x48);

/// NVMe opcodes zblk sends.
pub mod op {
    /// Admin: Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// I/O: Flush.
    pub const FLUSH: u8 = 0x00;
    /// I/O: Write.
    pub const WRITE: u8 = 0x01;
    /// I/O: Read.
    pub const READ: u8 = 0x02;
    /// ZNS: Zone Management Send.
    pub const ZONE_MGMT_SEND: u8 = 0x79;
    /// ZNS: Zone Management Receive.
    pub const ZONE_MGMT_RECV: u8 = 0x7a;
    /// ZNS: Zone Append.
    pub const ZONE_APPEND: u8 = 0x7d;
}

/// Zone Send Actions (Zone Management Send, CDW13 bits 7:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ZoneAction {
    /// Close.
    Close = 1,
    /// Finish.
    Finish = 2,
    /// Open (explicitly).
    Open = 3,
    /// Reset.
    Reset = 4,
}

impl Cmd {
    /// An I/O command on `nsid` with the starting LBA in CDW10-11.
    fn io(opcode: u8, nsid: u32, slba: u64) -> Cmd {
        let mut c = Cmd { opcode, nsid, ..Cmd::default() };
        c.cdw[0] = slba as u32;
        c.cdw[1] = (slba >> 32) as u32;
        c
    }

    /// Read, Write or Zone Append of `nlb` blocks (at least 1) from `slba` (for an
    /// append, the zone's start) with `len` bytes at `addr`.
    pub fn rw(opcode: u8, nsid: u32, slba: u64, nlb: u32, addr: u64, len: u32) -> Cmd {
        let mut c = Cmd::io(opcode, nsid, slba);
        // NLB is 0-based.
        c.cdw[2] = nlb.saturating_sub(1);
        c.addr = addr;
        c.data_len = len;
        c
    }

    /// Flush of namespace `nsid`.
    pub fn flush(nsid: u32) -> Cmd {
        Cmd { opcode: op::FLUSH, nsid, ..Cmd::default() }
    }

    /// Zone Management Send: `action` on the zone starting at `zslba`, or on every
    /// zone (Select All).
    pub fn zone_send(nsid: u32, zslba: u64, action: ZoneAction, all: bool) -> Cmd {
        let mut c = Cmd::io(op::ZONE_MGMT_SEND, nsid, zslba);
        c.cdw[3] = action as u32 | (u32::from(all) << 8);
        c
    }

    /// Zone Management Receive: the report of the zones from the one holding `slba`,
    /// all of them (Reporting Options 0), into `len` bytes at `addr`.
    pub fn zone_report(nsid: u32, slba: u64, addr: u64, len: u32) -> Cmd {
        let mut c = Cmd::io(op::ZONE_MGMT_RECV, nsid, slba);
        // NUMD: dwords, 0-based. CDW13: Report Zones (0), all states (0), partial
        // report (bit 16): the header counts the descriptors returned.
        c.cdw[2] = len / 4 - 1;
        c.cdw[3] = 1 << 16;
        c.addr = addr;
        c.data_len = len;
        c
    }

    /// Identify (admin): `cns` for `nsid` and command set `csi`, 4096 bytes into `addr`.
    pub fn identify(cns: u8, nsid: u32, csi: u8, addr: u64) -> Cmd {
        let mut c = Cmd { opcode: op::IDENTIFY, nsid, addr, data_len: 4096, ..Cmd::default() };
        c.cdw[0] = u32::from(cns);
        c.cdw[1] = u32::from(csi) << 24;
        c
    }

    /// The 80 bytes of an `IORING_OP_URING_CMD` entry's command area.
    pub fn to_sqe_cmd(&self) -> [u8; 80] {
        let mut out = [0u8; 80];
        // SAFETY: `Cmd` is plain old data of 72 bytes, no padding (checked above).
        let bytes: &[u8; 72] = unsafe { &*(self as *const Cmd).cast() };
        out[..72].copy_from_slice(bytes);
        out
    }
}

/// A passthrough ioctl: the command in, the result dwords out; the ioctl's return
/// value is the NVMe status (0 on success) or fails with an errno.
struct PassIoctl {
    code: Opcode,
    arg: Passthru64,
}

// SAFETY: the opcode's argument is the `Passthru64` we point at, which the kernel
// reads and writes back; nothing else is touched.
unsafe impl Ioctl for PassIoctl {
    type Output = (i32, u64);
    const IS_MUTATING: bool = true;
    fn opcode(&self) -> Opcode {
        self.code
    }
    fn as_ptr(&mut self) -> *mut c_void {
        (&mut self.arg as *mut Passthru64).cast()
    }
    unsafe fn output_from_ptr(out: IoctlOutput, ptr: *mut c_void) -> rustix::io::Result<(i32, u64)> {
        // SAFETY: `ptr` is `as_ptr`'s, still valid.
        let arg = unsafe { &*ptr.cast::<Passthru64>() };
        Ok((out, arg.result))
    }
}

/// Runs `cmd` synchronously with a passthrough ioctl (`admin`: an admin command);
/// returns the NVMe status (0: success) and the result dwords. The data buffer named
/// by `cmd` must be valid for the call.
///
/// # Safety
/// `cmd.addr` must point at `cmd.data_len` bytes the call may read or write.
pub unsafe fn submit_sync(fd: impl AsFd, cmd: &Cmd, admin: bool) -> Result<(u16, u64), Errno> {
    let code = if admin { IOCTL_ADMIN64 } else { IOCTL_IO64 };
    let io = PassIoctl { code, arg: Passthru64 { cmd: *cmd, result: 0 } };
    // SAFETY: the caller's guarantee for the buffer; the argument is ours.
    let (status, result) = unsafe { rustix::ioctl::ioctl(fd, io) }?;
    Ok((status as u16, result))
}

/// `NVME_IOCTL_ID`, whose return value is the namespace ID.
struct IdIoctl;

// SAFETY: NVME_IOCTL_ID takes no argument and touches no memory of ours.
unsafe impl Ioctl for IdIoctl {
    type Output = u32;
    const IS_MUTATING: bool = false;
    fn opcode(&self) -> Opcode {
        IOCTL_ID
    }
    fn as_ptr(&mut self) -> *mut c_void {
        std::ptr::null_mut()
    }
    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut c_void) -> rustix::io::Result<u32> {
        Ok(out as u32)
    }
}

/// The namespace ID of an NVMe device (`NVME_IOCTL_ID`); fails (`ENOTTY`, `EINVAL`)
/// on anything that is not an NVMe namespace.
pub fn namespace_id(fd: impl AsFd) -> Result<u32, Errno> {
    // SAFETY: no argument.
    unsafe { rustix::ioctl::ioctl(fd, IdIoctl) }
}

/// The status code type and code of an NVMe completion status (the DNR and More
/// bits dropped), as the kernel keeps it.
pub fn status_code(status: u16) -> u16 {
    status & 0x7ff
}

/// The name of an NVMe status (`nvme_get_error_status_str`'s), for messages.
pub fn status_name(status: u16) -> &'static str {
    match status_code(status) {
        0x000 => "Success",
        0x001 => "Invalid Command Opcode",
        0x002 => "Invalid Field in Command",
        0x004 => "Data Transfer Error",
        0x006 => "Internal Error",
        0x00b => "Invalid Namespace or Format",
        0x080 => "LBA Out of Range",
        0x081 => "Capacity Exceeded",
        0x082 => "Namespace Not Ready",
        0x1b8 => "Zone Boundary Error",
        0x1b9 => "Zone Is Full",
        0x1ba => "Zone Is Read Only",
        0x1bb => "Zone Is Offline",
        0x1bc => "Zone Invalid Write",
        0x1bd => "Too Many Active Zones",
        0x1be => "Too Many Open Zones",
        0x1bf => "Invalid Zone State Transition",
        0x280 => "Write Fault",
        0x281 => "Unrecovered Read Error",
        _ => "Unknown status",
    }
}

/// The status the kernel's block layer gives a request that ended with the NVMe
/// `status` (`nvme_error_status()`): the zone resource errors as their own statuses
/// (ETOOMANYREFS, EOVERFLOW), commands or fields the device does not take as
/// EOPNOTSUPP, the zone errors as zblk's zone statuses (EIO, as the kernel's
/// BLK_STS_IOERR), the rest EIO.
pub fn status_of(status: u16) -> Status {
    match status_code(status) {
        0x1bd => Status::ZoneActiveResource,
        0x1be => Status::ZoneOpenResource,
        0x001 | 0x002 | 0x00b => Status::NotSupported,
        0x1b9 => Status::ZoneFull,
        0x1ba => Status::ZoneReadOnly,
        0x1bb => Status::ZoneOffline,
        0x1bc => Status::Unaligned,
        _ => Status::IoErr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_opcodes() {
        assert_eq!(std::mem::size_of::<Passthru64>(), 80);
        assert_eq!(URING_CMD_IO, 0xc048_4e80);
        let c = Cmd::rw(op::ZONE_APPEND, 1, 0x1_0000_8000, 8, 0x1000, 4096);
        let b = c.to_sqe_cmd();
        assert_eq!(b[0], 0x7d);
        assert_eq!(&b[4..8], &1u32.to_le_bytes());
        assert_eq!(&b[40..44], &0x8000u32.to_le_bytes());
        assert_eq!(&b[44..48], &1u32.to_le_bytes());
        assert_eq!(&b[48..52], &7u32.to_le_bytes());
        assert_eq!(Cmd::zone_send(1, 0, ZoneAction::Reset, true).cdw[3], 0x104);
    }

    #[test]
    fn statuses_map_to_the_kernels_errnos() {
        // The DNR bit does not change the mapping.
        assert_eq!(status_of(0x41be).errno(), 109);
        assert_eq!(status_of(0x1bd).errno(), 75);
        assert_eq!(status_of(0x1bc).errno(), 5);
        assert_eq!(status_of(0x2).errno(), 95);
        assert_eq!(status_name(0x41be), "Too Many Open Zones");
    }
}
