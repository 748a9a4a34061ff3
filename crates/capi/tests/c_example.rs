//! examples/append.c compiled against include/zblk.h and libzblk_capi.so, and run on
//! a simulated device and on an image: records appended, read back, a refused write
//! told with its errno and rule.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The shared library cargo built beside this test (`deps/`, or the profile's
/// directory above it).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .into_iter()
        .find(|d| d.join("libzblk_capi.so").exists())
        .expect("libzblk_capi.so built with the tests")
        .to_path_buf()
}

fn compile(out: &Path) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = library_dir();
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(out)
        .arg(dir.join("examples/append.c"))
        .arg(format!("-I{}", dir.join("include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg("-lzblk_capi")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .expect("a C compiler (cc)");
    assert!(status.success(), "the C example compiles");
}

fn run(exe: &Path, target: &str) -> String {
    let out = Command::new(exe).arg(target).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{target}: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn the_c_example_appends_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("append");
    compile(&exe);

    let text = run(&exe, "sim:nullb:zone_size=4,size=64");
    let zone = 4u64 << 20;
    for i in 0..8 {
        assert!(text.contains(&format!("record {i} at byte {}\n", zone + i * 4096)), "{text}");
    }
    assert!(text.contains(&format!("zone at {zone}: wp {}, cond 2\n", zone + 8 * 4096)), "{text}");
    assert!(
        text.contains("write at the zone's start: -5 (-EIO): EIO: write at sector 8192 is not at zone 1's write pointer (sector 8256)"),
        "{text}"
    );

    let img = dir.path().join("img.zbd");
    let zblk_image = zblk_dev::file::CreateOptions {
        geometry: zblk_core::geometry::GeometryParams {
            capacity_bytes: 8 << 20,
            zone_size_bytes: 1 << 20,
            ..Default::default()
        },
        rotational: false,
        force: false,
        preallocate: false,
    };
    zblk_dev::file::FileImage::create(&img, &zblk_image).unwrap();
    let text = run(&exe, img.to_str().unwrap());
    assert!(text.contains("record 7 at byte 1077248\n"), "{text}");
}
