//! Per-user limits in one process: 5 requests a second each (`cargo run --example per_user`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let limiter = tollgate::MemoryStore::new().limiter(&tollgate::Policy::per_second(5)?);
    for user in ["alice", "alice", "alice", "alice", "alice", "alice", "bob"] {
        println!("{user}: {:?}", limiter.check(user.as_bytes(), 1)?);
    }
    Ok(())
}
