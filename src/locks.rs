//! Taking a `std::sync` lock, one way everywhere: a lock whose holder panicked stops the
//! caller, with a message that says what happened and what to do.
//!
//! Why fail closed rather than take the data as it is: what these locks guard — the inode
//! table, the current checkpoint and the paths captured in it, the change log's buffer, the
//! journal's pending records, the adoption table — may be half-updated by the panic, and a
//! change recorded against it could be saved without its pre-image or under the wrong
//! checkpoint. What the next mount trusts is on disk (the journal, the plans of unfinished
//! rewinds), and it finishes what was in flight; so the safe answer to a poisoned lock is to
//! serve nothing more from this process. Locks that guard no data (`Mutex<()>`, which only
//! serialise) follow the same rule, so that no reader has to know which kind it holds.

use std::sync::{LockResult, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// What a poisoned lock tells whoever meets it.
const POISONED: &str = "rewindfs: a lock is poisoned: a request panicked while holding it, so \
what it guards may be half-updated; this daemon serves nothing more from it. Unmount \
(`fusermount3 -u DIR`) and mount again: the next mount finishes any rewind in flight and \
replays the journal. Please report the panic above.";

/// [`Mutex::lock`], failing closed (see the module doc).
pub trait Locked<T: ?Sized> {
    /// Takes the lock; panics if a holder panicked.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    #[track_caller]
    fn locked(&self) -> MutexGuard<'_, T> {
        match self.lock() {
            Ok(g) => g,
            Err(_) => poisoned(),
        }
    }
}

/// [`RwLock::read`] and [`RwLock::write`], failing closed (see the module doc).
pub trait RwLocked<T: ?Sized> {
    /// Takes the lock shared; panics if a holder panicked.
    fn shared(&self) -> RwLockReadGuard<'_, T>;
    /// Takes the lock exclusively; panics if a holder panicked.
    fn exclusive(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLocked<T> for RwLock<T> {
    #[track_caller]
    fn shared(&self) -> RwLockReadGuard<'_, T> {
        match self.read() {
            Ok(g) => g,
            Err(_) => poisoned(),
        }
    }

    #[track_caller]
    fn exclusive(&self) -> RwLockWriteGuard<'_, T> {
        match self.write() {
            Ok(g) => g,
            Err(_) => poisoned(),
        }
    }
}

/// What any other call that reports poisoning gives (a `Condvar` wait, `Mutex::into_inner`),
/// failing closed.
#[track_caller]
pub fn held<G>(r: LockResult<G>) -> G {
    match r {
        Ok(g) => g,
        Err(_) => poisoned(),
    }
}

#[cold]
#[track_caller]
fn poisoned() -> ! {
    tracing::error!("{POISONED}");
    panic!("{POISONED}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn poison<L: Send + Sync + 'static>(l: Arc<L>, hold: fn(&L)) {
        let h = std::thread::spawn(move || hold(&l));
        assert!(h.join().is_err(), "the holder was meant to panic");
    }

    #[test]
    fn a_lock_works_as_usual_until_a_holder_panics_then_every_taker_stops() {
        let m = Arc::new(Mutex::new(1));
        *m.locked() += 1;
        assert_eq!(*m.locked(), 2);
        poison(m.clone(), |m| {
            let _g = m.locked();
            panic!("a request's bug");
        });
        let e = std::panic::catch_unwind(|| *m.locked()).unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("poisoned") && msg.contains("mount again"),
            "{msg}"
        );

        let rw = Arc::new(RwLock::new(()));
        drop(rw.shared());
        drop(rw.exclusive());
        poison(rw.clone(), |l| {
            let _g = l.exclusive();
            panic!("a request's bug");
        });
        assert!(std::panic::catch_unwind(|| drop(rw.shared())).is_err());
        assert!(std::panic::catch_unwind(|| drop(rw.exclusive())).is_err());
    }
}
