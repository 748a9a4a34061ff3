//! What a ZNS namespace is, from its Identify data: the namespace's size and LBA
//! format (Identify Namespace, CNS 0x00), its zones (the ZNS command set's Identify
//! Namespace, CNS 0x05 CSI 0x02: zone size per LBA format, max active and open
//! resources), the controller's zone append size limit (CNS 0x06 CSI 0x02) and
//! maximum data transfer size (Identify Controller, CNS 0x01).

/// The Zoned Namespace command set's identifier (CSI).
pub const CSI_ZNS: u8 = 0x02;

/// The memory page size the transfer limits count in: the controller's CAP.MPSMIN,
/// which userspace cannot read; 4 KiB, the minimum every controller supports.
const MIN_PAGE: u64 = 4096;

/// A ZNS namespace as its Identify data describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Namespace size, in logical blocks (NSZE).
    pub nsze: u64,
    /// The logical block size in bytes (the LBA format's LBADS).
    pub lba_bytes: u32,
    /// Metadata bytes per block: zblk drives formats without (0).
    pub metadata_bytes: u16,
    /// Zone size, in logical blocks (ZSZE of the LBA format).
    pub zone_blocks: u64,
    /// Maximum open zones; `None`: no limit (MOR, 0-based, all ones).
    pub max_open: Option<u32>,
    /// Maximum active zones; `None`: no limit (MAR).
    pub max_active: Option<u32>,
    /// Largest zone append, bytes (ZASL; the transfer limit when ZASL is 0).
    pub append_bytes: u64,
    /// Largest transfer, bytes (MDTS; `None`: no limit).
    pub max_transfer_bytes: Option<u64>,
}

fn u16_at(d: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([d[o], d[o + 1]])
}

fn u32_at(d: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(d[o..o + 4].try_into().expect("4 bytes"))
}

fn u64_at(d: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(d[o..o + 8].try_into().expect("8 bytes"))
}

/// A 0-based resource count: all ones means no limit.
fn limit(v: u32) -> Option<u32> {
    (v != u32::MAX).then(|| v + 1)
}

impl Identity {
    /// Reads the four Identify pages (4096 bytes each): `ns` (CNS 0x00), `zns_ns`
    /// (CNS 0x05, CSI 0x02), `ctrl` (CNS 0x01), `zns_ctrl` (CNS 0x06, CSI 0x02).
    /// Refuses what zblk cannot drive, saying why.
    pub fn parse(ns: &[u8], zns_ns: &[u8], ctrl: &[u8], zns_ctrl: &[u8]) -> Result<Identity, String> {
        let nsze = u64_at(ns, 0);
        let nlbaf = usize::from(ns[25]) + 1;
        let flbas = ns[26];
        // FLBAS: bits 3:0 the format's index, bits 6:5 its upper bits (over 16 formats).
        let idx = usize::from(flbas & 0xf) | (usize::from((flbas >> 5) & 0x3) << 4);
        if idx >= nlbaf.max(1) || idx >= 64 {
            return Err(format!("the formatted LBA format {idx} is not one of the namespace's {nlbaf}"));
        }
        let lbaf = 128 + idx * 4;
        let metadata_bytes = u16_at(ns, lbaf);
        let lbads = ns[lbaf + 2];
        if !(9..=16).contains(&lbads) {
            return Err(format!("a logical block of 2^{lbads} bytes (zblk takes 512 B to 64 KiB)"));
        }
        if metadata_bytes != 0 {
            return Err(format!(
                "its LBA format has {metadata_bytes} metadata bytes per block: zblk drives formats without"
            ));
        }
        // The ZNS namespace data: LBA Format Extensions at byte 2816, 16 bytes each.
        let zone_blocks = u64_at(zns_ns, 2816 + idx * 16);
        if zone_blocks == 0 {
            return Err("the namespace reports no zone size: not a zoned namespace".to_string());
        }
        let lba_bytes = 1u32 << lbads;
        let mdts = ctrl[77];
        let max_transfer_bytes = (mdts != 0).then(|| MIN_PAGE << mdts);
        let zasl = zns_ctrl[0];
        let append_bytes = match zasl {
            0 => max_transfer_bytes.unwrap_or(u64::from(u32::MAX)),
            z => MIN_PAGE << z,
        };
        Ok(Identity {
            nsze,
            lba_bytes,
            metadata_bytes,
            zone_blocks,
            max_open: limit(u32_at(zns_ns, 8)),
            max_active: limit(u32_at(zns_ns, 4)),
            append_bytes,
            max_transfer_bytes,
        })
    }

    /// Sectors (512 bytes) per logical block, as a shift.
    pub fn lba_shift(&self) -> u32 {
        self.lba_bytes.trailing_zeros() - 9
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Identify pages like the VM's emulated drive's: 512 B blocks,
    /// 32768-block zones, 4 open, 8 active, MDTS 7, ZASL 7.
    pub(crate) fn pages() -> [Vec<u8>; 4] {
        let mut ns = vec![0u8; 4096];
        ns[0..8].copy_from_slice(&(64u64 * 32768).to_le_bytes());
        ns[25] = 1;
        ns[26] = 0;
        ns[130] = 9;
        ns[134] = 12;
        let mut zns = vec![0u8; 4096];
        zns[4..8].copy_from_slice(&7u32.to_le_bytes());
        zns[8..12].copy_from_slice(&3u32.to_le_bytes());
        zns[2816..2824].copy_from_slice(&32768u64.to_le_bytes());
        let mut ctrl = vec![0u8; 4096];
        ctrl[77] = 7;
        let mut zctrl = vec![0u8; 4096];
        zctrl[0] = 7;
        [ns, zns, ctrl, zctrl]
    }

    #[test]
    fn the_vm_drive() {
        let [ns, zns, ctrl, zctrl] = pages();
        let id = Identity::parse(&ns, &zns, &ctrl, &zctrl).unwrap();
        assert_eq!(id.lba_bytes, 512);
        assert_eq!(id.zone_blocks, 32768);
        assert_eq!((id.max_open, id.max_active), (Some(4), Some(8)));
        assert_eq!(id.append_bytes, 512 << 10);
        assert_eq!(id.max_transfer_bytes, Some(512 << 10));
    }

    #[test]
    fn refusals() {
        let [ns, mut zns, ctrl, zctrl] = pages();
        let mut bad = ns.clone();
        bad[26] = 5;
        assert!(Identity::parse(&bad, &zns, &ctrl, &zctrl).unwrap_err().contains("LBA format 5"));
        let mut meta = ns.clone();
        meta[128] = 8;
        assert!(Identity::parse(&meta, &zns, &ctrl, &zctrl).unwrap_err().contains("metadata"));
        zns[2816..2824].fill(0);
        assert!(Identity::parse(&ns, &zns, &ctrl, &zctrl).unwrap_err().contains("not a zoned namespace"));
        let mut no_limits = pages();
        no_limits[1][4..12].fill(0xff);
        let id = Identity::parse(&no_limits[0], &no_limits[1], &ctrl, &zctrl).unwrap();
        assert_eq!((id.max_open, id.max_active), (None, None));
    }
}
