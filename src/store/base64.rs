//! Bytes as base64 text, where binary data travels in JSON: a bundle's BLOB values
//! (`bundle/`) and `show`'s file content on the control wire. The one place the `base64`
//! crate is used (standard alphabet, padded).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Text that is not base64 of the standard alphabet.
#[derive(Debug, thiserror::Error)]
#[error("not base64: {0}")]
pub struct Base64Error(base64::DecodeError);

/// `b` as base64.
pub fn encode(b: &[u8]) -> String {
    STANDARD.encode(b)
}

/// The bytes `s` encodes.
///
/// # Errors
/// `s` is not base64.
pub fn decode(s: &str) -> Result<Vec<u8>, Base64Error> {
    STANDARD.decode(s).map_err(Base64Error)
}

/// `Option<Vec<u8>>` as an optional base64 string (`#[serde(with = "…::option")]`).
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&super::encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(t) => super::decode(&t)
                .map(Some)
                .map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_text_that_is_not_base64_is_refused() {
        for b in [&b""[..], b"a\n", &[0, 1, 2, 255, 0, 7]] {
            assert_eq!(decode(&encode(b)).unwrap(), b);
        }
        assert_eq!(encode(b"a\n"), "YQo=");
        assert!(decode("not base64!").is_err());
    }
}
