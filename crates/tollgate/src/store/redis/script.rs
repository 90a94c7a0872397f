//! The decision script: arguments in, decisions out. See `decide.lua` for the contract.

use std::time::Duration;

use redis::{Cmd, ErrorKind, Script, ServerErrorKind, Value};

use super::encoded::{Encoded, MICROSECOND, Take, checks};
use super::error::store_error;
use super::plan::{Plan, TakeFirst};
use super::wait::Wait;
pub(crate) use super::wait::Waited;
use crate::algorithm::gcra::Gcra;
use crate::{CheckError, Decision, Nanos, StoreError, Verdict};

/// The latest time the scripts decide at: 2^52 µs after the UNIX epoch (September 2112), so
/// that `now + tau` (tau < 2^52) stays an exact double. The scripts refuse a later `TIME` with
/// an error; a test's injected clock is refused here, before the call.
pub(crate) const MAX_NOW_US: u64 = (1 << 52) - 1;

/// Refuses an injected clock reading past [`MAX_NOW_US`].
pub(crate) fn check_now(now: Nanos) -> Result<(), CheckError> {
    if now.as_u64() / 1000 > MAX_NOW_US {
        return Err(CheckError::ClockOutOfRange {
            now: now.into(),
            max: Duration::from_micros(MAX_NOW_US),
        });
    }
    Ok(())
}

/// `bucket.lua`'s prelude on one Redis: its buckets are `KEYS`; `read_rest(from)` reads those it
/// did not take first (from `from` on) with one `MGET`, as they share one slot, and returns the
/// values and where they start (key `k`'s is `got[k - shift]`); one `MGET` for every 4096 of
/// them, as Lua's `unpack` gives at most about 8,000 values (`LUAI_MAXCSTACK`: beyond, "too many
/// results to unpack", which a batch of that many buckets would meet: `max_batch` is the user's
/// to set).
const BUCKET_DECLARED: &str = "local keys, b, nkeys, last = KEYS, 0, #KEYS, #ARGV
local function read_rest(from)
  if from > nkeys then
    return {}, 0
  elseif nkeys - from < 4096 then
    return redis.call('MGET', unpack(keys, from, nkeys)), from - 1
  end
  local got = {}
  for i = from, nkeys, 4096 do
    local part = redis.call('MGET', unpack(keys, i, math.min(i + 4095, nkeys)))
    for j = 1, #part do
      got[i - from + j] = part[j]
    end
  end
  return got, from - 1
end
";

/// Batched per cluster node, a call declares one key (the keys a call declares must share one
/// slot, flag or not) and passes every bucket at the end of ARGV, then their number. The flag
/// lets a script touch keys of other slots of its node; a key the node does not serve (a slot
/// moved or migrating) raises "Script attempted to access a non local key", which the scripts
/// meet before they write anything they keep (`bucket.lua` takes back what it took first).
const PER_NODE: &str = "#!lua flags=allow-cross-slot-keys
";

/// `decide.lua` per node: the buckets put back in KEYS, as it expects.
const COPY_KEYS: &str = "do
  local last = #ARGV
  local first = last - tonumber(ARGV[last])
  for i = first, last - 1 do
    KEYS[i - first + 1] = ARGV[i]
  end
  for i = last, first, -1 do
    ARGV[i] = nil
  end
end
";

/// `bucket.lua`'s prelude per node: its buckets read where they are in ARGV, each with an `MGET`
/// of its own, as one command may not span slots even with the flag (`MGET` rather than `GET`:
/// a key of another type reads as missing, as in one `MGET`). A bucket the node does not serve
/// is an error, which `read_rest` returns and `bucket.lua` answers after taking back what it
/// took first.
const BUCKET_PER_NODE: &str = "local nkeys = ARGV[#ARGV] + 0
local last = #ARGV - 1 - nkeys
local keys, b = ARGV, last
local function read_rest(from)
  local got = {}
  for i = from, nkeys do
    local one = redis.pcall('MGET', keys[b + i])
    if one.err then
      return one
    end
    got[i] = one[1]
  end
  return got, 0
end
";

/// `rebase.lua`: a token bucket's state carried to new numbers, which every script that reads
/// token buckets runs before deciding on one (a port of `Gcra::rebase_in`).
const REBASE: &str = include_str!("rebase.lua");

/// `bucket.lua` takes `rebase.lua` inside a function, `rebaser()`, which makes `rebase` when a
/// call first needs it: a script's text runs as one function per call, so the closures at its
/// top are made on every call, and these two (with what they capture) would cost every call
/// what few calls need (docs/performance.md has the count).
const REBASER: &str = "local function rebaser()
";
const REBASER_END: &str = "return rebase
end
";

/// How a call names its buckets in a cluster.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// Every bucket declared: the call stays in one slot (one Redis, or a cluster per slot).
    Declared,
    /// One declared, the others passed as arguments: every bucket on the node serving the
    /// first (Redis 7's `allow-cross-slot-keys`).
    PerNode,
}

