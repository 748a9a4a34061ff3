//! The log's errors: typed values, each with the errno the kernel would give for
//! the same refusal.

/// Why a call of the log failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The record does not fit in one zone append (the smallest zone's capacity, the
    /// device's append limit, the handle's largest request, less the header). EINVAL.
    #[error("a record of {len} bytes is too large: at most {max} bytes fit in one zone append")]
    TooLarge {
        /// The payload's length.
        len: usize,
        /// The largest payload the log takes.
        max: usize,
    },
    /// The log was closed ([`crate::Log::close`]). ENODEV.
    #[error("the log is closed")]
    Closed,
    /// Every zone of the log holds records: none is empty to append to. Trimming
    /// ([`crate::Log::trim_to`]) resets the zones of records no longer needed. ENOSPC.
    #[error("the log is full: none of its {zones} zones is empty (trim it to reclaim zones)")]
    Full {
        /// The zones the log has.
        zones: usize,
    },
    /// The zones given to the log hold no sequential zone it can append to. EINVAL.
    #[error("{target}: no sequential zone for the log in zones {first}..{end}")]
    NoZones {
        /// The handle's target.
        target: String,
        /// The first zone asked for.
        first: usize,
        /// One past the last zone asked for.
        end: usize,
    },
    /// [`crate::Log::read`] found no record where a location said: a frame that does
    /// not check (its magic, its zone, its checksum), or a location outside the log.
    /// EILSEQ.
    #[error("no record at byte {offset}: {why}")]
    NotARecord {
        /// The location's offset.
        offset: u64,
        /// Why, in words.
        why: &'static str,
    },
    /// The handle refused or failed a request ([`zblk::Error`]: its errno and rule).
    #[error(transparent)]
    Device(#[from] zblk::Error),
}

impl LogError {
    /// The errno the kernel would give (positive: 22 is EINVAL, 28 ENOSPC).
    pub fn errno(&self) -> i32 {
        match self {
            LogError::TooLarge { .. } | LogError::NoZones { .. } => 22,
            LogError::Closed => 19,
            LogError::Full { .. } => 28,
            LogError::NotARecord { .. } => 84,
            LogError::Device(e) => e.errno(),
        }
    }
}
