//! Every decoder of the image format on arbitrary bytes: superblock, durable table,
//! live header and entries. None may panic; a superblock that decodes must give a
//! layout within the format's limits, and a table that reads as valid must encode
//! back to bytes that read the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zblk_dev::file::format::{LiveHeader, Superblock, Table, TableRead, decode_live_entries};

fuzz_target!(|data: &[u8]| {
    if let Ok((sb, geo)) = Superblock::decode(data) {
        assert_eq!(sb.layout.table_offset[0], 8192);
        assert!(geo.nr_zones() <= zblk_dev::file::format::MAX_ZONES);
    }
    let nr = u32::from(data.first().copied().unwrap_or(0));
    if let TableRead::Valid(t) = Table::read(data, nr) {
        let again = Table::read(&t.encode(data.len() as u64 / 512 * 512), nr);
        assert_eq!(again, TableRead::Valid(t));
    }
    if data.len() >= 64 {
        let _ = LiveHeader::decode(data);
        let _ = decode_live_entries(data, nr);
    }
});