/// The scripts: `decide.lua` decides every algorithm; `bucket.lua`, its token-bucket hot
/// path, takes calls whose checks are all token buckets; each in two forms (see [`Keys`]).
pub(crate) struct Scripts {
    general: Script,
    bucket: Script,
    general_node: Script,
    bucket_node: Script,
    /// `settle.lua`: refunds and charges (see `settle.rs`).
    pub(crate) settle: Script,
    /// `WAIT` behind every call, when durability is asked for (see `wait.rs`).
    pub(crate) wait: Option<Wait>,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        let decide = include_str!("decide.lua");
        let bucket = include_str!("bucket.lua");
        Scripts {
            general: Script::new(&format!("{REBASE}{decide}")),
            bucket: Script::new(&format!(
                "{BUCKET_DECLARED}{REBASER}{REBASE}{REBASER_END}{bucket}"
            )),
            general_node: Script::new(&format!("{PER_NODE}{COPY_KEYS}{REBASE}{decide}")),
            bucket_node: Script::new(&format!(
                "{PER_NODE}{BUCKET_PER_NODE}{REBASER}{REBASE}{REBASER_END}{bucket}"
            )),
            settle: Script::new(&format!("{REBASE}{}", include_str!("settle.lua"))),
            wait: None,
        }
    }

    /// The scripts of calls batched per node, to load on every node at start: a server that
    /// refuses them (older than Redis 7.0, or the flag unknown) is asked per slot.
    pub(crate) fn per_node(&self) -> [&Script; 2] {
        [&self.general_node, &self.bucket_node]
    }
}

impl Scripts {
    /// The script that decides `decisions` with their keys passed as `keys_as`, and whether it
    /// is `bucket.lua` (every check a token bucket).
    fn pick<D: AsRef<[Encoded]>>(&self, decisions: &[D], keys_as: Keys) -> (&Script, bool) {
        let buckets_only = checks(decisions).all(|c| c.gcra.is_some());
        let script = match (buckets_only, keys_as) {
            (true, Keys::Declared) => &self.bucket,
            (false, Keys::Declared) => &self.general,
            (true, Keys::PerNode) => &self.bucket_node,
            (false, Keys::PerNode) => &self.general_node,
        };
        (script, buckets_only)
    }
}

/// Appends to `out` the bytes [`run`] sends for `decisions` at Redis's clock: the
/// instruction-count benchmark's way in (see `bench.rs`).
#[cfg(feature = "__bench")]
pub(crate) fn pack(scripts: &Scripts, decisions: &[Vec<Encoded>], out: &mut Vec<u8>) {
    let (script, buckets_only) = scripts.pick(decisions, Keys::Declared);
    let mut plan = Plan::new(decisions, buckets_only);
    plan.take_first();
    command(script, None, decisions, &plan, buckets_only, Keys::Declared).write_packed_command(out);
}

/// The script's answer to one decision.
pub(crate) struct Reply {
    pub(crate) verdict: Verdict,
    /// Per check: how long a denial stays exactly as answered if nobody else takes (what a deny
    /// cache may repeat); zero when allowed.
    pub(crate) holds: Vec<Duration>,
    /// Why the decision was not made: a bucket's key holds a value this version never writes
    /// (the verdict is then empty, and nothing was taken).
    pub(crate) garbage: Option<String>,
    /// Why an allowed decision is answered as a store error: fewer replicas than asked hold
    /// what it charged (durability mode, `wait.rs`).
    pub(crate) unsure: Option<String>,
}

impl Reply {
    fn decided(decisions: Vec<Decision>, holds: Vec<Duration>) -> Reply {
        Reply {
            verdict: Verdict::new(decisions),
            holds,
            garbage: None,
            unsure: None,
        }
    }

    /// The answer to a decision naming `bucket`, whose value is garbage (`wrong_type`: a key
    /// of another type).
    fn garbage(bucket: &[u8], wrong_type: bool) -> Reply {
        let what = if wrong_type {
            "a key of another type (WRONGTYPE)"
        } else {
            "a value (garbage, or out of range)"
        };
        Reply {
            verdict: Verdict::new(Vec::new()),
            holds: Vec::new(),
            garbage: Some(format!(
                "the Redis key {:?} holds {what} this version of tollgate never writes: the \
                 decision took nothing, and the key now expires like a bucket of its policy",
                String::from_utf8_lossy(bucket)
            )),
            unsure: None,
        }
    }
}

