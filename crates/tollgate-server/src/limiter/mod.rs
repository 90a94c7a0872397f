//! The decision core every front end decides through, and none owns: the store (wrapped in
//! its fail policy), the policies in force ([`Live`]), and one entrance per use case, each
//! taking a request in the core's terms ([`Ask`]: a [`Target`], a key, a [`Cost`]):
//! [`Limiter::check`], [`Limiter::read`] and [`Limiter::reset`] (`check.rs`),
//! [`Limiter::reserve`] and [`Limiter::commit`] (`settle.rs`), and [`Limiter::check_counted`]
//! for the checks another rule set resolved (Envoy's descriptors, [`Counted`]).
//!
//! Every rule a request meets is written here once: the key's bound ([`check_key`]), the
//! refusal of client-chosen numbers where they are off, a cost above the capacity, the shadow
//! policies and the rounds of checks that cannot deny (`rounds.rs`), the reservations'
//! ownership, debt cap and commit, and the per-policy counts. The core imports no protocol
//! crate: its answers are its own types ([`Outcome`], [`DecideError`], [`CommitError`]), which
//! HTTP, gRPC and RESP each render at their edge.

mod amounts;
mod ask;
mod check;
mod counted;
mod error;
mod health;
mod leases;
mod live;
mod on_store_error;
mod outcome;
mod policies;
pub mod reservation;
mod rounds;
mod settle;
#[cfg(test)]
mod testing;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tollgate::store::settle::{Adjustment, DynSettle, Once};
use tollgate::{Check, Clock, MonotonicClock, Nanos, StoreError, Verdict};

pub use amounts::{Amount, AmountsError, by_policy};
pub use ask::{Ask, Cost, KeyError, MAX_KEY_BYTES, MAX_POLICIES_PER_CHECK, Target, check_key};
pub use counted::{Counted, CountedCheck, CountedOutcome};
pub use error::{BuildError, CommitError, DecideError};
pub use health::StoreHealth;
pub use live::{Entry, Live};
pub use on_store_error::OnStoreError;
pub use outcome::{Outcome, Part, Shown};
pub use policies::{MAX_POLICIES, NamedPolicy, Policies};
pub use settle::{Reservation, Used};

use crate::auth::{Auth, Tokens};
use crate::metrics::Metrics;
use crate::top::Top;
use crate::traces::Traces;
use reservation::Signer;

/// What every front end decides through.
pub struct Limiter {
    store: Arc<dyn DynSettle>,
    ready_timeout: Duration,
    signer: Signer,
    /// The time reservations expire by.
    clock: Arc<dyn Clock>,
    /// Times store calls, for the metrics.
    timer: MonotonicClock,
    reservation_ttl: Duration,
    live: ArcSwap<Live>,
    metrics: Arc<Metrics>,
    health: Arc<StoreHealth>,
    auth: Auth,
    /// The leases of the policies that ask for them, on a shared store.
    leases: Option<leases::Leases>,
    /// The spans of decisions, when `[tracing]` is on.
    traces: Option<Arc<Traces>>,
    /// The keys most denied and allowed per policy, when `[top]` is on.
    top: Option<Arc<Top>>,
}

/// Builds a [`Limiter`]: see [`Limiter::builder`].
pub struct LimiterBuilder {
    store: Arc<dyn DynSettle>,
    ready_timeout: Duration,
    secret: Option<Vec<u8>>,
    clock: Arc<dyn Clock>,
    reservation_ttl: Duration,
    policies: Policies,
    inline_policies: bool,
    observed: Option<(Arc<Metrics>, Arc<StoreHealth>)>,
    tokens: Tokens,
    traces: Option<Arc<Traces>>,
    top: Option<(usize, u32)>,
}

