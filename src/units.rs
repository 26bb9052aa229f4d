//! Sizes and ages as people write and read them: `--max-store-bytes 10G`, `--max-age 30d`,
//! `--range-capture-min 1M`, and the figures the log and the CLI print.

use std::time::Duration;

use anyhow::bail;

/// `1234`, `500K`, `500M`, `1.5G`, `2T` (powers of 1024); `0` or `none` is no limit.
///
/// # Errors
/// A message naming the value.
pub fn parse_size(s: &str) -> anyhow::Result<Option<u64>> {
    let t = s.trim();
    if t == "0" || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_uppercase();
            let mult: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => bail!("size {s:?}: unknown unit (use K, M, G or T)"),
            };
            (&t[..i], mult)
        }
        None => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("size {s:?} is not a number with an optional K/M/G/T"))?;
    if !n.is_finite() || n < 0.0 {
        bail!("size {s:?} must be a non-negative number");
    }
    Ok(Some((n * mult as f64) as u64).filter(|b| *b > 0))
}

/// `90s`, `30m`, `12h`, `30d`, `2w` (a bare number is seconds); `0` or `none` is no limit.
///
/// # Errors
/// A message naming the value.
pub fn parse_age(s: &str) -> anyhow::Result<Option<Duration>> {
    let t = s.trim();
    if t == "0" || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let (num, mult) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1),
        Some('m') => (&t[..t.len() - 1], 60),
        Some('h') => (&t[..t.len() - 1], 3600),
        Some('d') => (&t[..t.len() - 1], 86_400),
        Some('w') => (&t[..t.len() - 1], 7 * 86_400),
        _ => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("age {s:?} is not a number with an optional s/m/h/d/w"))?;
    if !n.is_finite() || n < 0.0 {
        bail!("age {s:?} must be a non-negative number");
    }
    Ok(Some(Duration::from_secs_f64(n * mult as f64)).filter(|d| !d.is_zero()))
}

/// Formats a byte count for people (`1.5 GiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Formats a duration in milliseconds for people (`30d`, `12h`, `90s`).
pub fn human_duration(ms: i64) -> String {
    let s = ms / 1000;
    if s % 86_400 == 0 && s > 0 {
        format!("{}d", s / 86_400)
    } else if s % 3600 == 0 && s > 0 {
        format!("{}h", s / 3600)
    } else if s % 60 == 0 && s > 0 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_parse_with_units_and_bad_ones_are_named() {
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_duration(30 * 86_400_000), "30d");
        assert_eq!(human_duration(90_000), "90s");
        assert_eq!(parse_size("10G").unwrap(), Some(10 << 30));
        assert_eq!(parse_size("1.5M").unwrap(), Some(3 << 19));
        assert_eq!(parse_size("500mib").unwrap(), Some(500 << 20));
        assert_eq!(parse_size("4096").unwrap(), Some(4096));
        assert_eq!(parse_size("0").unwrap(), None);
        assert_eq!(parse_size("none").unwrap(), None);
        assert!(parse_size("12Q").unwrap_err().to_string().contains("12Q"));
        assert!(parse_size("-1G").is_err());
        assert_eq!(
            parse_age("30d").unwrap(),
            Some(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(parse_age("90").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("1.5h").unwrap(), Some(Duration::from_secs(5400)));
        assert_eq!(parse_age("0").unwrap(), None);
        assert!(parse_age("soon").unwrap_err().to_string().contains("soon"));
    }
}
