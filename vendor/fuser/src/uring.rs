//! FUSE over io_uring (Linux ≥ 6.14 with `/sys/module/fuse/parameters/enable_uring` set).
//!
//! Added by rewindfs to the vendored fuser 0.18 (see `VENDORED.md`).
//!
//! The kernel keeps one request queue per possible CPU and hands a request to a ring entry of
//! the queue of the CPU its caller runs on. Serving each queue from threads pinned to that CPU
//! turns a round trip into two context switches on one CPU, where `/dev/fuse` needs two
//! cross-CPU wake-ups (each an IPI, and in a VM an exit from an idle vCPU).
//!
//! Until every queue has a registered entry the kernel keeps using `/dev/fuse`, and it always
//! sends FORGET and INTERRUPT there; the `/dev/fuse` threads of [`crate::Session::run`] keep
//! serving it, so a queue that fails to register only means the ring is not used.
//!
//! Layout of one ring entry (registered with `FUSE_IO_URING_CMD_REGISTER` as two iovecs):
//!
//! ```text
//! header (struct fuse_uring_req_header)   payload buffer
//! ┌────────────┬───────────┬──────────┐    ┌───────────────┬────────────────────────────┐
//! │ in_out 128 │ op_in 128 │ ent 32   │    │ FRONT (spare) │ payload (max_payload_sz)   │
//! └────────────┴───────────┴──────────┘    └───────────────┴────────────────────────────┘
//! ```
//!
//! A request arrives as its `fuse_in_header` in `in_out`, its first argument (the operation's
//! fixed struct) in `op_in` and the rest in the payload; the header and first argument are
//! copied into the spare room just before the payload so that the request is contiguous, as
//! `/dev/fuse` delivers it, without copying the payload. A reply's `fuse_out_header` goes to
//! `in_out` and everything after it to the payload.

use std::alloc::Layout;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::warn;
use parking_lot::Condvar;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::channel::Channel;
use crate::channel::ChannelSender;
use crate::ll::Operation;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;
const IN_OUT_HEADER_SZ: usize = 128;
const OP_IN_OUT_SZ: usize = 128;
const IN_HEADER_LEN: usize = 40;
const OUT_HEADER_LEN: usize = 16;
/// Room before the payload for the in-header and first argument of a request: a whole page,
/// so that the payload is page-aligned. The daemon copies a WRITE's payload into the page
/// cache of the file below; a source 168 bytes off the destination's alignment made that copy
/// (`rep movsb`) several times slower on AMD EPYC (1 GiB sequential write: 44% of two CPUs).
const FRONT: usize = 4096;
const _: () = assert!(FRONT >= IN_HEADER_LEN + OP_IN_OUT_SZ);
/// The kernel's `FUSE_MIN_READ_BUFFER`: no payload buffer may be smaller.
const MIN_PAYLOAD: usize = 8192;

/// `struct fuse_uring_ent_in_out`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct EntInOut {
    flags: u64,
    commit_id: u64,
    payload_sz: u32,
    padding: u32,
    reserved: u64,
}

/// `struct fuse_uring_req_header`.
#[repr(C, align(8))]
struct ReqHeader {
    in_out: [u8; IN_OUT_HEADER_SZ],
    op_in: [u8; OP_IN_OUT_SZ],
    ent: EntInOut,
}

/// `struct fuse_uring_cmd_req`, the 80-byte command area of the SQE.
fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    // flags (u64) stay 0
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

/// The ring settings chosen at the handshake.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UringSettings {
    /// Threads per CPU queue, each with `entries` ring entries.
    pub(crate) threads_per_queue: usize,
    /// Ring entries per thread.
    pub(crate) entries: usize,
    /// The kernel's `max_payload_sz` for this connection.
    pub(crate) payload: usize,
    /// Ring threads at `SCHED_IDLE` with a contention guard (see [`Placement`]).
    pub(crate) idle_placement: bool,
}

impl UringSettings {
    /// The payload size the kernel requires: `max(FUSE_MIN_READ_BUFFER, max_write,
    /// max_pages * PAGE_SIZE)`.
    pub(crate) fn new(
        threads_per_queue: usize,
        entries: usize,
        idle_placement: bool,
        max_write: u32,
        max_pages: u16,
    ) -> Self {
        let page = page_size::get();
        let payload = MIN_PAYLOAD
            .max(max_write as usize)
            .max(max_pages as usize * page);
        UringSettings {
            threads_per_queue: threads_per_queue.max(1),
            entries: entries.max(1),
            payload,
            idle_placement,
        }
    }
}

