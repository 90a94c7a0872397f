//! An LLM client's two limits on one Redis: 60 requests and 10,000 tokens a minute per user,
//! reserved together before each call (the tokens at the most the call may use) and committed
//! after it with what each used: one request, and the tokens the model reported.
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run --example llm_reserve_commit --features redis`
use std::time::Duration;

use tollgate::store::settle::{Settle, reserve};
use tollgate::{Check, Policy, RedisStore};

/// What one user's calls left: (requests, tokens) after each call, or `None` for a call denied.
pub async fn run<S: Settle>(
    store: &S,
    user: &[u8],
) -> Result<Vec<Option<(u64, u64)>>, Box<dyn std::error::Error>> {
    let requests = Policy::per_minute(60)?;
    let tokens = Policy::token_bucket(10_000, 10_000, Duration::from_secs(60))?;
    let mut left = Vec::new();
    // Each call may use up to 4,000 tokens; the model reports what it used.
    for used in [1_200, 3_900, 4_000, 2_500] {
        let estimate = [
            Check::new(requests, user, 1).named("requests"),
            Check::new(tokens, user, 4_000).named("tokens"),
        ];
        let (verdict, reservation) = reserve(store, &estimate).await?;
        let Some(reservation) = reservation else {
            println!("denied: retry in {:?}", verdict.retry_after());
            left.push(None);
            continue;
        };
        // ... the model answers, having used `used` tokens ...
        let after = reservation.commit_each(store, &[1, used]).await?;
        let (r, t) = (
            after.decisions()[0].remaining(),
            after.decisions()[1].remaining(),
        );
        println!("used {used}: {r} requests and {t} tokens left this minute");
        left.push(Some((r, t)));
    }
    Ok(left)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let store = RedisStore::connect(url).await?;
    run(&store, b"alice").await?;
    Ok(())
}
