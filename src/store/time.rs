//! Time as the store keeps it (unix milliseconds in the `*_at` columns) and shows it
//! (RFC 3339 UTC).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as the `*_at` columns hold them.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Formats unix milliseconds as RFC 3339 UTC (`2026-11-22T14:03:51.123Z`).
pub fn rfc3339(ms: i64) -> String {
    // Civil-from-days (Howard Hinnant), to avoid a date crate for one format.
    let secs = ms.div_euclid(1000);
    let (days, sod) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        ms.rem_euclid(1000)
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::rfc3339(1_795_356_231_123),
            "2026-11-22T14:03:51.123Z"
        );
    }
}
