//! A connection's requests answered from bytes to bytes, apart from its socket: each whole
//! request is decoded, admitted, parsed into its command and applied, and its reply encoded.
//! The listener's connections read into it and write out what it answers; tests and
//! `scripts/instructions` (its `resp_throttle` path) drive it without a socket.

use std::net::IpAddr;

use super::MAX_ARGUMENT;
use super::MAX_PENDING;
use super::cmd::{self, After, Session, Shared};
use super::codec::{self, Limits, Reply};

/// One connection's side of the protocol: who it authenticated as, whether it speaks RESP3,
/// its name; everything but the socket.
pub struct Conversation<'a> {
    shared: &'a Shared,
    session: Session,
    limits: Limits,
}

/// What [`Conversation::answer`] did with its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The input does not hold a whole request yet: nothing was read or written.
    Incomplete,
    /// The input's first `used` bytes were one request, whose reply (none for an empty one) is
    /// on the output; `close`: the connection closes once the reply is out (`QUIT`, or an
    /// address refused for failing `AUTH` too often).
    Request {
        /// The request's bytes.
        used: usize,
        /// Whether the connection closes after the reply.
        close: bool,
    },
    /// The input is not RESP, or holds more of an unfinished request than a connection keeps
    /// ([`MAX_PENDING`]): the protocol error is on the output, and the connection closes, as
    /// Redis closes it.
    Broken,
}

impl<'a> Conversation<'a> {
    /// A new connection from `peer` to the listener whose connections share `shared`.
    pub fn new(shared: &'a Shared, peer: IpAddr) -> Conversation<'a> {
        Conversation {
            shared,
            session: Session::new(shared, peer),
            limits: Limits {
                max_bulk: MAX_ARGUMENT,
                max_inline: MAX_ARGUMENT,
                ..Limits::default()
            },
        }
    }

    /// Answers the first request in `input` (the bytes read and not yet answered), appending
    /// its reply to `output`.
    pub async fn answer(&mut self, input: &[u8], output: &mut Vec<u8>) -> Answered {
        let resp3 = self.session.resp3;
        let (args, used) = match codec::decode(input, &self.limits) {
            Ok(Some(request)) => request,
            Ok(None) if input.len() > MAX_PENDING => {
                Reply::err("Protocol error: too big request").encode(output, resp3);
                return Answered::Broken;
            }
            Ok(None) => return Answered::Incomplete,
            Err(e) => {
                Reply::err(format!("Protocol error: {}", e.0)).encode(output, resp3);
                return Answered::Broken;
            }
        };
        let args = args.resolve(&input[..used]);
        if args.is_empty() {
            return Answered::Request { used, close: false };
        }
        let (reply, after) = cmd::execute(self.shared, &mut self.session, &args).await;
        // After `HELLO 3` its own reply is already RESP3.
        reply.encode(output, self.session.resp3);
        Answered::Request {
            used,
            close: after == After::Close,
        }
    }
}
