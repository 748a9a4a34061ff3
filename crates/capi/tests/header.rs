//! include/zblk.h is what cbindgen makes of src/lib.rs now (`ZBLK_BLESS=1` writes it).

use std::path::Path;

#[test]
fn the_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_src(dir.join("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen reads src/lib.rs")
        .write(&mut made);
    let path = dir.join("include/zblk.h");
    if std::env::var_os("ZBLK_BLESS").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == made,
        "include/zblk.h is not what cbindgen makes of src/lib.rs: ZBLK_BLESS=1 cargo test -p zblk-capi --test header"
    );
}
