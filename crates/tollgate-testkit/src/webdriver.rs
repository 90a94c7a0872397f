//! A headless Chromium for tests of web pages, driven over the W3C WebDriver protocol (HTTP and
//! JSON) through Debian's `chromedriver`: a small client of the kit's own over `reqwest`, with
//! the few commands a page test needs (navigate, find, click, type, run a script, answer a
//! `confirm`, read the browser's console, take a screenshot).
//!
//! `chromedriver` is started on a free port, Chromium with `--headless=new --no-sandbox` and a
//! profile in a temporary directory; both go when the [`Browser`] is dropped (or
//! [`Browser::quit`]), and when the test's process dies: `chromedriver` runs under a guard,
//! a shell leading a process group of its own (Chromium's processes, children of
//! `chromedriver`, are in it), which kills the whole group when the test's process dies, when
//! `chromedriver` exits, or when the [`Browser`] goes. Every command has a timeout. A missing `chromium` or `chromedriver` is an error that says how to
//! install them, never a skipped test.
//!
//! ```no_run
//! # async fn example() -> Result<(), tollgate_testkit::TestkitError> {
//! use tollgate_testkit::webdriver::Browser;
//!
//! let browser = Browser::start().await?;
//! browser.goto("http://127.0.0.1:8080/").await?;
//! let title = browser.execute("return document.title;", &[]).await?;
//! println!("{title}; errors: {:?}", browser.severe_logs().await?);
//! let png: Vec<u8> = browser.screenshot().await?;
//! browser.quit().await
//! # }
//! ```

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::TestkitError;
use crate::process::{Deadline, ServerProcess, find_binary, free_port, log_tail, open_log};
use crate::scratch;

/// How `chromium` and `chromedriver` are installed on Debian.
const INSTALL: &str = "apt-get install chromium chromium-driver (scripts/test --install does)";

/// The key W3C WebDriver gives an element reference under.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long `chromedriver` and Chromium get to start, on a busy machine.
const START: Duration = Duration::from_secs(30);

/// How long one WebDriver command gets (a page load, a script, a screenshot), on a busy
/// machine.
const COMMAND: Duration = Duration::from_secs(30);

/// The guard `chromedriver` runs under (`$0` and `$@` are `chromedriver` and its arguments):
/// SIGTERM, which the kernel sends when the test's process dies (`PR_SET_PDEATHSIG`), or
/// `chromedriver`'s exit, kills the group: Chromium never outlives either.
const GUARD: &str = "trap 'kill -KILL 0' TERM; \"$0\" \"$@\" & wait $!; kill -KILL 0";

/// A headless Chromium, one WebDriver session of a `chromedriver` of its own.
pub struct Browser {
    client: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
    driver: Option<ServerProcess>,
    log: PathBuf,
    dir: TempDir,
}

/// An element of the page, found by [`Browser::find`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element(String);

/// A line of the browser's console (`console.error`, an uncaught exception, a resource that
/// failed to load, a Content-Security-Policy violation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// `SEVERE`, `WARNING`, `INFO` or `DEBUG`.
    pub level: String,
    /// What it says, with where it came from.
    pub message: String,
}

