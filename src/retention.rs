//! Retention: what the store keeps, in one type — the limits a mount is given
//! (`--max-store-bytes`, `--max-age`), that a `gc` request or `rewindfs gc` may change, and
//! that every pass keeps to.
//!
//! Where the rest of retention lives, each with one job:
//! - what may be dropped, and the SQL that drops it (`store::gc`: never the current checkpoint,
//!   never what a live session needs to rewind to its first message);
//! - the locks a pass takes (`Rewinder::gc`: no rewind meanwhile; the recorder's capture lock
//!   for each batch of blob files it removes);
//! - when passes run (`daemon::retention`: at mount, every minute, and on a store no daemon
//!   serves), and the `gc` request's reply (`control::cmd::gc`).

use std::time::Duration;

use crate::units::{parse_age, parse_size};

/// The default store budget.
pub const DEFAULT_MAX_STORE_BYTES: &str = "10G";
/// The default age limit.
pub const DEFAULT_MAX_AGE: &str = "30d";

/// The limits: drop the oldest checkpoints until the store holds at most `max_bytes` and none
/// began longer ago than `max_age` (`None`: no such limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub max_bytes: Option<u64>,
    pub max_age: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention::parse(DEFAULT_MAX_STORE_BYTES, DEFAULT_MAX_AGE).expect("valid defaults")
    }
}

impl Retention {
    /// Parses `--max-store-bytes` and `--max-age` (`0` or `none`: no limit).
    ///
    /// # Errors
    /// A message naming the bad value.
    pub fn parse(bytes: &str, age: &str) -> anyhow::Result<Retention> {
        Ok(Retention {
            max_bytes: parse_size(bytes)?,
            max_age: parse_age(age)?,
        })
    }

    /// These limits with those a request names in their place (in bytes and seconds, as the
    /// wire carries them; `0`: no limit; `None`: keep this one).
    pub fn overridden(self, max_bytes: Option<u64>, max_age_seconds: Option<u64>) -> Retention {
        Retention {
            max_bytes: max_bytes.map_or(self.max_bytes, |b| Some(b).filter(|b| *b > 0)),
            max_age: max_age_seconds.map_or(self.max_age, |s| {
                Some(Duration::from_secs(s)).filter(|d| !d.is_zero())
            }),
        }
    }

    /// The age limit in milliseconds, as the store compares it with its timestamps.
    pub fn max_age_ms(&self) -> Option<i64> {
        self.max_age
            .map(|d| d.as_millis().min(i64::MAX as u128) as i64)
    }

    /// The age limit in whole seconds, as the wire carries it.
    pub fn max_age_seconds(&self) -> Option<u64> {
        self.max_age.map(|d| d.as_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_replaces_only_the_limits_it_names_and_zero_lifts_one() {
        let d = Retention::default();
        assert_eq!(d.max_bytes, Some(10 << 30));
        assert_eq!(d.max_age_seconds(), Some(30 * 86_400));
        assert_eq!(d.overridden(None, None), d);
        let r = d.overridden(Some(1 << 20), None);
        assert_eq!((r.max_bytes, r.max_age), (Some(1 << 20), d.max_age));
        let r = d.overridden(Some(0), Some(0));
        assert_eq!((r.max_bytes, r.max_age), (None, None));
        let r = d.overridden(None, Some(90));
        assert_eq!(r.max_age_ms(), Some(90_000));
    }
}
