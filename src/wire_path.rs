//! A path's form on the wire: JSON strings are UTF-8, Linux names are bytes.
//!
//! The rule (git's quoting, which people who read paths already know):
//! - a path that is valid UTF-8 and does not begin with `"` is sent as it is — every path the
//!   SDK would name, named exactly as the SDK names it;
//! - any other is quoted: in double quotes, `"` and `\` escaped with a backslash, and each byte
//!   that is not part of valid UTF-8 written as a three-digit octal escape (`a\377b` for the
//!   bytes `a`, 0xff, `b`).
//!
//! Exact both ways: [`decode`] gives back the bytes [`encode`] was given, for every byte string,
//! and takes any other string as its own UTF-8 bytes. A client sends a path back in the same
//! form (`show`, `ls`, `log`, a rewind's `paths`), so a name that is not UTF-8 can be named.
//! (Before, such names went out lossily, every bad byte as U+FFFD: two different files could
//! be reported under one name, and neither could be asked for.)

/// The wire form of `bytes` (see the module doc).
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    let bytes = bytes.as_ref();
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.starts_with('"') => s.to_string(),
        _ => quote(bytes),
    }
}

/// The wire form of a path's bytes joined under `dir` (an absolute path on the wire: the
/// workspace's, the SDK's form of a changed path).
pub fn encode_under(dir: &std::path::Path, rel: &[u8]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut b = dir.as_os_str().as_bytes().to_vec();
    if !b.ends_with(b"/") {
        b.push(b'/');
    }
    b.extend_from_slice(rel);
    encode(&b)
}

/// The bytes a wire path names: a quoted form's unescaped bytes, any other string's own.
pub fn decode(s: &str) -> Vec<u8> {
    unquote(s).unwrap_or_else(|| s.as_bytes().to_vec())
}

fn quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\{b:03o}"));
        }
    }
    out.push('"');
    out
}

/// A quoted form's bytes; `None` for a string that is not one (taken as it is then).
fn unquote(s: &str) -> Option<Vec<u8>> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let b = inner.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => match b.get(i + 1)? {
                q @ (b'"' | b'\\') => {
                    out.push(*q);
                    i += 2;
                }
                d0 @ b'0'..=b'3' => {
                    let digit = |x: Option<&u8>| x.copied().filter(|d| (b'0'..=b'7').contains(d));
                    let (d1, d2) = (digit(b.get(i + 2))?, digit(b.get(i + 3))?);
                    out.push((d0 - b'0') * 64 + (d1 - b'0') * 8 + (d2 - b'0'));
                    i += 4;
                }
                _ => return None,
            },
            // An unescaped quote inside is not a quoted form.
            b'"' => return None,
            x => {
                out.push(x);
                i += 1;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn utf8_paths_go_as_they_are_and_others_are_quoted() {
        assert_eq!(encode(b"src/main.rs"), "src/main.rs");
        assert_eq!(encode("é/ü".as_bytes()), "é/ü");
        assert_eq!(encode(b"a\xffb"), "\"a\\377b\"");
        assert_eq!(encode(b"\"q"), "\"\\\"q\"");
        assert_eq!(encode(b"x\\\xfe"), "\"x\\\\\\376\"");
        assert_eq!(decode("\"a\\377b\""), b"a\xffb");
        // Not a quoted form: taken as it is.
        assert_eq!(decode("a\"b"), b"a\"b");
        assert_eq!(decode("\"a\\x\""), b"\"a\\x\"");
        assert_eq!(
            encode_under(std::path::Path::new("/w"), b"d/\xff"),
            "\"/w/d/\\377\""
        );
    }

    proptest! {
        /// Every byte string comes back exactly, and two different ones never share a form.
        #[test]
        fn the_wire_form_is_exact_both_ways(a in proptest::collection::vec(any::<u8>(), 0..40),
                                            b in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(decode(&encode(&a)), a.clone());
            if a != b {
                prop_assert_ne!(encode(&a), encode(&b));
            }
        }

        /// A string that is not a quoted form names its own bytes.
        #[test]
        fn plain_strings_name_themselves(s in "[^\"].*") {
            prop_assert_eq!(encode(s.as_bytes()), s.clone());
            prop_assert_eq!(decode(&s), s.as_bytes().to_vec());
        }
    }
}
