//! Value parsers for command-line options: sizes with suffixes, durations as fio
//! writes them.

use zblk_core::units::parse_size;

/// A byte size: `4096`, `4k`, `1M`, `30T` (binary multiples, as fio).
pub fn size(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

/// A duration as fio's `runtime`: a number with `ns`, `us`, `ms`, `s`, `m` or `h`;
/// a plain number is seconds. Returns nanoseconds.
pub fn duration_ns(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("invalid duration '{text}': expected e.g. 10s, 500ms"))?;
    let scale = match unit {
        "" | "s" => 1e9,
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "m" => 60e9,
        "h" => 3600e9,
        _ => return Err(format!("invalid duration '{text}': unknown unit '{unit}' (ns, us, ms, s, m, h)")),
    };
    let ns = value * scale;
    if !(1.0..=1e18).contains(&ns) {
        return Err(format!("invalid duration '{text}': out of range"));
    }
    Ok(ns as u64)
}

/// As [`duration_ns`], but `0` (with or without a unit) is allowed.
pub fn duration_or_zero_ns(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse::<f64>() == Ok(0.0) {
        return Ok(0);
    }
    duration_ns(text)
}

/// A host-side delay in virtual time (a turnaround, the plug work): as
/// [`duration_or_zero_ns`], at most a second (more means nothing for a host, and
/// added up over a run it would overflow the clock).
pub fn host_delay_ns(text: &str) -> Result<u64, String> {
    let ns = duration_or_zero_ns(text)?;
    if ns > 1_000_000_000 {
        return Err(format!("invalid delay '{text}': at most 1s"));
    }
    Ok(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_ns("10"), Ok(10_000_000_000));
        assert_eq!(duration_ns("10s"), Ok(10_000_000_000));
        assert_eq!(duration_ns("500ms"), Ok(500_000_000));
        assert_eq!(duration_ns("1.5m"), Ok(90_000_000_000));
        assert!(duration_ns("10x").is_err());
        assert!(duration_ns("").is_err());
        assert!(duration_ns("0").is_err());
        assert_eq!(duration_or_zero_ns("0"), Ok(0));
        assert_eq!(duration_or_zero_ns("0us"), Ok(0));
        assert_eq!(duration_or_zero_ns("40us"), Ok(40_000));
        assert!(duration_or_zero_ns("-1").is_err());
        assert_eq!(host_delay_ns("0"), Ok(0));
        assert_eq!(host_delay_ns("1s"), Ok(1_000_000_000));
        assert!(host_delay_ns("1.5s").is_err_and(|e| e.contains("at most 1s")));
    }
}