/// Whether the kernel lets this process use FUSE over io_uring (the module parameter).
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .map(|s| s.trim() == "Y" || s.trim() == "1")
        .unwrap_or(false)
}

/// The number of the kernel's queues: one per possible CPU.
pub(crate) fn possible_cpus() -> usize {
    let Ok(s) = std::fs::read_to_string("/sys/devices/system/cpu/possible") else {
        return std::thread::available_parallelism().map_or(1, |n| n.get());
    };
    let mut n = 0;
    for part in s.trim().split(',') {
        let mut it = part.split('-');
        let a: usize = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
        let b: usize = it.next().and_then(|x| x.parse().ok()).unwrap_or(a);
        n += b.saturating_sub(a) + 1;
    }
    n.max(1)
}

/// Where a ring thread's dispatch leaves its reply (fuser replies may be sent from any thread,
/// so the ring thread waits for it before committing).
#[derive(Debug)]
pub(crate) struct UringReply {
    dev: ChannelSender,
    state: Mutex<ReplyState>,
    sent: Condvar,
    /// The entry's payload buffer, while the request being served has no payload (nothing
    /// borrows that memory): a data reply may be written straight into it.
    direct: Mutex<Option<Direct>>,
}

/// The payload buffer of a ring entry.
#[derive(Debug, Clone, Copy)]
struct Direct {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: the pointer names the ring entry's payload buffer, which outlives every reply of its
// requests; it is handed out only while the entry's request is being served and no other
// reference to that memory exists (see `UringReply::direct`).
unsafe impl Send for Direct {}

#[derive(Debug, Default)]
struct ReplyState {
    sent: bool,
    buf: Vec<u8>,
    /// Set when the reply's data was written into the payload buffer directly: its length
    /// (`buf` then holds only the out header).
    direct_len: Option<usize>,
}

impl UringReply {
    fn new(dev: ChannelSender) -> Self {
        UringReply {
            dev,
            state: Mutex::new(ReplyState::default()),
            sent: Condvar::new(),
            direct: Mutex::new(None),
        }
    }

    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let mut s = self.state.lock();
        s.buf.clear();
        for d in data {
            s.buf.extend_from_slice(d);
        }
        s.direct_len = None;
        s.sent = true;
        self.sent.notify_one();
        Ok(())
    }

    /// The entry's payload buffer for a data reply of up to `size` bytes, if the request has
    /// no payload of its own and the buffer is large enough. The buffer is handed out once.
    pub(crate) fn direct(&self, size: usize) -> Option<(*mut u8, usize)> {
        let mut d = self.direct.lock();
        match *d {
            Some(Direct { ptr, cap }) if size <= cap => {
                *d = None;
                Some((ptr, size))
            }
            _ => None,
        }
    }

    /// Completes a reply whose `len` data bytes were written into the buffer from `direct`.
    pub(crate) fn send_direct(&self, unique: u64, len: usize) {
        let mut s = self.state.lock();
        s.buf.clear();
        s.buf
            .extend_from_slice(&((OUT_HEADER_LEN + len) as u32).to_ne_bytes());
        s.buf.extend_from_slice(&0i32.to_ne_bytes());
        s.buf.extend_from_slice(&unique.to_ne_bytes());
        s.direct_len = Some(len);
        s.sent = true;
        self.sent.notify_one();
    }

    pub(crate) fn dev(&self) -> &ChannelSender {
        &self.dev
    }
}

/// One registered ring entry: memory the kernel writes requests into and reads replies from.
struct Entry {
    header: *mut ReqHeader,
    /// `FRONT + payload` bytes, page-aligned.
    buf: *mut u8,
    buf_layout: Layout,
    payload: usize,
    /// The iovecs given at registration (the kernel reads them during the submit).
    iov: Box<[libc::iovec; 2]>,
    reply: Arc<UringReply>,
}

