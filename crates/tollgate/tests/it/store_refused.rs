//! A store that was built and served, then refuses its settings when it connects again (a
//! password changed, a `pg_hba.conf` entry that now asks for one): an outage, not a
//! configuration error. Its decisions fail transiently, in plain words; a [`Guarded`] answers
//! them with its fail policy, hands them to its hook and counts them. Its readiness probe still
//! says the settings can never work, so a program starting on them refuses to.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_postgres::NoTls;
use tollgate::store::guarded::{FailPolicy, Guarded};
use tollgate::{
    Check, ErrorKind, MemoryStore, Policy, PostgresStore, RedisStore, Store, StoreError, Verdict,
};
use tollgate_testkit::{TestPostgres, TestRedis, TestRedisCluster};

/// Decides on `store` until it fails saying `says`; every failure before is transient (the
/// connection cut under it), and no decision passes meanwhile.
async fn refusal(store: &impl Store, says: &str) -> StoreError {
    let policy = Policy::per_second(1_000).unwrap();
    let mut last = None;
    for i in 0..100u32 {
        match store
            .decide(&[Check::new(policy, &i.to_be_bytes(), 1)])
            .await
        {
            Err(e) if e.to_string().contains(says) => return e,
            Err(e) => {
                assert!(e.is_transient(), "before the refusal: {e}");
                last = Some(e);
            }
            Ok(verdict) => assert!(!verdict.allowed(), "decided with refused settings"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the store never said {says:?}; last: {last:?}");
}

/// A `Guarded` failing open, with the kinds its hook saw.
fn guarded<S: Store>(store: S) -> (Guarded<S>, Arc<Mutex<Vec<ErrorKind>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hook = Arc::clone(&seen);
    let guarded =
        Guarded::new(store, FailPolicy::Allow).on_error(move |e| hook.lock().push(e.kind()));
    (guarded, seen)
}

/// What the refusal must be: an outage, answered and counted by `guarded`.
async fn is_an_outage<S: Store>(
    refused: &StoreError,
    guarded: &Guarded<S>,
    seen: &Mutex<Vec<ErrorKind>>,
) {
    assert_eq!(refused.kind(), ErrorKind::Unavailable, "{refused}");
    assert!(refused.is_transient(), "{refused}");
    let policy = Policy::per_second(1_000).unwrap();
    let verdict = guarded
        .decide(&[Check::new(policy, b"through the guard", 1)])
        .await
        .expect("the fail policy answers");
    assert!(verdict.allowed() && verdict.by_fail_policy());
    assert!(guarded.stats().store_errors() >= 1);
    assert!(guarded.stats().failed_open() >= 1);
    assert!(seen.lock().contains(&ErrorKind::Unavailable), "{seen:?}");
}

/// The probe a program asks before it serves still says the settings can never work.
async fn probe_says_config(store: &impl Store) {
    let probe = store.ready().await.unwrap_err();
    assert_eq!(probe.kind(), ErrorKind::Config, "{probe}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_password_changed_after_build_is_an_outage() {
    let redis = TestRedis::start().expect("start redis-server");
    if !redis.is_owned() {
        eprintln!(
            "TOLLGATE_REDIS_URL names an external Redis, whose password this test cannot change"
        );
        return;
    }
    let admin = redis::Client::open(redis.url()).unwrap();
    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
    let set_password = |password: &str| {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg("requirepass").arg(password);
        cmd
    };
    set_password("before")
        .query_async::<()>(&mut admin)
        .await
        .unwrap();
    let store = RedisStore::builder(format!("redis://:before@127.0.0.1:{}", redis.port()))
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let (guarded, seen) = guarded(store.clone());
    let policy = Policy::per_second(1_000).unwrap();
    let served = guarded.decide(&[Check::new(policy, b"alice", 1)]).await;
    assert!(!served.unwrap().by_fail_policy(), "the store serves");

    // The password changes, and the store's connection is cut: it connects again, refused.
    set_password("after")
        .query_async::<()>(&mut admin)
        .await
        .unwrap();
    redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query_async::<()>(&mut admin)
        .await
        .unwrap();
    let refused = refusal(&store, "password").await;
    is_an_outage(&refused, &guarded, &seen).await;
    probe_says_config(&guarded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_password_refused_after_build_is_an_outage() {
    let pg = TestPostgres::start().expect("start PostgreSQL");
    if !pg.is_owned() {
        eprintln!(
            "TOLLGATE_DATABASE_URL names an external PostgreSQL, whose pg_hba.conf this test \
             cannot change"
        );
        return;
    }
    let (admin, connection) = tokio_postgres::connect(pg.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    // The test kit's server trusts every local connection: `app` logs in without its password.
    admin
        .batch_execute("CREATE ROLE app LOGIN SUPERUSER PASSWORD 'before'")
        .await
        .unwrap();
    let url = format!("postgres://app:before@127.0.0.1:{}/postgres", pg.port());
    let store = PostgresStore::builder(url)
        .timeout(Duration::from_secs(2))
        .connections(1)
        .build()
        .await
        .unwrap();
    let (guarded, seen) = guarded(store.clone());
    let policy = Policy::per_second(1_000).unwrap();
    let served = guarded.decide(&[Check::new(policy, b"alice", 1)]).await;
    assert!(!served.unwrap().by_fail_policy(), "the store serves");

    // From now on `app` must give its password, which changes; its connection is cut.
    let hba: String = admin.query_one("SHOW hba_file", &[]).await.unwrap().get(0);
    admin
        .batch_execute(&format!(
            "COPY (SELECT line FROM (VALUES
                (1, 'host all app 127.0.0.1/32 scram-sha-256'),
                (2, 'host all all 127.0.0.1/32 trust'),
                (3, 'local all all trust')) AS hba (n, line) ORDER BY n) TO '{hba}';
             SELECT pg_reload_conf();
             ALTER ROLE app PASSWORD 'after';
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app';"
        ))
        .await
        .unwrap();
    let refused = refusal(&store, "password authentication failed").await;
    is_an_outage(&refused, &guarded, &seen).await;
    probe_says_config(&guarded).await;
}

/// The cluster client does not say why it cannot connect to a node ("No connections found"):
/// the refusal is an outage without its words, and the probe cannot tell it from a node that
/// is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_password_changed_after_build_is_an_outage() {
    let cluster = TestRedisCluster::start(3).expect("start a 3-master cluster");
    if !cluster.is_owned() {
        eprintln!("the cluster is external: this test cannot change its password");
        return;
    }
    let mut admins = Vec::new();
    for url in cluster.urls() {
        let admin = redis::Client::open(url).unwrap();
        admins.push(admin.get_multiplexed_async_connection().await.unwrap());
    }
    let mut set_password = async |password: &str| {
        for admin in &mut admins {
            redis::cmd("CONFIG")
                .arg(&["SET", "requirepass", password])
                .query_async::<()>(admin)
                .await
                .unwrap();
        }
    };
    set_password("before").await;
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| url.replace("redis://", "redis://:before@"))
        .collect();
    let store = RedisStore::builder(&urls[0])
        .cluster(urls)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let (guarded, seen) = guarded(store.clone());
    let policy = Policy::per_second(1_000).unwrap();
    let served = guarded.decide(&[Check::new(policy, b"alice", 1)]).await;
    assert!(!served.unwrap().by_fail_policy(), "the store serves");

    set_password("after").await;
    for admin in &mut admins {
        redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
            .query_async::<()>(admin)
            .await
            .unwrap();
    }
    let refused = refusal(&store, "").await;
    is_an_outage(&refused, &guarded, &seen).await;
}

/// A store of one's own that reports refused settings at decision time.
struct Late;

impl Store for Late {
    async fn decide(&self, _: &[Check<'_>]) -> Result<Verdict, StoreError> {
        Err(StoreError::Config("the password was refused".into()))
    }

    async fn ready(&self) -> Result<(), StoreError> {
        Err(StoreError::Config("the password was refused".into()))
    }

    fn name(&self) -> &'static str {
        "late"
    }
}

#[tokio::test]
async fn a_config_error_from_any_stores_decision_is_an_outage_to_guarded() {
    let (guarded, seen) = guarded(Late);
    let refused = guarded
        .inner()
        .decide(&[Check::new(Policy::per_second(1).unwrap(), b"k", 1)])
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Config);
    // `Guarded` answers it with the fail policy, as it does any store's outage.
    is_an_outage(
        &StoreError::Unavailable("the password was refused".into()),
        &guarded,
        &seen,
    )
    .await;
    let local = Guarded::new(Late, FailPolicy::Local(MemoryStore::new()));
    let verdict = local
        .decide(&[Check::new(Policy::per_second(1).unwrap(), b"k", 1)])
        .await
        .unwrap();
    assert!(verdict.allowed() && verdict.by_fail_policy());
    assert_eq!(local.stats().local_fallbacks(), 1);
    probe_says_config(&guarded).await;
}
