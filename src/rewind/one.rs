//! One at a time: the guard every plan, apply, look at the past and gc pass holds.
//!
//! Why one at a time: a plan names blobs — some it put together itself (a file completed from a
//! chain of range pre-images, a moved file's content) — that gc, or the end of another plan,
//! must not remove under it; and a look at the past reads blobs gc could drop.
//!
//! Why a type and not a `Mutex<()>` taken by convention: what a plan puts together (the
//! scratch list, a look's in-memory content) lives *inside* the lock, in [`Plans`], and the
//! functions that put content together or read it back take `&mut One`; so none of them can be
//! called without holding the lock. Dropping the guard removes what the plans put together
//! that nothing else names ([`One::discard`]): forgetting it cannot leak a blob either.
//!
//! Lock order: first, before the capture gate (`capture::Recorder`).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::capture::Recorder;
use crate::locks::Locked;
use crate::store::BlobRef;

/// What the plans of the current holder put together; reachable only through [`One`].
#[derive(Default)]
pub(super) struct Plans {
    /// Blobs a plan stored for its own use (see [`One::discard`]).
    scratch: Vec<BlobRef>,
    /// While a dry run or diff looks (from its plan to `discard`): the content its plan put
    /// together, by hash, kept here instead of in the store — a look writes nothing to the
    /// store. `None` otherwise.
    looked: Option<HashMap<String, Vec<u8>>>,
}

/// The lock itself, owned by the ground both services share.
#[derive(Default)]
pub(super) struct OneAtATime(Mutex<Plans>);

impl OneAtATime {
    /// Waits for the previous holder, then holds the right to plan, apply or look.
    pub(super) fn take<'a>(&'a self, recorder: &'a Recorder) -> One<'a> {
        One {
            plans: self.0.locked(),
            recorder,
        }
    }
}

/// Held while a plan, apply, look or gc pass runs; see the module doc.
pub(super) struct One<'a> {
    plans: MutexGuard<'a, Plans>,
    /// Removes a plan's blobs under the capture lock.
    recorder: &'a Recorder,
}

impl One<'_> {
    /// From now until [`One::discard`], what a plan puts together stays in memory.
    pub(super) fn look(&mut self) {
        self.plans.looked.get_or_insert_with(Default::default);
    }

    /// Whether the current plan is a look (a dry run or a diff).
    pub(super) fn looking(&self) -> bool {
        self.plans.looked.is_some()
    }

    /// Keeps content a look put together and names it; `None` when a real rewind plans (the
    /// content goes to the store then).
    pub(super) fn keep_looked(&mut self, content: Vec<u8>) -> Option<BlobRef> {
        let m = self.plans.looked.as_mut()?;
        let h = crate::store::blobs::content_hash(&content);
        m.insert(h.clone(), content);
        Some(BlobRef::hash(h))
    }

    /// The content a look put together under `b`, if it did.
    pub(super) fn looked(&self, b: &BlobRef) -> Option<Vec<u8>> {
        self.plans.looked.as_ref()?.get(b.as_str()).cloned()
    }

    /// Blobs a plan stored for its own use: removed by [`One::discard`] unless something else
    /// names them by then.
    pub(super) fn scratch(&mut self, blobs: impl IntoIterator<Item = BlobRef>) {
        self.plans.scratch.extend(blobs);
    }

    /// Removes the blob files the plans since the last call put together that no capture names
    /// and no unfinished rewind's plan names: nothing needs them once the rewind is applied (or
    /// has failed, leaving its plan for the next mount), or the dry run or diff has read them.
    /// A crash before that leaves them to the next gc's sweep.
    pub(super) fn discard(&mut self) {
        self.plans.looked = None;
        let hashes = std::mem::take(&mut self.plans.scratch);
        if let Err(e) = self.recorder.discard_unreferenced(&hashes) {
            tracing::warn!("removing a plan's transient blobs: {e}");
        }
    }
}

impl Drop for One<'_> {
    fn drop(&mut self) {
        self.discard();
    }
}