impl Entry {
    fn new(payload: usize, dev: ChannelSender) -> io::Result<Entry> {
        let hl = Layout::new::<ReqHeader>();
        let bl = Layout::from_size_align(FRONT + payload, 4096)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: both layouts have a non-zero size; a null result is checked.
        let (header, buf) = unsafe {
            (
                std::alloc::alloc_zeroed(hl).cast::<ReqHeader>(),
                std::alloc::alloc_zeroed(bl),
            )
        };
        if header.is_null() || buf.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        }
        let iov = Box::new([
            libc::iovec {
                iov_base: header.cast(),
                iov_len: hl.size(),
            },
            libc::iovec {
                // SAFETY: FRONT is inside the allocation.
                iov_base: unsafe { buf.add(FRONT) }.cast(),
                iov_len: payload,
            },
        ]);
        Ok(Entry {
            header,
            buf,
            buf_layout: bl,
            payload,
            iov,
            reply: Arc::new(UringReply::new(dev)),
        })
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts; the ring that could still write to them
        // is dropped (closed) before the entries (see `serve_queue`).
        unsafe {
            std::alloc::dealloc(self.header.cast(), Layout::new::<ReqHeader>());
            std::alloc::dealloc(self.buf, self.buf_layout);
        }
    }
}

/// Sets the SQE's `len` field, which `UringCmd80` does not expose: REGISTER passes its iovec
/// count there.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is `#[repr(C)]` over a 64-byte `io_uring_sqe` and 64 more bytes; `len`
    // is the u32 at offset 24 of `io_uring_sqe`. Any bit pattern is a valid SQE.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET checks nothing we rely on beyond the index,
    // which is below CPU_SETSIZE (checked).
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn build_ring(depth: u32) -> io::Result<IoUring<squeue::Entry128, cqueue::Entry>> {
    // One thread submits and reaps (single issuer); completions are delivered when it waits
    // (deferred task work), so a request wakes exactly that thread.
    match IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(depth)
    {
        Ok(r) => Ok(r),
        Err(_) => IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(depth),
    }
}

/// Serves queue `qid` from the calling thread until the connection ends.
pub(crate) fn serve_queue<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    dev: &Channel,
    qid: u16,
    settings: UringSettings,
    placement: &Placement,
) -> io::Result<()> {
    let r = serve_queue_inner(se, dev, qid, settings, placement);
    placement.leave();
    r
}

fn serve_queue_inner<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    dev: &Channel,
    qid: u16,
    settings: UringSettings,
    placement: &Placement,
) -> io::Result<()> {
    if let Err(e) = pin_to_cpu(qid as usize) {
        // Still correct, only slower: requests of this CPU wake a thread elsewhere.
        warn!("io_uring queue {qid}: cannot pin to CPU {qid}: {e}");
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    placement.join(tid);
    let n = settings.entries;
    let mut ents = Vec::with_capacity(n);
    for _ in 0..n {
        ents.push(Entry::new(settings.payload, dev.sender())?);
    }
    let mut ring = build_ring((n as u32).next_power_of_two().max(2))?;
    let fd = types::Fd(std::os::fd::AsFd::as_fd(dev).as_raw_fd());
    for (i, ent) in ents.iter().enumerate() {
        let sqe = opcode::UringCmd80::new(fd, FUSE_IO_URING_CMD_REGISTER)
            .cmd(cmd_req(0, qid))
            .addr(Some(ent.iov.as_ptr() as u64))
            .build()
            .user_data(i as u64);
        let sqe = with_len(sqe, 2);
        // SAFETY: the iovecs and the memory they name live in `ents`, which outlives `ring`
        // (dropped at the end of this function, after `ring`: see the explicit drop below).
        unsafe { ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    }
    ring.submit()?;
    debug!("io_uring queue {qid}: {n} entries registered");

    let result = run_ring(se, &mut ring, fd, &ents, qid, placement);
    drop(ring);
    drop(ents);
    result
}

fn run_ring<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    fd: types::Fd,
    ents: &[Entry],
    qid: u16,
    placement: &Placement,
) -> io::Result<()> {
    let mut live = ents.len();
    let mut ready: Vec<(usize, i32)> = Vec::with_capacity(ents.len());
    while live > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            // Interrupted, or completions must be reaped first: reap, then submit again.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => {
                // The queue's entries are lost with this thread; requests of this CPU would
                // wait for them. Nothing can unregister them, so say so loudly.
                log::error!("io_uring queue {qid}: waiting for requests failed: {e}");
                return Err(e);
            }
        }
        ready.clear();
        ready.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
        for &(i, res) in &ready {
            if res < 0 {
                // ENOTCONN: the connection ended (unmount, abort); anything else ends this entry.
                if res != -libc::ENOTCONN && res != -libc::ECANCELED && res != -libc::ENODEV {
                    warn!(
                        "io_uring queue {qid}: entry {i}: {}",
                        io::Error::from_raw_os_error(-res)
                    );
                }
                live -= 1;
                continue;
            }
            let Some(ent) = ents.get(i) else { continue };
            placement.request();
            let commit_id = handle(se, ent);
            let sqe = opcode::UringCmd80::new(fd, FUSE_IO_URING_CMD_COMMIT_AND_FETCH)
                .cmd(cmd_req(commit_id, qid))
                .build()
                .user_data(i as u64);
            // SAFETY: as for REGISTER: the entry's memory outlives the ring.
            unsafe { ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
    }
    Ok(())
}