/// Decides `decisions` (each a list of checks, all or nothing) in order in one script call;
/// `now_us` injects the time (tests), `None` uses Redis's clock; `cluster` when `conn` is a
/// cluster's (see [`query`] for what is asked again).
///
/// `None` when the call was sent per node ([`Keys::PerNode`]) and the node does not serve one
/// of its buckets: the script stopped at its reads and took back what it had written, so it
/// decided and wrote nothing.
///
/// Per node, and in a call of one bucket, lone buckets are always taken first (see [`Plan`]);
/// with several keys declared, while `guess` says it is worth it, and what the call read
/// teaches `guess`.
pub(crate) async fn run<D: AsRef<[Encoded]>>(
    scripts: &Scripts,
    conn: &mut impl redis::aio::ConnectionLike,
    cluster: bool,
    keys_as: Keys,
    guess: &TakeFirst,
    now_us: Option<u64>,
    decisions: &[D],
) -> Result<Option<Vec<Reply>>, StoreError> {
    let (script, buckets_only) = scripts.pick(decisions, keys_as);
    let mut plan = Plan::new(decisions, buckets_only);
    if keys_as == Keys::PerNode || plan.keys.len() == 1 || guess.worth() {
        plan.take_first();
    }
    let cmd = command(script, now_us, decisions, &plan, buckets_only, keys_as);
    let Waited { reply, short } =
        match query(script, &cmd, conn, cluster, scripts.wait.as_ref()).await {
            Err(e) if keys_as == Keys::PerNode && is_not_local(&e) => return Ok(None),
            reply => reply.map_err(store_error)?,
        };
    if buckets_only {
        let mut read = Read::new(reply, plan.keys.len())?;
        if read.now < 0 {
            // The script could not take first (see `bucket.lua`): it read as before.
            read.now = -read.now;
            guess.refused();
        }
        if keys_as == Keys::Declared {
            // An absent bucket is read with no numbers.
            let absent = plan
                .lone
                .iter()
                .filter(|&&(k, _)| matches!(read.states.get(k), Some(Some((_, None)))))
                .count();
            guess.learn(absent, plan.lone.len() - absent);
        }
        replay(read, decisions, &plan.slots)
    } else {
        parse(&numbers(reply)?, decisions)
    }
    .map(|replies| Some(unsure(replies, short)))
}

/// When the `WAIT` behind the call fell short (`short`), marks the decisions it charged: their
/// write may not survive a failover, so they are answered as a store error. A denial wrote
/// nothing to lose, and is answered as Redis decided it.
fn unsure(mut replies: Vec<Reply>, short: Option<String>) -> Vec<Reply> {
    if let Some(why) = short {
        for reply in &mut replies {
            if reply.garbage.is_none() && reply.verdict.allowed() {
                reply.unsure = Some(why.clone());
            }
        }
    }
    replies
}

/// A script sent per node met a bucket its node does not serve (Redis 7.0.15: "Script
/// attempted to access a non local key in a cluster node script: ..."), or a node that ignored
/// the flag ("... keys that do not hash to the same slot").
fn is_not_local(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    text.contains("Script attempted to access a non local key")
        || text.contains("Script attempted to access keys that do not hash to the same slot")
}

/// How often a call that the cluster client could not follow through its redirections is made
/// again, and the wait before the first (then twice that, three times...).
const REDIRECTION_RETRIES: u32 = 5;
const REDIRECTION_BACKOFF: Duration = Duration::from_millis(2);

/// Runs `cmd`, an `EVALSHA` of `script`, followed by `wait` when given: loads the script when
/// Redis has lost it (`NOSCRIPT`: a `SCRIPT FLUSH`, a restart, a replica promoted), and, on a
/// cluster, makes the call again a moment later when the cluster client gave up following its
/// redirections. (One Redis that answers `MOVED` is a cluster node given as a single Redis:
/// asking again would not help.)
pub(crate) async fn query(
    script: &Script,
    cmd: &Cmd,
    conn: &mut impl redis::aio::ConnectionLike,
    cluster: bool,
    wait: Option<&Wait>,
) -> redis::RedisResult<Waited> {
    let mut redirected = 0;
    loop {
        let reply = match send(cmd, conn, wait).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load_async(conn).await?;
                send(cmd, conn, wait).await
            }
            reply => reply,
        };
        match reply {
            Err(e) if cluster && is_redirection(&e) && redirected < REDIRECTION_RETRIES => {
                redirected += 1;
                tokio::time::sleep(REDIRECTION_BACKOFF * redirected).await;
            }
            reply => return reply,
        }
    }
}

/// `cmd` alone, or pipelined with `WAIT`.
async fn send(
    cmd: &Cmd,
    conn: &mut impl redis::aio::ConnectionLike,
    wait: Option<&Wait>,
) -> redis::RedisResult<Waited> {
    match wait {
        Some(wait) => wait.query(cmd, conn).await,
        None => Ok(Waited {
            reply: cmd.query_async(conn).await?,
            short: None,
        }),
    }
}

/// `MOVED` or `ASK` that the cluster client gave up following: during a slot migration whose
/// tool tells the old owner before the new one, the two redirect to each other for a moment.
/// A redirected command did not run, so making it again cannot charge twice; the caller's
/// timeout bounds the waits.
fn is_redirection(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    )
}

