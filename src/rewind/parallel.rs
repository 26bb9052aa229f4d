//! Work on many paths at once: planning a rewind reads and compares each path on its own,
//! mostly in system calls, so a few threads cut its time (on 2 cores, a 10k-path plan took
//! 300-440 ms instead of 440-570 ms). Results come back in the items' order, so callers put together the same outcome
//! as one thread would.

/// Fewest items a thread of [`map`] is given: below, starting it costs more than it
/// saves.
const PER_THREAD_MIN: usize = 16;

/// `f` of every item, in order, computed on up to 4 threads (as many as there are CPUs). A
/// thread that cannot be started leaves its share to this one: running out of threads never
/// fails the work (a panic here would poison the rewinder's lock until the next mount).
pub(super) fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cpus.min(4).min(items.len() / PER_THREAD_MIN).max(1);
    if threads == 1 {
        return items.iter().map(&f).collect();
    }
    let per = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let f = &f;
        let shares: Vec<_> = items
            .chunks(per)
            .map(|chunk| {
                let started = std::thread::Builder::new()
                    .spawn_scoped(s, move || chunk.iter().map(f).collect::<Vec<R>>());
                (chunk, started.ok())
            })
            .collect();
        shares
            .into_iter()
            .flat_map(|(chunk, thread)| match thread.map(|t| t.join()) {
                Some(Ok(v)) => v,
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => chunk.iter().map(f).collect(),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Results are in the items' order whatever the number of threads, and each item is
    /// seen once: the counts below and above the threshold, and one not a multiple of it.
    #[test]
    fn every_item_is_mapped_once_in_order() {
        for n in [0, 1, PER_THREAD_MIN - 1, PER_THREAD_MIN * 2, 1001] {
            let items: Vec<usize> = (0..n).collect();
            let seen = std::sync::atomic::AtomicUsize::new(0);
            let out = map(&items, |i| {
                seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (*i, std::thread::current().id())
            });
            assert_eq!(out.iter().map(|(i, _)| *i).collect::<Vec<_>>(), items);
            assert_eq!(seen.into_inner(), n);
            if n >= PER_THREAD_MIN * 2
                && std::thread::available_parallelism().is_ok_and(|c| c.get() > 1)
            {
                let threads: std::collections::HashSet<_> = out.iter().map(|(_, t)| *t).collect();
                assert!(threads.len() > 1, "{n} items were all mapped on one thread");
            }
        }
    }
}
