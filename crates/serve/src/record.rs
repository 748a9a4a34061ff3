//! What a served device records of what it serves, so that a recovery (`zblk serve
//! --recover N`) can refuse anything but the image the device was served from.
//!
//! A recoverable device outlives its server: the kernel keeps `/dev/ublkbN`, with
//! what it acknowledged and what its file systems fsynced, until a new server takes
//! it over. The geometry alone does not say which image that server must open: any
//! image of the same geometry matches it, and one that is not the device's reads
//! back other data and other write pointers under the kernel's feet. So the server
//! records the identity of the image it serves (the ublk library keeps it with the
//! device, in `/run/ublksrvd/N.json`, the target data), and a recovery compares it
//! with the image it is given.

use crate::ServeError;
use zblk_dev::file::format::ImageId;

/// What is served, as recorded with the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedRecord {
    /// What is served, in words: an image's path, a device's spec.
    pub name: String,
    /// For an image: its identity ([`ImageId::NONE`] for an image of format 2) and
    /// its file (device and inode numbers), which tells apart images without an
    /// identity. `None` for a device that is no image.
    pub image: Option<(ImageId, (u64, u64))>,
}

/// The key the record is kept under in the device's target data.
const KEY: &str = "zblk";

impl ServedRecord {
    /// The record as the device's target data (JSON).
    pub fn to_json(&self) -> serde_json::Value {
        let mut rec = serde_json::Map::new();
        rec.insert("serving".into(), self.name.clone().into());
        if let Some((id, (dev, ino))) = self.image {
            rec.insert("image_identity".into(), id.to_string().into());
            rec.insert("image_file".into(), format!("{dev}:{ino}").into());
        }
        serde_json::json!({ KEY: rec })
    }

    /// The record a device's target data holds, if it holds one.
    pub fn from_json(v: &serde_json::Value) -> Option<ServedRecord> {
        let rec = v.get(KEY)?;
        let name = rec.get("serving")?.as_str()?.to_string();
        let image = match (rec.get("image_identity"), rec.get("image_file")) {
            (Some(id), Some(file)) => {
                let id = match id.as_str()? {
                    "none" => ImageId::NONE,
                    s => ImageId::parse(s)?,
                };
                let (dev, ino) = file.as_str()?.split_once(':')?;
                Some((id, (dev.parse().ok()?, ino.parse().ok()?)))
            }
            _ => None,
        };
        Some(ServedRecord { name, image })
    }

    /// Whether device `dev`, whose record is `recorded` (its target data, if any),
    /// may be recovered by serving `self`: the same image (the same identity; for
    /// an image without one, the same file), or the same kind of device that is no
    /// image. Otherwise refused, naming both.
    pub fn check_recovery(&self, dev: &str, recorded: Option<&serde_json::Value>) -> Result<(), ServeError> {
        let Some(was) = recorded.and_then(ServedRecord::from_json) else {
            return Err(ServeError(format!(
                "{dev} records nothing of what it served (served by an earlier zblk, or its record in \
                 /run/ublksrvd is gone): whether {} is what it served cannot be told, and recovering it onto \
                 anything else would give the kernel other data than it acknowledged; remove the device \
                 (`ublk del`) and serve the image again",
                self.name
            )));
        };
        let describe = |r: &ServedRecord| match r.image {
            Some((id, _)) if !id.is_none() => format!("image {} (identity {id})", r.name),
            Some(_) => format!("image {} (of format 2, no identity)", r.name),
            None => r.name.clone(),
        };
        let same = match (was.image, self.image) {
            (Some((a, _)), Some((b, _))) if !a.is_none() || !b.is_none() => a == b,
            // Images without an identity: only their files tell them apart.
            (Some((_, fa)), Some((_, fb))) => fa == fb,
            (None, None) => true,
            _ => false,
        };
        if same {
            return Ok(());
        }
        Err(ServeError(format!(
            "{dev} was served from {}, not from {}: recovering it onto another image would give the kernel other \
             data and write pointers than those it acknowledged; give the image it was served from",
            describe(&was),
            describe(self)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(name: &str, id: u8, file: (u64, u64)) -> ServedRecord {
        let id = if id == 0 { ImageId::NONE } else { ImageId([id; 16]) };
        ServedRecord { name: name.into(), image: Some((id, file)) }
    }

    #[test]
    fn a_recovery_takes_only_the_image_served() {
        let served = image("a.img", 1, (8, 100));
        let json = served.to_json();
        assert_eq!(ServedRecord::from_json(&json), Some(served.clone()));
        // The same image, wherever it lies now.
        assert!(image("moved.img", 1, (9, 7)).check_recovery("/dev/ublkb0", Some(&json)).is_ok());
        // Another image of the same geometry: refused, both named.
        let e = image("b.img", 2, (8, 101)).check_recovery("/dev/ublkb0", Some(&json)).unwrap_err();
        assert!(e.0.contains("was served from image a.img (identity 0101"), "{}", e.0);
        assert!(e.0.contains("not from image b.img (identity 0202"), "{}", e.0);
        // A copy of it in another file, made before it was given one: refused too.
        let e = image("c.img", 0, (8, 100)).check_recovery("/dev/ublkb0", Some(&json)).unwrap_err();
        assert!(e.0.contains("not from image c.img (of format 2, no identity)"), "{}", e.0);
        // Images of format 2: their files tell them apart.
        let old = image("old.img", 0, (8, 5)).to_json();
        assert!(image("old.img", 0, (8, 5)).check_recovery("/dev/ublkb0", Some(&old)).is_ok());
        assert!(image("cp.img", 0, (8, 6)).check_recovery("/dev/ublkb0", Some(&old)).is_err());
        // Nothing recorded: refused; a memory device for an image: refused.
        let e = served.check_recovery("/dev/ublkb0", None).unwrap_err();
        assert!(e.0.contains("records nothing of what it served"), "{}", e.0);
        let mem = ServedRecord { name: "nullb:completion_nsec=0".into(), image: None };
        assert!(mem.check_recovery("/dev/ublkb0", Some(&json)).is_err());
        assert!(mem.check_recovery("/dev/ublkb0", Some(&mem.to_json())).is_ok());
    }
}
