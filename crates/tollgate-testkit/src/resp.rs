//! A one-command Redis client over a raw TCP socket, speaking RESP2. The kit needs it for
//! readiness (`PING`) and cluster setup (`CLUSTER INFO`), and tests use it for faults
//! (`DEBUG SLEEP`, `SCRIPT FLUSH`) without depending on the Redis client crate under test.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpStream, ToSocketAddrs},
    time::Duration,
};

use crate::{TestkitError, url::Url};

/// A Redis reply (RESP2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`, `+PONG`.
    Status(String),
    /// `-ERR ...`: an answer, not a failure to talk to Redis, so it is a `Reply`.
    Error(String),
    /// `:42`.
    Integer(i64),
    /// `$3\r\nfoo`.
    Bulk(Vec<u8>),
    /// `*2\r\n...`.
    Array(Vec<Reply>),
    /// `$-1` or `*-1`.
    Nil,
}

impl Reply {
    /// The bytes of a status or bulk reply.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Status(s) => Some(s.as_bytes()),
            Self::Bulk(b) => Some(b),
            _ => None,
        }
    }

    /// A status or bulk reply that is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// An integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Self::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The reply as text for a test to read: the bytes of a status, error or bulk reply, an
    /// integer in decimal, nothing for nil, and an array's elements one per line.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Self::Status(s) | Self::Error(s) => s.into_bytes(),
            Self::Bulk(b) => b,
            Self::Integer(i) => i.to_string().into_bytes(),
            Self::Nil => Vec::new(),
            Self::Array(items) => {
                let lines: Vec<Vec<u8>> = items.into_iter().map(Self::into_bytes).collect();
                lines.join(&b'\n')
            }
        }
    }
}

/// Where [`redis_cmd`] connects: a port on 127.0.0.1 (`u16`) or a `redis://` URL (`&str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisTarget<'a> {
    /// `127.0.0.1:port`.
    Port(u16),
    /// `redis://[[user]:password@]host[:port][/db]`.
    Url(&'a str),
}

impl From<u16> for RedisTarget<'_> {
    fn from(port: u16) -> Self {
        Self::Port(port)
    }
}

impl<'a> From<&'a str> for RedisTarget<'a> {
    fn from(url: &'a str) -> Self {
        Self::Url(url)
    }
}

impl<'a> From<&'a String> for RedisTarget<'a> {
    fn from(url: &'a String) -> Self {
        Self::Url(url)
    }
}

/// How long [`redis_cmd`] waits for a reply: long enough for a test's `DEBUG SLEEP`, short
/// enough that a wedged server fails the test instead of hanging it.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends one command on a fresh connection to the Redis at `target` (a port on 127.0.0.1, or a
/// URL) and returns its reply.
///
/// A URL is `redis://[[user]:password@]host[:port][/db]` (port 6379 by default); credentials
/// are sent with `AUTH` and a database with `SELECT` first. A Redis error reply is
/// `Ok(Reply::Error(..))`; `Err` means Redis could not be reached or answered nonsense.
///
/// ```no_run
/// use tollgate_testkit::{Reply, TestRedis, redis_cmd};
///
/// let redis = TestRedis::start()?;
/// assert_eq!(redis_cmd(redis.url(), &[b"PING"])?, Reply::Status("PONG".into()));
/// redis_cmd(redis.port(), &[b"DEBUG", b"SLEEP", b"0.5"])?; // a slow Redis
/// # Ok::<(), tollgate_testkit::TestkitError>(())
/// ```
pub fn redis_cmd<'a>(
    target: impl Into<RedisTarget<'a>>,
    args: &[&[u8]],
) -> Result<Reply, TestkitError> {
    let url = match target.into() {
        RedisTarget::Port(port) => format!("redis://127.0.0.1:{port}"),
        RedisTarget::Url(url) => url.to_owned(),
    };
    command(&Url::parse(&url)?, args, REPLY_TIMEOUT)
}

