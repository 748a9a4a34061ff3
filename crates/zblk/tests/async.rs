//! The asynchronous calls under two executors: tokio's multi-threaded runtime and a
//! plain `block_on`. The library depends on neither.

use std::collections::BTreeSet;
use zblk::{Error, Handle, ZoneOp};
use zblk_core::rule::Rule;

const TASKS: u8 = 8;
const PER_TASK: u8 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokio_tasks_append_to_one_zone_and_read_back() {
    let h = Handle::open("sim:nullb:zone_size=4,size=64").unwrap();
    let zone = 2 * h.zone_size();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let h = h.clone();
            tokio::spawn(async move {
                let mut landed = vec![];
                for n in 0..PER_TASK {
                    let (at, buf) = h.append_async(zone, vec![t * PER_TASK + n; 512]).await.unwrap();
                    landed.push((at, buf.as_slice()[0]));
                }
                landed
            })
        })
        .collect();
    let mut landed = vec![];
    for t in tasks {
        landed.extend(t.await.unwrap());
    }
    let places: BTreeSet<u64> = landed.iter().map(|(at, _)| *at).collect();
    assert_eq!(places.len(), usize::from(TASKS * PER_TASK));
    for (at, byte) in landed {
        let back = h.read_at_async(at, vec![0u8; 512]).await.unwrap();
        assert!(back.as_slice().iter().all(|&b| b == byte), "at {at}");
    }
    h.flush_async().await.unwrap();
    h.zone_op_async(ZoneOp::Reset, zone).await.unwrap();
    assert_eq!(h.zone(zone).unwrap().wp, zone);
}

#[test]
fn block_on_submits_in_order_and_says_errors() {
    let h = Handle::open("sim:nullb:zone_size=4,size=64").unwrap();
    let zone = h.zone_size();
    futures_lite::future::block_on(async {
        // Submitted before any is awaited: the zone's writes go out in this order.
        let writes: Vec<_> = (0..4u64).map(|i| h.write_at_async(zone + i * 4096, vec![i as u8; 4096])).collect();
        for w in writes {
            w.await.unwrap();
        }
        assert_eq!(h.zone(zone).unwrap().wp, zone + 4 * 4096);
        let e = h.write_at_async(zone, vec![0u8; 4096]).await.unwrap_err();
        assert_eq!(
            (e.errno(), e.rule()),
            (5, Some(Rule::NotAtWp { wp: zblk_core::units::Sector((zone + 16384) / 512) }))
        );
        let e = h.read_at_async(zone + 1, vec![0u8; 512]).await.unwrap_err();
        assert!(matches!(e, Error::Range { .. }), "{e:?}");
        let e = h.zone_op_async(ZoneOp::Close, 3 * zone).await.unwrap_err();
        assert_eq!(e.errno(), 5, "{e}");
        h.close().unwrap();
        assert!(matches!(h.flush_async().await, Err(Error::Closed)));
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_on_an_image() {
    use zblk_core::geometry::GeometryParams;
    use zblk_dev::file::{CreateOptions, FileImage};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("img.zbd");
    let geometry = GeometryParams { capacity_bytes: 8 << 20, zone_size_bytes: 1 << 20, ..GeometryParams::default() };
    FileImage::create(&p, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    let h = Handle::open(p.to_str().unwrap()).unwrap();
    let zone = 5 * h.zone_size();
    // Aligned buffers (O_DIRECT on the ring) and plain vectors alike.
    let tasks: Vec<_> = (0..8u8)
        .map(|t| {
            let h = h.clone();
            tokio::spawn(async move {
                let buf = zblk::AlignedBuf::from_slice(&[t; 4096]);
                let (a, _) = h.append_async(zone, buf).await.unwrap();
                let (b, _) = h.append_async(zone, vec![t; 4096]).await.unwrap();
                (t, a, b)
            })
        })
        .collect();
    let mut places = BTreeSet::new();
    for task in tasks {
        let (t, a, b) = task.await.unwrap();
        for at in [a, b] {
            assert!(places.insert(at));
            let back = h.read_at_async(at, zblk::AlignedBuf::zeroed(4096)).await.unwrap();
            assert!(back.as_slice().iter().all(|&x| x == t));
        }
    }
    h.flush_async().await.unwrap();
    assert_eq!(h.zone(zone).unwrap().wp, zone + 16 * 4096);
    h.close().unwrap();
}
