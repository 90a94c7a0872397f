//! The peers, started for the benchmark and stopped when dropped: `redis-server` with the
//! redis-cell module, throttlecrab-server with its Redis transport, and a plain `redis-server`
//! for the ceiling.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A port free now (the peer binds it a moment later; a clash fails the start, loudly).
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Waits until `addr` answers `PING` with `+PONG`.
fn wait_for_pong(addr: SocketAddr, child: &mut Child) -> Result<(), String> {
    use std::io::{Read, Write};
    for _ in 0..200 {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited at start: {status}"));
        }
        if let Ok(mut stream) = TcpStream::connect(addr) {
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let mut reply = [0u8; 7];
            if stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
                && stream.read_exact(&mut reply).is_ok()
                && &reply == b"+PONG\r\n"
            {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(format!("did not answer PING on {addr} within 5 s"))
}

/// A peer process serving RESP on `addr`; killed when dropped.
pub(crate) struct Peer {
    pub(crate) addr: SocketAddr,
    child: Child,
}

impl Peer {
    /// Starts `command` (`what`, for errors), made to listen on `port`, and waits for its PONG.
    fn start(command: &mut Command, port: u16, what: &str) -> Result<Peer, String> {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{what} cannot be started: {e}"))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_for_pong(addr, &mut child)?;
        Ok(Peer { addr, child })
    }

    /// `redis-server` with the redis-cell module at `module` loaded.
    pub(super) fn redis_cell(module: Option<&Path>) -> Result<Peer, String> {
        let module = module.ok_or(
            "no module given: build redis-cell 0.5.0 from its source (`cargo build --release` in \
             a checkout of brandur/redis-cell) and pass --redis-cell target/release/libredis_cell.so \
             (or TOLLGATE_REDIS_CELL); scripts/bench resp does this",
        )?;
        if !module.exists() {
            return Err(format!("{} does not exist", module.display()));
        }
        Peer::redis_server(Some(module))
    }

    /// A plain `redis-server`, for the ceiling.
    pub(crate) fn redis() -> Result<Peer, String> {
        Peer::redis_server(None)
    }

    fn redis_server(module: Option<&Path>) -> Result<Peer, String> {
        let port = free_port()?;
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"]);
        if let Some(module) = module {
            command.arg("--loadmodule").arg(module);
        }
        Peer::start(&mut command, port, "redis-server")
    }

    /// throttlecrab-server (the binary at `binary`) with its Redis transport.
    pub(super) fn throttlecrab(binary: Option<&Path>) -> Result<Peer, String> {
        let binary = binary.ok_or(
            "no binary given: `cargo install throttlecrab-server --root target/peers` (needs \
             protobuf-compiler) and pass --throttlecrab target/peers/bin/throttlecrab-server (or \
             TOLLGATE_THROTTLECRAB); scripts/bench resp does this",
        )?;
        let port = free_port()?;
        Peer::start(
            Command::new(binary)
                .args(["--redis", "--redis-host", "127.0.0.1"])
                .args(["--redis-port", &port.to_string()])
                .args(["--log-level", "error"]),
            port,
            "throttlecrab-server",
        )
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
