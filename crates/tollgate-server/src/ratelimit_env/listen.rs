//! Where it listens (`HOST`/`PORT`, `GRPC_*`, `DEBUG_*`), gRPC's TLS, and the logs.

use super::doc::{Doc, Value};
use super::{Env, EnvError, Notes, ignored};

/// `[http]`, `[grpc]` and `[admin]`: the listeners upstream opens, where it opens them.
pub(super) fn listeners(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<(), EnvError> {
    let http = address(env, "HOST", "PORT")?;
    doc.set("http", "listen", Value::Str(http), &["HOST", "PORT"]);
    // Upstream's debug listener (`/rlconfig`, `/stats`): tollgate's admin endpoints. They can
    // also reset buckets, which upstream's cannot: on the loopback unless DEBUG_HOST says.
    let debug = if env.is_set("DEBUG_HOST") {
        address(env, "DEBUG_HOST", "DEBUG_PORT")?
    } else {
        address_on("127.0.0.1", env, "DEBUG_PORT")?
    };
    doc.set(
        "admin",
        "listen",
        Value::Str(debug),
        &["DEBUG_HOST", "DEBUG_PORT"],
    );
    let uds = env.string("GRPC_UDS")?;
    if uds.is_empty() {
        let grpc = address(env, "GRPC_HOST", "GRPC_PORT")?;
        doc.set(
            "grpc",
            "listen",
            Value::Str(grpc),
            &["GRPC_HOST", "GRPC_PORT"],
        );
    } else {
        // Upstream listens on the socket rather than on GRPC_HOST:GRPC_PORT.
        doc.set("grpc", "unix_socket", Value::Str(uds), &["GRPC_UDS"]);
        ignored(
            env,
            &["GRPC_HOST", "GRPC_PORT"],
            "GRPC_UDS is set, and gRPC listens on that socket alone, as upstream does",
            notes,
        );
    }
    for (name, key) in [
        ("GRPC_MAX_CONNECTION_AGE", "max_connection_age"),
        ("GRPC_MAX_CONNECTION_AGE_GRACE", "max_connection_age_grace"),
    ] {
        let d = env.duration(name)?;
        // gRPC-Go takes 0 for "never".
        let value = if d.is_zero() {
            Value::Str("100years".to_owned())
        } else if d < std::time::Duration::from_millis(1) {
            return Err(EnvError::new(
                name,
                format!("{d:?} is below a millisecond, the least tollgate takes"),
            ));
        } else {
            Value::duration(d)
        };
        doc.set("grpc", key, value, &[name]);
    }
    grpc_tls(env, doc, notes)
}

/// `GRPC_SERVER_USE_TLS` and its files, as `[grpc.tls]`.
fn grpc_tls(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<(), EnvError> {
    const FILES: [&str; 4] = [
        "GRPC_SERVER_TLS_CERT",
        "GRPC_SERVER_TLS_KEY",
        "GRPC_CLIENT_TLS_CACERT",
        "GRPC_CLIENT_TLS_SAN",
    ];
    if env.is_set("GRPC_SERVER_TLS_CA_CERT") {
        notes.push(
            "GRPC_SERVER_TLS_CA_CERT is ignored: envoyproxy/ratelimit does not read it either; \
             client certificates are checked only against GRPC_CLIENT_TLS_CACERT"
                .to_owned(),
        );
    }
    if !env.bool("GRPC_SERVER_USE_TLS")? {
        ignored(env, &FILES, "GRPC_SERVER_USE_TLS is not true", notes);
        return Ok(());
    }
    for (name, key) in [
        ("GRPC_SERVER_TLS_CERT", "cert"),
        ("GRPC_SERVER_TLS_KEY", "key"),
    ] {
        let path = env.string(name)?;
        if path.is_empty() {
            return Err(EnvError::new(
                name,
                "is empty, and GRPC_SERVER_USE_TLS=true needs the server's certificate and key",
            ));
        }
        doc.set(
            "grpc.tls",
            key,
            Value::Str(path),
            &[name, "GRPC_SERVER_USE_TLS"],
        );
    }
    let ca = env.string("GRPC_CLIENT_TLS_CACERT")?;
    let san = env.string("GRPC_CLIENT_TLS_SAN")?;
    let no_ca = ca.is_empty();
    if !no_ca {
        doc.set(
            "grpc.tls",
            "client_ca",
            Value::Str(ca),
            &["GRPC_CLIENT_TLS_CACERT"],
        );
    }
    if !san.is_empty() && no_ca {
        // Upstream asks for no client certificate without a CA, so the name checks nothing.
        notes.push(
            "GRPC_CLIENT_TLS_SAN is ignored: without GRPC_CLIENT_TLS_CACERT no client \
             certificate is asked for, as upstream asks for none"
                .to_owned(),
        );
    } else if !san.is_empty() {
        doc.set(
            "grpc.tls",
            "client_san",
            Value::Strings(vec![san]),
            &["GRPC_CLIENT_TLS_SAN", "GRPC_CLIENT_TLS_CACERT"],
        );
    }
    Ok(())
}

/// `HOST:PORT` as Go's `net.JoinHostPort` writes it (an IPv6 host in brackets).
fn address(env: &Env, host: &'static str, port: &'static str) -> Result<String, EnvError> {
    address_on(&env.string(host)?, env, port)
}

/// `host` and the port `port` names.
fn address_on(host: &str, env: &Env, port: &'static str) -> Result<String, EnvError> {
    let h = host.to_owned();
    let p = env.int(port)?;
    if !(0..=65535).contains(&p) {
        return Err(EnvError::new(
            port,
            format!("{p} is not a port (0 to 65535)"),
        ));
    }
    // Go listens on every interface for an empty host.
    let h = if h.is_empty() {
        "0.0.0.0".to_owned()
    } else {
        h
    };
    Ok(if h.contains(':') {
        format!("[{h}]:{p}")
    } else {
        format!("{h}:{p}")
    })
}

/// `LOG_FORMAT` as `[log] format`; `LOG_LEVEL` (logrus's names, any case) as a log filter.
pub(super) fn logs(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<&'static str, EnvError> {
    let format = env.string("LOG_FORMAT")?;
    // Upstream writes JSON for `json` in any case, and text for anything else.
    let json = format.eq_ignore_ascii_case("json");
    if !json && format != "text" {
        notes.push(format!(
            "LOG_FORMAT={format:?} is read as `text`, as upstream reads any value but `json`"
        ));
    }
    doc.set(
        "log",
        "format",
        Value::Str(if json { "json" } else { "text" }.to_owned()),
        &["LOG_FORMAT"],
    );
    let level = env.string("LOG_LEVEL")?;
    Ok(match level.to_ascii_lowercase().as_str() {
        "panic" | "fatal" | "error" => "error",
        "warn" | "warning" => "warn",
        "info" => "info",
        "debug" => "debug",
        "trace" => "trace",
        _ => {
            return Err(EnvError::new(
                "LOG_LEVEL",
                format!(
                    "{level:?} is not a log level (trace, debug, info, warn, warning, error, \
                     fatal or panic, in any case)"
                ),
            ));
        }
    })
}
