//! The commands, one file per family as Redis groups them: the rate limiters
//! ([`throttle`]: `CL.THROTTLE`, `THROTTLE`, `TOLLGATE.CHECK`), a connection's own
//! ([`connection`]: `HELLO`, `CLIENT`, ...; [`auth`]: `AUTH`, and who may run what), and what
//! clients ask of the server ([`server`]: `COMMAND`, `INFO`, `CONFIG GET`), each answered as
//! Redis words it.
//!
//! A request goes through three steps ([`execute`]): its name is looked up and the connection
//! admitted to run it ([`auth::admit`]); its arguments are read into a [`Command`] ([`parse`]);
//! the command is applied ([`apply`]).

mod auth;
mod connection;
mod name;
mod parse;
mod server;
mod throttle;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::{Clock, MonotonicClock, Nanos};

use super::codec::Reply;
use crate::auth::Secret;
use crate::limiter::Limiter;
use crate::traces::Traces;
use name::Name;
use parse::Command;

/// What every connection of a listener shares: the decision core, `AUTH`'s password, and what
/// `INFO` reports (the port, the counts of connections and commands).
pub struct Shared {
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
}

impl Shared {
    /// For the connections of a listener on `port` (`INFO` gives it) deciding through
    /// `limiter`, whose user `default` has `password` (`[resp] password`).
    pub fn new(limiter: Arc<Limiter>, password: Option<Secret>, port: u16) -> Shared {
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

/// Answers `args` (the command's name first; never empty).
pub(super) async fn execute(
    shared: &Shared,
    session: &mut Session,
    args: &[&[u8]],
) -> (Reply, After) {
    let name = Name::of(args[0]);
    if let Err(refused) = auth::admit(shared, session, name) {
        return (refused, After::Continue);
    }
    shared.commands.fetch_add(1, Ordering::Relaxed);
    match Command::parse(name, args) {
        Ok(command) => apply(shared, session, &command).await,
        Err(refused) => (refused, After::Continue),
    }
}

/// The reply of the rate-limiting command `name`, in a span of its own (the untraced path
/// awaits the command itself: no wrapper to move its future into).
async fn traced(traces: &Traces, name: &'static str, work: impl Future<Output = Reply>) -> Reply {
    let span = traces.resp_command(name);
    let reply = span.run(work).await;
    match &reply {
        Reply::Error(message) => span.fail(message.as_str()),
        Reply::RawError(message) => span.fail(String::from_utf8_lossy(message)),
        _ => {}
    }
    span.end();
    reply
}

/// Runs `command` on the connection `session`.
async fn apply(shared: &Shared, session: &mut Session, command: &Command<'_>) -> (Reply, After) {
    let limiter = &*shared.limiter;
    let reply = match command {
        Command::ClThrottle(parsed) => {
            let work = throttle::cl_throttle(limiter, parsed);
            match limiter.traces() {
                None => work.await,
                Some(traces) => traced(traces, "CL.THROTTLE", work).await,
            }
        }
        Command::Throttle(parsed) => {
            let work = throttle::throttle(limiter, parsed);
            match limiter.traces() {
                None => work.await,
                Some(traces) => traced(traces, "THROTTLE", work).await,
            }
        }
        Command::TollgateCheck(check) => {
            let work = throttle::tollgate_check(limiter, check);
            match limiter.traces() {
                None => work.await,
                Some(traces) => traced(traces, "TOLLGATE.CHECK", work).await,
            }
        }
        Command::Ping(None) => Reply::Simple("PONG"),
        Command::Ping(Some(message)) | Command::Echo(message) => Reply::Bulk(message.to_vec()),
        Command::Quit => return (Reply::Simple("OK"), After::Close),
        Command::Hello(hello) => match connection::hello(shared, session, hello) {
            Ok(reply) => reply,
            Err(auth::WrongPass(refusal)) => return auth::wrong_pass(refusal).await,
        },
        Command::Auth { user, password } => match auth::auth(shared, session, *user, password) {
            Ok(reply) => reply,
            Err(auth::WrongPass(refusal)) => return auth::wrong_pass(refusal).await,
        },
        Command::Client(client) => connection::client(session, client),
        Command::Select => Reply::Simple("OK"),
        Command::Commands(query) => server::command(query),
        Command::Info(sections) => server::info(shared, sections),
        Command::Reset => connection::reset(session),
        Command::Config(get) => server::config(get),
    };
    (reply, After::Continue)
}
