//! `zblk check IMG`: checks an image's metadata as e2fsck checks a file system.
//! Read-only by default (`-n`): one line per problem found, nothing changed. With
//! `-y` or `--repair`: opens for writing, accepting an older zone state when no newer
//! one can be proven, and says every change it made. Exit codes as e2fsck: 0 clean,
//! 1 problems corrected, 4 problems left uncorrected, 8 operational error (also added
//! to the others when the report cannot be written: `check -y >/dev/full` after a
//! repair exits 9, and says on standard error what it corrected).
//!
//! Beyond the metadata (what an open checks), the data region: the file holds
//! nothing past the image's end (bytes there are no image's: a repair cuts them
//! off), and every zone's written range (a conventional zone whole, a sequential
//! zone up to its write pointer) reads back without an error. What lies past a
//! write pointer is never returned (reads there give zeroes, whatever the file
//! holds), so it is not checked.

use crate::out::{self, errln, outln};
use clap::Args;
use std::path::PathBuf;
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_core::zone::{ZoneCond, ZoneType};
use zblk_dev::Device;
use zblk_dev::file::{FileImage, ImageErrorKind, ImageOptions};

/// Arguments of `zblk check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The image.
    pub image: PathBuf,
    /// Waiting for an image another process holds.
    #[command(flatten)]
    pub lock: crate::image::WaitArg,
    /// Check only, change nothing (the default).
    #[arg(short = 'n', conflicts_with_all = ["yes", "repair"])]
    pub no: bool,
    /// Repair every problem found, without asking (as e2fsck -y).
    #[arg(short = 'y')]
    pub yes: bool,
    /// Repair every problem found (same as -y).
    #[arg(long)]
    pub repair: bool,
}

/// e2fsck's exit codes.
const CLEAN: u8 = 0;
const CORRECTED: u8 = 1;
const UNCORRECTED: u8 = 4;
const OPERATIONAL: u8 = out::OPERATIONAL;

/// Runs the check; returns the exit code.
pub fn run(a: &CheckArgs) -> u8 {
    let name = a.image.display().to_string();
    let repair = a.yes || a.repair;
    let opts =
        ImageOptions { read_only: !repair, accept_rollback: repair, lock_wait: a.lock.wait, ..ImageOptions::default() };
    let img = match FileImage::open(&a.image, &opts) {
        Ok(img) => img,
        Err(e) => {
            // Damage that no copy can make up for is a problem left; a file that is
            // not there, not an image, or in use is an operational error.
            let code = match e.kind {
                ImageErrorKind::Corrupt(_) | ImageErrorKind::Truncated { .. } | ImageErrorKind::MayLoseData(_) => {
                    UNCORRECTED
                }
                _ => OPERATIONAL,
            };
            errln!("zblk: {e}");
            if code == UNCORRECTED {
                outln!("{name}: problem left uncorrected: {}", e.kind);
            }
            return code;
        }
    };
    let mut found: Vec<String> = img.repairs().to_vec();
    let verb = if repair { "corrected" } else { "found" };
    for r in &found {
        outln!("{name}: {verb}: {r}");
        if repair {
            out::done(format!("{name}: corrected: {r}"));
        }
    }
    // The data region. Unreadable data is left as it is (no copy makes up for it).
    let mut left = 0;
    // The file the image was opened on, through its descriptor: the path may name
    // another file by now.
    match img.file_len() {
        Ok(len) if len > img.file_bytes() => {
            let extra = len - img.file_bytes();
            let what = format!("the file has {extra} bytes past the image's end (byte {})", img.file_bytes());
            if repair {
                if let Err(e) = img.cut_past_end() {
                    errln!("zblk: {e}");
                    return OPERATIONAL;
                }
                outln!("{name}: corrected: {what}: cut off");
                out::done(format!("{name}: corrected: {what}: cut off"));
            } else {
                outln!("{name}: found: {what}");
            }
            found.push(what);
        }
        Ok(_) => {}
        Err(e) => {
            errln!("zblk: {e}");
            return OPERATIONAL;
        }
    }
    for bad in unreadable(&img) {
        outln!("{name}: found: {bad} (left as it is)");
        left += 1;
    }
    if repair {
        if let Err(e) = img.close() {
            errln!("zblk: {e}");
            return OPERATIONAL;
        }
    }
    match (found.is_empty() && left == 0, repair) {
        (true, _) => {
            outln!("{name}: clean");
            CLEAN
        }
        _ if left > 0 => UNCORRECTED,
        (false, true) => CORRECTED,
        (false, false) => UNCORRECTED,
    }
}

/// Reads every zone's written range; one line per zone that does not read back.
fn unreadable(img: &FileImage) -> Vec<String> {
    const CHUNK: u64 = 4 << 20;
    let geo = img.geo();
    let ranges: Vec<(u32, Sector, u64)> = if geo.is_zoned() {
        img.zones()
            .iter()
            .enumerate()
            // An OFFLINE zone has nothing to read, by its condition.
            .filter(|(_, i)| i.cond != ZoneCond::Offline)
            .map(|(z, i)| {
                let n = if i.ztype == ZoneType::Conventional { i.len } else { i.wp.since(i.start).min(i.capacity) };
                (z as u32, i.start, n)
            })
            .collect()
    } else {
        vec![(0, Sector::ZERO, geo.nr_sectors())]
    };
    let mut buf = vec![0u8; CHUNK as usize];
    let mut bad = Vec::new();
    for (z, start, n) in ranges {
        let mut done = 0;
        while done < n {
            let k = (n - done).min(CHUNK / SECTOR_SIZE);
            if let Err(st) = img.read_direct(start + done, &mut buf[..(k * SECTOR_SIZE) as usize]) {
                let why = img.last_error().unwrap_or_else(|| format!("{}: {st}", st.errno_name()));
                bad.push(format!(
                    "zone {z}: data unreadable at sectors {}..{}: {why}",
                    (start + done).0,
                    (start + done).0 + k
                ));
                break;
            }
            done += k;
        }
    }
    bad
}