impl Browser {
    /// Starts `chromedriver` and, through it, a headless Chromium with an empty profile and a
    /// 1400×1000 window, its console logged at every level.
    pub async fn start() -> Result<Browser, TestkitError> {
        let missing = |binary| TestkitError::MissingBinary {
            binary,
            searched: "PATH, /usr/bin, /usr/lib/chromium".to_owned(),
            install_hint: INSTALL,
        };
        let extra = ["/usr/bin", "/usr/lib/chromium"];
        let chromium = find_binary("chromium", &extra).ok_or_else(|| missing("chromium"))?;
        let chromedriver =
            find_binary("chromedriver", &extra).ok_or_else(|| missing("chromedriver"))?;
        let dir = scratch::tempdir(&std::env::temp_dir(), "tollgate-chromium-")?;
        let log = dir.path().join("chromedriver.log");
        let port = free_port()?;
        let out = open_log(&log)?;
        let err = out
            .try_clone()
            .map_err(|e| TestkitError::io(format!("duplicating {}", log.display()), e))?;
        let mut command = Command::new("/bin/sh");
        command
            .args(["-c", GUARD])
            .arg(&chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let what = format!("chromedriver on port {port}");
        let driver = ServerProcess::spawn_group(command, &what)?;
        let client = reqwest::Client::builder()
            .timeout(COMMAND)
            .build()
            .map_err(|e| TestkitError::WebDriver(format!("an HTTP client: {e}")))?;
        let mut browser = Browser {
            client,
            session: format!("http://127.0.0.1:{port}"),
            driver: Some(driver),
            log,
            dir,
        };
        browser.until_ready(&what).await?;
        let profile = browser.dir.path().join("profile");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            // The test answers every `alert` and `confirm` itself.
            "unhandledPromptBehavior": "ignore",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--disable-extensions",
                    "--disable-background-networking",
                    "--disable-sync",
                    "--window-size=1400,1000",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        }}});
        let created = browser.send(reqwest::Method::POST, "/session", Some(capabilities));
        let created = tokio::time::timeout(START, created)
            .await
            .map_err(|_| browser.failed(format!("Chromium did not start within {START:?}")))??;
        let id = created["sessionId"]
            .as_str()
            .ok_or_else(|| browser.failed(format!("no session id in {created}")))?;
        browser.session = format!("{}/session/{id}", browser.session);
        Ok(browser)
    }

    /// Waits for `chromedriver`'s `/status` to say it is ready.
    async fn until_ready(&mut self, what: &str) -> Result<(), TestkitError> {
        let deadline = Deadline::after(START);
        loop {
            let status = self.send(reqwest::Method::GET, "/status", None).await;
            if status.is_ok_and(|s| s["ready"] == true) {
                return Ok(());
            }
            if let Some(driver) = &mut self.driver
                && let Ok(Some(status)) = driver.exit_status()
            {
                return Err(TestkitError::Exited {
                    what: what.to_owned(),
                    status,
                    log: self.log.clone(),
                    log_tail: log_tail(&self.log, 0),
                });
            }
            if deadline.expired() {
                return Err(TestkitError::NotReady {
                    what: what.to_owned(),
                    waited: deadline.elapsed(),
                    log: self.log.clone(),
                    log_tail: log_tail(&self.log, 0),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A WebDriver error, with the tail of `chromedriver`'s log.
    fn failed(&self, what: String) -> TestkitError {
        TestkitError::WebDriver(format!(
            "{what}; last lines of {}:\n{}",
            self.log.display(),
            log_tail(&self.log, 0)
        ))
    }

    /// Sends a command to `path` under the session's URL; its `value`, or its error.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, TestkitError> {
        let url = format!("{}{path}", self.session);
        let mut request = self.client.request(method.clone(), &url);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let failed = |e: String| TestkitError::WebDriver(format!("{method} {url}: {e}"));
        let response = request.send().await.map_err(|e| failed(e.to_string()))?;
        let text = response.text().await.map_err(|e| failed(e.to_string()))?;
        let answer: Value = serde_json::from_str(&text)
            .map_err(|e| failed(format!("{e} in the answer {text:?}")))?;
        let value = answer.get("value").cloned().unwrap_or(Value::Null);
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            let message = value["message"].as_str().unwrap_or_default();
            return Err(failed(format!("{error}: {message}")));
        }
        Ok(value)
    }

    /// Opens `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) -> Result<(), TestkitError> {
        self.send(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await
            .map(drop)
    }

    /// The first element `css` selects.
    pub async fn find(&self, css: &str) -> Result<Element, TestkitError> {
        let found = self
            .send(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        found[ELEMENT]
            .as_str()
            .map(|id| Element(id.to_owned()))
            .ok_or_else(|| TestkitError::WebDriver(format!("no element reference in {found}")))
    }

    /// Clicks `element`, as a user would.
    pub async fn click(&self, element: &Element) -> Result<(), TestkitError> {
        let path = format!("/element/{}/click", element.0);
        self.send(reqwest::Method::POST, &path, Some(json!({})))
            .await
            .map(drop)
    }

    /// Types `text` into `element`.
    pub async fn type_into(&self, element: &Element, text: &str) -> Result<(), TestkitError> {
        let path = format!("/element/{}/value", element.0);
        self.send(reqwest::Method::POST, &path, Some(json!({"text": text})))
            .await
            .map(drop)
    }

    /// Runs `script` (a function body: `return ...;` gives its value) with `args` in the page.
    pub async fn execute(&self, script: &str, args: &[Value]) -> Result<Value, TestkitError> {
        self.send(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Runs `script` every 100 ms until it returns something other than `null` or `false`, for
    /// at most `timeout`; that value, or an error with the last one.
    pub async fn until(
        &self,
        timeout: Duration,
        script: &str,
        args: &[Value],
    ) -> Result<Value, TestkitError> {
        let deadline = Deadline::after(timeout);
        loop {
            let value = self.execute(script, args).await?;
            if !matches!(value, Value::Null | Value::Bool(false)) {
                return Ok(value);
            }
            if deadline.expired() {
                return Err(TestkitError::WebDriver(format!(
                    "still {value} after {timeout:?}: {script}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The text of the `alert`, `confirm` or `prompt` open, if one is.
    pub async fn dialog_text(&self) -> Result<Option<String>, TestkitError> {
        match self.send(reqwest::Method::GET, "/alert/text", None).await {
            Ok(text) => Ok(text.as_str().map(str::to_owned)),
            Err(TestkitError::WebDriver(e)) if e.contains("no such alert") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Accepts the open dialog (OK on a `confirm`).
    pub async fn accept_dialog(&self) -> Result<(), TestkitError> {
        self.send(reqwest::Method::POST, "/alert/accept", Some(json!({})))
            .await
            .map(drop)
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Result<Vec<u8>, TestkitError> {
        let png = self.send(reqwest::Method::GET, "/screenshot", None).await?;
        let png = png.as_str().unwrap_or_default();
        base64::engine::general_purpose::STANDARD
            .decode(png)
            .map_err(|e| TestkitError::WebDriver(format!("a screenshot that is not base64: {e}")))
    }

    /// What the browser's console said since the last call (`chromedriver`'s log endpoint,
    /// with `goog:loggingPrefs`).
    pub async fn logs(&self) -> Result<Vec<LogEntry>, TestkitError> {
        let entries = self
            .send(
                reqwest::Method::POST,
                "/se/log",
                Some(json!({"type": "browser"})),
            )
            .await?;
        Ok(entries
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|e| LogEntry {
                level: e["level"].as_str().unwrap_or_default().to_owned(),
                message: e["message"].as_str().unwrap_or_default().to_owned(),
            })
            .collect())
    }

    /// The console's errors since the last call: [`Browser::logs`] at level `SEVERE`.
    pub async fn severe_logs(&self) -> Result<Vec<LogEntry>, TestkitError> {
        let logs = self.logs().await?;
        Ok(logs.into_iter().filter(|e| e.level == "SEVERE").collect())
    }

    /// Ends the session (Chromium quits), then kills what is left of `chromedriver`'s
    /// process group.
    pub async fn quit(mut self) -> Result<(), TestkitError> {
        let ended = self.send(reqwest::Method::DELETE, "", None).await;
        self.end_group();
        ended.map(drop)
    }

    /// SIGKILL to `chromedriver`'s group: Chromium's processes, whatever the session did.
    fn end_group(&mut self) {
        if let Some(mut driver) = self.driver.take() {
            let _ = driver.kill_group();
        }
    }

    /// The process group's leader (the guard's pid), while it runs.
    #[cfg(test)]
    fn group(&self) -> Option<u32> {
        self.driver.as_ref().map(ServerProcess::pid)
    }
}

impl Drop for Browser {
    /// A browser not quit (a test that failed half-way, a session that did not start in
    /// time) is quit here, then its process group killed: whatever the session's end did,
    /// nothing of Chromium is left. Drop cannot wait on the test's runtime, so the request goes
    /// from a thread of its own.
    fn drop(&mut self) {
        if self.driver.is_none() {
            return;
        }
        if !self.session.contains("/session/") {
            // No session yet: nothing to end but the group.
            self.end_group();
            return;
        }
        let session = self.session.clone();
        let ended = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(async {
                    let request = reqwest::Client::new().delete(session).send();
                    let _ = tokio::time::timeout(Duration::from_secs(10), request).await;
                });
            }
        });
        let _ = ended.join();
        self.end_group();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The processes of group `group` that run (zombies, dead but not yet reaped by whoever
    /// inherited them, do not), from `/proc/PID/stat`: `PID (NAME) STATE PPID PGRP ...`.
    fn group_members(group: u32) -> Vec<String> {
        let group = group.to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
            .filter(|stat| {
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or("", |(_, rest)| rest)
                    .split_whitespace()
                    .collect();
                fields.len() > 2 && fields[0] != "Z" && fields[2] == group
            })
            .collect()
    }

    /// A browser whose session cannot be ended (here: a session id `chromedriver` does not
    /// know, as when the end times out) still leaves no Chromium process behind.
    #[tokio::test]
    async fn a_browser_dropped_without_its_session_ended_leaves_no_process() {
        let mut browser = Browser::start().await.unwrap_or_else(|e| panic!("{e}"));
        browser.goto("data:text/html,<p>up</p>").await.unwrap();
        let group = browser.group().unwrap();
        assert!(
            group_members(group).len() >= 3,
            "{:?}",
            group_members(group)
        );
        let chromium = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .filter(|c| {
                let profile = browser.dir.path().join("profile");
                String::from_utf8_lossy(c).contains(profile.to_str().unwrap())
            })
            .count();
        assert!(
            chromium >= 1,
            "no Chromium process with the browser's profile"
        );
        browser.session = format!("{}-gone", browser.session);
        drop(browser);
        // SIGKILL is sent to the group before drop returns; a process ends in a moment.
        let deadline = crate::process::Deadline::after(Duration::from_secs(10));
        while !group_members(group).is_empty() && !deadline.expired() {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(group_members(group), Vec::<String>::new());
    }
}
