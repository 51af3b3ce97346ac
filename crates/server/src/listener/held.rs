//! A connection's socket, holding its place for as long as anyone holds the socket.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::places::{ConnState, Slot};

/// The socket with its place: whoever holds the socket (hyper, or an upgraded WebSocket) holds
/// the place.
pub(super) struct Held {
    pub(super) stream: TcpStream,
    pub(super) state: Arc<ConnState>,
    pub(super) _slot: Slot,
}

impl Drop for Held {
    fn drop(&mut self) {
        let left_unread = self.state.closing_idle.load(Ordering::SeqCst) && self.unsent() > 0;
        if left_unread || self.state.reset_on_close.load(Ordering::SeqCst) {
            if let Err(err) = self.stream.set_zero_linger() {
                tracing::debug!(%err, "cannot reset a connection");
            }
        }
    }
}

impl Held {
    /// Bytes the kernel holds for the peer that it has not taken yet (sent or not); 0 where
    /// the system does not say.
    #[cfg(target_os = "linux")]
    fn unsent(&self) -> usize {
        use std::os::fd::AsRawFd;
        let mut unsent: libc::c_int = 0;
        // SAFETY: TIOCOUTQ writes one int, into `unsent`, for a socket this value owns.
        let read = unsafe { libc::ioctl(self.stream.as_raw_fd(), libc::TIOCOUTQ, &mut unsent) };
        if read == 0 {
            usize::try_from(unsent).unwrap_or(0)
        } else {
            0
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn unsent(&self) -> usize {
        0
    }
}

impl AsyncRead for Held {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
