//! The blocking I/O pool (`static.io_threads`): what may wait for a disk —
//! opening a file that missed the open-file table, reading file pages that
//! are not in the page cache — runs here instead of on a reactor, as
//! nginx's `aio threads` and h2o do.
//!
//! A task comes back through its [`Ticket`]: the pool thread stores the
//! result and signals the ticket's eventfd, which the connection's engine
//! watches as the connection's second descriptor (like a request waiting
//! for a pooled FastCGI connection), so the connection resumes on its own
//! worker and the reactor never blocks. Only a reactor (the event engine)
//! lends this pool to its connections; a thread that may block does its
//! I/O itself.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::open_files::OpenFile;
use crate::resolve::{Found, ResolveError, Root};
use crate::sys;

/// Work for the pool.
pub enum Task {
    /// Resolve `path[..rel_len]` under `root` (`Root::find`; `path` is
    /// the open-file table's path, which may end in `/`).
    Open { root: Arc<Root>, path: Vec<u8>, rel_len: usize, trailing_slash: bool },
    /// Read `len` bytes at `offset` (bringing them into the page cache too).
    Read { file: Arc<OpenFile>, offset: u64, len: usize },
}

/// A task's result.
pub enum Done {
    Opened(Result<Found, ResolveError>),
    /// The bytes read; a file that ended early is an `UnexpectedEof` error.
    Read(io::Result<Vec<u8>>),
}

/// A task handed to the pool; its eventfd becomes readable when the result
/// is in.
pub struct Ticket {
    done: Mutex<Option<Done>>,
    event: OwnedFd,
}

impl Ticket {
    /// What the waiting connection's engine watches.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }

    /// The result, once the pool has finished.
    pub fn take(&self) -> Option<Done> {
        lock(&self.done).take()
    }
}

struct Queue {
    tasks: VecDeque<(Task, Arc<Ticket>)>,
    stopping: bool,
}

struct Inner {
    queue: Mutex<Queue>,
    more: Condvar,
}

/// The pool: its threads live until it is dropped.
pub struct Offload {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Offload {
    /// Starts `threads` threads.
    pub fn start(threads: usize) -> io::Result<Offload> {
        let inner = Arc::new(Inner {
            queue: Mutex::new(Queue { tasks: VecDeque::new(), stopping: false }),
            more: Condvar::new(),
        });
        let mut pool = Offload { inner, threads: Vec::with_capacity(threads) };
        for i in 0..threads {
            let inner = pool.inner.clone();
            let thread = std::thread::Builder::new().name(format!("tern-io-{i}")).spawn(move || serve(&inner))?;
            pool.threads.push(thread);
        }
        Ok(pool)
    }

    /// Queues `task`; the caller watches the ticket's descriptor. Fails
    /// only when no eventfd can be made (the caller then does the I/O
    /// itself).
    pub fn submit(&self, task: Task) -> io::Result<Arc<Ticket>> {
        let event = sys::eventfd()?;
        let ticket = Arc::new(Ticket { done: Mutex::new(None), event });
        lock(&self.inner.queue).tasks.push_back((task, ticket.clone()));
        self.inner.more.notify_one();
        Ok(ticket)
    }
}

impl Drop for Offload {
    /// Stops the threads after the task each is doing (queued ones are
    /// dropped: their connections are gone with the workers).
    fn drop(&mut self) {
        lock(&self.inner.queue).stopping = true;
        self.inner.more.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One pool thread: takes tasks until the pool stops.
fn serve(inner: &Inner) {
    let mut scratch = Vec::with_capacity(256);
    loop {
        let (task, ticket) = {
            let mut q = lock(&inner.queue);
            loop {
                if q.stopping {
                    return;
                }
                if let Some(next) = q.tasks.pop_front() {
                    break next;
                }
                q = inner.more.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        let done = match task {
            Task::Open { root, path, rel_len, trailing_slash } => {
                Done::Opened(root.find(&path[..rel_len], trailing_slash, &mut scratch))
            }
            Task::Read { file, offset, len } => {
                let mut buf = vec![0; len];
                let read = file.file.read_exact_at(&mut buf, offset).map(|()| buf);
                Done::Read(read.map_err(|e| if e.kind() == io::ErrorKind::UnexpectedEof { file.shrank() } else { e }))
            }
        };
        *lock(&ticket.done) = Some(done);
        sys::signal_eventfd(ticket.fd());
    }
}
