//! Replays every committed fuzz input (fuzz/corpus/TARGET/*: seeds, minimized
//! corpora, inputs that once crashed) through the function its cargo-fuzz target
//! calls, on the stable toolchain: CI runs what the fuzzers found worth keeping.

use std::path::Path;

/// The entry function of each target under fuzz/fuzz_targets/.
fn entry(target: &str) -> Option<fn(&[u8])> {
    Some(match target {
        "size_parser" => zblk_core::fuzzing::size,
        "params" => zblk_core::fuzzing::params,
        "image_format" => zblk_dev::fuzzing::image_format,
        "dev_spec" => zblk_sim::fuzzing::dev_spec,
        "stack_spec" => zblk_sim::fuzzing::stack_spec,
        _ => return None,
    })
}

#[test]
fn every_corpus_file_replays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut targets: Vec<String> = std::fs::read_dir(root.join("fuzz_targets"))
        .expect("fuzz/fuzz_targets")
        .map(|e| e.expect("dir entry").path().file_stem().expect("name").to_string_lossy().into_owned())
        .collect();
    targets.sort();
    let mut total = 0;
    for t in &targets {
        let f = entry(t).unwrap_or_else(|| panic!("fuzz target {t} has no entry here: add it to entry()"));
        let dir = root.join("corpus").join(t);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (every target keeps its seeds there)", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no inputs", dir.display());
        for p in &files {
            let data = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            // A panic names the input, so that it can be run under the fuzz target.
            let r = std::panic::catch_unwind(|| f(&data));
            assert!(r.is_ok(), "{t}: {} panicked", p.display());
        }
        println!("{t}: {} inputs replayed", files.len());
        total += files.len();
    }
    zblk_dev::fuzzing::image_format_cleanup();
    println!("{total} inputs in all");
}
