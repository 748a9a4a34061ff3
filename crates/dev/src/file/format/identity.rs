//! An image's identity: 16 random bytes given at its creation, stored in both
//! superblocks and mixed into the check value of every other part of the metadata
//! (each durable table sector, each zone entry, the live header, digest and
//! witness). A part of another image then fails its checks in this one, as damage
//! does, whatever its commit numbers say: it can never pass for this image's state.
//!
//! Images of format 2 have none ([`ImageId::NONE`]): mixed in, it changes nothing,
//! so their check values are format 2's and they open as before.

use std::fmt;

/// An image's identity (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImageId(pub [u8; 16]);

impl ImageId {
    /// No identity: an image of format 2, made before images had one.
    pub const NONE: ImageId = ImageId([0; 16]);

    /// A new identity, from the kernel's random source; never [`ImageId::NONE`].
    pub fn random() -> std::io::Result<ImageId> {
        use std::io::Read;
        let mut id = [0u8; 16];
        let mut f = std::fs::File::open("/dev/urandom")?;
        // All zeroes means "none": drawn again (2^-128 a draw).
        while id == [0; 16] {
            f.read_exact(&mut id)?;
        }
        Ok(ImageId(id))
    }

    /// Whether this is no identity (format 2).
    pub fn is_none(&self) -> bool {
        *self == ImageId::NONE
    }

    /// Mixes the identity into a check value being computed; no identity mixes
    /// nothing, which leaves format 2's check values as they were.
    pub(crate) fn mix(&self, h: &mut crc32fast::Hasher) {
        if !self.is_none() {
            h.update(&self.0);
        }
    }

    /// A short tag of the identity, stored beside the check values (outside them)
    /// where a part has room, so that a part that fails its checks can be told as
    /// another image's rather than as damaged bytes. 0 for no identity.
    pub fn tag(&self) -> u32 {
        if self.is_none() { 0 } else { crc32fast::hash(&self.0) | 1 }
    }

    /// Parses the 32 hexadecimal digits [`fmt::Display`] writes.
    pub fn parse(s: &str) -> Option<ImageId> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(ImageId(id))
    }
}

impl fmt::Display for ImageId {
    /// 32 hexadecimal digits; `none` for no identity.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_none() {
            return f.write_str("none");
        }
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ImageId({self})")
    }
}