/// `EVALSHA sha numkeys keys... time ...`; then, for `decide.lua`, the number of decisions and
/// 5 numbers per check; for `bucket.lua`, the distinct policies, then per decision its number
/// of checks and 3 numbers per check, or one number for each run of single checks of cost 1
/// under the first policy (see [`Run`]), then what the buckets taken first take and their
/// number. Indices count from 1, as Lua does. Per node, the first key alone is declared, and
/// every key follows the rest, then their number (see `PER_NODE`).
fn command<D: AsRef<[Encoded]>>(
    script: &Script,
    now_us: Option<u64>,
    decisions: &[D],
    plan: &Plan<'_>,
    buckets_only: bool,
    keys_as: Keys,
) -> Cmd {
    let keys = &plan.keys;
    // Sized up front (roughly: a number has at most 20 digits, most have a few), as grown
    // argument by argument the command was reallocated a dozen times. Per node the keys go in
    // ARGV, and the first in KEYS as well.
    let numbers = 8 + 5 * plan.slots.len() + plan.takes().len();
    let key_bytes: usize = keys.iter().chain(keys.first()).map(|k| k.len()).sum();
    let mut cmd = Cmd::with_capacity(keys.len() + numbers + 4, 64 + key_bytes + numbers * 8);
    cmd.arg("EVALSHA").arg(script.get_hash());
    match keys_as {
        Keys::Declared => {
            cmd.arg(keys.len());
            for key in keys {
                cmd.arg(*key);
            }
        }
        Keys::PerNode => {
            cmd.arg(1).arg(keys[0]);
        }
    }
    match now_us {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    // bucket.lua's policies, each (t, tau) once, and the index of each check's among them.
    let mut policies: Vec<(u64, u64)> = Vec::new();
    let mut policy_of: Vec<usize> = Vec::new();
    if buckets_only {
        for check in checks(decisions) {
            let p = match policies.iter().position(|&p| p == (check.a, check.b)) {
                Some(p) => p,
                None => {
                    policies.push((check.a, check.b));
                    policies.len() - 1
                }
            };
            policy_of.push(p + 1);
        }
        cmd.arg(policies.len());
        for &(t, tau) in &policies {
            cmd.arg(t).arg(tau);
        }
    } else {
        cmd.arg(decisions.len());
    }
    let mut slots = plan.slots.iter().enumerate();
    let mut run = Run::default();
    for checks in decisions.iter().map(AsRef::as_ref) {
        if let ([check], true) = (checks, buckets_only) {
            let (i, &slot) = slots.next().expect("a slot per check");
            if check.cost == 1 && policy_of[i] == 1 {
                run.push(&mut cmd, slot + 1);
            } else {
                run.end(&mut cmd);
                cmd.arg(1).arg(slot + 1).arg(policy_of[i]).arg(check.cost);
            }
            continue;
        }
        run.end(&mut cmd);
        cmd.arg(checks.len());
        for (check, (i, &slot)) in checks.iter().zip(&mut slots) {
            let k = slot + 1;
            if buckets_only {
                cmd.arg(k).arg(policy_of[i]).arg(check.cost);
            } else {
                cmd.arg(k)
                    .arg(check.code)
                    .arg(check.a)
                    .arg(check.b)
                    .arg(check.cost);
            }
        }
    }
    run.end(&mut cmd);
    if buckets_only {
        let takes = plan.takes();
        let arg = |(took, t, tau): Take| format!("{took} {t} {tau}");
        match takes.split_first() {
            Some(((_, take), rest)) if rest.iter().all(|(_, t)| t == take) => {
                cmd.arg(arg(*take))
                    .arg(-i64::try_from(takes.len()).expect("fewer keys than i64::MAX"));
            }
            _ => {
                for (_, take) in takes {
                    cmd.arg(arg(*take));
                }
                cmd.arg(takes.len());
            }
        }
    }
    if keys_as == Keys::PerNode {
        for key in keys {
            cmd.arg(*key);
        }
        cmd.arg(keys.len());
    }
    cmd
}

/// `bucket.lua`'s short form, decisions of one check of cost 1 under the first policy, sent as
/// runs: on buckets `k` to `k + r` in order, `-(k + r × RUN_STRIDE)`, and all on bucket `k`,
/// the same plus `SAME_BUCKET`: one number that Lua converts once instead of one a decision (a
/// batch of users' checks is one run, as the plan numbers buckets in the order first met, and so
/// is a batch of a hot key's).
#[derive(Default)]
struct Run {
    /// The first bucket (counting from 1), `0` when no run is open.
    k: u64,
    /// How many decisions follow the first.
    more: u64,
    /// Whether they are all on bucket `k` (rather than on the buckets after it).
    same: bool,
}

/// A run that starts below bucket 2^24 (far more than a batch holds) and has at most 2^26
/// decisions (r < 2^26) is below 2^50, and with `SAME_BUCKET` below 2^51: exact in Lua's
/// doubles, and read back without ambiguity.
const RUN_STRIDE: u64 = 1 << 24;
const SAME_BUCKET: u64 = 1 << 50;
const RUN_MAX: u64 = 1 << 26;

impl Run {
    /// Adds a decision on bucket `k` (from 1), sending the open run first unless `k` extends it.
    fn push(&mut self, cmd: &mut Cmd, k: usize) {
        let k = k as u64;
        if self.k > 0 && self.more + 1 < RUN_MAX {
            let same = k == self.k && (self.same || self.more == 0);
            if same || (!self.same && k == self.k + self.more + 1) {
                self.same = same;
                self.more += 1;
                return;
            }
        }
        self.end(cmd);
        if k < RUN_STRIDE {
            self.k = k;
        } else {
            // Beyond the stride (a call of 16 million buckets), where -k would read as a run:
            // the long form, one check on bucket k under policy 1 of cost 1.
            cmd.arg(1).arg(k).arg(1).arg(1);
        }
    }

    /// Sends the open run, if any.
    fn end(&mut self, cmd: &mut Cmd) {
        if self.k > 0 {
            let same = if self.same { SAME_BUCKET } else { 0 };
            let number = self.k + self.more * RUN_STRIDE + same;
            cmd.arg(-i64::try_from(number).expect("below 2^51"));
            *self = Run::default();
        }
    }
}

/// `decide.lua`'s reply: a flat array of integers, none negative.
fn numbers(reply: Value) -> Result<Vec<i64>, StoreError> {
    let Value::Array(items) = reply else {
        return Err(malformed("not an array"));
    };
    items
        .into_iter()
        .map(|v| match v {
            Value::Int(n) => Ok(n),
            _ => Err(malformed("not an integer")),
        })
        .collect()
}

/// A count or a time the script answered, which is never negative.
fn whole(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| malformed("negative number"))
}

