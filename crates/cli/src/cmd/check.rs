//! `zblk check IMG`: checks an image's metadata as e2fsck checks a file system.
//! Read-only by default (`-n`): one line per problem found, nothing changed. With
//! `-y` or `--repair`: opens for writing, accepting an older zone state when no newer
//! one can be proven, and says every change it made. Exit codes as e2fsck: 0 clean,
//! 1 problems corrected, 4 problems left uncorrected, 8 operational error.

use clap::Args;
use std::path::PathBuf;
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
const OPERATIONAL: u8 = 8;

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
            eprintln!("zblk: {e}");
            if code == UNCORRECTED {
                println!("{name}: problem left uncorrected: {}", e.kind);
            }
            return code;
        }
    };
    let found: Vec<String> = img.repairs().to_vec();
    let verb = if repair { "corrected" } else { "found" };
    for r in &found {
        println!("{name}: {verb}: {r}");
    }
    if repair {
        if let Err(e) = img.close() {
            eprintln!("zblk: {e}");
            return OPERATIONAL;
        }
    }
    match (found.is_empty(), repair) {
        (true, _) => {
            println!("{name}: clean");
            CLEAN
        }
        (false, true) => CORRECTED,
        (false, false) => UNCORRECTED,
    }
}
