//! Which control flags the running ublk driver takes beside `UBLK_F_ZONED`: its
//! advertised features, then a device added (and deleted at once) with each
//! combination of a zoned device and a data path, the driver's answer printed
//! (docs/serve.md, "The driver's paths"). Needs root and `ublk_drv`; in the VM:
//!
//! ```text
//! cargo build --profile test-release -p zblk-serve --features ublk --example driver_paths
//! scripts/kernel-vm.sh --kernel 7.3 --ublk -- sh -c 'mount -t tmpfs tmpfs /run; target/test-release/examples/driver_paths'
//! ```
use libublk::ctrl::{UblkCtrl, UblkCtrlBuilder};
use libublk::{UblkFlags, sys};

fn main() {
    let feats = UblkCtrl::get_features().unwrap_or(0);
    println!("driver features {feats:#x}");
    let names = [
        ("ZERO_COPY", sys::UBLK_F_SUPPORT_ZERO_COPY as u64),
        ("USER_COPY", sys::UBLK_F_USER_COPY as u64),
        ("ZONED", sys::UBLK_F_ZONED as u64),
        ("AUTO_BUF_REG", sys::UBLK_F_AUTO_BUF_REG as u64),
        ("QUIESCE", sys::UBLK_F_QUIESCE as u64),
        ("PER_IO_DAEMON", sys::UBLK_F_PER_IO_DAEMON as u64),
        ("BATCH_IO", sys::UBLK_F_BATCH_IO as u64),
    ];
    for (n, f) in names {
        println!("  {n:<14} {f:#x} {}", if feats & f != 0 { "advertised" } else { "-" });
    }
    let z = (sys::UBLK_F_ZONED) as u64;
    let uc = sys::UBLK_F_USER_COPY as u64;
    let zc = sys::UBLK_F_SUPPORT_ZERO_COPY as u64;
    let combos: [(&str, u64); 10] = [
        ("ZONED|USER_COPY", z | uc),
        ("ZONED", z),
        ("ZONED|AUTO_BUF_REG", z | sys::UBLK_F_AUTO_BUF_REG as u64),
        ("ZONED|ZERO_COPY", z | sys::UBLK_F_SUPPORT_ZERO_COPY as u64),
        ("ZONED|ZERO_COPY|AUTO_BUF_REG", z | (sys::UBLK_F_SUPPORT_ZERO_COPY | sys::UBLK_F_AUTO_BUF_REG) as u64),
        ("ZONED|USER_COPY|AUTO_BUF_REG", z | uc | sys::UBLK_F_AUTO_BUF_REG as u64),
        ("ZONED|USER_COPY|BATCH_IO", z | uc | sys::UBLK_F_BATCH_IO as u64),
        ("ZONED|USER_COPY|PER_IO_DAEMON", z | uc | sys::UBLK_F_PER_IO_DAEMON as u64),
        // Zero copy for the data with user copy beside it for the zone reports.
        ("ZONED|USER_COPY|ZERO_COPY", z | uc | zc),
        ("ZONED|USER_COPY|ZERO_COPY|AUTO_BUF_REG", z | uc | zc | sys::UBLK_F_AUTO_BUF_REG as u64),
    ];
    for (n, flags) in combos {
        let r = UblkCtrlBuilder::default()
            .name("probe")
            .nr_queues(1)
            .depth(8)
            .ctrl_flags(flags)
            .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV)
            .build();
        match r {
            Ok(c) => {
                let got = c.dev_info().flags;
                println!("{n:<34} added (flags {got:#x})");
                let _ = c.del_dev();
            }
            Err(e) => println!("{n:<34} refused: {e:?}"),
        }
    }
    for (n, flags) in [
        ("BATCH_IO (not zoned)", sys::UBLK_F_BATCH_IO as u64),
        ("AUTO_BUF_REG|ZERO_COPY", (sys::UBLK_F_SUPPORT_ZERO_COPY | sys::UBLK_F_AUTO_BUF_REG) as u64),
    ] {
        match UblkCtrlBuilder::default()
            .name("probe")
            .nr_queues(1)
            .depth(8)
            .ctrl_flags(flags)
            .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV)
            .build()
        {
            Ok(c) => {
                println!("{n:<34} added (flags {:#x})", c.dev_info().flags);
                let _ = c.del_dev();
            }
            Err(e) => println!("{n:<34} refused: {e:?}"),
        }
    }
}
