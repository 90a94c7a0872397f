//! The commands: the rate limiters (`CL.THROTTLE`, `THROTTLE`, `TOLLGATE.CHECK`) and what
//! clients send on connect and in daily use, each answered as Redis words it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Check, Clock, Decision, MonotonicClock, Nanos, Policy};

use super::cell::{self, Throttle};
use super::codec::Reply;
use crate::limiter::{DecideError, Limiter, MAX_KEY_BYTES, Target};
use crate::metrics::PolicyCounters;

/// The bucket name every `THROTTLE` key goes by.
const THROTTLE_BUCKET: &str = "throttle";

/// What every connection shares.
pub(super) struct Shared {
    /// The server's store, policies and metrics.
    pub(super) state: Arc<Limiter>,
    /// `AUTH`'s password; `None`: no authentication.
    pub(super) password: Option<String>,
    /// The port the listener is on (for `INFO`).
    pub(super) port: u16,
    next_id: AtomicU64,
    clock: MonotonicClock,
    started: Nanos,
    cell: PolicyCounters,
    throttle: PolicyCounters,
}

impl Shared {
    /// Connections deciding on `state`.
    pub(super) fn new(state: Arc<Limiter>, password: Option<String>, port: u16) -> Shared {
        let cell = state.metrics().policy(cell::BUCKET);
        let throttle = state.metrics().policy(THROTTLE_BUCKET);
        let clock = MonotonicClock::new();
        Shared {
            state,
            password,
            port,
            next_id: AtomicU64::new(1),
            started: clock.now(),
            clock,
            cell,
            throttle,
        }
    }
}

/// One connection's state.
pub(super) struct Session {
    /// `CLIENT ID`.
    pub(super) id: u64,
    /// Whether replies are RESP3 (after `HELLO 3`).
    pub resp3: bool,
    name: Option<Vec<u8>>,
    authenticated: bool,
}

