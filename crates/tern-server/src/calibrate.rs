//! Measures which I/O method sends each file-size class fastest on this
//! host: a file of the class's typical size ([`representative`]) is sent again and again
//! through the real output queue (`body.rs`) to reader threads over a few
//! loopback connections at once, each method in turn, in rotating order
//! for a few rounds; the fastest method wins.
//!
//! A sample's cost is the larger of the CPU time the sender and the readers
//! used and its wall time less the time they waited for a CPU (schedstat):
//! on an idle machine that is the wall time, stalls included; on a machine busy with
//! other work, waiting for a CPU is not the method's fault, but the CPU it
//! needs is what the server will be short of. A method's rate is the median
//! of its rounds, not the best: a slice lasts milliseconds, and a method
//! whose rate swings (sendfile of large files here, 1.0-3.0 k/s against
//! mmap's steadier 1.8-4.5 k/s) would otherwise win on one lucky slice.
//! A sample ends only
//! when the peer has acknowledged every byte, so data parked in a large send
//! buffer is not counted as sent. The reader stands for the clients: it
//! runs on the same host, as a benchmark client would, so work the kernel
//! moves to the receiving side counts too, and it may run on any CPU, not
//! only those the server is pinned to.
//!
//! The `uring` method (measured for the `uring` engine only) goes as that
//! engine sends it: each file region read through a ring into a buffer,
//! which a `sendmsg` through the ring takes, the queue's own code
//! (`OutQueue::gather_into`, `insert_read`) doing the rest.

use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use io_uring::{opcode, types::Fd, IoUring};

use crate::body::{Flushed, OutQueue, Sending};
use crate::limits::Limits;
use crate::open_files::OpenFile;
use crate::static_io::{index, to_measure, ClassChoice, METHODS};
use crate::static_io::{IoMethod, StaticFiles};
use crate::sys;

/// Rounds per class and method (their median is kept).
const ROUNDS: usize = 5;

/// A typical static response head, sent before each body.
const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nServer: tern\r\nDate: Tue, 24 Nov 2026 20:00:00 GMT\r\n\
Content-Type: application/octet-stream\r\nLast-Modified: Tue, 24 Nov 2026 19:00:00 GMT\r\n\
ETag: \"6744f1e0.0-100000\"\r\nAccept-Ranges: bytes\r\nContent-Length: 1048576\r\n\r\n";

/// Measures `methods` for the classes of `choices` left to it
/// (`static_io::to_measure`: above `static_io::SMALL` and not configured)
/// within `budget` (the files and connections it prepares included); the
/// others keep their choice. Returns the choice per class.
///
/// Every round measures each method once per class; a round that would
/// not end within the budget (judged by the longest so far: on a busy
/// machine a slice's responses take longer to finish than the slice) is
/// not started, so a calibration ends on time with fewer rounds rather
/// than late.
///
/// Each class is sent with the unsent bound the server's connections
/// settle at for its size ([`Limits::settled_unsent`]): the rig keeps its
/// sockets full, so the bound, not the request/response rhythm of the
/// server's clients, is what limits how much waits in each.
pub fn run(
    bounds: &[u64],
    mut choices: Vec<ClassChoice>,
    methods: &[IoMethod],
    budget: Duration,
    st: &StaticFiles,
    limits: &Limits,
) -> io::Result<Vec<ClassChoice>> {
    let start = Instant::now();
    let measured: Vec<usize> = (0..choices.len()).filter(|&i| to_measure(&choices[i])).collect();
    if measured.is_empty() {
        return Ok(choices);
    }
    let files =
        measured.iter().map(|&i| OpenFile::temporary(representative(bounds, i))).collect::<io::Result<Vec<_>>>()?;
    let mut rig = Rig::new(st)?;
    // One warm-up slice per class, then ROUNDS slices per class and method,
    // out of what the preparation left of the budget.
    let slices = (measured.len() * (1 + ROUNDS * methods.len())) as u32;
    let slice = budget.saturating_sub(start.elapsed()) / slices;
    let mut rates = vec![[[0.0; ROUNDS]; METHODS.len()]; measured.len()];
    for file in &files {
        rig.sample(file, IoMethod::Sendfile, slice, limits)?;
    }
    let (mut longest, mut rounds) = (Duration::ZERO, 0);
    while rounds < ROUNDS {
        let round_start = Instant::now();
        if rounds > 0 && round_start + longest > start + budget {
            break;
        }
        for (k, file) in files.iter().enumerate() {
            for j in 0..methods.len() {
                let m = methods[(j + rounds + k) % methods.len()];
                rates[k][index(m)][rounds] = rig.sample(file, m, slice, limits)?;
            }
        }
        longest = longest.max(round_start.elapsed());
        rounds += 1;
    }
    rig.finish();
    for (k, &class) in measured.iter().enumerate() {
        let (pick, typical) = judge(&rates[k], rounds, index(choices[class].method));
        choices[class] = ClassChoice { method: METHODS[pick], basis: "measured", rates: Some(typical) };
    }
    Ok(choices)
}