/// How many times the Redis at `target` has run `command` (as `INFO commandstats` names it,
/// lower case: `evalsha`), by its own count: 0 before the first.
///
/// ```no_run
/// use tollgate_testkit::{TestRedis, command_calls, redis_cmd};
///
/// let redis = TestRedis::start()?;
/// redis_cmd(redis.port(), &[b"PING"])?;
/// assert_eq!(command_calls(redis.port(), "ping")?, 1);
/// # Ok::<(), tollgate_testkit::TestkitError>(())
/// ```
pub fn command_calls<'a>(
    target: impl Into<RedisTarget<'a>>,
    command: &str,
) -> Result<u64, TestkitError> {
    let reply = redis_cmd(target, &[b"INFO", b"commandstats"])?;
    let Reply::Bulk(info) = &reply else {
        return Err(TestkitError::Protocol(format!("INFO answered {reply:?}")));
    };
    let prefix = format!("cmdstat_{command}:calls=");
    let calls = String::from_utf8_lossy(info)
        .lines()
        .find_map(|l| Some(l.strip_prefix(prefix.as_str())?.split(',').next()?.parse()))
        .transpose()
        .map_err(|_| TestkitError::Protocol(format!("INFO commandstats: a count of {command}")))?;
    Ok(calls.unwrap_or(0))
}

pub(crate) fn command(url: &Url, args: &[&[u8]], timeout: Duration) -> Result<Reply, TestkitError> {
    if url.scheme != "redis" {
        return Err(TestkitError::InvalidUrl {
            url: format!("{}://{}", url.scheme, url.host),
            reason: "only redis:// is supported (no TLS, no unix sockets)".into(),
        });
    }
    let port = url.port.unwrap_or(6379);
    let addr = format!("{}:{port}", url.host);
    let io_err = |e| TestkitError::io(format!("talking to Redis at {addr}"), e);
    let stream = connect(&url.host, port, timeout.min(CONNECT_TIMEOUT)).map_err(io_err)?;
    stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
    stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
    let mut writer = stream.try_clone().map_err(io_err)?;
    let mut reader = BufReader::new(stream);

    let mut preamble: Vec<Vec<&[u8]>> = Vec::new();
    match (&url.user, &url.password) {
        (Some(user), Some(password)) => {
            preamble.push(vec![b"AUTH", user.as_bytes(), password.as_bytes()])
        }
        (None, Some(password)) => preamble.push(vec![b"AUTH", password.as_bytes()]),
        _ => {}
    }
    if !url.path.is_empty() {
        preamble.push(vec![b"SELECT", url.path.as_bytes()]);
    }
    for setup in &preamble {
        writer.write_all(&encode(setup)).map_err(io_err)?;
        if let Reply::Error(e) = read_reply(&mut reader)? {
            let what = String::from_utf8_lossy(setup[0]);
            return Err(TestkitError::Protocol(format!(
                "{what} at {addr} failed: {e}"
            )));
        }
    }
    writer.write_all(&encode(args)).map_err(io_err)?;
    read_reply(&mut reader)
}

fn connect(host: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("{host} resolves to nothing"))))
}

/// A command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Redis's own limit on a bulk string.
const MAX_BULK: usize = 512 * 1024 * 1024;
const MAX_LINE: u64 = 64 * 1024;
/// Replies nest only a few levels; a deeper one is garbage, not worth a stack overflow.
const MAX_DEPTH: usize = 32;

pub(crate) fn read_reply(reader: &mut impl BufRead) -> Result<Reply, TestkitError> {
    read_nested(reader, 0)
}

