//! The size and suffix parser on arbitrary text: never a panic, and a parsed size
//! prints back (exactly, with a binary suffix) to text that parses to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zblk_core::units::{format_bytes_exact, parse_size};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(v) = parse_size(text) {
            let back = format_bytes_exact(v);
            assert_eq!(parse_size(&back).ok(), Some(v), "{text:?} -> {v} -> {back:?}");
        }
    }
});