/// How far ahead of the class's safe choice (`sendfile`) another method's
/// median must be to replace it. A sample lasts milliseconds, and on the
/// project's 2-CPU machine one method's samples within one calibration
/// spread 2-5x: of 23 start-ups, five sent the `<= 256KiB` class by mmap or
/// read on a lead of 1.04-1.13x (one of 1.48x), and that method then served
/// 40 KiB files about 25 % slower than sendfile under load, while the
/// larger class's winner (mmap, 1.2-1.3x sendfile under load) led by
/// 1.31-2.5x in every one (`bench/RESULTS.md`, 2026-11-27).
pub const LEAD_TO_SWITCH: f64 = 1.15;

/// Each method's median rate over the `rounds` that ran, and the index of
/// the method chosen: the fastest, unless the one in place (`incumbent`)
/// is within [`LEAD_TO_SWITCH`] of it.
fn judge(rates: &[[f64; ROUNDS]; METHODS.len()], rounds: usize, incumbent: usize) -> (usize, [f64; METHODS.len()]) {
    let typical = rates.map(|r| median(&r[..rounds]));
    let best = (0..typical.len()).max_by(|&a, &b| typical[a].total_cmp(&typical[b])).unwrap_or(0);
    let pick = if typical[best] > typical[incumbent] * LEAD_TO_SWITCH { best } else { incumbent };
    (pick, typical)
}