/// Handles the request in `ent` and leaves its reply there; returns the commit id.
fn handle<FS: Filesystem>(se: &SessionEventLoop<FS>, ent: &Entry) -> u64 {
    // SAFETY: the kernel wrote the request before posting the CQE and does not touch the entry
    // again until it is committed; nothing else holds a reference to this memory.
    let (commit_id, payload_sz, total) = unsafe {
        let h = &*ent.header;
        let total = u32::from_ne_bytes(h.in_out[0..4].try_into().unwrap()) as usize;
        (h.ent.commit_id, h.ent.payload_sz as usize, total)
    };
    let unique = commit_id;
    let arg0 = total
        .checked_sub(IN_HEADER_LEN + payload_sz)
        .filter(|&a| a <= OP_IN_OUT_SZ && payload_sz <= ent.payload);
    let reply = &ent.reply;
    match arg0 {
        Some(arg0) => {
            let start = FRONT - IN_HEADER_LEN - arg0;
            // SAFETY: the header is copied into the spare room in front of the payload; the
            // slice covers `buf[start .. FRONT + payload_sz]`, all inside the allocation, and
            // lives only for the dispatch below (the reply is written elsewhere).
            let data = unsafe {
                let h = &*ent.header;
                std::ptr::copy_nonoverlapping(
                    h.in_out.as_ptr(),
                    ent.buf.add(start),
                    IN_HEADER_LEN,
                );
                std::ptr::copy_nonoverlapping(
                    h.op_in.as_ptr(),
                    ent.buf.add(start + IN_HEADER_LEN),
                    arg0,
                );
                std::slice::from_raw_parts(ent.buf.add(start), total)
            };
            if payload_sz == 0 {
                // SAFETY: FRONT is inside the allocation; the request slice ends at FRONT.
                *reply.direct.lock() = Some(Direct {
                    ptr: unsafe { ent.buf.add(FRONT) },
                    cap: ent.payload,
                });
            }
            match RequestWithSender::new(reply.dev.clone(), data) {
                Some(mut req) => {
                    if let Ok(Operation::Destroy(_)) = req.request.operation() {
                        req.reply::<crate::ReplyEmpty>().ok();
                    } else {
                        req.uring = Some(reply.clone());
                        // A panicking handler must not take the queue's thread with it: the
                        // kernel would wait for this entry forever. (Its reply, if unsent, is
                        // sent as EIO by the reply's drop during unwinding.)
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            req.dispatch(se);
                        }));
                        if r.is_err() && !reply.state.lock().sent {
                            error_reply(reply, unique, libc::EIO);
                        }
                    }
                }
                None => error_reply(reply, unique, libc::EIO),
            }
        }
        None => {
            warn!("io_uring: malformed request (len {total}, payload {payload_sz})");
            error_reply(reply, unique, libc::EIO);
        }
    }
    // Wait for the reply (sent by now unless the filesystem replies from another thread).
    let mut s = reply.state.lock();
    while !s.sent {
        reply.sent.wait(&mut s);
    }
    s.sent = false;
    // The payload buffer is the kernel's again once committed.
    *reply.direct.lock() = None;
    if let Some(len) = s.direct_len.take() {
        // SAFETY: as below; the data is already in the payload buffer.
        unsafe {
            let h = &mut *ent.header;
            h.in_out[..OUT_HEADER_LEN].copy_from_slice(&s.buf[..OUT_HEADER_LEN]);
            h.ent.payload_sz = len as u32;
        }
        return commit_id;
    }
    if s.buf.len() < OUT_HEADER_LEN || s.buf.len() - OUT_HEADER_LEN > ent.payload {
        warn!("io_uring: reply of {} bytes does not fit", s.buf.len());
        drop(s);
        error_reply(reply, unique, libc::EIO);
        s = reply.state.lock();
        s.sent = false;
    }
    let payload_sz = s.buf.len() - OUT_HEADER_LEN;
    // SAFETY: the request slice is gone; the kernel reads these buffers only after the commit.
    unsafe {
        let h = &mut *ent.header;
        h.in_out[..OUT_HEADER_LEN].copy_from_slice(&s.buf[..OUT_HEADER_LEN]);
        std::ptr::copy_nonoverlapping(
            s.buf.as_ptr().add(OUT_HEADER_LEN),
            ent.buf.add(FRONT),
            payload_sz,
        );
        h.ent.payload_sz = payload_sz as u32;
    }
    commit_id
}