impl Session {
    /// A new connection's.
    pub(super) fn new(shared: &Shared) -> Session {
        Session {
            id: shared.next_id.fetch_add(1, Ordering::Relaxed),
            resp3: false,
            name: None,
            authenticated: shared.password.is_none(),
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
    if !session.authenticated && !matches!(name, "auth" | "hello" | "quit" | "reset") {
        return (
            Reply::Error("NOAUTH Authentication required.".into()),
            After::Continue,
        );
    }
    let reply = match name {
        "cl.throttle" => cl_throttle(shared, args).await,
        "throttle" => throttle(shared, args).await,
        "tollgate.check" => tollgate_check(shared, args).await,
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
        "hello" => hello(shared, session, args),
        "auth" => auth(shared, session, args),
        "client" => client(session, args),
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
        "command" => command(args),
        "info" => info(shared),
        "reset" => {
            session.resp3 = false;
            session.name = None;
            session.authenticated = shared.password.is_none();
            Reply::Simple("RESET")
        }
        // redis-benchmark and some clients read the server's persistence settings at start:
        // nothing is saved to disk by this server. Other parameters are not exposed.
        "config" => match args.get(1) {
            Some(sub) if sub.eq_ignore_ascii_case(b"get") => Reply::Map(
                args[2..]
                    .iter()
                    .filter_map(|p| match p.to_ascii_lowercase().as_slice() {
                        b"save" => Some(("save", "")),
                        b"appendonly" => Some(("appendonly", "no")),
                        _ => None,
                    })
                    .map(|(k, v)| (Reply::text(k), Reply::text(v)))
                    .collect(),
            ),
            _ => Reply::err("tollgate answers CONFIG GET only (save, appendonly)"),
        },
        _ => unknown(args),
    };
    (reply, After::Continue)
}

fn arity(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

/// Redis's words for a command it does not know, with the start of its arguments.
fn unknown(args: &[&[u8]]) -> Reply {
    let mut beginning = String::new();
    for arg in &args[1..] {
        let arg = String::from_utf8_lossy(arg);
        if beginning.len() + arg.len() > 128 {
            break;
        }
        beginning.push_str(&format!("'{arg}' "));
    }
    Reply::err(format!(
        "unknown command '{}', with args beginning with: {beginning}",
        String::from_utf8_lossy(args[0])
    ))
}

/// The refusal of a client-chosen limit where the operator turned those off.
fn chosen_limits_refused(shared: &Shared) -> Option<String> {
    (!shared.state.live().inline_policies).then(|| {
        "limits chosen by the client are turned off on this server (http.inline_policies = \
         false); use TOLLGATE.CHECK <policy> <key> [cost] with a configured policy"
            .to_owned()
    })
}

async fn cl_throttle(shared: &Shared, args: &[&[u8]]) -> Reply {
    if let Some(refused) = chosen_limits_refused(shared) {
        return Reply::Error(format!("Cell error: {refused}"));
    }
    let throttle = match Throttle::parse(args) {
        Ok(throttle) => throttle,
        Err(line) => return Reply::Error(line),
    };
    if throttle.key.len() > MAX_KEY_BYTES {
        return Reply::Error(format!(
            "Cell error: the key is longer than {MAX_KEY_BYTES} bytes"
        ));
    }
    // A quantity above the limit is answered from a look at the bucket: nothing is taken.
    let cost = if throttle.exceeds_limit() {
        0
    } else {
        throttle.quantity
    };
    let check = [Check::new(throttle.policy, throttle.key, cost).named(cell::BUCKET)];
    match decide_one(shared, &check, &shared.cell).await {
        Ok(decision) => {
            let reply = throttle.reply(&decision);
            Reply::Array(reply.into_iter().map(Reply::Integer).collect())
        }
        Err(e) => Reply::Error(format!("Cell error: {e}")),
    }
}

/// throttlecrab's `THROTTLE key max_burst count_per_period period [quantity]`: its reply's
/// shape, `[allowed (1 when allowed), limit (= max_burst), remaining, reset_after, retry_after]`
/// in seconds, on tollgate's token bucket (capacity `max_burst`, `count_per_period` tokens per
/// `period` seconds).
async fn throttle(shared: &Shared, args: &[&[u8]]) -> Reply {
    if args.len() != 5 && args.len() != 6 {
        return arity("throttle");
    }
    if let Some(refused) = chosen_limits_refused(shared) {
        return Reply::err(refused);
    }
    let number = |i: usize, what: &str| -> Result<i64, Reply> {
        std::str::from_utf8(args[i])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Reply::err(format!("invalid {what}")))
    };
    let parsed = (|| {
        let burst = number(2, "max_burst")?;
        let count = number(3, "count_per_period")?;
        let period = number(4, "period")?;
        let quantity = if args.len() == 6 {
            number(5, "quantity")?
        } else {
            1
        };
        Ok((burst, count, period, quantity))
    })();
    let (burst, count, period, quantity) = match parsed {
        Ok(numbers) => numbers,
        Err(reply) => return reply,
    };
    if quantity < 0 {
        return Reply::err(format!("negative quantity: {quantity}"));
    }
    if burst <= 0 || count <= 0 || period <= 0 {
        return Reply::err(
            "invalid rate limit: max_burst, count_per_period and period must be positive",
        );
    }
    if args[1].len() > MAX_KEY_BYTES {
        return Reply::err(format!("the key is longer than {MAX_KEY_BYTES} bytes"));
    }
    let policy = match Policy::token_bucket(
        burst as u64,
        count as u64,
        Duration::from_secs(period as u64),
    ) {
        Ok(policy) => policy,
        Err(e) => return Reply::err(format!("invalid rate limit: {e}")),
    };
    let quantity = quantity as u64;
    let over = quantity > policy.capacity();
    let check =
        [Check::new(policy, args[1], if over { 0 } else { quantity }).named(THROTTLE_BUCKET)];
    match decide_one(shared, &check, &shared.throttle).await {
        Ok(d) => {
            let allowed = d.allowed && !over;
            let retry = match (allowed, over) {
                (true, _) => 0,
                (false, true) => -1,
                (false, false) => d.retry_after_secs() as i64,
            };
            Reply::Array(vec![
                Reply::Integer(i64::from(allowed)),
                Reply::Integer(burst),
                Reply::Integer(d.remaining as i64),
                Reply::Integer(d.reset_after_secs() as i64),
                Reply::Integer(retry),
            ])
        }
        Err(e) => Reply::err(e),
    }
}

/// `TOLLGATE.CHECK policy key [cost]`: a configured policy by name, answered
/// `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
async fn tollgate_check(shared: &Shared, args: &[&[u8]]) -> Reply {
    let (policy, key, cost) = match args {
        [_, policy, key] => (policy, key, 1),
        [_, policy, key, cost] => {
            match std::str::from_utf8(cost)
                .ok()
                .and_then(|c| c.parse::<u64>().ok())
            {
                Some(cost) => (policy, key, cost),
                None => {
                    return Reply::err("cost must be an integer from 0 to 18446744073709551615");
                }
            }
        }
        _ => return arity("tollgate.check"),
    };
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Reply::err(format!("the key must be 1 to {MAX_KEY_BYTES} bytes"));
    }
    let target = Target::Named {
        names: vec![String::from_utf8_lossy(policy).into_owned()],
        listed: false,
    };
    let entries = match shared.state.live().resolve(&target) {
        Ok(entries) => entries,
        Err(e) => return Reply::err(e.to_string()),
    };
    match shared.state.decide_entries(entries, key, cost).await {
        Ok(decided) => {
            let shown = &decided.shown().decision;
            Reply::Array(vec![
                Reply::Integer(i64::from(decided.allowed())),
                Reply::Integer(shown.limit as i64),
                Reply::Integer(shown.remaining as i64),
                Reply::Integer(shown.retry_after_ms() as i64),
                Reply::Integer(shown.reset_after_ms() as i64),
            ])
        }
        Err(e) => Reply::err(message(&e)),
    }
}

/// Decides one check, counting its outcome under `counters`.
async fn decide_one(
    shared: &Shared,
    check: &[Check<'_>; 1],
    counters: &PolicyCounters,
) -> Result<Decision, String> {
    match shared.state.decide(check).await {
        Ok(verdict) => {
            let decision = verdict.decisions[0];
            if decision.allowed && check[0].cost > 0 {
                counters.allowed.inc();
            } else if !decision.allowed {
                counters.denied.inc();
            }
            Ok(decision)
        }
        Err(e) => {
            counters.error.inc();
            Err(message(&DecideError::from(e)))
        }
    }
}

/// What a Redis error says of a request not decided.
fn message(error: &DecideError) -> String {
    match error {
        DecideError::Unavailable(e) => format!("the store is unavailable: {e}"),
        e => e.to_string(),
    }
}

fn hello(shared: &Shared, session: &mut Session, args: &[&[u8]]) -> Reply {
    let mut resp3 = session.resp3;
    let mut rest = &args[1..];
    if let Some((version, tail)) = rest.split_first() {
        match std::str::from_utf8(version)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
        {
            Some(2) => resp3 = false,
            Some(3) => resp3 = true,
            Some(_) => return Reply::Error("NOPROTO unsupported protocol version".into()),
            None => return Reply::err("Protocol version is not an integer or out of range"),
        }
        rest = tail;
    }
    let mut name = None;
    let mut authenticated = session.authenticated;
    while let Some((option, tail)) = rest.split_first() {
        match (option.to_ascii_lowercase().as_slice(), tail) {
            (b"auth", [user, password, more @ ..]) => {
                if !shared.password_matches(user, password) {
                    return wrong_password();
                }
                authenticated = true;
                rest = more;
            }
            (b"setname", [client, more @ ..]) => {
                if let Err(reply) = check_name(client) {
                    return reply;
                }
                name = Some(client.to_vec());
                rest = more;
            }
            _ => {
                return Reply::err(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(option)
                ));
            }
        }
    }
    if !authenticated {
        return Reply::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        );
    }
    session.resp3 = resp3;
    session.authenticated = authenticated;
    if name.is_some() {
        session.name = name;
    }
    Reply::Map(vec![
        (Reply::text("server"), Reply::text("tollgate")),
        (
            Reply::text("version"),
            Reply::text(env!("CARGO_PKG_VERSION")),
        ),
        (
            Reply::text("proto"),
            Reply::Integer(if resp3 { 3 } else { 2 }),
        ),
        (Reply::text("id"), Reply::Integer(session.id as i64)),
        (Reply::text("mode"), Reply::text("standalone")),
        (Reply::text("role"), Reply::text("master")),
        (Reply::text("modules"), Reply::Array(Vec::new())),
    ])
}