/// The middle of `rates` (the mean of the two middle ones for an even
/// count; 0 for none). `tern tune` judges its rounds with it too.
pub fn median(rates: &[f64]) -> f64 {
    let mut sorted = rates.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The file size a class is measured with (`tern tune` uses it too): the
/// geometric middle of the class, `sqrt(lo * hi)` rounded to a page (64 KiB
/// for the default "<= 256 KiB" class), because a site's file sizes spread
/// over orders of magnitude and the winning method changes inside a class
/// (on the project's machine sendfile led at 40 KiB while mmap led at
/// 256 KiB). The first class's lower end is a quarter of its bound; the
/// last, open-ended class is measured at four times its lower bound, at
/// least 1 MiB.
pub fn representative(bounds: &[u64], class: usize) -> u64 {
    let lo = match class.checked_sub(1).and_then(|p| bounds.get(p)) {
        Some(&lo) => lo,
        None => bounds.first().map_or(0, |&hi| hi / 4),
    };
    match bounds.get(class) {
        Some(&hi) => {
            let middle = ((lo as f64) * (hi as f64)).sqrt() as u64;
            (middle.div_ceil(4096) * 4096).clamp(1, hi)
        }
        None => (lo * 4).max(1 << 20),
    }
}

/// Connections sent to at once: stalls of one overlap with progress on
/// the others, as they do for a server with many clients.
const LINKS: usize = 4;

/// Loopback connections: the server's side writes, a thread per
/// connection reads.
struct Rig {
    links: Vec<Link>,
    /// The ring of the `uring` method, made when it is first measured.
    ring: Option<IoUring>,
}

struct Link {
    sock: TcpStream,
    out: OutQueue,
    reader: Option<JoinHandle<()>>,
    /// The reader thread's schedstat file.
    reader_stat: Option<String>,
}

impl Rig {
    fn new(st: &StaticFiles) -> io::Result<Rig> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let mut links = Vec::with_capacity(LINKS);
        for _ in 0..LINKS {
            let mut client = TcpStream::connect(listener.local_addr()?)?;
            let (sock, _) = listener.accept()?;
            sock.set_nonblocking(true)?;
            sock.set_nodelay(true)?;
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let reader = std::thread::Builder::new().name("tern-calibrate".into()).spawn(move || {
                sys::allow_every_cpu();
                let _ = tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get());
                let mut buf = vec![0; 64 * 1024];
                while matches!(client.read(&mut buf), Ok(n) if n > 0) {}
            })?;
            let reader_stat = tid_rx.recv().ok().map(|tid| format!("/proc/self/task/{tid}/schedstat"));
            links.push(Link {
                sock,
                out: OutQueue::new(st.read_chunk.usize(), st.sendfile_max_chunk.0, false),
                reader: Some(reader),
                reader_stat,
            });
        }
        Ok(Rig { links, ring: None })
    }

    /// Nanoseconds on a CPU and waiting for one, of all threads together.
    fn clocks(&self) -> Option<(u64, u64)> {
        let (mut run, mut wait) = schedstat("/proc/thread-self/schedstat")?;
        for link in &self.links {
            let (r, w) = schedstat(link.reader_stat.as_deref()?)?;
            run += r;
            wait += w;
        }
        Some((run, wait))
    }

    /// Responses per second sending `file` with `method` for about `slice`
    /// (per second of cost, see the module's comment).
    /// With the unsent bound `limits` give responses of its size.
    fn sample(&mut self, file: &Arc<OpenFile>, method: IoMethod, slice: Duration, limits: &Limits) -> io::Result<f64> {
        for link in &self.links {
            sys::limit_unsent(link.sock.as_fd(), limits.settled_unsent(file.size))?;
        }
        let before = self.clocks();
        let start = Instant::now();
        let responses = match method {
            IoMethod::Uring => self.send_by_ring(file, slice)?,
            _ => self.send(file, method, slice)?,
        };
        // Until the readers have it all: bytes parked in the send buffers
        // are not sent yet.
        let deadline = Instant::now() + Duration::from_secs(2);
        for link in &self.links {
            while sys::unacked(link.sock.as_fd())? > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let wall = start.elapsed();
        let cost = match (before, self.clocks()) {
            (Some((run0, wait0)), Some((run1, wait1))) => Duration::from_nanos(run1.saturating_sub(run0))
                .max(wall.saturating_sub(Duration::from_nanos(wait1.saturating_sub(wait0)))),
            _ => wall,
        };
        Ok(responses as f64 / cost.as_secs_f64().max(1e-6))
    }

    /// Sends `file` by `method` through the queue's own writes, a response
    /// after another on each link, for `slice`; the responses sent.
    fn send(&mut self, file: &Arc<OpenFile>, method: IoMethod, slice: Duration) -> io::Result<u64> {
        let start = Instant::now();
        let mut responses = 0u64;
        loop {
            let more = start.elapsed() < slice;
            let (mut pending, mut blocked) = (0, 0);
            for link in &mut self.links {
                if link.out.is_empty() && more {
                    link.out.buf.extend_from_slice(HEAD);
                    link.out.push_file(file, 0, file.size, method);
                    responses += 1;
                }
                if !link.out.is_empty() {
                    pending += 1;
                    if matches!(link.out.flush(link.sock.as_fd())?, Flushed::Blocked) {
                        blocked += 1;
                    }
                }
            }
            if pending == 0 {
                break;
            }
            if blocked == pending {
                let socks: Vec<_> = self.links.iter().filter(|l| !l.out.is_empty()).map(|l| l.sock.as_fd()).collect();
                sys::wait_writable(&socks, Duration::from_secs(1))?;
            }
        }
        Ok(responses)
    }

    /// Sends `file` by the `uring` method for `slice`, as the `uring`
    /// engine does: each link's file regions read through a ring, its
    /// queue's front sent by a `sendmsg` through it, one submission per
    /// round for all links; the responses sent.
    fn send_by_ring(&mut self, file: &Arc<OpenFile>, slice: Duration) -> io::Result<u64> {
        let ring = match &mut self.ring {
            Some(ring) => ring,
            none => none.insert(IoUring::new(2 * LINKS as u32)?),
        };
        let start = Instant::now();
        let mut responses = 0u64;
        let mut busy: Vec<Option<InFlight>> = (0..LINKS).map(|_| None).collect();
        loop {
            let more = start.elapsed() < slice;
            let mut pending = 0;
            for (i, link) in self.links.iter_mut().enumerate() {
                if busy[i].is_none() {
                    if link.out.is_empty() && more {
                        link.out.buf.extend_from_slice(HEAD);
                        link.out.push_file(file, 0, file.size, IoMethod::Uring);
                        responses += 1;
                    }
                    if link.out.is_empty() {
                        continue;
                    }
                    busy[i] = Some(submit(ring, link, i)?);
                }
                pending += 1;
            }
            if pending == 0 {
                return Ok(responses);
            }
            ring.submit_and_wait(1)?;
            for cqe in ring.completion() {
                let i = cqe.user_data() as usize;
                let link = &mut self.links[i];
                match busy[i].take() {
                    Some(InFlight::Send(s)) => match s.outcome(cqe.result()) {
                        Ok(n) => _ = link.out.ring_sent(n),
                        Err(e) if sys::would_block(&e) => _ = link.out.ring_sent(0),
                        Err(e) => return Err(e),
                    },
                    Some(InFlight::Read(mut buf, offset)) => {
                        if usize::try_from(cqe.result()).ok() != Some(buf.capacity()) {
                            return Err(file.shrank());
                        }
                        // SAFETY: the kernel wrote the whole buffer.
                        unsafe { buf.set_len(buf.capacity()) };
                        link.out.insert_read(offset, buf);
                    }
                    None => {}
                }
            }
        }
    }

    fn finish(self) {
        for mut link in self.links {
            sys::shutdown_write(link.sock.as_fd());
            if let Some(reader) = link.reader.take() {
                let _ = reader.join();
            }
        }
    }
}

