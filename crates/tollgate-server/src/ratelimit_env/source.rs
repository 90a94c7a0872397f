//! Where the Envoy config comes from (`CONFIG_TYPE`: the runtime directory, or xDS) and how
//! its limits are answered (`SHADOW_MODE`, `NEAR_LIMIT_RATIO`, the headers, ...).

use std::path::{Component, Path, PathBuf};

use super::doc::{Doc, Value};
use super::{Env, EnvError, Notes, ignored};

/// The xDS client's variables, read only when `CONFIG_TYPE=GRPC_XDS_SOTW`.
const XDS: [&str; 16] = [
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
];

/// The runtime directory's variables, read only when `CONFIG_TYPE=FILE`.
const RUNTIME: [&str; 5] = [
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
];

/// `CONFIG_TYPE`: `FILE` (the runtime directory, `[grpc] config_dir`) or `GRPC_XDS_SOTW`
/// (`[grpc.xds]`).
pub(super) fn config_source(env: &Env, doc: &mut Doc, notes: &mut Notes) -> Result<(), EnvError> {
    let kind = env.string("CONFIG_TYPE")?;
    doc.set(
        "grpc",
        "merge_domain_config",
        Value::Bool(env.bool("MERGE_DOMAIN_CONFIG")?),
        &["MERGE_DOMAIN_CONFIG"],
    );
    match kind.as_str() {
        "FILE" => {
            ignored(
                env,
                &XDS,
                "CONFIG_TYPE is FILE, and upstream reads it only for GRPC_XDS_SOTW",
                notes,
            );
            runtime_dir(env, doc)
        }
        "GRPC_XDS_SOTW" => {
            ignored(
                env,
                &RUNTIME,
                "CONFIG_TYPE is GRPC_XDS_SOTW, and upstream reads it only for FILE",
                notes,
            );
            xds(env, doc)
        }
        other => Err(EnvError::new(
            "CONFIG_TYPE",
            format!("{other:?} is not a config type: FILE or GRPC_XDS_SOTW, as upstream takes"),
        )),
    }
}

/// The directory upstream's file loader reads: `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
/// RUNTIME_APPDIRECTORY`, whether it watches the root (a symlink swapped, as with
/// `RUNTIME_WATCH_ROOT=true`) or the directory: tollgate reads the directory anew on every
/// change of either kind.
fn runtime_dir(env: &Env, doc: &mut Doc) -> Result<(), EnvError> {
    let dir = join(&[
        env.string("RUNTIME_ROOT")?,
        env.string("RUNTIME_SUBDIRECTORY")?,
        env.string("RUNTIME_APPDIRECTORY")?,
    ]);
    // tollgate never reads dot-named entries (a ConfigMap's `..data` beside its links); upstream
    // reads them unless told not to. A directory holding one would be read otherwise.
    if !env.bool("RUNTIME_IGNOREDOTFILES")?
        && let Some(dotted) = dot_named(&dir)
    {
        return Err(EnvError::new(
            "RUNTIME_IGNOREDOTFILES",
            format!(
                "is false, and {} is dot-named: upstream would load it, tollgate never loads \
                 dot-named entries; set RUNTIME_IGNOREDOTFILES=true, or rename it",
                dotted.display()
            ),
        ));
    }
    doc.set(
        "grpc",
        "config_dir",
        Value::Str(dir.to_string_lossy().into_owned()),
        &[
            "RUNTIME_ROOT",
            "RUNTIME_SUBDIRECTORY",
            "RUNTIME_APPDIRECTORY",
        ],
    );
    Ok(())
}

/// Go's `filepath.Join`: the non-empty parts, each below the one before (a leading `/` of a
/// later part does not start over, as `Path::join` would).
fn join(parts: &[String]) -> PathBuf {
    let mut out = PathBuf::new();
    for (i, part) in parts.iter().enumerate() {
        for c in Path::new(part).components() {
            match c {
                Component::RootDir if i == 0 => out.push("/"),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(n) => out.push(n),
            }
        }
    }
    out
}

/// The most entries looked at for a dot-named one.
const MAX_SEEN: usize = 10_000;

/// A dot-named entry below `dir` (a missing directory has none: the loader says so itself).
fn dot_named(dir: &Path) -> Option<PathBuf> {
    let mut stack = vec![(dir.to_owned(), 0)];
    let mut seen = 0;
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_SEEN {
                return None;
            }
            let path = entry.path();
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                return Some(path);
            }
            if depth < 16 && std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                stack.push((path, depth + 1));
            }
        }
    }
    None
}