impl Shared {
    /// Whether `user` and `password` authenticate. Without a password set, the default user
    /// takes any (as Redis's `nopass` default user does), so a client configured with one still
    /// connects.
    fn password_matches(&self, user: &[u8], password: &[u8]) -> bool {
        if self.password.is_none() {
            return user == b"default";
        }
        // Compared in constant time, so that timing does not tell how much of a guess is right.
        let same = |a: &[u8], b: &[u8]| {
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
        };
        user == b"default"
            && self
                .password
                .as_ref()
                .is_some_and(|p| same(p.as_bytes(), password))
    }
}

fn wrong_password() -> Reply {
    Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
}

fn auth(shared: &Shared, session: &mut Session, args: &[&[u8]]) -> Reply {
    let (user, password): (&[u8], &[u8]) = match args {
        [_, password] => {
            // Redis refuses the password-only form when no password is set.
            if shared.password.is_none() {
                return Reply::err(
                    "AUTH <password> called without any password configured for the default \
                     user. Are you sure your configuration is correct?",
                );
            }
            (b"default", password)
        }
        [_, user, password] => (user, password),
        _ => return arity("auth"),
    };
    if shared.password_matches(user, password) {
        session.authenticated = true;
        Reply::Simple("OK")
    } else {
        wrong_password()
    }
}

