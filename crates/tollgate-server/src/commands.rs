//! The commands other than `serve`: `tollgate config check` and `tollgate migrate`.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use tollgate::StoreError;

use crate::config::Config;
use crate::error::ServeError;
use crate::options::{self, PostgresOptions, StoreSpec};
use crate::{settings, store};

/// `tollgate config check PATH`: the policies a TOML file defines, one line each (and the
/// Envoy directory it names, loaded), or a directory of envoyproxy/ratelimit YAML loaded (its
/// domains merged with `merge_domains`); or why it is refused.
pub fn check_config(path: &Path, merge_domains: bool) -> Result<String, ServeError> {
    if path.is_dir() {
        let config = crate::descriptors::config::EnvoyConfig::load_dir(path, merge_domains)?;
        return Ok(format!(
            "{}: ok, {}, {}\n{}",
            path.display(),
            count(config.files(), "file"),
            count(config.domains(), "domain"),
            config.dump()
        ));
    }
    let config = Config::load(path)?;
    let store = match &config.store {
        Some(store) => {
            settings::check_policies(Some(path), store, &config.policies)?;
            check_store(&config)?
        }
        None => String::new(),
    };
    let envoy = match &config.grpc.config_dir {
        Some(dir) => {
            let merge = config.grpc.merge_domain_config.unwrap_or(false);
            let envoy = crate::descriptors::config::EnvoyConfig::load_dir(dir, merge)?;
            format!(
                "  grpc.config_dir {}: {}, {}\n",
                dir.display(),
                count(envoy.files(), "file"),
                count(envoy.domains(), "domain")
            )
        }
        None => String::new(),
    };
    let mut out = format!(
        "{}: ok, {} {}\n",
        path.display(),
        config.policies.len(),
        if config.policies.len() == 1 {
            "policy"
        } else {
            "policies"
        }
    );
    for p in config.policies.iter() {
        out.push_str(&format!(
            "  {}: {}, capacity {}, {}{}{}\n",
            p.name,
            options::algorithm_name(p.policy.algorithm()),
            p.policy.capacity(),
            match p.policy.algorithm() {
                tollgate::Algorithm::TokenBucket => format!(
                    "refill {} every {}",
                    p.policy.refill(),
                    humantime::format_duration(p.policy.period())
                ),
                _ => format!("window {}", humantime::format_duration(p.policy.period())),
            },
            if p.shadow { ", shadow" } else { "" },
            if p.lease { ", leased" } else { "" }
        ));
    }
    // The tokens by name and scopes: their secrets were read, and are never shown.
    for token in config.auth.iter() {
        out.push_str(&format!("  auth.tokens.{}: {}\n", token.name, token.scopes));
    }
    out.push_str(&envoy);
    out.push_str(&store);
    for warning in &config.warnings {
        out.push_str(&format!("  warning: {warning}\n"));
    }
    Ok(out)
}

/// How long `config check` waits for the store the file names.
const STORE_CHECK: Duration = Duration::from_secs(2);

/// Asks the store `config` names, as the server would at start: one line saying it answers,
/// or that it cannot be reached now (not an error: a check run where the store is not, as in
/// CI, must pass, and the server would start and answer with its fail policy meanwhile); or
/// the error, when the store can never work as configured (no such database or DB index,
/// credentials refused, a URL the driver cannot use, a host name that does not resolve, no TLS
/// roots, a certificate not trusted), which a start would refuse too.
fn check_store(config: &Config) -> Result<String, ServeError> {
    let settings = settings::Settings::resolve(settings::Overrides::default(), Some(config));
    if settings.store == StoreSpec::Memory {
        return Ok(String::new());
    }
    let name = settings.store.to_string();
    // On a thread of its own with a runtime of its own: this command is synchronous, and may
    // be called from within a runtime (as `main` does).
    let outcome = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
                runtime.block_on(store::probe(&settings, STORE_CHECK))
            })
            .join()
            .unwrap_or_else(|_| Err(StoreError::incompatible("the store check panicked")))
    });
    match outcome {
        Ok(()) => Ok(format!("  store {name}: answers\n")),
        Err(source) if source.kind() == tollgate::ErrorKind::Config => Err(ServeError::Unusable {
            store: name,
            source,
        }),
        Err(e) if !e.is_transient() => Ok(format!(
            "  store {name}: answers, but: {e}; the server would start and answer with the \
             fail policy `{}` while this lasts\n",
            settings.on_store_error
        )),
        Err(e) => Ok(format!(
            "  store {name}: not reachable from here ({e}); not an error: the server would \
             start and answer with the fail policy `{}` until it is\n",
            settings.on_store_error
        )),
    }
}

/// `n` and `what`, plural unless `n` is 1.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `tollgate migrate`: creates the PostgreSQL schema, table and function that `postgres`
/// names in the database `store` names.
pub async fn migrate(store: String, postgres: PostgresOptions) -> Result<(), ServeError> {
    let url = match StoreSpec::parse(&store) {
        Ok(StoreSpec::Postgres(url)) => url,
        _ => return Err(ServeError::NothingToMigrate(store)),
    };
    let failed = |source| ServeError::Store {
        store: StoreSpec::Postgres(url.clone()).to_string(),
        source,
    };
    let timeout = Duration::from_secs(30);
    let store = store::postgres(&url, &postgres, timeout)
        .await
        .map_err(failed)?;
    store.migrate().await.map_err(failed)?;
    // Done whether or not anyone reads it: a closed stdout is no reason to fail, nor to panic.
    let _ = writeln!(
        std::io::stdout(),
        "tollgate: {}.{} and {}.{}_decide are ready",
        postgres.schema,
        postgres.table,
        postgres.schema,
        postgres.table
    );
    Ok(())
}
