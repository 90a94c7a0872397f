//! The commands, one file per family as Redis groups them: the rate limiters
//! ([`throttle`]: `CL.THROTTLE`, `THROTTLE`, `TOLLGATE.CHECK`), a connection's own
//! ([`connection`]: `HELLO`, `CLIENT`, ...; [`auth`]: `AUTH`, and who may run what), and what
//! clients ask of the server ([`server`]: `COMMAND`, `INFO`, `CONFIG GET`), each answered as
//! Redis words it.

mod auth;
mod connection;
mod server;
mod throttle;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::{Clock, MonotonicClock, Nanos};

use super::cell;
use super::codec::Reply;
use crate::auth::{Caller, Frontend, Scope, Secret};
use crate::limiter::Limiter;
use crate::metrics::PolicyCounters;

/// The bucket name every `THROTTLE` key goes by.
const THROTTLE_BUCKET: &str = "throttle";

/// What every connection shares.
pub(super) struct Shared {
    /// The decision core: the store, the policies and the metrics.
    pub(super) limiter: Arc<Limiter>,
    /// `AUTH`'s password, the user `default`'s; `None`: that user has none (then only the
    /// `[auth]` tokens, if any, authenticate).
    pub(super) password: Option<Secret>,
    /// The port the listener is on (for `INFO`).
    pub(super) port: u16,
    next_id: AtomicU64,
    /// Connections open now, for `INFO clients`.
    connected: AtomicU64,
    /// Commands answered since the start, for `INFO stats`.
    commands: AtomicU64,
    clock: MonotonicClock,
    started: Nanos,
    cell: PolicyCounters,
    throttle: PolicyCounters,
}

impl Shared {
    /// Connections deciding through `limiter`.
    pub(super) fn new(limiter: Arc<Limiter>, password: Option<Secret>, port: u16) -> Shared {
        let cell = limiter.metrics().policy(cell::BUCKET);
        let throttle = limiter.metrics().policy(THROTTLE_BUCKET);
        let clock = MonotonicClock::new();
        Shared {
            limiter,
            password,
            port,
            next_id: AtomicU64::new(1),
            connected: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            started: clock.now(),
            clock,
            cell,
            throttle,
        }
    }
}

impl Shared {
    /// Counts a connection open until the guard it returns is dropped.
    pub(super) fn connect(&self) -> Connected<'_> {
        self.connected.fetch_add(1, Ordering::Relaxed);
        Connected(self)
    }
}

/// A connection counted in [`Shared`]'s open connections while it lives.
pub(super) struct Connected<'a>(&'a Shared);

impl Drop for Connected<'_> {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection's state.
pub(super) struct Session {
    /// `CLIENT ID`.
    pub(super) id: u64,
    /// Whether replies are RESP3 (after `HELLO 3`).
    pub resp3: bool,
    name: Option<Vec<u8>>,
    /// Whom `AUTH` proved the connection to be; `None`: no one yet.
    user: Option<auth::User>,
    /// The TCP peer's address, whose failed `AUTH`s are counted (with its other connections'
    /// and its failures on the other front ends).
    peer: IpAddr,
}

impl Session {
    /// A new connection's, from `peer`.
    pub(super) fn new(shared: &Shared, peer: IpAddr) -> Session {
        Session {
            id: shared.next_id.fetch_add(1, Ordering::Relaxed),
            resp3: false,
            name: None,
            user: None,
            peer,
        }
    }
}

/// Whether the connection goes on after the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum After {
    /// Read the next request.
    Continue,
    /// Close once the reply is written (`QUIT`).
    Close,
}

/// The command names, arities (negative: at least) and flags, for `COMMAND`.
const COMMANDS: [(&str, i64, &[&str]); 14] = [
    ("cl.throttle", -5, &["write", "fast"]),
    ("throttle", -5, &["write", "fast"]),
    ("tollgate.check", -3, &["write", "fast"]),
    ("ping", -1, &["fast"]),
    ("echo", 2, &["fast"]),
    ("quit", -1, &["fast"]),
    ("hello", -1, &["noauth", "fast"]),
    ("auth", -2, &["noauth", "fast"]),
    ("client", -2, &[]),
    ("select", 2, &["fast"]),
    ("command", -1, &[]),
    ("info", -1, &[]),
    ("reset", 1, &["noauth", "fast"]),
    ("config", -2, &[]),
];

