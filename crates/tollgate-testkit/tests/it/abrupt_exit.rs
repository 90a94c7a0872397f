//! Servers die with a test process that is killed outright (no `Drop` runs): the kit spawns
//! them with `PR_SET_PDEATHSIG`. The test re-runs this test binary as the victim.

use std::{
    env, fs,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use tollgate_testkit::{TestPostgres, TestRedis};

const VICTIM_VAR: &str = "TOLLGATE_TESTKIT_VICTIM";

/// Running and not a zombie (a killed orphan may wait a moment for its new parent to reap it).
fn alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) state ...": comm may contain spaces, so split after the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim().chars().next());
    state != Some('Z')
}

/// The victim half of `servers_die_with_a_killed_test_process`; does nothing when run as an
/// ordinary test.
#[test]
fn victim_holds_servers_until_killed() {
    if env::var_os(VICTIM_VAR).is_none() {
        return;
    }
    let redis = TestRedis::start().unwrap();
    let pg = TestPostgres::start().unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "VICTIM {} {} {} {} {}",
        redis.pid().unwrap(),
        redis.dir().unwrap().display(),
        pg.pid().unwrap(),
        pg.port(),
        pg.dir().unwrap().display(),
    )
    .unwrap();
    out.flush().unwrap();
    thread::sleep(Duration::from_secs(60));
}

#[test]
fn servers_die_with_a_killed_test_process() {
    let mut victim = Command::new(env::current_exe().unwrap())
        .args([
            "--exact",
            "abrupt_exit::victim_holds_servers_until_killed",
            "--nocapture",
        ])
        .env(VICTIM_VAR, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(victim.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map(Result::unwrap)
        .find(|line| line.starts_with("VICTIM "))
        .expect("the victim exited before starting its servers");
    let fields: Vec<&str> = line.split(' ').skip(1).collect();
    // The port is not checked once the server is dead: another test's server may have it since.
    let [redis_pid, redis_dir, pg_pid, _pg_port, pg_dir] = fields[..] else {
        panic!("bad victim line {line:?}");
    };
    let (redis_pid, pg_pid): (u32, u32) = (redis_pid.parse().unwrap(), pg_pid.parse().unwrap());
    assert!(alive(redis_pid) && alive(pg_pid));
    // The postmaster's small SysV segment outlives a SIGKILL; its id is on line 7 of the lock
    // file. Read it now: once the victim is dead, any kit user may sweep its directories.
    let lock = fs::read_to_string(Path::new(pg_dir).join("data/postmaster.pid")).unwrap();
    let shm_id = lock
        .lines()
        .nth(6)
        .and_then(|l| l.split_whitespace().nth(1))
        .map(str::to_owned);

    victim.kill().unwrap(); // SIGKILL: no unwinding, no Drop
    victim.wait().unwrap();

    for _ in 0..500 {
        if !alive(redis_pid) && !alive(pg_pid) {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !alive(redis_pid),
        "redis-server {redis_pid} outlived its test process"
    );
    assert!(
        !alive(pg_pid),
        "postmaster {pg_pid} outlived its test process"
    );
    if let Some(shm_id) = shm_id {
        let _ = Command::new("ipcrm").args(["-m", &shm_id]).status();
    }

    // Nothing removed the victim's directories; the next server started sweeps them.
    assert!(Path::new(redis_dir).exists());
    let _redis = TestRedis::start().unwrap();
    assert!(!Path::new(redis_dir).exists(), "{redis_dir} was not swept");
    let _ = fs::remove_dir_all(pg_dir);
}