/// What a link of the `uring` method has in its ring.
enum InFlight {
    Send(Box<Sending>),
    /// A file region's buffer and offset.
    Read(Vec<u8>, u64),
}

/// Submits what link `i`'s queue needs next through `ring`: a `sendmsg`
/// of its front, or the read of the file region there.
fn submit(ring: &mut IoUring, link: &mut Link, i: usize) -> io::Result<InFlight> {
    let sock = link.sock.as_raw_fd();
    let (entry, flight) = if link.out.ring_ready() {
        let mut s = Sending::new();
        link.out.gather_into(&mut s);
        (opcode::SendMsg::new(Fd(sock), s.msghdr()).flags(s.flags()).build(), InFlight::Send(s))
    } else {
        let Flushed::Fetch { file, offset, len, .. } = link.out.flush(link.sock.as_fd())? else {
            return Err(io::Error::other("a uring region that is not fetched"));
        };
        let mut buf = Vec::with_capacity(len);
        let read = opcode::Read::new(Fd(file.file.as_raw_fd()), buf.as_mut_ptr(), len as u32).offset(offset);
        (read.build(), InFlight::Read(buf, offset))
    };
    // SAFETY: what the entry points to (the boxed message and what it
    // keeps, the buffer's heap block) is held in `flight` until the
    // completion, and a completion comes before the ring is dropped.
    unsafe { ring.submission().push(&entry.user_data(i as u64)) }.map_err(|_| io::Error::other("ring full"))?;
    Ok(flight)
}

/// A thread's time on a CPU and time runnable but waiting for one, in
/// nanoseconds (the first two fields of its schedstat file).
fn schedstat(path: &str) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

#[cfg(test)]
mod tests {
    use super::{judge, representative, ROUNDS};
    use crate::static_io::IoMethod;
    use crate::static_io::{index, METHODS};

    /// Rates in `METHODS` order from (sendfile, mmap, read) rounds.
    fn rates(sendfile: [f64; ROUNDS], mmap: [f64; ROUNDS], read: [f64; ROUNDS]) -> [[f64; ROUNDS]; METHODS.len()] {
        let mut r = [[0.0; ROUNDS]; METHODS.len()];
        r[index(IoMethod::Sendfile)] = sendfile;
        r[index(IoMethod::Mmap)] = mmap;
        r[index(IoMethod::Read)] = read;
        r
    }

    #[test]
    fn a_steady_method_beats_one_that_won_a_single_lucky_slice() {
        // Four rounds ran of five: the fifth is not counted.
        let r =
            rates([1_100.0, 4_000.0, 1_000.0, 1_200.0, 0.0], [2_900.0, 3_100.0, 3_000.0, 2_800.0, 0.0], [1_500.0; 5]);
        let (best, typical) = judge(&r, 4, index(IoMethod::Sendfile));
        assert_eq!(METHODS[best], IoMethod::Mmap);
        assert_eq!(typical[index(IoMethod::Sendfile)], 1_150.0);
        assert_eq!(typical[index(IoMethod::Mmap)], 2_950.0);
        // One round: its rates as they are.
        assert_eq!(METHODS[judge(&r, 1, index(IoMethod::Sendfile)).0], IoMethod::Mmap);
    }

    #[test]
    fn the_method_in_place_stays_unless_another_clearly_leads() {
        // mmap 1.10x sendfile: inside the noise, sendfile stays.
        let close = rates([1_000.0; 5], [1_100.0; 5], [900.0; 5]);
        assert_eq!(METHODS[judge(&close, 5, index(IoMethod::Sendfile)).0], IoMethod::Sendfile);
        // read 1.20x: it replaces sendfile.
        let clear = rates([1_000.0; 5], [1_100.0; 5], [1_200.0; 5]);
        assert_eq!(METHODS[judge(&clear, 5, index(IoMethod::Sendfile)).0], IoMethod::Read);
        // The fastest of all is taken even when a closer one also leads.
        let both = rates([1_000.0; 5], [1_160.0; 5], [1_300.0; 5]);
        assert_eq!(METHODS[judge(&both, 5, index(IoMethod::Sendfile)).0], IoMethod::Read);
    }

    #[test]
    fn a_class_is_measured_at_its_geometric_middle() {
        let bounds = [16 << 10, 256 << 10];
        assert_eq!(representative(&bounds, 0), 8 << 10);
        assert_eq!(representative(&bounds, 1), 64 << 10);
        assert_eq!(representative(&bounds, 2), 1 << 20);
        assert_eq!(representative(&[1 << 20], 1), 4 << 20);
        // Rounded up to a page, never above the class's bound.
        assert_eq!(representative(&[100, 1000], 1), 1000);
        assert_eq!(representative(&[], 0), 1 << 20);
    }
}