/// Reads `decide.lua`'s answers.
fn parse<D: AsRef<[Encoded]>>(numbers: &[i64], decisions: &[D]) -> Result<Vec<Reply>, StoreError> {
    let mut numbers = numbers.iter().copied();
    let mut next = || whole(numbers.next().ok_or_else(|| malformed("too short"))?);
    let _now = next()?;
    let mut replies = Vec::with_capacity(decisions.len());
    for checks in decisions.iter().map(AsRef::as_ref) {
        let _all = next()?;
        let mut decided = Vec::with_capacity(checks.len());
        let mut holds = Vec::with_capacity(checks.len());
        let mut garbage = None;
        for check in checks {
            let allowed = next()?;
            if allowed >= 2 && garbage.is_none() {
                garbage = Some(Reply::garbage(&check.bucket, allowed == 3));
            }
            decided.push(Decision::new(
                allowed == 1,
                check.limit,
                next()?,
                Duration::from_micros(next()?),
                Duration::from_micros(next()?),
            ));
            holds.push(Duration::from_micros(next()?));
        }
        replies.push(garbage.unwrap_or_else(|| Reply::decided(decided, holds)));
    }
    Ok(replies)
}

/// A bucket's state as `bucket.lua` read it: its tat and the numbers it counts in (none when
/// absent), or `None` when garbage.
type State = Option<(Nanos, Option<Gcra>)>;

/// `bucket.lua`'s reply, read.
struct Read {
    /// Its time in µs, negated when it could not take first.
    now: i64,
    /// Per bucket, what it read.
    states: Vec<State>,
    /// The decisions it did not take, counting from 1, in order: `d` denied, `-d` naming a
    /// garbage key.
    not_taken: Vec<i64>,
}

impl Read {
    /// Reads the reply of a call on `keys` buckets.
    fn new(reply: Value, keys: usize) -> Result<Read, StoreError> {
        let Value::Array(items) = reply else {
            return Err(malformed("not an array"));
        };
        if items.len() <= keys {
            return Err(malformed("too short"));
        }
        let mut items = items.into_iter();
        let Some(Value::Int(now)) = items.next() else {
            return Err(malformed("no time"));
        };
        let states = items
            .by_ref()
            .take(keys)
            .map(|value| match value {
                Value::Nil => Ok(Some((Nanos::ZERO, None))),
                Value::Int(-1) => Ok(None),
                Value::BulkString(bytes) => state(&bytes).map(Some),
                _ => Err(malformed("a state neither a value nor absent")),
            })
            .collect::<Result<_, _>>()?;
        let not_taken = items
            .map(|value| match value {
                Value::Int(d) => Ok(d),
                _ => Err(malformed("not an integer")),
            })
            .collect::<Result<_, _>>()?;
        Ok(Read {
            now,
            states,
            not_taken,
        })
    }
}

/// A bucket's value as `bucket.lua` read it, "<tat> <t> <tau>" in µs, which it found to be
/// three whole numbers, t not 0 and every one below 2^53.
fn state(value: &[u8]) -> Result<(Nanos, Option<Gcra>), StoreError> {
    let mut numbers = value.split(|&b| b == b' ').map(|n| {
        std::str::from_utf8(n)
            .ok()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(micros)
    });
    match (
        numbers.next(),
        numbers.next(),
        numbers.next(),
        numbers.next(),
    ) {
        (Some(Some(tat)), Some(Some(t)), Some(Some(tau)), None) if t > Nanos::ZERO => {
            Ok((tat, Some(Gcra::from_parts(t, tau))))
        }
        _ => Err(malformed("a bucket's value")),
    }
}

