//! The C calls' bad inputs: NULL pointers, an unknown policy, a bad target, a zero
//! length, an unaligned offset: a negative errno and words, never a crash.

use std::ffi::{CStr, CString};
use std::ptr::null_mut;
use zblk_capi::*;

const EINVAL: i32 = 22;

fn last() -> String {
    // SAFETY: a NUL-terminated string the library keeps until this thread's next
    // failing call.
    unsafe { CStr::from_ptr(zblk_last_error()) }.to_string_lossy().into_owned()
}

fn open(spec: &str, opts: Option<&ZblkOptions>) -> (i32, *mut ZblkHandle) {
    let spec = CString::new(spec).unwrap();
    let mut h = null_mut();
    // SAFETY: valid strings, options and out pointer.
    let r = unsafe { zblk_open(spec.as_ptr(), opts.map_or(std::ptr::null(), |o| o), &mut h) };
    (r, h)
}

#[test]
fn bad_inputs_are_negative_errnos_with_words() {
    let (r, h) = open("sim:nosuch", None);
    assert_eq!((r, h.is_null()), (-EINVAL, true));
    assert!(last().contains("unknown preset"), "{}", last());
    let policy = CString::new("nosuch").unwrap();
    let (r, _) = open("sim:nullb", Some(&ZblkOptions { policy: policy.as_ptr(), queue_depth: 0, read_only: 0 }));
    assert_eq!(r, -EINVAL);
    assert!(last().contains("no such issue policy"), "{}", last());
    let (r, _) = open("sim:nullb", Some(&ZblkOptions { policy: std::ptr::null(), queue_depth: 5000, read_only: 0 }));
    assert_eq!(r, -EINVAL);
    assert!(last().contains("queue depth 5000"), "{}", last());
    // SAFETY: NULL pointers, which every call refuses.
    unsafe {
        assert_eq!(zblk_open(std::ptr::null(), std::ptr::null(), &mut null_mut()), -EINVAL);
        assert_eq!(zblk_open(c"sim:nullb".as_ptr(), std::ptr::null(), null_mut()), -EINVAL);
        assert_eq!(zblk_flush(std::ptr::null()), -EINVAL);
        assert_eq!(zblk_close(null_mut()), 0);
    }

    let zblk = CString::new("zwp").unwrap();
    let (r, h) = open(
        "sim:nullb:zone_size=4,size=64",
        Some(&ZblkOptions { policy: zblk.as_ptr(), queue_depth: 4, read_only: 0 }),
    );
    assert_eq!(r, 0, "{}", last());
    let zone = 4u64 << 20;
    let mut landed = 0;
    let data = [1u8; 512];
    // SAFETY: an open handle, buffers of the lengths given, or NULL where refused.
    unsafe {
        assert_eq!(zblk_append(h, zone, std::ptr::null(), 512, &mut landed), -EINVAL);
        assert_eq!(zblk_append(h, zone, data.as_ptr().cast(), 0, &mut landed), -EINVAL);
        assert!(last().contains("length 0"), "{}", last());
        assert_eq!(zblk_write_at(h, zone + 1, data.as_ptr().cast(), 512), -EINVAL);
        assert!(last().contains("offset 4194305"), "{}", last());
        assert_eq!(zblk_append(h, zone, data.as_ptr().cast(), 512, &mut landed), 0);
        assert_eq!(landed, zone);
        let mut n = 1;
        assert_eq!(zblk_report_zones(h, zone, null_mut(), &mut n), -EINVAL);
        let mut z = std::mem::zeroed::<ZblkZone>();
        assert_eq!(zblk_report_zones(h, zone + 512, &mut z, &mut n), 0);
        assert_eq!((n, z.start, z.wp, z.zone_type, z.cond), (1, zone, zone + 512, 2, 2));
        let mut n = 100;
        let mut zones: Vec<ZblkZone> = (0..100).map(|_| std::mem::zeroed()).collect();
        assert_eq!(zblk_report_zones(h, 15 * zone, zones.as_mut_ptr(), &mut n), 0);
        assert_eq!(n, 1, "the last zone only");
        assert_eq!(zblk_close_zone(h, 2 * zone), -5, "an EMPTY zone: {}", last());
        assert!(last().contains("EMPTY"), "{}", last());
        assert_eq!(zblk_close(h), 0);
    }
}

#[test]
fn a_simulated_stack_opens_through_the_c_face() {
    // A linear stack of two zoned disks: the second disk's first zone is the stack's
    // zone 4 (4 zones of 4 MiB each), and zone append lands where it should there too.
    let (r, h) = open("stack:linear[nullb:zone_size=4,size=16; nullb:zone_size=4,size=16]", None);
    assert_eq!(r, 0, "{}", last());
    let zone4 = 4 * (4u64 << 20);
    let data = [7u8; 4096];
    let mut landed = 0;
    let mut back = [0u8; 4096];
    // SAFETY: an open handle and buffers of the lengths given.
    unsafe {
        assert_eq!(zblk_append(h, zone4, data.as_ptr().cast(), 4096, &mut landed), 0, "{}", last());
        assert_eq!(landed, zone4);
        assert_eq!(zblk_read_at(h, zone4, back.as_mut_ptr().cast(), 4096), 0, "{}", last());
        assert_eq!(back, data);
        assert_eq!(zblk_close(h), 0);
    }
}