/// Answers `args` (the command's name first; never empty).
pub(super) async fn execute(
    shared: &Shared,
    session: &mut Session,
    args: &[&[u8]],
) -> (Reply, After) {
    // Command names are short: lowercased on the stack, no allocation on the hot path.
    let mut lower = [0u8; 16];
    let name = match args[0].len() {
        n if n <= lower.len() => {
            lower[..n].copy_from_slice(args[0]);
            lower[..n].make_ascii_lowercase();
            std::str::from_utf8(&lower[..n]).unwrap_or("")
        }
        _ => "",
    };
    if !matches!(name, "auth" | "hello" | "quit" | "reset") {
        let needs = match name {
            "cl.throttle" | "throttle" | "tollgate.check" => Some(Scope::Check),
            _ => None,
        };
        match auth::access(shared, session) {
            auth::Access::Open => {}
            auth::Access::Anonymous => {
                let caller = Caller::new(Frontend::Resp, session.peer);
                shared.limiter.auth().missing(caller);
                return (
                    Reply::Error("NOAUTH Authentication required.".into()),
                    After::Continue,
                );
            }
            auth::Access::Scopes(scopes) => {
                if let Some(scope) = needs
                    && !scopes.contains(scope)
                {
                    // Redis 7.0's words for a command the user's ACL does not allow.
                    return (
                        Reply::Error(format!(
                            "NOPERM this user has no permissions to run the '{name}' command"
                        )),
                        After::Continue,
                    );
                }
            }
        }
    }
    shared.commands.fetch_add(1, Ordering::Relaxed);
    let reply = match name {
        "cl.throttle" => throttle::cl_throttle(shared, args).await,
        "throttle" => throttle::throttle(shared, args).await,
        "tollgate.check" => throttle::tollgate_check(shared, args).await,
        "ping" => match args {
            [_] => Reply::Simple("PONG"),
            [_, message] => Reply::Bulk(message.to_vec()),
            _ => arity(name),
        },
        "echo" => match args {
            [_, message] => Reply::Bulk(message.to_vec()),
            _ => arity(name),
        },
        "quit" => return (Reply::Simple("OK"), After::Close),
        "hello" => match connection::hello(shared, session, args) {
            Ok(reply) => reply,
            Err(auth::WrongPass(refusal)) => return auth::wrong_pass(refusal).await,
        },
        "auth" => match auth::auth(shared, session, args) {
            Ok(reply) => reply,
            Err(auth::WrongPass(refusal)) => return auth::wrong_pass(refusal).await,
        },
        "client" => connection::client(session, args),
        "select" => match args {
            [_, db] => match std::str::from_utf8(db)
                .ok()
                .and_then(|d| d.parse::<i64>().ok())
            {
                Some(0) => Reply::Simple("OK"),
                Some(_) => Reply::err("DB index is out of range"),
                None => Reply::err("value is not an integer or out of range"),
            },
            _ => arity(name),
        },
        "command" => server::command(args),
        "info" => server::info(shared, &args[1..]),
        "reset" => {
            session.resp3 = false;
            session.name = None;
            session.user = None;
            Reply::Simple("RESET")
        }
        "config" => server::config(args),
        _ => unknown(args),
    };
    (reply, After::Continue)
}

pub(super) fn arity(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

/// Redis 7's words for a command it does not know (`commandCheckExistence`): the name as
/// `'%.128s'`, then each argument as `'%.*s' ` with the precision what is left of 128 bytes,
/// added while the list is under 128 bytes. Both are C strings there, cut at a NUL, and cut by
/// byte, so the reply echoes raw bytes; the encoder turns CR and LF into spaces, as Redis does.
fn unknown(args: &[&[u8]]) -> Reply {
    const BUDGET: usize = 128;
    let c_string = |arg: &[u8], most: usize| -> Vec<u8> {
        let end = arg.iter().position(|&b| b == 0).unwrap_or(arg.len());
        arg[..end.min(most)].to_vec()
    };
    let mut beginning = Vec::new();
    for arg in &args[1..] {
        if beginning.len() >= BUDGET {
            break;
        }
        let most = BUDGET - beginning.len();
        beginning.push(b'\'');
        beginning.extend(c_string(arg, most));
        beginning.extend_from_slice(b"' ");
    }
    let mut line = b"ERR unknown command '".to_vec();
    line.extend(c_string(args[0], BUDGET));
    line.extend_from_slice(b"', with args beginning with: ");
    line.extend(beginning);
    Reply::RawError(line)
}