fn error_reply(reply: &UringReply, unique: u64, errno: i32) {
    let mut h = [0u8; OUT_HEADER_LEN];
    h[0..4].copy_from_slice(&(OUT_HEADER_LEN as u32).to_ne_bytes());
    h[4..8].copy_from_slice(&(-errno).to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    let _ = reply.send(&[IoSlice::new(&h)]);
}

/// Where ring threads run, and at which priority.
///
/// A request wakes the ring thread of its caller's CPU, and the reply wakes the caller. When the
/// ring thread is an ordinary thread, the scheduler sees the caller's CPU busy (the ring thread
/// is still running as it replies) and wakes the caller on another, idle CPU: every round trip
/// then pays two cross-CPU wake-ups of an idle CPU (an IPI; in a VM whose idle vCPUs halt, an
/// exit and re-entry: 20-25 µs each, measured), and the caller wanders between CPUs. A CPU that
/// runs only `SCHED_IDLE` threads counts as idle for wake-up placement, so with ring threads at
/// `SCHED_IDLE` the caller is woken where it slept, preempting the ring thread, and both stay on
/// one CPU: a round trip is two context switches.
///
/// A `SCHED_IDLE` thread gets almost no CPU time while an ordinary thread wants the same CPU.
/// A guard thread checks every 10 ms, while requests flow, that no ring thread has been
/// runnable without running since the previous check; one that has makes every ring thread an
/// ordinary thread at once, for a calm period (1 s, doubled each time starvation comes back
/// soon after, up to a minute), after which they return to `SCHED_IDLE`. Without requests for a
/// second the guard sleeps until the next one.
///
/// Once the ring serves its first request, the `/dev/fuse` threads go to `SCHED_IDLE` too (and
/// stay there): from then on they are sent only FORGET and INTERRUPT. As ordinary threads, each
/// forget the kernel queued woke one, and it preempted the `SCHED_IDLE` ring thread serving the
/// caller (a quarter of the time of an `rm -rf`, whose every unlink is followed by a forget). At
/// `SCHED_IDLE` they read the queued forgets when a CPU is free, many at a time
/// (`BATCH_FORGET`). No caller waits for a forget, but until it comes the filesystem keeps what
/// it holds for the node (rewindfs: an open fd of each removed file, against a limit on open
/// files), so the guard watches these threads as it watches the ring threads: one starved makes
/// them all ordinary for the calm period. Before the first ring request (INIT and whatever the
/// kernel sends before every queue has registered) they are ordinary.
#[derive(Debug, Default)]
pub(crate) struct Placement {
    /// Whether ring threads start at `SCHED_IDLE` (off: they stay ordinary and no guard runs).
    idle: bool,
    /// The `/dev/fuse` threads (see the type's doc), and whether the ring has served a
    /// request: both under one lock, so a thread that joins after the first request is not
    /// missed.
    devfuse: Mutex<(Vec<libc::pid_t>, bool)>,
    /// The ring has served a request (read without the lock on each request).
    serving: std::sync::atomic::AtomicBool,
    threads: Mutex<Vec<Watched>>,
    /// Ring threads still serving.
    live: std::sync::atomic::AtomicUsize,
    requests: std::sync::atomic::AtomicU64,
    parked: std::sync::atomic::AtomicBool,
    stop: std::sync::atomic::AtomicBool,
    wake_lock: Mutex<()>,
    wake: Condvar,
}

/// A ring thread as the guard sees it.
#[derive(Debug)]
struct Watched {
    tid: libc::pid_t,
    /// Its CPU-time clock.
    clock: libc::clockid_t,
    /// `/proc/self/task/<tid>/stat`, for its state.
    stat: Option<std::fs::File>,
    last_cpu: u64,
    /// Runnable without CPU progress at the previous check.
    suspect: bool,
}

impl Watched {
    /// The calling thread (`tid`), if its CPU clock can be read.
    fn this_thread(tid: libc::pid_t) -> Option<Watched> {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self is this thread; the out-pointer is valid.
        let ok = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0;
        ok.then(|| Watched {
            tid,
            clock,
            stat: std::fs::File::open(format!("/proc/self/task/{tid}/stat")).ok(),
            last_cpu: 0,
            suspect: false,
        })
    }

    /// Whether the thread has been runnable without running since the previous check.
    fn starved(&mut self) -> bool {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock id of a live thread of this process and a valid timespec.
        if unsafe { libc::clock_gettime(self.clock, &mut ts) } != 0 {
            return false;
        }
        let cpu = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        let progressed = cpu != self.last_cpu;
        self.last_cpu = cpu;
        if progressed {
            self.suspect = false;
            return false;
        }
        let runnable = self.stat.as_ref().is_some_and(|f| {
            use std::os::unix::fs::FileExt;
            let mut buf = [0u8; 256];
            let Ok(n) = f.read_at(&mut buf, 0) else {
                return false;
            };
            // "tid (comm) S ...": the state follows the last ')'.
            let b = &buf[..n];
            b.iter()
                .rposition(|&c| c == b')')
                .and_then(|i| b.get(i + 2))
                .is_some_and(|&c| c == b'R')
        });
        let starved = runnable && self.suspect;
        self.suspect = runnable;
        starved
    }
}

/// How often the guard looks at the ring threads while requests flow.
const GUARD_EVERY: std::time::Duration = std::time::Duration::from_millis(10);
/// How long ring threads stay ordinary after starvation, at first and at most.
const GUARD_CALM: std::time::Duration = std::time::Duration::from_secs(1);
const GUARD_CALM_MAX: std::time::Duration = std::time::Duration::from_secs(60);
/// Checks without a request before the guard sleeps.
const GUARD_QUIET_CHECKS: u32 = 100;

impl Placement {
    pub(crate) fn new(idle: bool) -> Self {
        // The guard must be able to make a starved ring thread ordinary again: without
        // CAP_SYS_NICE (or an RLIMIT_NICE of 20) a thread cannot leave SCHED_IDLE.
        let idle = idle && can_leave_idle();
        Placement {
            idle,
            ..Default::default()
        }
    }

    /// Called by each ring thread as it starts.
    fn join(&self, tid: libc::pid_t) {
        use std::sync::atomic::Ordering;
        self.live.fetch_add(1, Ordering::SeqCst);
        if !self.idle {
            return;
        }
        if let Some(w) = Watched::this_thread(tid) {
            self.threads.lock().push(w);
            set_policy(tid, libc::SCHED_IDLE);
        }
    }

    /// Called by each ring thread as it ends.
    fn leave(&self) {
        use std::sync::atomic::Ordering;
        if self.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.stop.store(true, Ordering::SeqCst);
            self.unpark();
        }
    }

    /// Called by each `/dev/fuse` thread as it starts: it goes to `SCHED_IDLE` once the ring
    /// serves (see the type's doc), and the guard watches it as it watches the ring threads.
    pub(crate) fn join_devfuse(&self) {
        if !self.idle {
            return;
        }
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let Some(w) = Watched::this_thread(tid) else {
            return; // unwatched, it stays an ordinary thread
        };
        let mut d = self.devfuse.lock();
        self.threads.lock().push(w);
        d.0.push(tid);
        if d.1 {
            set_policy(tid, libc::SCHED_IDLE);
        }
    }

    /// The ring's first request: the `/dev/fuse` threads go to `SCHED_IDLE`.
    #[cold]
    fn ring_serves(&self) {
        use std::sync::atomic::Ordering;
        let mut d = self.devfuse.lock();
        if !d.1 {
            d.1 = true;
            for &tid in &d.0 {
                set_policy(tid, libc::SCHED_IDLE);
            }
            debug!("io_uring: the ring serves; {} /dev/fuse threads at SCHED_IDLE", d.0.len());
        }
        self.serving.store(true, Ordering::Relaxed);
    }

    #[inline]
    fn request(&self) {
        use std::sync::atomic::Ordering;
        if self.idle && !self.serving.load(Ordering::Relaxed) {
            self.ring_serves();
        }
        self.requests.fetch_add(1, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            self.unpark();
        }
    }

    fn unpark(&self) {
        use std::sync::atomic::Ordering;
        self.parked.store(false, Ordering::SeqCst);
        let _g = self.wake_lock.lock();
        self.wake.notify_all();
    }

    /// The guard's loop (see the type's doc); returns when every ring thread has ended.
    pub(crate) fn guard(&self) {
        use std::sync::atomic::Ordering;
        use std::time::Instant;
        if !self.idle {
            return;
        }
        let mut last = u64::MAX;
        let mut quiet = 0;
        // When ring threads became ordinary, and for how long.
        let mut ordinary: Option<(Instant, std::time::Duration)> = None;
        let mut calm = GUARD_CALM;
        let mut idle_since = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            std::thread::sleep(GUARD_EVERY);
            let n = self.requests.load(Ordering::SeqCst);
            if n == last && ordinary.is_none() {
                quiet += 1;
                if quiet >= GUARD_QUIET_CHECKS {
                    self.parked.store(true, Ordering::SeqCst);
                    let mut g = self.wake_lock.lock();
                    if self.requests.load(Ordering::SeqCst) == last {
                        while self.parked.load(Ordering::SeqCst)
                            && !self.stop.load(Ordering::SeqCst)
                        {
                            self.wake.wait(&mut g);
                        }
                    }
                    self.parked.store(false, Ordering::SeqCst);
                    quiet = 0;
                }
                continue;
            }
            quiet = 0;
            last = n;
            match ordinary {
                Some((since, d)) => {
                    if since.elapsed() >= d {
                        ordinary = None;
                        idle_since = Instant::now();
                        let mut ts = self.threads.lock();
                        for t in ts.iter_mut() {
                            t.suspect = false;
                            set_policy(t.tid, libc::SCHED_IDLE);
                        }
                    }
                }
                None => {
                    let mut ts = self.threads.lock();
                    let mut starved = false;
                    for t in ts.iter_mut() {
                        starved |= t.starved();
                    }
                    if starved {
                        // Starved again soon after the last calm period: stay ordinary longer.
                        calm = if idle_since.elapsed() < calm * 2 {
                            (calm * 2).min(GUARD_CALM_MAX)
                        } else {
                            GUARD_CALM
                        };
                        debug!("io_uring: a ring thread was starved; ordinary for {calm:?}");
                        for t in ts.iter() {
                            set_policy(t.tid, libc::SCHED_OTHER);
                        }
                        ordinary = Some((Instant::now(), calm));
                    }
                }
            }
        }
    }
}

/// Whether a thread of this process may go from `SCHED_IDLE` back to `SCHED_OTHER` (tried on
/// a short-lived probe thread).
fn can_leave_idle() -> bool {
    std::thread::spawn(|| {
        // SAFETY: sched_param is plain data; the calls change only this probe thread.
        unsafe {
            let p: libc::sched_param = std::mem::zeroed();
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) == 0
                && libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) == 0
        }
    })
    .join()
    .unwrap_or(false)
}

fn set_policy(tid: libc::pid_t, policy: libc::c_int) {
    // SAFETY: sched_param is plain data; sched_setscheduler on a thread of this process.
    let r = unsafe {
        let p: libc::sched_param = std::mem::zeroed();
        libc::sched_setscheduler(tid, policy, &p)
    };
    if r != 0 {
        debug!(
            "io_uring: scheduling policy {policy} for thread {tid}: {}",
            io::Error::last_os_error()
        );
    }
}
