//! [`StallProxy`]: a TCP proxy in front of a store that can stop moving bytes (a store that
//! hangs without closing: a GC pause, a saturated link, a half-dead host) and cut every
//! connection (a network partition), to test that a client bounds its waits.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::TestkitError;

/// How often a stalled pump looks whether it may go on.
const PAUSE: Duration = Duration::from_millis(2);

/// A proxy on a free 127.0.0.1 port forwarding to an upstream address; stopped when dropped.
///
/// ```no_run
/// use tollgate_testkit::{StallProxy, TestRedis};
///
/// let redis = TestRedis::start()?;
/// let proxy = StallProxy::start(([127, 0, 0, 1], redis.port()).into())?;
/// // point the store under test at proxy.port() ...
/// proxy.stall(); // replies stop arriving; connections stay open
/// proxy.resume();
/// proxy.cut(); // every open connection is closed
/// # Ok::<(), tollgate_testkit::TestkitError>(())
/// ```
pub struct StallProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    stalled: AtomicBool,
    /// Replies (upstream to client) held back, requests still forwarded.
    replies_held: AtomicBool,
    stopped: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
}

impl StallProxy {
    /// Listens on a free port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<StallProxy, TestkitError> {
        let failed = |e| TestkitError::io("start a TCP proxy", e);
        let listener = TcpListener::bind("127.0.0.1:0").map_err(failed)?;
        let addr = listener.local_addr().map_err(failed)?;
        listener.set_nonblocking(true).map_err(failed)?;
        let shared = Arc::new(Shared {
            stalled: AtomicBool::new(false),
            replies_held: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept(listener, upstream, accepting));
        Ok(StallProxy { addr, shared })
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stops moving bytes either way; connections stay open, new ones are accepted but hang.
    pub fn stall(&self) {
        self.shared.stalled.store(true, Ordering::SeqCst);
    }

    /// Moves bytes again, the ones held back first.
    pub fn resume(&self) {
        self.shared.stalled.store(false, Ordering::SeqCst);
    }

    /// Holds back the upstream's replies while still forwarding what clients send: a request
    /// reaches the store and is done there, and its answer is lost if [`cut`](Self::cut)
    /// follows (a connection that dies between a commit and its reply).
    pub fn hold_replies(&self) {
        self.shared.replies_held.store(true, Ordering::SeqCst);
    }

    /// Closes every connection open now (a client must reconnect).
    pub fn cut(&self) {
        let mut open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        for stream in open.drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.cut();
    }
}

fn accept(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    while !shared.stopped.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(PAUSE);
                continue;
            }
            Err(_) => continue,
        };
        let Ok(server) = TcpStream::connect(upstream) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nonblocking(false);
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(client_2), Ok(server_2)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut open = shared.open.lock().unwrap_or_else(|e| e.into_inner());
            // Forget the connections already closed, so the list holds the open ones.
            open.retain(|s| s.peer_addr().is_ok());
            for s in [&client, &server] {
                if let Ok(s) = s.try_clone() {
                    open.push(s);
                }
            }
        }
        let (a, b) = (Arc::clone(&shared), Arc::clone(&shared));
        thread::spawn(move || pump(client, server, a, false));
        thread::spawn(move || pump(server_2, client_2, b, true));
    }
}

/// Copies `from` to `to` while not stalled (nor, for the `replies` direction, held); closes
/// both when either end closes.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: Arc<Shared>, replies: bool) {
    let mut buf = [0u8; 16 * 1024];
    let held = |shared: &Shared| {
        (shared.stalled.load(Ordering::SeqCst)
            || (replies && shared.replies_held.load(Ordering::SeqCst)))
            && !shared.stopped.load(Ordering::SeqCst)
    };
    loop {
        while held(&shared) {
            thread::sleep(PAUSE);
        }
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Bytes read just as a stall began are held until it ends.
        while held(&shared) {
            thread::sleep(PAUSE);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_stalls_resumes_and_cuts() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = echo.local_addr().unwrap();
        thread::spawn(move || {
            for conn in echo.incoming().flatten() {
                thread::spawn(move || {
                    let mut conn = conn;
                    let mut buf = [0u8; 64];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = StallProxy::start(upstream).unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 4];
        client.write_all(b"ping").unwrap();
        client.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");

        proxy.stall();
        client.write_all(b"held").unwrap();
        let err = client.read(&mut buf).unwrap_err();
        assert!(matches!(
            err.kind(),
            ErrorKind::WouldBlock | ErrorKind::TimedOut
        ));
        proxy.resume();
        client.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held");

        // Replies held: what the client sends still arrives (the echo server answers it), but
        // its answer does not come back.
        proxy.hold_replies();
        client.write_all(b"sent").unwrap();
        let err = client.read(&mut buf).unwrap_err();
        assert!(matches!(
            err.kind(),
            ErrorKind::WouldBlock | ErrorKind::TimedOut
        ));

        proxy.cut();
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        assert_eq!(
            client.read(&mut buf).unwrap_or(0),
            0,
            "the connection is closed"
        );
    }
}
