//! The mechanics of the disk: where an LBA sits (radius, angle, zone advance), what
//! moving the head there costs (seek curve, rotational wait, the zone resume of
//! mechanism M2) and the media access that moves it.

use super::HddModel;
use super::cache::Readahead;
use super::queue::MediaOp;
use zblk_core::bio::{Op, Request};

/// What `unit_hash` draws the zone advance with, when the parameters leave it open.
pub(super) const ZONE_ADVANCE_DRAW: u64 = 0x20e_adf;

/// A deterministic hash of `(seed, x)` to [0, 1) (splitmix64).
pub(super) fn unit_hash(seed: u64, x: u64) -> f64 {
    let mut z = seed ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Ruemmler & Wilkes' seek curve, fitted to three datasheet figures.
#[derive(Clone, Copy, Debug)]
pub(super) struct SeekCurve {
    t1: f64,
    a: f64,
    c: f64,
    b: f64,
    pub(super) knee: f64,
    /// Distance of one track, as a fraction of the stroke.
    pub(super) one_track: f64,
}

impl SeekCurve {
    /// Fits `t(d) = t1 + a·√d` (d ≤ knee) and `c + b·d` (d > knee), continuous at the
    /// knee, with `t(1) = full` and the average over random pairs of positions
    /// (density 2(1−d)) equal to `avg`.
    pub(super) fn fit(t1: f64, avg: f64, full: f64, one_track: f64) -> SeekCurve {
        let knee = 0.2f64;
        // Unknowns a, b (c follows from t(1) = full: c = full − b). Continuity:
        // t1 + a·√k = full − b + b·k  →  a·√k + b(1 − k) = full − t1.
        // Mean: ∫0^k (t1 + a√d)·2(1−d) dd + ∫k^1 (full − b + b d)·2(1−d) dd = avg.
        let m0 = |lo: f64, hi: f64| 2.0 * ((hi - hi * hi / 2.0) - (lo - lo * lo / 2.0)); // ∫ 2(1−d)
        let m_sqrt = |lo: f64, hi: f64| {
            let f = |d: f64| 2.0 * (2.0 / 3.0 * d.powf(1.5) - 2.0 / 5.0 * d.powf(2.5));
            f(hi) - f(lo)
        };
        let m_lin = |lo: f64, hi: f64| {
            let f = |d: f64| 2.0 * (d * d / 2.0 - d * d * d / 3.0);
            f(hi) - f(lo)
        };
        // avg = t1·m0(0,k) + a·m_sqrt(0,k) + (full − b)·m0(k,1) + b·m_lin(k,1)
        // → a·m_sqrt(0,k) + b·(m_lin(k,1) − m0(k,1)) = avg − t1·m0(0,k) − full·m0(k,1)
        let (p1, q1, r1) = (knee.sqrt(), 1.0 - knee, full - t1);
        let (p2, q2, r2) =
            (m_sqrt(0.0, knee), m_lin(knee, 1.0) - m0(knee, 1.0), avg - t1 * m0(0.0, knee) - full * m0(knee, 1.0));
        let det = p1 * q2 - p2 * q1;
        let a = (r1 * q2 - r2 * q1) / det;
        let b = (p1 * r2 - p2 * r1) / det;
        SeekCurve { t1, a, c: full - b, b, knee, one_track }
    }

    pub(super) fn time(&self, d: f64) -> f64 {
        if d < self.one_track {
            0.0
        } else if d <= self.knee {
            self.t1 + self.a * (d.max(self.one_track) - self.one_track).sqrt()
        } else {
            self.c + self.b * d
        }
    }
}

impl HddModel {
    /// Radius (OD = 1) of byte offset `b`: constant linear density means the data
    /// between the OD and radius r is proportional to 1 − r².
    pub(super) fn radius(&self, b: u64) -> f64 {
        let x = (b as f64 / self.p.capacity_bytes as f64).clamp(0.0, 1.0);
        (1.0 - x * (1.0 - self.r_min * self.r_min)).sqrt()
    }

    /// Position of byte `b` as a fraction of the stroke from the OD.
    pub(super) fn stroke(&self, b: u64) -> f64 {
        (1.0 - self.radius(b)) / (1.0 - self.r_min)
    }

    /// Angle of byte `b` in revolutions [0, 1): continuous within a zone (track skew
    /// matched to sequential access), each zone starting `zone_advance` further on
    /// than the previous one.
    pub(super) fn angle(&self, b: u64) -> f64 {
        let origin = match self.p.zone_bytes {
            0 => 0.0,
            z => (b / z) as f64 * self.zone_advance,
        };
        (self.stroke(b) * self.n_tracks + origin).fract()
    }

    /// Media rate at byte `b`, bytes per ns.
    pub(super) fn rate(&self, b: u64) -> f64 {
        self.p.od_rate * self.radius(b) * 1e-9
    }

    /// The sustained media rate over `len` bytes from `start`, MB/s: the bytes over the
    /// time the head needs to transfer them (track-to-track moves within a zone are
    /// hidden by the track skew, as in the model).
    pub fn sustained_mb_s(&self, start: u64, len: u64) -> f64 {
        assert!(len > 0, "an empty region has no rate");
        pub(super) const STEPS: u64 = 256;
        let step = len.div_ceil(STEPS).max(1);
        let mut ns = 0.0;
        let mut b = start;
        while b < start + len {
            let n = step.min(start + len - b);
            ns += n as f64 / self.rate(b + n / 2);
            b += n;
        }
        len as f64 / ns * 1e9 / 1e6
    }

    /// Seek + settle + rotational wait to start a media access at byte `b` at or after
    /// time `t`, from the current head position.
    pub(super) fn positioning(&self, b: u64, t: f64, write: bool) -> (f64, f64) {
        let d = (self.stroke(b) - self.stroke(self.head_byte)).abs();
        let seek = if write { self.write_seek.time(d) } else { self.seek.time(d) };
        // Whole revolutions leave the angle where it was: the resume cost adds to
        // the time before the rotational wait, not to the angle.
        let seek = seek + if write { self.resume_ns(b) } else { 0.0 };
        let arrive = t + seek;
        let head_angle = (arrive / self.rev_ns).fract();
        let mut wait = (self.angle(b) - head_angle).rem_euclid(1.0) * self.rev_ns;
        if seek == 0.0 && b == self.head_byte && (t - self.head_time).abs() < 1.0 {
            wait = 0.0; // continuing a transfer without a break
        }
        (seek, wait)
    }

    /// Mechanism M2: what a media write at `b` pays to resume its zone. Nothing for
    /// the zone the head last wrote, for a zone's first sector (its first track is
    /// not shingled onto anything written before the reset) or without zones.
    pub(super) fn resume_ns(&self, b: u64) -> f64 {
        let z = self.p.zone_bytes;
        if z == 0 || self.p.zone_resume_revs == 0.0 || b % z == 0 || self.last_write_zone == Some(b / z) {
            return 0.0;
        }
        self.p.zone_resume_revs * self.rev_ns
    }

    pub(super) fn positioning_total(&self, req: &Request, t: f64) -> f64 {
        let (s, w) = self.positioning(req.sector.bytes(), t, req.op != Op::Read);
        s + w
    }

    /// Positions and transfers at `b..b+len` starting no earlier than `t`.
    pub(super) fn media_access(&mut self, t: f64, b: u64, len: u64, write: bool, op: MediaOp) {
        if let Some(ra) = &mut self.readahead {
            ra.stopped_at.get_or_insert(t);
        }
        let (seek, wait) = self.positioning(b, t, write);
        let resume = if write { self.resume_ns(b) } else { 0.0 };
        if resume > 0.0 {
            self.stats.zone_resumes += 1;
            self.stats.resume_ns += resume;
        }
        if write && self.p.zone_bytes != 0 {
            self.last_write_zone = Some(b / self.p.zone_bytes);
        }
        let seek = seek - resume;
        let xfer = len as f64 / self.rate(b);
        self.stats.media_ops += 1;
        if seek > 0.0 {
            self.stats.seeks += 1;
        }
        self.stats.seek_ns += seek;
        self.stats.rotation_ns += wait;
        self.stats.transfer_ns += xfer;
        let end = t + seek + resume + wait + xfer;
        self.media_free_at = end;
        self.media_op = Some(op);
        self.head_byte = b + len;
        self.head_time = end;
        if !write {
            self.readahead = Some(Readahead { start: b + len, t0: end, rate: self.rate(b + len), stopped_at: None });
        }
    }
}