fn check_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(Reply::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

fn client(session: &mut Session, args: &[&[u8]]) -> Reply {
    let Some(sub) = args.get(1) else {
        return arity("client");
    };
    match (sub.to_ascii_lowercase().as_slice(), &args[2..]) {
        (b"setname", [name]) => match check_name(name) {
            Ok(()) => {
                session.name = (!name.is_empty()).then(|| name.to_vec());
                Reply::Simple("OK")
            }
            Err(reply) => reply,
        },
        (b"getname", []) => session.name.clone().map_or(Reply::Null, Reply::Bulk),
        (b"id", []) => Reply::Integer(session.id as i64),
        (b"setinfo", [attribute, _]) => {
            if attribute.eq_ignore_ascii_case(b"lib-name")
                || attribute.eq_ignore_ascii_case(b"lib-ver")
            {
                Reply::Simple("OK")
            } else {
                Reply::err(format!(
                    "Unrecognized option '{}'",
                    String::from_utf8_lossy(attribute)
                ))
            }
        }
        (b"setname" | b"getname" | b"id" | b"setinfo", _) => Reply::err(format!(
            "wrong number of arguments for 'client|{}' command",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        )),
        _ => Reply::err(format!(
            "unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(sub)
        )),
    }
}

/// `COMMAND` (every command, in Redis 7's ten-field form), `COMMAND COUNT`, `COMMAND INFO`,
/// `COMMAND DOCS` (none documented: an empty map, which redis-cli takes as "no hints").
fn command(args: &[&[u8]]) -> Reply {
    let info = |(name, arity, flags): &(&str, i64, &[&str])| {
        let is_key = name.contains("throttle") || *name == "tollgate.check";
        let key = if *name == "tollgate.check" { 2 } else { 1 };
        Reply::Array(vec![
            Reply::text(*name),
            Reply::Integer(*arity),
            Reply::Array(flags.iter().map(|f| Reply::text(*f)).collect()),
            Reply::Integer(if is_key { key } else { 0 }),
            Reply::Integer(if is_key { key } else { 0 }),
            Reply::Integer(i64::from(is_key)),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
        ])
    };
    match args.get(1).map(|s| s.to_ascii_lowercase()) {
        None => Reply::Array(COMMANDS.iter().map(info).collect()),
        Some(sub) if sub == b"count" => Reply::Integer(COMMANDS.len() as i64),
        Some(sub) if sub == b"docs" => Reply::Map(Vec::new()),
        Some(sub) if sub == b"info" => Reply::Array(
            args[2..]
                .iter()
                .map(|name| {
                    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
                    COMMANDS
                        .iter()
                        .find(|c| c.0 == name)
                        .map_or(Reply::Null, info)
                })
                .collect(),
        ),
        Some(sub) => Reply::err(format!(
            "unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(&sub)
        )),
    }
}

fn info(shared: &Shared) -> Reply {
    let uptime = Duration::from(shared.clock.now() - shared.started).as_secs();
    Reply::text(format!(
        "# Server\r\nredis_version:7.2.0\r\ntollgate_version:{}\r\nredis_mode:standalone\r\n\
         process_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime}\r\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        shared.port,
    ))
}