impl Limiter {
    /// A limiter deciding on `store`: no configured policies, inline ones allowed, `/readyz`
    /// waiting a second for the store, reservations signed with a random secret and lasting
    /// [`reservation::DEFAULT_TTL`] by the monotonic clock, metrics of its own, the keys most
    /// denied and allowed summarized in [`top::DEFAULT_CAPACITY`](crate::top::DEFAULT_CAPACITY)
    /// counters.
    pub fn builder(store: Arc<dyn DynSettle>) -> LimiterBuilder {
        LimiterBuilder {
            store,
            ready_timeout: Duration::from_secs(1),
            secret: None,
            clock: Arc::new(MonotonicClock::new()),
            reservation_ttl: reservation::DEFAULT_TTL,
            policies: Policies::default(),
            inline_policies: true,
            observed: None,
            tokens: Tokens::default(),
            traces: None,
            top: Some((
                crate::top::DEFAULT_CAPACITY,
                crate::top::DEFAULT_SAMPLE_EVERY,
            )),
        }
    }

    /// Puts `policies` in force for the next requests (a reload): buckets keep their state,
    /// since they are named by policy name and key. The series of policies no longer
    /// configured are dropped.
    pub fn reload(&self, policies: Policies, inline: bool) {
        if let Some(leases) = &self.leases {
            leases.reload(&policies);
        }
        let live = Live::new(policies, inline, &self.metrics, self.top.as_deref());
        live.keep_chosen(&self.live.load());
        let old = self.live.swap(Arc::new(live));
        let live = self.live.load();
        if let Some(top) = &self.top {
            top.keep_policies(live.policies.iter().map(|p| &*p.name));
        }
        for gone in old
            .policies
            .iter()
            .filter(|p| live.policies.get(&p.name).is_none())
        {
            self.metrics.forget_policy(&gone.name);
        }
    }

    /// Gives back every lease this server holds, before it stops: what they did not spend is
    /// the bucket's again, not lost until the refill pays it back.
    pub async fn close(&self) {
        if let Some(leases) = &self.leases {
            leases.close().await;
        }
    }

    /// Decides `checks` on the store: one call, timed for the metrics, its fail-policy answers
    /// counted, the store's recovery noted. Every decision goes through here.
    pub(super) async fn ask_store(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        // Inside a request's span, the call is its child.
        let mut span = self
            .traces
            .as_ref()
            .and_then(|t| t.store_call(self.store.name_dyn(), checks.len()));
        let started = self.timer.now();
        let result = self.store.decide_dyn(checks).await;
        if let (Some(span), Err(e)) = (&mut span, &result) {
            span.fail(e.to_string());
        }
        let took = Duration::from(self.timer.now() - started);
        self.metrics.store_latency.observe(took.as_secs_f64());
        let verdict = result?;
        if verdict.decisions().len() != checks.len() {
            return Err(StoreError::incompatible(
                "the store answered another number of decisions than it was asked",
            ));
        }
        if verdict.by_fail_policy() {
            self.metrics.fail_policy_decisions.inc();
        } else {
            self.health.answered();
        }
        Ok(verdict)
    }

    /// Whether the store can decide `policy` at all (see [`tollgate::Store::supports`]).
    pub fn supports(&self, policy: &tollgate::Policy) -> Result<(), tollgate::PolicyError> {
        self.store.supports_dyn(policy)
    }

