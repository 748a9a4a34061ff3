//! The format's own tests: each structure encoded and decoded back, and what a
//! decode refuses (torn and damaged tables, a superblock it does not read, entries,
//! headers and witnesses that do not check out, geometries past the format's limits).

use super::*;

/// An identity for the tests, and another image's.
const ID: ImageId = ImageId(*b"this image's id!");
const OTHER: ImageId = ImageId(*b"another image id");

fn geo() -> (GeometryParams, Geometry) {
    let p = GeometryParams {
        capacity_bytes: 40 << 20,
        zone_size_bytes: 8 << 20,
        zone_capacity_bytes: 6 << 20,
        nr_conv: 1,
        ..GeometryParams::default()
    };
    let g = Geometry::new(&p).unwrap();
    (p, g)
}

#[test]
fn layout_aligns_data_to_zones() {
    let (_, g) = geo();
    let l = Layout::of(&g);
    assert_eq!(l.table_offset[0], 8192);
    assert_eq!(l.data_offset % (8 << 20), 0);
    assert_eq!(l.file_bytes, l.data_offset + (40 << 20));
}

#[test]
fn superblock_round_trip_and_refusals() {
    let (p, g) = geo();
    let sb = Superblock { params: p, rotational: true, layout: Layout::of(&g), id: ID };
    let buf = sb.encode(77);
    let (back, g2, commit) = Superblock::decode(&buf).unwrap();
    assert_eq!(back, sb);
    assert_eq!(g2, g);
    assert_eq!(commit, 77);
    // An image of an earlier zblk (zeroes where the witness is) witnesses nothing.
    assert_eq!(Superblock::decode(&sb.encode(0)).unwrap().2, 0);
    let mut bad = buf.clone();
    bad[40] ^= 1;
    assert!(matches!(Superblock::decode(&bad), Err(SuperblockError::Corrupt(_))));
    let mut bad = buf.clone();
    bad[8] = 9;
    assert_eq!(Superblock::decode(&bad), Err(SuperblockError::Version(9)));
    // An image of version 1 (the CRC at the same place) is named as such.
    let mut v1 = buf.clone();
    v1[8] = 1;
    let crc = crc32fast::hash(&v1[..SB_CRC_AT]);
    v1[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(Superblock::decode(&v1), Err(SuperblockError::Version(1)));
    assert_eq!(Superblock::decode(b"hello world"), Err(SuperblockError::NotAnImage));
    // Format 2: no identity, whatever lies where format 3 keeps it; format 3
    // without one is damage.
    let v2 = Superblock { id: ImageId::NONE, ..sb.clone() }.encode(77);
    assert_eq!(v2[8], 2);
    assert_eq!(Superblock::decode(&v2).unwrap().0.id, ImageId::NONE);
    let mut v3 = v2.clone();
    v3[8] = 3;
    let crc = crc32fast::hash(&v3[..SB_CRC_AT]);
    v3[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(Superblock::decode(&v3), Err(SuperblockError::Corrupt(w)) if w.contains("identity")));
}

#[test]
fn another_images_parts_fail_their_checks_and_are_named() {
    let (_, g) = geo();
    let l = Layout::of(&g);
    let entries = vec![Entry { cond: ZoneCond::Empty, wp_offset: 0 }; g.nr_zones() as usize];
    let t = Table { seq: 9, entries };
    // A table of another image, or of an image of format 2, is another image's in
    // this one, every sector named; and this image's in an image of format 2 too.
    for (mine, theirs) in [(ID, OTHER), (ID, ImageId::NONE), (ImageId::NONE, ID)] {
        match Table::read(&t.encode(l.table_bytes, theirs), g.nr_zones(), mine) {
            TableRead::Damaged { seq: None, why, other_image: Some(w) } => {
                assert!(why.starts_with("every sector of the table belongs to another image"), "{why}");
                assert_eq!(w, "every sector");
            }
            other => panic!("{mine} reading {theirs}'s table: {other:?}"),
        }
    }
    // One sector of another image's: that sector named, the commit still known.
    let mut buf = t.encode(l.table_bytes, ID);
    buf[512..1024].copy_from_slice(&t.encode(l.table_bytes, OTHER)[512..1024]);
    match Table::read(&buf, g.nr_zones(), ID) {
        TableRead::Damaged { seq: Some(9), why, other_image: Some(w) } => {
            assert_eq!((why.as_str(), w.as_str()), ("sector 1 of the table belongs to another image", "sector 1"))
        }
        other => panic!("{other:?}"),
    }
    // A zeroed sector is damage, no image's.
    let mut buf = t.encode(l.table_bytes, ID);
    buf[512..1024].fill(0);
    assert!(matches!(Table::read(&buf, g.nr_zones(), ID), TableRead::Damaged { other_image: None, .. }));
    // Entries, the live header, digest and witness of another image fail here.
    let e = Entry { cond: ZoneCond::Closed, wp_offset: 64 };
    assert!(Entry::unpack(e.pack(ZoneNo(2), OTHER), ZoneNo(2), ID).is_err());
    let mut region = vec![0u8; 4096];
    LiveHeader::put_identity(&mut region, &[b'x'; 36], OTHER);
    LiveHeader::put_state(&mut region, LiveState::Clean, 9, OTHER);
    LiveHeader::put_digest(&mut region, 9, 4, OTHER);
    put_live_witness(&mut region, LiveWitness { completed: 9, announced: 9 }, OTHER);
    let h = LiveHeader::decode(&region, ID);
    assert_eq!((h.state, h.commit, h.other_image), (LiveState::Invalid, None, true));
    // Damage to this image's header is no other image's.
    let mut mine = region.clone();
    LiveHeader::put_identity(&mut mine, &[b'x'; 36], ID);
    LiveHeader::put_state(&mut mine, LiveState::Clean, 9, ID);
    LiveHeader::put_digest(&mut mine, 9, 4, ID);
    assert_eq!(LiveHeader::decode(&mine, ID).commit, Some(9));
    for at in 0..64 {
        let mut bad = mine.clone();
        bad[at] ^= 0x40;
        assert!(!LiveHeader::decode(&bad, ID).other_image, "byte {at}");
    }
    assert_eq!(LiveHeader::decode(&region, OTHER).commit, Some(9));
    assert_ne!(live_digest(&region, 9, 4, ID), live_digest(&region, 9, 4, OTHER));
    assert_eq!(live_witness(&region, ID), None);
    assert!(live_witness_of_another_image(&region, ID));
    assert!(!live_witness_of_another_image(&region, OTHER));
    assert!(!live_witness_of_another_image(&vec![0u8; 4096], ID), "zeroes are no image's");
    // A format 2 header in an image that has an identity is named as such.
    let mut v2 = vec![0u8; 64];
    LiveHeader::put_identity(&mut v2, &[b'x'; 36], ImageId::NONE);
    LiveHeader::put_state(&mut v2, LiveState::Clean, 9, ImageId::NONE);
    assert!(LiveHeader::decode(&v2, ID).other_image);
    // No identity mixes nothing: the check values of format 2 are unchanged.
    assert_eq!(e.pack(ZoneNo(2), ImageId::NONE) >> WP_BITS & 0xffff, {
        let mut h = crc32fast::Hasher::new();
        h.update(&2u32.to_le_bytes());
        h.update(&[ZoneCond::Closed.code()]);
        h.update(&64u64.to_le_bytes());
        u64::from(h.finalize() & 0xffff)
    });
    assert_eq!(ImageId::parse(&ID.to_string()), Some(ID));
    assert_eq!(ImageId::NONE.to_string(), "none");
}

#[test]
fn table_round_trip_torn_and_damaged() {
    let (_, g) = geo();
    let entries: Vec<Entry> = (0..g.nr_zones())
        .map(|z| Entry { cond: if z == 0 { ZoneCond::NotWp } else { ZoneCond::Closed }, wp_offset: u64::from(z) * 8 })
        .collect();
    let t = Table { seq: 7, entries };
    let l = Layout::of(&g);
    let buf = t.encode(l.table_bytes, ID);
    assert_eq!(Table::decode(&buf, g.nr_zones(), ID).unwrap(), t);
    // Damage: one byte of one sector; the other sectors still say commit 7.
    let mut bad = buf.clone();
    bad[520] ^= 0x10;
    match Table::read(&bad, g.nr_zones(), ID) {
        TableRead::Damaged { seq: Some(7), why, other_image: None } => assert!(why.contains("sector 1"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Torn: sector 1 from commit 5's table, the rest from commit 7's.
    let old = Table { seq: 5, ..t.clone() }.encode(l.table_bytes, ID);
    let mut torn = buf.clone();
    torn[512..1024].copy_from_slice(&old[512..1024]);
    assert_eq!(Table::read(&torn, g.nr_zones(), ID), TableRead::Torn { seqs: (5, 7) });
    assert!(Table::decode(&buf, 3, ID).is_err());
}

#[test]
fn a_commit_number_past_the_live_header_is_damage() {
    let (_, g) = geo();
    let l = Layout::of(&g);
    let entries = vec![Entry { cond: ZoneCond::Empty, wp_offset: 0 }; g.nr_zones() as usize];
    let mut buf = Table { seq: 3, entries }.encode(l.table_bytes, ID);
    // Sector 0's commit number raised past 46 bits, its CRC made to match.
    buf[TSECT_SEQ_AT + 6] = 0xef;
    let crc = tsect_crc(&buf[..TSECT], 0, ID);
    buf[TSECT_CRC_AT..TSECT_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    match Table::read(&buf, g.nr_zones(), ID) {
        TableRead::Damaged { seq: Some(3), why, .. } => assert!(why.contains("past the limit"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn entries_pack_into_one_word_with_a_check() {
    let e = Entry { cond: ZoneCond::ExpOpen, wp_offset: 12345 };
    assert_eq!(Entry::unpack(e.pack(ZoneNo(3), ID), ZoneNo(3), ID), Ok(e));
    // The same word read as another zone's, or with one bit flipped, fails.
    assert!(Entry::unpack(e.pack(ZoneNo(3), ID), ZoneNo(4), ID).is_err());
    for bit in 0..64 {
        assert!(Entry::unpack(e.pack(ZoneNo(3), ID) ^ (1 << bit), ZoneNo(3), ID).is_err(), "bit {bit}");
    }
    // A forged word (condition and write pointer, no check) fails.
    assert!(Entry::unpack((u64::from(ZoneCond::Closed.code()) << 56) | 0x100, ZoneNo(2), ID).is_err());
}

#[test]
fn live_header_word_is_checked() {
    let mut buf = vec![0u8; 64];
    LiveHeader::put_identity(&mut buf, &[b'x'; 36], ID);
    LiveHeader::put_state(&mut buf, LiveState::Live, 42, ID);
    let h = LiveHeader::decode(&buf, ID);
    assert_eq!((h.state, h.commit), (LiveState::Live, Some(42)));
    for at in [8, 12, 20, 53] {
        let mut bad = buf.clone();
        bad[at] ^= 4;
        assert_eq!(LiveHeader::decode(&bad, ID).state, LiveState::Invalid, "byte {at}");
    }
    // No digest until a clean close stores one; then it is the entries'.
    assert_eq!(h.digest, None);
    let mut region = vec![0u8; 64 + 8 * 4];
    region[..64].copy_from_slice(&buf);
    region[64 + 8] = 0x2a;
    LiveHeader::put_digest(&mut region, 42, 4, ID);
    assert_eq!(LiveHeader::decode(&region, ID).digest, Some(live_digest(&region, 42, 4, ID)));
    let mut other = region.clone();
    other[64 + 8] = 0x2b;
    assert_ne!(LiveHeader::decode(&other, ID).digest, Some(live_digest(&other, 42, 4, ID)), "entries changed");
    assert_ne!(live_digest(&region, 41, 4, ID), live_digest(&region, 42, 4, ID), "another commit");
}

#[test]
fn live_witness_is_checked() {
    let mut region = vec![0u8; 4096];
    assert_eq!(live_witness(&region, ID), None, "zeroes (an earlier zblk's image) witness nothing");
    let w = LiveWitness { completed: 6, announced: 7 };
    put_live_witness(&mut region, w, ID);
    assert_eq!(live_witness(&region, ID), Some(w));
    assert!(region[..4096 - LIVE_WITNESS_BYTES].iter().all(|&b| b == 0), "written past its bytes");
    for at in 4096 - LIVE_WITNESS_BYTES..4096 - 4 {
        let mut bad = region.clone();
        bad[at] ^= 1;
        assert_eq!(live_witness(&bad, ID), None, "byte {at}");
    }
}

#[test]
fn limits_are_named() {
    let p = GeometryParams {
        capacity_bytes: 1 << 40,
        zone_size_bytes: 64 << 10,
        zone_capacity_bytes: 64 << 10,
        ..GeometryParams::default()
    };
    if let Ok(g) = Geometry::new(&p) {
        let e = Layout::try_of(&g).unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }
}