fn read_nested(reader: &mut impl BufRead, depth: usize) -> Result<Reply, TestkitError> {
    if depth > MAX_DEPTH {
        return Err(TestkitError::Protocol("reply nested too deeply".into()));
    }
    let line = read_line(reader)?;
    let (kind, body) = line
        .split_first()
        .ok_or_else(|| TestkitError::Protocol("empty reply line".into()))?;
    let text = || String::from_utf8_lossy(body).into_owned();
    match kind {
        b'+' => Ok(Reply::Status(text())),
        b'-' => Ok(Reply::Error(text())),
        b':' => Ok(Reply::Integer(parse_int(body)?)),
        b'$' => match parse_int(body)? {
            -1 => Ok(Reply::Nil),
            len => {
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&len| len <= MAX_BULK)
                    .ok_or_else(|| TestkitError::Protocol(format!("bad bulk length {len}")))?;
                let mut data = vec![0; len + 2];
                reader.read_exact(&mut data).map_err(read_error)?;
                if !data.ends_with(b"\r\n") {
                    return Err(TestkitError::Protocol("bulk string without CRLF".into()));
                }
                data.truncate(len);
                Ok(Reply::Bulk(data))
            }
        },
        b'*' => match parse_int(body)? {
            -1 => Ok(Reply::Nil),
            len => {
                let len = usize::try_from(len)
                    .map_err(|_| TestkitError::Protocol(format!("bad array length {len}")))?;
                // The length is the server's word; grow as elements actually arrive.
                let mut items = Vec::with_capacity(len.min(1024));
                for _ in 0..len {
                    items.push(read_nested(reader, depth + 1)?);
                }
                Ok(Reply::Array(items))
            }
        },
        other => Err(TestkitError::Protocol(format!(
            "unexpected reply type byte {:?}",
            char::from(*other)
        ))),
    }
}

/// One CRLF-terminated line, without the CRLF.
fn read_line(reader: &mut impl BufRead) -> Result<Vec<u8>, TestkitError> {
    let mut line = Vec::new();
    reader
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .map_err(read_error)?;
    if line.is_empty() {
        return Err(TestkitError::Protocol(
            "connection closed before a reply".into(),
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(TestkitError::Protocol("reply line without CRLF".into()));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(body: &[u8]) -> Result<i64, TestkitError> {
    std::str::from_utf8(body)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            TestkitError::Protocol(format!("bad integer {:?}", String::from_utf8_lossy(body)))
        })
}

fn read_error(e: std::io::Error) -> TestkitError {
    TestkitError::io("reading a Redis reply", e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Reply, TestkitError> {
        read_reply(&mut &bytes[..])
    }

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        assert_eq!(
            encode(&[b"SET", b"k", b""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn parses_every_resp2_type() {
        assert_eq!(parse(b"+PONG\r\n").unwrap(), Reply::Status("PONG".into()));
        assert_eq!(
            parse(b"-ERR no\r\n").unwrap(),
            Reply::Error("ERR no".into())
        );
        assert_eq!(parse(b":-42\r\n").unwrap(), Reply::Integer(-42));
        assert_eq!(
            parse(b"$5\r\na\r\nbc\r\n").unwrap(),
            Reply::Bulk(b"a\r\nbc".to_vec())
        );
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), Reply::Bulk(Vec::new()));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Nil);
        assert_eq!(parse(b"*-1\r\n").unwrap(), Reply::Nil);
        assert_eq!(
            parse(b"*3\r\n:1\r\n*1\r\n$1\r\nx\r\n$-1\r\n").unwrap(),
            Reply::Array(vec![
                Reply::Integer(1),
                Reply::Array(vec![Reply::Bulk(b"x".to_vec())]),
                Reply::Nil
            ])
        );
    }

    #[test]
    fn flattens_any_reply_into_text() {
        let reply = Reply::Array(vec![
            Reply::Status("OK".into()),
            Reply::Integer(-7),
            Reply::Nil,
            Reply::Bulk(b"a\nb".to_vec()),
        ]);
        assert_eq!(reply.into_bytes(), b"OK\n-7\n\na\nb");
        assert_eq!(Reply::Error("ERR x".into()).into_bytes(), b"ERR x");
    }

    #[test]
    fn rejects_malformed_replies() {
        for bad in [
            &b""[..],
            b"+PONG\n",
            b":x\r\n",
            b"$3\r\nab\r\n",
            b"$3\r\nabcd\r\n",
            b"$-2\r\n",
            b"*2\r\n:1\r\n",
            b"%1\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = "*1\r\n".repeat(100) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
    }
}
