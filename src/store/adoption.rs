//! Adoption: the state machine that keeps the content of a file about to lose its last name
//! (an unlink, a rename over it, a rewind replacing it) by hard-linking the file into the store
//! under a pending key instead of reading and copying it — so `rm -rf` of a tree reads no data on
//! the request path. One type owns every state; the steps run in three places (the FUSE
//! request that removes the name, the capture journal, the flusher), which is why the states
//! must live here and nowhere else:
//!
//! ```text
//!            adopt (link under pending/KEY, before the change; KEY is InFlight,
//!              │     and remembered under the path until the change is done)
//!      ┌───────┴────────┐
//!   settle           unshare (the change failed: the file lives on and may change,
//!  (the change         │      so the pending file is made a copy of its own)
//!   happened: the      │
//!   link is the only   └──► settle
//!   name left)
//!      │
//!   resolve (the flusher, when the journal record naming KEY is applied: waits until KEY is
//!      │     settled, hashes the file, links it under its hash; a file still linked elsewhere
//!      │     is copied instead) → Resolved(hash)
//!   finish  (the record is in the database and out of the journal: the pending name goes)
//! ```
//!
//! Invariants, under the one lock of [`Adoptions`]:
//! - a key is in `in_flight` from before its link exists until it is settled: no resolver takes
//!   a file for settled while the change that removes its name may still be running;
//! - `by_path` holds at most one key per path (a second adoption of a path settles the first),
//!   and every key taken out of it is settled;
//! - `resolved` holds a key from its hashing until `finish`: a batch applied again after a
//!   failure finds the hash although the pending file may be gone.

use crate::locks::Locked;
use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The pending keys and what each is waiting for.
#[derive(Debug, Default)]
struct Table {
    /// Keys whose change is in flight: the pending file may still be the live file.
    in_flight: HashSet<String>,
    /// Keys adopted for a path whose change has not happened yet, by path (the recorder's
    /// side: `after` settles, `failed` unshares).
    by_path: HashMap<Vec<u8>, String>,
    /// Keys already hashed → their hash, until the batch that named them is in the database.
    resolved: HashMap<String, String>,
    /// Resolvers waiting in [`Adoptions::wait_settled`]: a settle with none skips the wake-up
    /// (a system call even when nobody waits, once per removal on the request path).
    waiting: usize,
}

/// Every adoption in flight in one store (see the module doc).
#[derive(Debug, Default)]
pub struct Adoptions {
    table: Mutex<Table>,
    /// Signalled when a key is settled.
    settled: Condvar,
}

impl Adoptions {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic elsewhere never leaves the table half-updated: each method is one step.
        self.table.locked()
    }

    /// `key` is about to be linked to a file whose name is about to go: in flight.
    pub fn begin(&self, key: &str) {
        self.lock().in_flight.insert(key.to_string());
    }

    /// The change `key` was linked for has happened, or failed and the pending file was made
    /// a copy: the resolver may take it.
    pub fn settle(&self, key: &str) {
        let mut t = self.lock();
        if t.in_flight.remove(key) && t.waiting > 0 {
            drop(t);
            self.settled.notify_all();
        }
    }

    /// The capture of `path` adopted its file under `key` and its row is recorded; returns the
    /// key an earlier adoption of the path left unsettled (the caller settles it).
    pub fn remember(&self, path: &[u8], key: String) -> Option<String> {
        self.lock().by_path.insert(path.to_vec(), key)
    }

    /// The key adopted for `path`, taken out (its change has happened or failed).
    pub fn take(&self, path: &[u8]) -> Option<String> {
        self.lock().by_path.remove(path)
    }

    /// Waits up to `wait` for `key` to be settled; whether it was.
    pub fn wait_settled(&self, key: &str, wait: Duration) -> bool {
        let mut g = self.lock();
        if !g.in_flight.contains(key) {
            return true;
        }
        // Counted under the lock before waiting, so a settle after this sees it.
        g.waiting += 1;
        let (mut g, _) = crate::locks::held(
            self.settled
                .wait_timeout_while(g, wait, |t| t.in_flight.contains(key)),
        );
        g.waiting -= 1;
        !g.in_flight.contains(key)
    }

    /// The hash `key` was resolved to, if it was.
    pub fn resolved(&self, key: &str) -> Option<String> {
        self.lock().resolved.get(key).cloned()
    }

    /// `key` hashes to `hash` (kept until [`Adoptions::finish`]).
    pub fn set_resolved(&self, key: &str, hash: &str) {
        self.lock()
            .resolved
            .insert(key.to_string(), hash.to_string());
    }

    /// The records naming these keys are in the database and out of the journal: returns those
    /// that were resolved, whose pending files may go now.
    pub fn finish<'a>(&self, keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut t = self.lock();
        keys.into_iter()
            .filter(|k| t.resolved.remove(*k).is_some())
            .map(str::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// The lifecycle in order: a resolver waits for the settle (and gives up after its
    /// timeout), one key per path, and finish hands back only what was resolved.
    #[test]
    fn an_adoption_goes_adopt_settle_resolve_finish() {
        let a = Arc::new(Adoptions::default());
        a.begin("pending/k1");
        assert!(
            !a.wait_settled("pending/k1", Duration::from_millis(20)),
            "in flight"
        );
        assert_eq!(a.remember(b"f", "pending/k1".into()), None);
        assert_eq!(
            a.remember(b"f", "pending/k2".into()).as_deref(),
            Some("pending/k1"),
            "a second adoption of a path hands the first back"
        );
        let waiter = {
            let a = a.clone();
            std::thread::spawn(move || a.wait_settled("pending/k1", Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(20));
        a.settle("pending/k1");
        assert!(waiter.join().unwrap(), "the settle wakes the resolver");
        assert_eq!(a.take(b"f").as_deref(), Some("pending/k2"));
        assert_eq!(a.take(b"f"), None);
        a.set_resolved("pending/k1", "abc");
        assert_eq!(a.resolved("pending/k1").as_deref(), Some("abc"));
        assert_eq!(
            a.finish(["pending/k1", "pending/k9"]),
            vec!["pending/k1".to_string()]
        );
        assert_eq!(a.resolved("pending/k1"), None);
    }
}
