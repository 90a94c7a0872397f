//! A listener's table as the file sets it: its connection limits and `[NAME.tls]`.

use std::path::Path;

use super::file::{ConnFile, TlsFile};
use super::policies::FaultAt;
use super::{ConfigError, at_least_one, checked, duration};
use crate::net::limits::ConnGiven;
use crate::net::tls::TlsFiles;
use toml::Spanned;

/// What a listener's table sets of its limits and TLS; `None` where it is silent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenerGiven {
    /// Its connection limits.
    pub conn: ConnGiven,
    /// `[NAME.tls]`, its paths resolved against the config file's directory.
    pub tls: Option<TlsFiles>,
}

/// `[table]`'s limits and TLS; `http` says whether the HTTP-only keys may be set.
pub(super) fn given(
    table: &str,
    conn: ConnFile<'_>,
    tls: Option<&Spanned<TlsFile>>,
    http: bool,
    dir: &Path,
    refuse: &FaultAt<'_>,
) -> Result<ListenerGiven, ConfigError> {
    let key = |name: &str| format!("{table}.{name}");
    let time = |value: &Option<Spanned<String>>, name: &str| {
        checked(value.clone(), &key(name), &duration, refuse)
    };
    if !http {
        let http_only = [
            (conn.max_connection_age, "max_connection_age"),
            (conn.max_connection_age_grace, "max_connection_age_grace"),
            (conn.keepalive_interval, "keepalive_interval"),
        ];
        if let Some((value, name)) = http_only
            .iter()
            .find_map(|(v, n)| Some(((*v).as_ref()?, n)))
        {
            return Err(refuse(
                Some(value.span()),
                &key(name),
                format!("applies to the HTTP listeners (http, grpc, admin), not to [{table}]"),
            ));
        }
    }
    let given = ConnGiven {
        max_connections: checked(
            conn.max_connections.clone(),
            &key("max_connections"),
            &at_least_one,
            refuse,
        )?,
        max_connections_per_ip: checked(
            conn.max_connections_per_ip.clone(),
            &key("max_connections_per_ip"),
            &at_least_one,
            refuse,
        )?,
        request_timeout: time(conn.request_timeout, "request_timeout")?,
        idle_timeout: time(conn.idle_timeout, "idle_timeout")?,
        max_age: time(conn.max_connection_age, "max_connection_age")?,
        max_age_grace: time(conn.max_connection_age_grace, "max_connection_age_grace")?,
        keepalive_interval: time(conn.keepalive_interval, "keepalive_interval")?,
    };
    let tls = tls.map(|tls| {
        let span = tls.span();
        let tls = tls.get_ref().clone();
        if !tls.client_san.is_empty() && tls.client_ca.is_none() {
            return Err(refuse(
                Some(span),
                &key("tls.client_san"),
                "needs client_ca: without a CA no client certificate is asked for".to_owned(),
            ));
        }
        Ok(TlsFiles {
            cert: dir.join(tls.cert),
            key: dir.join(tls.key),
            client_ca: tls.client_ca.map(|ca| dir.join(ca)),
            client_san: tls.client_san,
        })
    });
    Ok(ListenerGiven {
        conn: given,
        tls: tls.transpose()?,
    })
}