/// A time the script answered in µs, in nanoseconds.
fn micros(us: u64) -> Option<Nanos> {
    us.checked_mul(1000).map(Nanos::new)
}

/// Replays `bucket.lua`'s decisions with [`Gcra`] from the states it read, at its `now`: the
/// same integers in nanoseconds instead of microseconds, so the same decisions, which what it
/// says it did not take confirms one by one.
fn replay<D: AsRef<[Encoded]>>(
    read: Read,
    decisions: &[D],
    slots: &[usize],
) -> Result<Vec<Reply>, StoreError> {
    let now = micros(whole(read.now)?).ok_or_else(|| malformed("time out of range"))?;
    let mut tats = read.states;
    let mut not_taken = read.not_taken.into_iter().peekable();
    let mut slots = slots.iter();
    let mut replies = Vec::with_capacity(decisions.len());
    for (d, checks) in (1..).zip(decisions.iter().map(AsRef::as_ref)) {
        // 1 taken, 0 denied, 2 naming a garbage key, as the script says.
        let flag = match not_taken.next_if(|&n| n == d || n == -d) {
            None => 1,
            Some(n) if n > 0 => 0,
            Some(_) => 2,
        };
        let slots: Vec<usize> = slots.by_ref().take(checks.len()).copied().collect();
        if let Some((check, _)) = checks.iter().zip(&slots).find(|&(_, &k)| tats[k].is_none()) {
            if flag != 2 {
                return Err(malformed("a decision on a garbage value was made"));
            }
            replies.push(Reply::garbage(&check.bucket, false));
            continue;
        }
        let mut outcomes = Vec::with_capacity(checks.len());
        for (check, &k) in checks.iter().zip(&slots) {
            let gcra = check.gcra.ok_or_else(|| malformed("not a token bucket"))?;
            let (tat, under) = tats[k].ok_or_else(|| malformed("no state"))?;
            // Under other numbers, rebased as the script did (and then written so).
            let tat = match under {
                Some(from) => gcra.rebase_in(&from, tat, now, MICROSECOND),
                None => tat,
            };
            tats[k] = Some((tat, Some(gcra)));
            let outcome = gcra
                .decide(tat, now, check.cost)
                .map_err(StoreError::Check)?;
            outcomes.push((k, outcome));
        }
        let taken = outcomes.iter().all(|(_, o)| o.allowed());
        if i64::from(taken) != flag {
            return Err(malformed(
                "the script decided otherwise than tollgate's GCRA",
            ));
        }
        let mut decided = Vec::with_capacity(checks.len());
        let mut holds = Vec::with_capacity(checks.len());
        for ((k, outcome), check) in outcomes.iter().zip(checks) {
            if taken && check.cost > 0 {
                tats[*k] = Some((outcome.new_tat(), check.gcra));
            }
            let decision = outcome.decision(taken);
            // A token bucket's denial stands, counting down, until its retry.
            holds.push(if outcome.allowed() {
                Duration::ZERO
            } else {
                decision.retry_after()
            });
            decided.push(decision);
        }
        replies.push(Reply::decided(decided, holds));
    }
    if not_taken.next().is_some() {
        return Err(malformed("a decision past the call's"));
    }
    Ok(replies)
}

