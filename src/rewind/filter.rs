//! Which paths a rewind may touch: the request's `paths`, as exact paths or globs.
//!
//! Invariants: a filter never admits a path outside the workspace — a requested path that
//! is absolute or has a `..` component is refused when the filter is built, not skipped; a
//! leading `./` and a trailing `/` are ignored, so `./src/` and `src` are the same filter; an
//! exact path admits what lies beneath it (a directory's contents), while an undo's exact
//! set admits only its own members, so an undo touches nothing its rewind did not.

use std::collections::HashSet;

use super::RewindError;
use crate::wspath::beneath;

/// A path filter from `paths`: exact paths (and what lies beneath them) or globs.
pub(super) struct Filter {
    /// The globs; `None` matches everything.
    set: Option<globset::GlobSet>,
    /// The same paths taken literally: each matches itself and what lies beneath it.
    prefixes: Vec<Vec<u8>>,
    /// When set, exactly these paths (an undo: the paths the rewind touched).
    exact: Option<HashSet<Vec<u8>>>,
}

impl Filter {
    /// The filter of a request's `paths` (none: every path).
    ///
    /// # Errors
    /// `Failed` for a path outside the workspace (absolute, or with a `..` component) or a
    /// glob that does not parse.
    pub(super) fn new(paths: &[String]) -> Result<Filter, RewindError> {
        if paths.is_empty() {
            return Ok(Filter {
                set: None,
                prefixes: Vec::new(),
                exact: None,
            });
        }
        let mut b = globset::GlobSetBuilder::new();
        let mut prefixes = Vec::new();
        for wire in paths {
            // A path's wire form: a name that is not UTF-8 comes quoted (`wire_path.rs`), and
            // is matched exactly, as a path and what lies beneath it, never as a glob.
            let bytes = crate::wire_path::decode(wire);
            let Ok(p) = std::str::from_utf8(&bytes) else {
                let p = bytes.strip_prefix(b"./").unwrap_or(&bytes);
                let p = p.strip_suffix(b"/").unwrap_or(p);
                if p.starts_with(b"/") || p.split(|c| *c == b'/').any(|c| c == b"..") {
                    return Err(RewindError::Failed(format!(
                        "path {wire} is not inside the workspace"
                    )));
                }
                prefixes.push(p.to_vec());
                continue;
            };
            let p = p.trim_start_matches("./").trim_end_matches('/');
            if p.starts_with('/') || p.split('/').any(|c| c == "..") {
                return Err(RewindError::Failed(format!(
                    "path {p:?} is not inside the workspace"
                )));
            }
            prefixes.push(p.as_bytes().to_vec());
            b.add(
                globset::Glob::new(p)
                    .map_err(|e| RewindError::Failed(format!("bad glob {p:?}: {e}")))?,
            );
        }
        Ok(Filter {
            set: Some(b.build().map_err(|e| RewindError::Failed(e.to_string()))?),
            prefixes,
            exact: None,
        })
    }

    /// Exactly these paths, nothing beneath them (an undo: every path the rewind captured).
    pub(super) fn exactly(paths: HashSet<Vec<u8>>) -> Filter {
        Filter {
            set: None,
            prefixes: Vec::new(),
            exact: Some(paths),
        }
    }

    /// Whether the workspace-relative path `p` is one the rewind may touch.
    pub(super) fn matches(&self, p: &[u8]) -> bool {
        if let Some(exact) = &self.exact {
            return exact.contains(p);
        }
        let Some(set) = &self.set else { return true };
        self.prefixes.iter().any(|x| p == &x[..] || beneath(p, x))
            || set.is_match(crate::wspath::key_path(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_admits_its_paths_what_lies_beneath_and_its_globs_only() {
        let f = Filter::new(&["./src/".into(), "*.md".into()]).unwrap();
        for yes in ["src", "src/a.rs", "src/deep/b.rs", "README.md"] {
            assert!(f.matches(yes.as_bytes()), "{yes}");
        }
        for no in ["srcx", "lib/a.rs", "docs/a.txt"] {
            assert!(!f.matches(no.as_bytes()), "{no}");
        }
        assert!(Filter::new(&[]).unwrap().matches(b"anything"));
        for bad in ["/etc", "a/../../b", ".."] {
            assert!(Filter::new(&[bad.into()]).is_err(), "{bad}");
        }
        // A name that is not UTF-8, in its wire form: that path and what lies beneath it.
        let odd = Filter::new(&[crate::wire_path::encode(b"d\xff")]).unwrap();
        assert!(odd.matches(b"d\xff") && odd.matches(b"d\xff/x"));
        assert!(!odd.matches(b"d\xfe") && !odd.matches("d\u{fffd}".as_bytes()));
        let exact = Filter::exactly([b"a".to_vec()].into_iter().collect());
        assert!(exact.matches(b"a") && !exact.matches(b"a/b"));
    }
}
