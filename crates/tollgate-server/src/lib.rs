//! The tollgate server: a standalone rate-limit service over tollgate's stores.
//!
//! The layers point one way. [`limiter`] is the decision core: the store (in its fail
//! policy), the policies in force, and one entrance per use case (`check`, `read`, `reset`,
//! `reserve`, `commit`, and `check_counted` for checks another rule set resolved), each taking
//! a request in the core's terms ([`limiter::Ask`]) and validating, deciding and counting it
//! by rules written there once. [`auth`] admits a caller once, whatever the front end.
//! [`api`] (HTTP/JSON), [`envoy`] (Envoy's gRPC) and [`resp`] (the Redis protocol) are the
//! front ends: each parses its protocol into the core's request, crosses into the core once,
//! and renders the answer; none names another, and none names a rule of the core
//! (`tests/it/front_door.rs`). [`web`] is the HTTP plumbing two of them share.
//! [`descriptors`] holds Envoy's rules (envoyproxy/ratelimit's config files and matching)
//! beside the core, which never names them nor any protocol crate. [`options`], [`config`] and
//! [`settings`] say what to run; [`app`] is the one way to put it together, which `main.rs`,
//! the tests and the benchmarks all use; [`cli`] only parses the command line into options,
//! and [`ratelimit_env`] envoyproxy/ratelimit's environment into the same settings.
//!
//! ```no_run
//! # async fn example() -> Result<(), tollgate_server::ServeError> {
//! let settings = tollgate_server::cli::serve_settings(["--listen", "127.0.0.1:0"])?;
//! let server = tollgate_server::Server::bind(settings).await?;
//! println!("listening on {}", server.local_addr());
//! server.run(tokio_util::sync::CancellationToken::new()).await
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
mod commands;
pub mod config;
pub mod descriptors;
pub mod envoy;
mod error;
pub mod files;
pub mod limiter;
pub mod metrics;
pub mod monitor;
pub mod net;
pub mod options;
pub mod ratelimit_env;
mod reload;
pub mod resp;
pub mod settings;
pub mod store;
pub mod top;
pub mod traces;
mod watch;
pub mod web;

pub use app::{App, Server};
pub use commands::{check_config, migrate};
pub use error::ServeError;
pub use settings::Settings;

/// Serves with `settings` until `shutdown` is cancelled and the requests in flight are
/// answered, after announcing on stdout, in one line, where it listens and on what.
pub async fn serve(
    settings: Settings,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), ServeError> {
    let server = tokio::select! {
        server = Server::bind(settings) => server?,
        // A signal while it waits for its first config over xDS, before anything listens,
        // ends it at once: there is nothing in flight.
        () = shutdown.cancelled() => return Ok(()),
    };
    // stdout, one line, so that scripts (and tests) can read the port chosen for `:0`.
    let s = server.settings();
    let scheme = |plain: &'static str, tls: Option<&net::tls::TlsFiles>| match tls {
        Some(_) => format!("{plain}s"),
        None => plain.to_owned(),
    };
    let mut resp = server
        .resp_addr()
        .map(|addr| {
            format!(
                " and {}://{addr}",
                scheme("redis", s.resp.listener.tls.as_ref())
            )
        })
        .unwrap_or_default();
    if let Some(addr) = server.grpc_addr() {
        let grpc = scheme("grpc", s.grpc_listener.tls.as_ref());
        resp.push_str(&format!(" and {grpc}://{addr}"));
    }
    if let Some(path) = server.grpc_socket() {
        resp.push_str(&format!(" and grpc+unix://{}", path.display()));
    }
    if let Some(addr) = server.admin_addr() {
        let admin = scheme("http", s.admin.tls.as_ref());
        resp.push_str(&format!(" and admin {admin}://{addr}"));
    }
    if let (Some(addr), Some(grpc)) = (server.prometheus_addr(), &s.grpc)
        && let Some(exporter) = &grpc.prometheus
    {
        resp.push_str(&format!(
            " and Prometheus exporter http://{addr} at {}",
            exporter.path
        ));
    }
    // What the gRPC listener answers from: a server that serves only an Envoy directory says so.
    let envoy = server.envoy().map_or_else(String::new, |envoy| {
        let loaded = envoy.loaded();
        let dir = match (&loaded.settings.xds, &loaded.settings.config_dir) {
            (Some(xds), _) if loaded.waiting => {
                format!("Envoy config over xDS from {} (none yet)", xds.url())
            }
            (Some(xds), _) => format!("Envoy config over xDS from {}", xds.url()),
            (None, Some(dir)) => format!("Envoy config {}", dir.display()),
            (None, None) => "no Envoy config directory".to_owned(),
        };
        format!(
            ", {dir}: {} {}, {} {}",
            loaded.config.domains(),
            if loaded.config.domains() == 1 {
                "domain"
            } else {
                "domains"
            },
            loaded.config.rules().len(),
            if loaded.config.rules().len() == 1 {
                "limit"
            } else {
                "limits"
            },
        )
    });
    println!(
        "tollgate listening on {}://{}{resp} (store: {}, on store error: {}, timeout {:?}, \
         config: {}, {} named {}{envoy})",
        scheme("http", s.http.tls.as_ref()),
        server.local_addr(),
        s.store,
        s.on_store_error,
        s.store_timeout,
        s.config
            .as_ref()
            .map_or_else(|| "none".to_owned(), |p| p.display().to_string()),
        s.policies.len(),
        if s.policies.len() == 1 {
            "policy"
        } else {
            "policies"
        },
    );
    server.run(shutdown).await
}
