//! Many tokio tasks appending records to one zone through one handle, each told
//! where its record landed, then every record read back.
//!
//!     cargo run -p zblk --example tokio_append [TARGET]
//!
//! TARGET is any target string (an image made by `zblk create`, `/dev/nullb0`,
//! `sim:smr-30tb`); the default is a simulated null_blk with 64 MiB zones.

use zblk::Handle;

#[tokio::main]
async fn main() -> Result<(), zblk::Error> {
    let target = std::env::args().nth(1).unwrap_or_else(|| "sim:nullb:zone_size=64".into());
    let h = Handle::open(&target)?;
    let zone = h.report()?.into_iter().find(|z| z.is_sequential() && z.remaining() >= 1 << 20).map(|z| z.start);
    let Some(zone) = zone else {
        eprintln!("{target}: no sequential zone with 1 MiB free");
        std::process::exit(1);
    };
    let tasks: Vec<_> = (0..16u8)
        .map(|t| {
            let h = h.clone();
            tokio::spawn(async move { h.append_async(zone, vec![t; 4096]).await.map(|(at, _)| (t, at)) })
        })
        .collect();
    let mut landed = vec![];
    for t in tasks {
        landed.push(t.await.expect("the task ran")?);
    }
    h.flush_async().await?;
    for (t, at) in &landed {
        let back = h.read_at_async(*at, vec![0u8; 4096]).await?;
        assert!(back.as_slice().iter().all(|b| b == t));
        println!("task {t:2}: its record at byte {at}");
    }
    h.close()
}
