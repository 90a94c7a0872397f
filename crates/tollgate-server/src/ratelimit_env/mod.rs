//! envoyproxy/ratelimit's environment, read as it reads it: started as `ratelimit` (the name
//! Envoy Gateway's image runs, `/bin/ratelimit`) or with `--envoy-ratelimit-env`, tollgate
//! takes its settings from the variables of upstream's `src/settings/settings.go` alone.
//!
//! The environment is translated into the config file it amounts to (`doc`: the same TOML
//! keys a file gives), which then goes through the one reader and resolution every config file
//! goes through, so that every check at start applies; a refusal names the variable. Each
//! variable is honoured with upstream's meaning and default, refused at start saying why, or,
//! only where it cannot change a decision, ignored with a note logged at start. docs/envoy.md
//! has the table, variable by variable.

mod doc;
mod go;
mod listen;
mod source;
mod stats;
mod store;
mod traces;
mod vars;

use std::ffi::OsStr;
use std::fmt;
use std::path::Path;

pub use vars::Env;

use crate::config::Config;
use crate::settings::{Overrides, Settings};
use doc::Doc;

/// The flag that asks for this mode under any program name.
pub const FLAG: &str = "--envoy-ratelimit-env";

/// The program name that asks for this mode (Envoy Gateway runs `/bin/ratelimit`).
pub const PROGRAM: &str = "ratelimit";

/// What the config reader is told it reads, in its messages.
const SOURCE: &str = "envoyproxy/ratelimit environment";

/// The file name the config reader is given: none of a directory, so that a relative path in
/// a variable stays relative to the working directory, as upstream opens it (a file's relative
/// paths are taken from the file's directory).
const AS_FILE: &str = "environment";

/// Whether `argv` (the program's name first) asks for this mode: the program is named
/// `ratelimit`, or [`FLAG`] is its only argument.
pub fn requested(argv: &[impl AsRef<OsStr>]) -> bool {
    let named = argv
        .first()
        .and_then(|p| Path::new(p.as_ref()).file_name())
        .is_some_and(|name| name == PROGRAM);
    named || argv.get(1).is_some_and(|a| a.as_ref() == FLAG)
}

/// A variable refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    /// The variable (or several, joined with `, `).
    pub variable: String,
    /// Why, and what would be taken.
    pub message: String,
}

impl EnvError {
    pub(super) fn new(variable: &str, message: impl Into<String>) -> EnvError {
        EnvError {
            variable: variable.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.variable, self.message)
    }
}

impl std::error::Error for EnvError {}

/// The server's settings from the environment, with what the logs need.
#[derive(Debug)]
pub struct EnvSettings {
    /// The settings, resolved and checked as a config file's are.
    pub settings: Settings,
    /// `LOG_LEVEL` as a log filter directive (`warn` by default, as upstream's `WARN`).
    pub log_filter: &'static str,
    /// The variables set that tollgate ignores, each with why it cannot change a decision:
    /// logged at start.
    pub notes: Vec<String>,
    /// The config file the environment amounts to (for `--help`-level debugging and tests).
    pub toml: String,
}

/// Reads `env` into settings, or refuses the first variable that cannot work.
pub fn load(env: &Env) -> Result<EnvSettings, EnvError> {
    let (doc, log_filter, notes) = translate(env)?;
    let toml = doc.render();
    let config = Config::parse(Path::new(AS_FILE), &toml).map_err(|e| {
        let variables = doc.variables_of(&e.field);
        EnvError {
            variable: if variables.is_empty() {
                SOURCE.to_owned()
            } else {
                variables.join(", ")
            },
            message: format!("{} (as `{}`)", e.message, e.field),
        }
    })?;
    // The environment names no policy of tollgate's own, so none is to check against the store.
    let mut settings = Settings::resolve(Overrides::default(), Some(&config));
    // There is no file to watch: the environment does not change under a running process.
    settings.config = None;
    settings.config_text = None;
    Ok(EnvSettings {
        settings,
        log_filter,
        notes,
        toml,
    })
}

/// The notes of variables ignored.
pub(super) type Notes = Vec<String>;

/// The config file `env` amounts to, the log filter, and the notes.
fn translate(env: &Env) -> Result<(Doc, &'static str, Notes), EnvError> {
    env.check_all()?;
    let mut doc = Doc::default();
    let mut notes = Notes::new();
    listen::listeners(env, &mut doc, &mut notes)?;
    let log_filter = listen::logs(env, &mut doc, &mut notes)?;
    source::config_source(env, &mut doc, &mut notes)?;
    source::decisions(env, &mut doc)?;
    store::store(env, &mut doc, &mut notes)?;
    stats::stats(env, &mut doc, &mut notes)?;
    traces::tracing(env, &mut doc, &mut notes)?;
    Ok((doc, log_filter, notes))
}

/// Notes each variable of `names` that is set, as ignored for `why`.
pub(super) fn ignored(env: &Env, names: &[&'static str], why: &str, notes: &mut Notes) {
    for name in names {
        if env.is_set(name) {
            notes.push(format!("{name} is ignored: {why}"));
        }
    }
}

#[cfg(test)]
mod tests;
