//! A headless Chromium for tests of web pages, driven over the W3C WebDriver protocol (HTTP and
//! JSON) through Debian's `chromedriver`: a small client of the kit's own over `reqwest`, with
//! the few commands a page test needs (navigate, find, click, type, run a script, answer a
//! `confirm`, read the browser's console, take a screenshot).
//!
//! `chromedriver` is started on a free port, Chromium with `--headless=new --no-sandbox` and a
//! profile in a temporary directory; both go when the [`Browser`] is dropped (or
//! [`Browser::quit`]). A missing `chromium` or `chromedriver` is an error that says how to
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

use std::path::{Path, PathBuf};
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
        let mut command = Command::new(&chromedriver);
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let what = format!("chromedriver on port {port}");
        let driver = ServerProcess::spawn(command, &what)?;
        let mut browser = Browser {
            client: reqwest::Client::new(),
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

    /// The directory the browser's profile and `chromedriver`'s log are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Ends the session (Chromium quits) and stops `chromedriver`.
    pub async fn quit(mut self) -> Result<(), TestkitError> {
        let ended = self.send(reqwest::Method::DELETE, "", None).await;
        self.driver = None;
        ended.map(drop)
    }
}

impl Drop for Browser {
    /// A browser not quit (a test that failed half-way) is quit here: `chromedriver` killed
    /// outright would leave Chromium running. Drop cannot wait on the test's runtime, so the
    /// request goes from a thread of its own.
    fn drop(&mut self) {
        if self.driver.is_none() {
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
    }
}
