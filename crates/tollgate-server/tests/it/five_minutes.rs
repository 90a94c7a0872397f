//! docs/security.md's "Secure it in five minutes", run as written: every fenced block whose info
//! string says `five-minutes`, in order, in an empty directory, as one bash script (`set -e`). A
//! block that names a file (` ```toml five-minutes tollgate.toml `) is written to it; the others
//! are commands, run verbatim. The only change: the four ports the page uses are replaced by free
//! ones, so that the test runs beside others. The page's commands check their own answers
//! (`| grep -x 401`), so a server that answers otherwise fails here.

use std::path::Path;
use std::process::{Command, Stdio};

/// The page, and the ports it listens on.
const PAGE: &str = "docs/security.md";
const PORTS: [&str; 4] = ["8443", "8081", "6380", "8082"];

/// What the script may take at most (a fresh `pip install` included).
const WITHIN: std::time::Duration = std::time::Duration::from_secs(300);

/// A block of the page: the file it is written to (none for commands), its text, and the line
/// it starts on.
#[derive(Debug)]
struct Block {
    file: Option<String>,
    text: String,
    line: usize,
}

/// The page's `five-minutes` blocks, in order.
fn blocks(page: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in page.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, Some(info)) => {
                let words: Vec<&str> = info.split_whitespace().collect();
                if words.get(1) == Some(&"five-minutes") {
                    open = Some(Block {
                        file: words.get(2).map(|f| (*f).to_owned()),
                        text: String::new(),
                        line: i + 1,
                    });
                }
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The script that runs `blocks`: files written, commands as they are, each announced.
fn script(blocks: &[Block]) -> String {
    let mut script = String::from("set -e\n");
    for block in blocks {
        script.push_str(&format!("echo '== {PAGE}:{}' >&2\n", block.line));
        match &block.file {
            Some(file) => {
                assert!(
                    !block.text.contains("FIVE_MINUTES_EOF"),
                    "{PAGE}:{}",
                    block.line
                );
                script.push_str(&format!(
                    "mkdir -p \"$(dirname '{file}')\"\ncat > '{file}' <<'FIVE_MINUTES_EOF'\n{}FIVE_MINUTES_EOF\n",
                    block.text
                ));
            }
            None => script.push_str(&block.text),
        }
    }
    script
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Fails, saying how to install it, when `tool` cannot be run.
fn require(tool: &str, args: &[&str], install: &str) {
    let ran = Command::new(tool)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        ran.is_ok_and(|s| s.success()),
        "{PAGE}'s five-minute setup needs `{tool}`: {install}"
    );
}

#[test]
fn the_page_holds_the_five_minute_blocks() {
    let page = std::fs::read_to_string(root().join(PAGE)).unwrap();
    let blocks = blocks(&page);
    let files: Vec<&str> = blocks.iter().filter_map(|b| b.file.as_deref()).collect();
    assert_eq!(files, ["tollgate.toml", "ratelimit/edge.yaml", "rls.py"]);
    assert!(blocks.len() >= 8, "{blocks:?}");
    // A block left open would swallow the rest of the page.
    let made_wrong = "```sh five-minutes\necho one\n";
    assert!(self::blocks(made_wrong).is_empty());
}

#[test]
fn the_five_minute_setup_runs_as_written() {
    require("openssl", &["version"], "sudo apt-get install -y openssl");
    require("curl", &["--version"], "sudo apt-get install -y curl");
    require(
        "redis-cli",
        &["--version"],
        "sudo apt-get install -y redis-tools",
    );
    require(
        "python3",
        &["-c", "import ensurepip, venv"],
        "sudo apt-get install -y python3-venv",
    );
    let page = std::fs::read_to_string(root().join(PAGE)).unwrap();
    let mut script = script(&blocks(&page));
    for port in PORTS {
        script = script.replace(port, &free_port().to_string());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("five-minutes.sh");
    std::fs::write(&path, &script).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_tollgate")).parent().unwrap();
    let path_var = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = std::os::unix::process::CommandExt::process_group(
        Command::new("bash")
            .arg(&path)
            .current_dir(dir.path())
            .env("PATH", path_var)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        0,
    )
    .spawn()
    .unwrap();
    let group = child.id().to_string();
    let clock = tollgate::MonotonicClock::new();
    let started = tollgate::Clock::now(&clock);
    let finished = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if std::time::Duration::from(tollgate::Clock::now(&clock) - started) > WITHIN {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // Whatever the script left running (a server it did not get to stop).
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(finished, "still running after {WITHIN:?}:\n{said}");
    assert!(
        out.status.success(),
        "{PAGE}'s five-minute setup failed:\n{said}"
    );
}

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