fn malformed(what: &'static str) -> StoreError {
    StoreError::incompatible(format!("malformed reply from the tollgate script: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Check, Policy};

    /// The numbers `cmd` carries, as text.
    fn sent(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => unreachable!("the script's arguments are all simple"),
            })
            .collect()
    }

    #[test]
    fn consecutive_short_decisions_are_sent_as_one_run() {
        let mut cmd = Cmd::new();
        let mut run = Run::default();
        for k in [1, 2, 3, 5, 4, 7, 7, 7, 8, 9, 9] {
            run.push(&mut cmd, k);
        }
        run.end(&mut cmd);
        let (stride, same) = (RUN_STRIDE as i64, SAME_BUCKET as i64);
        // 5 then 4 is not a run: a run's buckets go up by one, or stay.
        let expected = [
            -(1 + 2 * stride),
            -5,
            -4,
            -(7 + 2 * stride + same),
            -(8 + stride),
            -9,
        ];
        assert_eq!(sent(&cmd), expected.map(|n| n.to_string()));
    }

    #[test]
    fn a_run_starts_below_the_stride_and_a_bucket_beyond_it_goes_alone_in_the_long_form() {
        let mut cmd = Cmd::new();
        let mut run = Run::default();
        let stride = RUN_STRIDE as usize;
        // A run may go past the stride, as only its first bucket is sent apart from the count.
        run.push(&mut cmd, stride - 1);
        run.push(&mut cmd, stride);
        run.push(&mut cmd, stride + 2);
        run.end(&mut cmd);
        let expected = [
            format!("-{}", stride - 1 + stride),
            "1".into(),
            (stride + 2).to_string(),
            "1".into(),
            "1".into(),
        ];
        assert_eq!(sent(&cmd), expected);
    }

    /// A batch of users' single checks of cost 1, broken by a check of cost 2 and a decision of
    /// two checks: each run is closed before them, and before the tail of what is taken first
    /// and (per node) the keys.
    #[test]
    fn runs_are_closed_before_every_other_form_and_the_tails() {
        let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
        let check = |user: &'static str, cost| {
            Encoded::new(&Check::new(policy, user.as_bytes(), cost)).unwrap()
        };
        let decisions = vec![
            vec![check("alice", 1)],
            vec![check("bob", 1)],
            vec![check("carol", 2)],
            vec![check("dave", 1)],
            vec![check("erin", 1), check("frank", 1)],
            vec![check("gina", 1)],
        ];
        let scripts = Scripts::new();
        let stride = RUN_STRIDE as i64;
        let decided = [
            vec![(-(1 + stride)).to_string()],
            ["1", "3", "1", "2"].map(String::from).to_vec(),
            vec!["-4".into()],
            ["2", "5", "1", "1", "6", "1", "1"]
                .map(String::from)
                .to_vec(),
            vec!["-7".into()],
        ]
        .concat();
        // One Redis, nothing taken first: EVALSHA, its hash, 7 keys declared, the time, one
        // policy (t = 100 ms, tau = 1 s in µs), the decisions, no takes.
        let plan = Plan::new(&decisions, true);
        let cmd = command(
            &scripts.bucket,
            None,
            &decisions,
            &plan,
            true,
            Keys::Declared,
        );
        let args = sent(&cmd);
        let head = ["", "1", "100000", "1000000"].map(String::from);
        assert_eq!(args[2], "7");
        assert_eq!(args[10..14], head);
        assert_eq!(args[14..], [decided.clone(), vec!["0".into()]].concat());
        // Per node, every bucket lone and taken first: their takes (not all alike), their
        // number, then the keys and their number.
        let mut plan = Plan::new(&decisions, true);
        plan.take_first();
        let cmd = command(
            &scripts.bucket_node,
            None,
            &decisions,
            &plan,
            true,
            Keys::PerNode,
        );
        let args = sent(&cmd);
        assert_eq!(args[2], "1");
        let takes = [
            100_000, 100_000, 200_000, 100_000, 100_000, 100_000, 100_000,
        ]
        .map(|took| format!("{took} 100000 1000000"));
        let tail = [decided, takes.to_vec(), vec!["7".into()]].concat();
        assert_eq!(args[4..8], head);
        assert_eq!(args[8..8 + tail.len()], tail);
        assert_eq!(args.len(), 8 + tail.len() + 8);
        assert_eq!(args[3], args[8 + tail.len()], "the first key, declared");
        assert_eq!(args.last().map(String::as_str), Some("7"));
    }

    #[test]
    fn a_value_read_is_three_whole_numbers_in_microseconds() {
        let (tat, gcra) = state(b"1500 100 1000").unwrap();
        assert_eq!(tat, Nanos::new(1_500_000));
        let numbers = Gcra::from_parts(Nanos::new(100_000), Nanos::new(1_000_000));
        assert_eq!(gcra, Some(numbers));
        let refused: [&[u8]; 8] = [
            b"1 0 5",
            b"1 2",
            b"1 2 3 4",
            b"1 2 3 ",
            b"a 2 3",
            b"+1 2 3",
            b"1  2 3",
            b"18446744073709551615 1 1",
        ];
        for value in refused {
            assert!(
                state(value).is_err(),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    /// Decisions the script left out were taken: the replay must agree with each, and with
    /// the end of the list.
    #[test]
    fn the_replay_holds_the_script_to_the_decisions_it_says_it_did_not_take() {
        let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
        let decisions = vec![
            vec![Encoded::new(&Check::new(policy, b"alice", 1)).unwrap()],
            vec![Encoded::new(&Check::new(policy, b"bob", 1)).unwrap()],
        ];
        let now: i64 = 5_000_000;
        // Alice absent; bob's bucket empty (tat = now + tau, t = 100 ms, tau = 1 s).
        let read = |not_taken: Vec<i64>| Read {
            now,
            states: vec![
                Some((Nanos::ZERO, None)),
                Some(state(format!("{} 100000 1000000", now + 1_000_000).as_bytes()).unwrap()),
            ],
            not_taken,
        };
        let replies = replay(read(vec![2]), &decisions, &[0, 1]).unwrap();
        assert!(replies[0].verdict.allowed());
        assert_eq!(replies[0].verdict.decisions()[0].remaining(), 9);
        assert!(!replies[1].verdict.allowed());
        for wrong in [vec![], vec![1], vec![1, 2], vec![-2], vec![2, 3]] {
            assert!(
                replay(read(wrong.clone()), &decisions, &[0, 1]).is_err(),
                "{wrong:?}"
            );
        }
        // A garbage bucket's decision is answered as such, and only when the script says so.
        let garbage = |not_taken| Read {
            states: vec![Some((Nanos::ZERO, None)), None],
            ..read(not_taken)
        };
        let replies = replay(garbage(vec![-2]), &decisions, &[0, 1]).unwrap();
        assert!(replies[1].garbage.is_some());
        assert!(replay(garbage(vec![2]), &decisions, &[0, 1]).is_err());
    }

    /// The raw reply: nil is absent, -1 garbage, a bulk string a value; anything else, or a
    /// reply too short for its keys, is refused as incompatible.
    #[test]
    fn a_reply_is_read_state_by_state() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = |states: Vec<Value>, not_taken: Vec<Value>| {
            let mut items = vec![Value::Int(7)];
            items.extend(states);
            items.extend(not_taken);
            Value::Array(items)
        };
        let states = vec![Value::Nil, Value::Int(-1), bulk("12 3 30")];
        let read = Read::new(reply(states.clone(), vec![Value::Int(-2)]), 3).unwrap();
        assert_eq!(read.now, 7);
        assert_eq!(read.states.len(), 3);
        assert_eq!(read.states[0], Some((Nanos::ZERO, None)));
        assert_eq!(read.states[1], None);
        let Some((tat, Some(under))) = read.states[2] else {
            panic!("a value with its numbers");
        };
        assert_eq!(tat, Nanos::new(12_000));
        assert_eq!(
            under,
            Gcra::from_parts(Nanos::new(3_000), Nanos::new(30_000))
        );
        assert_eq!(read.not_taken, [-2]);
        // Nothing left out: every decision was taken.
        assert!(
            Read::new(reply(states.clone(), vec![]), 3)
                .unwrap()
                .not_taken
                .is_empty()
        );
        let refused = [
            // A state of another type; garbage is -1 and nothing else.
            reply(vec![Value::Int(5)], vec![]),
            reply(vec![Value::Int(-2)], vec![]),
            reply(vec![Value::SimpleString("12 3 30".into())], vec![]),
            reply(vec![bulk("12 3")], vec![]),
            // Too short for its key, or no time first.
            reply(vec![], vec![]),
            Value::Array(vec![Value::Nil, Value::Nil]),
            Value::Int(7),
            // A not-taken entry that is not an integer.
            reply(vec![Value::Nil], vec![bulk("1")]),
        ];
        for reply in refused {
            let Err(e) = Read::new(reply.clone(), 1) else {
                panic!("{reply:?} read");
            };
            assert_eq!(e.kind(), crate::ErrorKind::Incompatible, "{reply:?}");
        }
    }

    /// A value written under other numbers (another capacity, another rate) is rebased into
    /// the check's before its decision, as `bucket.lua` rebased it, from the numbers the value
    /// itself carries.
    #[test]
    fn the_replay_rebases_a_value_written_under_other_numbers() {
        // t = 100 ms, tau = 1 s; the value: t = 200 ms, tau = 4 s, two tokens left of 20.
        let policy = Policy::token_bucket(10, 10, Duration::from_secs(1)).unwrap();
        let decisions = vec![vec![
            Encoded::new(&Check::new(policy, b"alice", 1)).unwrap(),
        ]];
        let now: i64 = 5_000_000;
        let read = Read {
            now,
            states: vec![Some(
                state(format!("{} 200000 4000000", now + 3_600_000).as_bytes()).unwrap(),
            )],
            not_taken: vec![],
        };
        let replies = replay(read, &decisions, &[0]).unwrap();
        let at = Nanos::new(5_000_000_000);
        let from = Gcra::from_parts(Nanos::new(200_000_000), Nanos::new(4_000_000_000));
        let gcra = Gcra::new(&policy);
        let tat = gcra.rebase_in(&from, Nanos::new(8_600_000_000), at, MICROSECOND);
        // Two tokens left of 10 (read as is, 3.6 s of backlog would be past its tau: denied).
        assert_eq!(tat, Nanos::new(5_800_000_000));
        let expected = gcra.decide(tat, at, 1).unwrap().decision(true);
        let decision = replies[0].verdict.decisions()[0];
        assert!(decision.allowed());
        assert_eq!(decision.remaining(), 1);
        assert_eq!(decision.remaining(), expected.remaining());
        assert_eq!(decision.reset_after(), expected.reset_after());
    }

    #[test]
    fn a_full_run_is_sent_and_the_next_decision_starts_another() {
        let mut cmd = Cmd::new();
        let mut run = Run {
            k: 5,
            more: RUN_MAX - 1,
            same: true,
        };
        run.push(&mut cmd, 5);
        run.end(&mut cmd);
        let full = 5 + (RUN_MAX - 1) * RUN_STRIDE + SAME_BUCKET;
        assert!(full < 1 << 51);
        assert_eq!(sent(&cmd), [format!("-{full}"), "-5".into()]);
    }
}
