//! One Redis limiter shared by two tasks: 10 a second and 100 a minute per user, both decided
//! in one atomic call, answered "allowed" if Redis is down (`FailPolicy::Allow`).
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run --example redis_shared --features redis`
use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::{Check, Policy, RedisStore, Store, StoreError};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let store = Guarded::new(RedisStore::connect(url).await?, FailPolicy::Allow);
    let (second, minute) = (Policy::per_second(10)?, Policy::per_minute(100)?);
    let tasks = ["task 1", "task 2"].map(|task| {
        let store = store.clone(); // the same connection, and the same fail-policy counts
        tokio::spawn(async move {
            for _ in 0..8 {
                let checks = [
                    Check::new(second, b"alice", 1).named("per-second"),
                    Check::new(minute, b"alice", 1).named("per-minute"),
                ];
                let verdict = store.decide(&checks).await?;
                println!("{task}: {verdict:?}");
            }
            Ok::<_, StoreError>(())
        })
    });
    for task in tasks {
        task.await??;
    }
    println!("failed open: {}", store.stats().failed_open());
    Ok(())
}