/// `[grpc.xds]` from upstream's xDS client variables.
fn xds(env: &Env, doc: &mut Doc) -> Result<(), EnvError> {
    const T: &str = "grpc.xds";
    let s = |name: &'static str| env.string(name);
    doc.set(
        T,
        "url",
        Value::Str(s("CONFIG_GRPC_XDS_SERVER_URL")?),
        &["CONFIG_GRPC_XDS_SERVER_URL"],
    );
    doc.set(
        T,
        "node_id",
        Value::Str(s("CONFIG_GRPC_XDS_NODE_ID")?),
        &["CONFIG_GRPC_XDS_NODE_ID"],
    );
    let metadata = super::go::node_metadata(&s("CONFIG_GRPC_XDS_NODE_METADATA")?);
    if !metadata.is_empty() {
        doc.set(
            T,
            "node_metadata",
            Value::Map(metadata),
            &["CONFIG_GRPC_XDS_NODE_METADATA"],
        );
    }
    let headers = env.map("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")?;
    if !headers.is_empty() {
        doc.set(
            T,
            "headers",
            Value::Map(headers),
            &["CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"],
        );
    }
    let max = env.int("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")?;
    if max < 0 {
        return Err(EnvError::new(
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            format!("{max} is negative"),
        ));
    }
    // 0 (unset): gRPC's own default, as upstream leaves it.
    if max > 0 {
        doc.set(
            T,
            "max_message_size",
            Value::Int(max),
            &["XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"],
        );
    }
    doc.set(
        T,
        "force_start_without_initial_config",
        Value::Bool(env.bool("FORCE_START_WITHOUT_INITIAL_CONFIG")?),
        &["FORCE_START_WITHOUT_INITIAL_CONFIG"],
    );
    for (name, key) in [
        (
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "retry_interval",
        ),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "backoff_initial"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "backoff_max"),
    ] {
        doc.set(T, key, Value::duration(env.duration(name)?), &[name]);
    }
    doc.set(
        T,
        "backoff_random_factor",
        Value::Float(env.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")?),
        &["XDS_CLIENT_BACKOFF_RANDOM_FACTOR"],
    );
    doc.set(
        T,
        "backoff_jitter",
        Value::Bool(env.bool("XDS_CLIENT_BACKOFF_JITTER")?),
        &["XDS_CLIENT_BACKOFF_JITTER"],
    );
    if env.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS")? {
        const TLS: &str = "grpc.xds.tls";
        doc.table(TLS);
        for (name, key) in [
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "ca"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "cert"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "server_name"),
        ] {
            let value = s(name)?;
            if !value.is_empty() {
                doc.set(
                    TLS,
                    key,
                    Value::Str(value),
                    &[name, "CONFIG_GRPC_XDS_SERVER_USE_TLS"],
                );
            }
        }
    }
    Ok(())
}

/// How limits are answered: `[grpc]`'s keys for what upstream's service does.
pub(super) fn decisions(env: &Env, doc: &mut Doc) -> Result<(), EnvError> {
    const T: &str = "grpc";
    doc.set(
        T,
        "shadow_mode",
        Value::Bool(env.bool("SHADOW_MODE")?),
        &["SHADOW_MODE"],
    );
    if env.bool("QUOTA_MODE")? {
        return Err(EnvError::new(
            "QUOTA_MODE",
            "is true, and tollgate has no global quota mode; set `quota_mode: true` on the \
             descriptors of the config instead",
        ));
    }
    if env.bool("RESPONSE_DYNAMIC_METADATA")? {
        doc.set(
            T,
            "response_dynamic_metadata",
            Value::Bool(true),
            &["RESPONSE_DYNAMIC_METADATA"],
        );
    }
    doc.set(
        T,
        "near_limit_ratio",
        Value::Float(env.float("NEAR_LIMIT_RATIO")?),
        &["NEAR_LIMIT_RATIO"],
    );
    // Upstream increments every descriptor's key unless told to stop when one is over: each
    // descriptor on its own, or none when one is over (tollgate's all-or-nothing).
    let charge = if env.bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")? {
        "all_or_nothing"
    } else {
        "per_descriptor"
    };
    doc.set(
        T,
        "charge",
        Value::Str(charge.to_owned()),
        &["STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"],
    );
    doc.set(
        T,
        "response_headers",
        Value::Bool(env.bool("LIMIT_RESPONSE_HEADERS_ENABLED")?),
        &["LIMIT_RESPONSE_HEADERS_ENABLED"],
    );
    for (name, key) in [
        ("LIMIT_LIMIT_HEADER", "limit_header"),
        ("LIMIT_REMAINING_HEADER", "remaining_header"),
        ("LIMIT_RESET_HEADER", "reset_header"),
    ] {
        doc.set(T, key, Value::Str(env.string(name)?), &[name]);
    }
    doc.set(
        T,
        "health_needs_config",
        Value::Bool(env.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")?),
        &["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_as_go_joins() {
        let j = |parts: &[&str]| join(&parts.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(
            j(&["/srv/runtime_data/current", "", "config"]),
            PathBuf::from("/srv/runtime_data/current/config")
        );
        assert_eq!(
            j(&["/data", "/ratelimit", "config/"]),
            PathBuf::from("/data/ratelimit/config")
        );
        assert_eq!(j(&["/data", "a/../b", "."]), PathBuf::from("/data/b"));
        assert_eq!(j(&["rel", "x", "config"]), PathBuf::from("rel/x/config"));
    }
}