    /// The store's short name.
    pub fn store_name(&self) -> &'static str {
        self.store.name_dyn()
    }

    /// Whether the store answers within the readiness timeout; the timeout when it does not.
    pub async fn ready(&self) -> Result<Result<(), StoreError>, Duration> {
        tokio::time::timeout(self.ready_timeout, self.store.ready_dyn())
            .await
            .map_err(|_| self.ready_timeout)
    }

    /// Gives each check's cost back to its bucket (token buckets only), in one store call.
    pub(super) async fn refund(&self, checks: &[Check<'_>]) -> Result<Verdict, StoreError> {
        let adjustments: Vec<_> = checks
            .iter()
            .map(|c| (*c, Adjustment::Refund(c.cost())))
            .collect();
        self.store.settle_dyn(None, &adjustments).await
    }

    /// Settles `adjustments` in one store call, at most once for `once`.
    pub(super) async fn settle(
        &self,
        once: Option<Once<'_>>,
        adjustments: &[(Check<'_>, Adjustment)],
    ) -> Result<Verdict, StoreError> {
        self.store.settle_dyn(once, adjustments).await
    }

    /// Makes the buckets of `checks` full again.
    pub(super) async fn reset_checks(&self, checks: &[Check<'_>]) -> Result<(), StoreError> {
        self.store.reset_dyn(checks).await
    }

    /// The policies in force now.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// The store's health as its calls report it.
    pub fn store_health(&self) -> &StoreHealth {
        &self.health
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// What signs and opens reservations.
    pub(super) fn signer(&self) -> &Signer {
        &self.signer
    }

    /// The time reservations expire by.
    pub(super) fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// How long a reservation may wait for its commit.
    pub(super) fn reservation_ttl(&self) -> Duration {
        self.reservation_ttl
    }

    /// Who may do what: every front end asks it before deciding.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// The tracer of decisions, when `[tracing]` is on: each front end starts its request's
    /// span with it.
    pub fn traces(&self) -> Option<&Arc<Traces>> {
        self.traces.as_ref()
    }

    /// The summaries of who is denied and allowed, when `[top]` is on.
    pub fn top(&self) -> Option<&Arc<Top>> {
        self.top.as_ref()
    }
}

impl LimiterBuilder {
    /// `/readyz` waits at most `timeout` for the store.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Reservations are signed with `secret`: servers sharing a store must share it, to
    /// commit each other's reservations.
    pub fn secret(mut self, secret: Option<&[u8]>) -> Self {
        self.secret = secret.map(<[u8]>::to_vec);
        self
    }

    /// Reservations expire by `clock` (the store's, in tests that move time by hand).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How long a reservation may wait for its commit.
    pub fn reservation_ttl(mut self, ttl: Duration) -> Self {
        self.reservation_ttl = ttl;
        self
    }

    /// Serves `policies`, and inline policies only if `inline` allows.
    pub fn policies(mut self, policies: Policies, inline: bool) -> Self {
        self.policies = policies;
        self.inline_policies = inline;
        self
    }

    /// Requests need one of `tokens` (none: everything is open).
    pub fn tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = tokens;
        self
    }

    /// Summarizes each policy's keys in `capacity` counters per slice, recording one decision
    /// in `sample_every` (`None`: not at all).
    pub fn top(mut self, top: Option<(usize, u32)>) -> Self {
        self.top = top;
        self
    }

    /// Traces the store calls made inside a request's span with `traces`.
    pub fn traces(mut self, traces: Option<Arc<Traces>>) -> Self {
        self.traces = traces;
        self
    }

    /// Reports to `metrics`, and store calls to `health` (which the store's fail policy
    /// reports its failures to).
    pub fn observed(mut self, metrics: Arc<Metrics>, health: Arc<StoreHealth>) -> Self {
        self.observed = Some((metrics, health));
        self
    }

    /// The limiter, or why not: the system's random source failed (for the reservations'
    /// secret), or the metrics could not be registered.
    pub fn build(self) -> Result<Limiter, BuildError> {
        let (metrics, health) = match self.observed {
            Some(observed) => observed,
            None => {
                let metrics = Arc::new(Metrics::new()?);
                let health = Arc::new(StoreHealth::new(Arc::clone(&metrics), OnStoreError::Deny));
                (metrics, health)
            }
        };
        let signer = Signer::new(self.secret.as_deref()).map_err(|_| BuildError::Random)?;
        let (store, leases) = leases::Leases::wrap(self.store, &self.policies, &metrics)?;
        // The summaries' windows move on the limiter's clock, as its buckets do.
        let top = self
            .top
            .map(|(capacity, every)| Arc::new(Top::new(capacity, every, Arc::clone(&self.clock))));
        let live = Live::new(
            self.policies,
            self.inline_policies,
            &metrics,
            top.as_deref(),
        );
        Ok(Limiter {
            store,
            leases,
            ready_timeout: self.ready_timeout,
            signer,
            clock: self.clock,
            timer: MonotonicClock::new(),
            reservation_ttl: self.reservation_ttl,
            live: ArcSwap::from_pointee(live),
            auth: Auth::new(self.tokens, &metrics),
            metrics,
            health,
            traces: self.traces,
            top,
        })
    }
}
