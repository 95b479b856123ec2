//! The h2 crate's floor: the least a server built on it can spend per
//! response. A bare server — the crate on a tokio runtime of one thread,
//! each connection's task answering every stream it accepts with one body
//! held in memory and the fields tern sends for a static file — with no
//! routing, no file, no log. Its frames are gathered as tern gathers them
//! (`conn/h2.rs`): written once the streams that arrived are answered,
//! not once per stream as an `accept().await` loop would. `bench/h2.sh`
//! runs it beside the servers (as `h2floor`): what tern spends above it
//! is tern's; what it spends above h2o, the crate's.
//!
//! Usage: h2_floor ADDRESS FILE   (h2c by prior knowledge, no TLS)

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(address), Some(file)) = (args.next(), args.next()) else {
        eprintln!("usage: h2_floor ADDRESS FILE");
        std::process::exit(2);
    };
    let body = Bytes::from(std::fs::read(&file)?);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&address).await?;
        eprintln!("h2_floor: listening on {address}");
        loop {
            let (socket, _) = listener.accept().await?;
            socket.set_nodelay(true)?;
            tokio::spawn(serve(Arc::new(socket), body.clone()));
        }
    })
}

/// Answers the connection's streams until it ends.
async fn serve(socket: Arc<TcpStream>, body: Bytes) {
    let output = Arc::new(Mutex::new(Vec::new()));
    let io = Gathering { socket: socket.clone(), output: output.clone() };
    let Ok(mut conn) = h2::server::handshake(io).await else { return };
    std::future::poll_fn(|cx| loop {
        match conn.poll_accept(cx) {
            Poll::Ready(Some(Ok((_, respond)))) => answer(respond, body.clone()),
            Poll::Ready(_) => return Poll::Ready(()),
            Poll::Pending => {
                let mut out = output.lock().unwrap();
                while !out.is_empty() {
                    match socket.poll_write_ready(cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(_)) => return Poll::Ready(()),
                        Poll::Pending => return Poll::Pending,
                    }
                    match socket.try_write(&out) {
                        Ok(n) => drop(out.drain(..n)),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => return Poll::Ready(()),
                    }
                }
                return Poll::Pending;
            }
        }
    })
    .await;
}

/// Answers a stream with `body` and the fields tern gives a static file.
fn answer(mut respond: SendResponse<Bytes>, body: Bytes) {
    let head = http::Response::builder()
        .header("server", "h2floor")
        .header("date", "Sat, 28 Nov 2026 22:47:52 GMT")
        .header("content-type", "text/plain; charset=utf-8")
        .header("last-modified", "Sat, 28 Nov 2026 22:45:25 GMT")
        .header("etag", "\"6b0b5985.6ac86f8-400\"")
        .header("accept-ranges", "bytes")
        .header("vary", "Accept-Encoding")
        .header("content-length", body.len())
        .body(())
        .expect("a valid head");
    if let Ok(mut send) = respond.send_response(head, false) {
        let _ = send.send_data(body, true);
    }
}

/// The socket as the crate sees it: reads go to it, writes are gathered
/// in `output`, which [`serve`] writes once the streams are answered.
struct Gathering {
    socket: Arc<TcpStream>,
    output: Arc<Mutex<Vec<u8>>>,
}

impl AsyncRead for Gathering {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            std::task::ready!(self.socket.poll_read_ready(cx))?;
            match self.socket.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Gathering {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        self.output.lock().unwrap().extend_from_slice(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
