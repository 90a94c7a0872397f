//! The clients of each protocol, one request in flight each: the HTTP benchmark's HTTP/1.1
//! connection, a tonic channel's `ShouldRateLimit` calls, and a RESP connection writing one
//! command and reading its reply.

use std::net::SocketAddr;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};

use super::pace::Caller;
use crate::BenchError;
use crate::http::load::{self, Connection, Requests};

/// Distinct keys every protocol's requests spread over.
pub(super) const KEYS: usize = 10_000;

/// An HTTP/1.1 keep-alive connection sending the HTTP benchmark's requests (`GET /hello` to
/// the bare handler, `POST /v1/check` to the server); 200 is the answer expected.
pub(super) struct Http {
    connection: Connection,
    requests: Requests,
}

impl Http {
    pub(super) async fn connect(addr: SocketAddr, requests: Requests) -> Result<Http, BenchError> {
        Ok(Http {
            connection: load::connect(addr, None).await?,
            requests,
        })
    }
}

impl Caller for Http {
    async fn call(&mut self, n: usize) -> Result<(), String> {
        let request = self.requests.build(n);
        match load::exchange(&mut self.connection.sender, request).await {
            Ok((StatusCode::OK, _)) => Ok(()),
            Ok((status, _)) => Err(format!("status {status}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// `ShouldRateLimit` calls on a shared HTTP/2 channel, one descriptor `user` each; `OK` is
/// the answer expected.
pub(super) struct Grpc(RateLimitServiceClient<Channel>);

impl Grpc {
    /// `count` HTTP/2 connections to `addr`, open before any call.
    pub(super) async fn channels(
        addr: SocketAddr,
        count: usize,
    ) -> Result<Vec<Channel>, BenchError> {
        let mut channels = Vec::with_capacity(count);
        for _ in 0..count {
            let channel = Endpoint::from_shared(format!("http://{addr}"))
                .map_err(|e| BenchError::Args(format!("the gRPC address {addr}: {e}")))?
                .tcp_nodelay(true)
                .connect()
                .await
                .map_err(|e| BenchError::Args(format!("cannot connect to {addr}: {e}")))?;
            channels.push(channel);
        }
        Ok(channels)
    }

    pub(super) fn new(channel: Channel) -> Grpc {
        Grpc(RateLimitServiceClient::new(channel))
    }
}

impl Caller for Grpc {
    async fn call(&mut self, n: usize) -> Result<(), String> {
        let request = RateLimitRequest {
            domain: "bench".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".to_owned(),
                    value: (n % KEYS).to_string(),
                }],
                ..Default::default()
            }],
            hits_addend: 0,
        };
        match self.0.should_rate_limit(request).await {
            Ok(r) if r.get_ref().overall_code == Code::Ok as i32 => Ok(()),
            Ok(r) => Err(format!("code {}", r.get_ref().overall_code)),
            Err(status) => Err(status.to_string()),
        }
    }
}

/// What a RESP connection sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RespCommand {
    /// `PING`, answered `+PONG`.
    Ping,
    /// `CL.THROTTLE bench:<key> 1000 1000000 1` (the RESP benchmark's), answered by an array
    /// of five integers, the first 0 when allowed.
    Throttle,
}

/// A RESP connection, one command in flight.
pub(super) struct Resp {
    stream: TcpStream,
    command: RespCommand,
    buffer: Vec<u8>,
}

impl Resp {
    pub(super) async fn connect(
        addr: SocketAddr,
        command: RespCommand,
    ) -> Result<Resp, BenchError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Resp {
            stream,
            command,
            buffer: Vec::with_capacity(128),
        })
    }
}

impl Caller for Resp {
    async fn call(&mut self, n: usize) -> Result<(), String> {
        let out = match self.command {
            RespCommand::Ping => encode(&["PING"]),
            RespCommand::Throttle => {
                let key = format!("bench:{}", n % KEYS);
                encode(&["CL.THROTTLE", &key, "1000", "1000000", "1"])
            }
        };
        self.stream
            .write_all(&out)
            .await
            .map_err(|e| e.to_string())?;
        self.buffer.clear();
        let reply = loop {
            if let Some(reply) = complete(&self.buffer) {
                break reply;
            }
            let mut chunk = [0u8; 256];
            let read = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(|e| e.to_string())?;
            if read == 0 {
                return Err("the server closed the connection".into());
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        };
        let expected: &[u8] = match self.command {
            RespCommand::Ping => b"+PONG\r\n",
            RespCommand::Throttle => b"*5\r\n:0\r\n",
        };
        if reply.starts_with(expected) {
            Ok(())
        } else {
            Err(format!("answered {:?}", String::from_utf8_lossy(reply)))
        }
    }
}

/// A command as a RESP array of bulk strings.
fn encode(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for word in words {
        out.extend_from_slice(format!("${}\r\n{word}\r\n", word.len()).as_bytes());
    }
    out
}

/// The whole reply at the start of `buffer`, once it is there: a simple string, error or
/// integer (one line), or an array of such (`*N` and N lines); the only replies these two
/// commands get.
fn complete(buffer: &[u8]) -> Option<&[u8]> {
    let mut lines = buffer
        .windows(2)
        .enumerate()
        .filter(|(_, w)| *w == b"\r\n")
        .map(|(i, _)| i + 2);
    let first = lines.next()?;
    let more = match buffer.first() {
        Some(b'*') => std::str::from_utf8(&buffer[1..first - 2])
            .ok()?
            .parse::<usize>()
            .ok()?,
        _ => 0,
    };
    let end = if more == 0 {
        first
    } else {
        lines.nth(more - 1)?
    };
    Some(&buffer[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_complete_once_its_last_line_is_there() {
        assert_eq!(complete(b"+PONG\r"), None);
        assert_eq!(complete(b"+PONG\r\n"), Some(&b"+PONG\r\n"[..]));
        let array = b"*5\r\n:0\r\n:1001\r\n:1000\r\n:-1\r\n:0\r\n";
        assert_eq!(complete(&array[..array.len() - 1]), None);
        assert_eq!(complete(array), Some(&array[..]));
        assert_eq!(complete(b"-ERR no\r\n"), Some(&b"-ERR no\r\n"[..]));
        assert_eq!(encode(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
    }
}
