//! TLS to PostgreSQL, as libpq's `sslmode` and `sslrootcert` say (feature `postgres-tls`).
//!
//! tokio-postgres parses `sslmode` only as `disable`, `prefer` or `require`, refuses
//! `verify-ca`, `verify-full` and `sslrootcert`, and leaves the handshake to a connector. So
//! the two settings are taken out of the URL here, the driver is told whether TLS is off,
//! preferred or required, and the connector (rustls with the ring provider, as `redis-tls`)
//! checks the server's certificate as libpq would:
//!
//! | `sslmode` | TLS | the certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | if the server offers it | not checked |
//! | `require` | always | not checked; checked as `verify-ca` when `sslrootcert` is given |
//! | `verify-ca` | always | signed by a trusted root |
//! | `verify-full` | always | signed by a trusted root, and for the host connected to |
//!
//! The trusted roots are the PEM file `sslrootcert` names, or, when it is absent or
//! `system`, the system's store (or the file `SSL_CERT_FILE` names). libpq's default file,
//! `~/.postgresql/root.crt`, is not read: a server process has no such home.

use crate::StoreError;

/// What the URL says about TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SslSettings {
    pub(crate) mode: SslMode,
    /// `sslrootcert`: a PEM file of roots, or `system`.
    pub(crate) root_cert: Option<String>,
}

/// libpq's `sslmode` (`allow` is not taken: it would try without TLS first and send the
/// password in the clear to a server that then offers TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, StoreError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(StoreError::Config(format!(
                    "the PostgreSQL URL's sslmode {other:?} is not one of disable, prefer, \
                     require, verify-ca, verify-full"
                )));
            }
        })
    }

    /// What the driver is told: whether to ask for TLS, and whether to go on without it.
    fn driver(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self {
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }
}

/// Takes `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL or a `key=value`
/// string), returning what is left for the driver to parse.
pub(crate) fn take_ssl_settings(url: &str) -> Result<(String, SslSettings), StoreError> {
    let mut settings = SslSettings {
        mode: SslMode::Prefer,
        root_cert: None,
    };
    let mut take = |key: &str, value: String| -> Result<bool, StoreError> {
        match key {
            "sslmode" => settings.mode = SslMode::parse(&value)?,
            "sslrootcert" => settings.root_cert = Some(value),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&') {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(key, percent_decode(value)?)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for (key, value, raw) in key_values(url)? {
            if !take(key, value)? {
                kept.push(raw);
            }
        }
        kept.join(" ")
    };
    Ok((rest, settings))
}

/// The `key=value` pairs of a libpq connection string, each with its text as written. A
/// value may be quoted (`'a b'`, with `\'` and `\\` inside).
fn key_values(text: &str) -> Result<Vec<(&str, String, &str)>, StoreError> {
    let unparsable = || {
        StoreError::Config(format!(
            "the PostgreSQL connection string does not parse as key=value pairs: {text:?}"
        ))
    };
    let mut pairs = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let start = rest;
        let (key, after) = rest.split_once('=').ok_or_else(unparsable)?;
        let key = key.trim();
        let after = after.trim_start();
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = if after.starts_with('\'') {
            chars.next();
            loop {
                match chars.next().ok_or_else(unparsable)? {
                    (i, '\'') => break i + 1,
                    (_, '\\') => value.push(chars.next().ok_or_else(unparsable)?.1),
                    (_, c) => value.push(c),
                }
            }
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            value.push_str(&after[..end]);
            end
        };
        let consumed = start.len() - after.len() + end;
        pairs.push((key, value, &start[..consumed]));
        rest = start[consumed..].trim_start();
    }
    Ok(pairs)
}

/// A URL query value with its `%XX` escapes decoded (a path may hold any byte).
fn percent_decode(value: &str) -> Result<String, StoreError> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else {
                return Err(StoreError::Config(format!(
                    "the PostgreSQL URL's value {value:?} has a % not followed by two hex digits"
                )));
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| {
        StoreError::Config(format!(
            "the PostgreSQL URL's value {value:?} is not UTF-8 once decoded"
        ))
    })
}

/// How the store's connections are made: in the clear, or through rustls.
#[derive(Clone)]
pub(crate) enum Connect {
    Plain,
    #[cfg(feature = "postgres-tls")]
    Rustls(rustls_connect::MakeRustls),
}

/// The connector for `settings`, and the mode the driver is told.
pub(crate) fn connector(
    settings: &SslSettings,
) -> Result<(tokio_postgres::config::SslMode, Connect), StoreError> {
    let driver = settings.mode.driver();
    if settings.mode == SslMode::Disable {
        return Ok((driver, Connect::Plain));
    }
    #[cfg(feature = "postgres-tls")]
    {
        let connect = rustls_connect::MakeRustls::new(settings)?;
        Ok((driver, Connect::Rustls(connect)))
    }
    #[cfg(not(feature = "postgres-tls"))]
    {
        if settings.mode == SslMode::Prefer && settings.root_cert.is_none() {
            // What the driver does with no connector: it does not ask for TLS.
            return Ok((driver, Connect::Plain));
        }
        Err(StoreError::Config(
            "the PostgreSQL URL asks for TLS (sslmode or sslrootcert), which needs tollgate's \
             feature `postgres-tls`"
                .into(),
        ))
    }
}

#[cfg(feature = "postgres-tls")]
mod rustls_connect {
    //! A tokio-postgres TLS connector on tokio-rustls.

    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::WebPkiSupportedAlgorithms;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

    use super::{SslMode, SslSettings};
    use crate::StoreError;

    type BoxError = Box<dyn std::error::Error + Send + Sync>;

    /// Makes a TLS handshake per connection, with one rustls configuration.
    #[derive(Clone)]
    pub(crate) struct MakeRustls {
        config: Arc<ClientConfig>,
    }

    impl MakeRustls {
        pub(crate) fn new(settings: &SslSettings) -> Result<MakeRustls, StoreError> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            // libpq: `require` with a root file checks the chain as `verify-ca` does.
            let mode = match (settings.mode, &settings.root_cert) {
                (SslMode::Require, Some(_)) => SslMode::VerifyCa,
                (mode, _) => mode,
            };
            let verifier: Arc<dyn ServerCertVerifier> = match mode {
                SslMode::VerifyCa | SslMode::VerifyFull => {
                    let roots = roots(settings.root_cert.as_deref())?;
                    let webpki =
                        WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
                            .build()
                            .map_err(|e| {
                                StoreError::Config(format!(
                                    "the PostgreSQL TLS roots cannot be used: {e}"
                                ))
                            })?;
                    if mode == SslMode::VerifyFull {
                        webpki
                    } else {
                        Arc::new(AnyName(webpki))
                    }
                }
                _ => Arc::new(Unchecked(provider.signature_verification_algorithms)),
            };
            let config = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| StoreError::Config(format!("rustls refuses its defaults: {e}")))?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth();
            Ok(MakeRustls {
                config: Arc::new(config),
            })
        }
    }

    /// The trusted roots: the PEM file `sslrootcert` names, else the system's.
    fn roots(root_cert: Option<&str>) -> Result<Arc<RootCertStore>, StoreError> {
        let mut store = RootCertStore::empty();
        match root_cert {
            Some(path) if path != "system" => {
                let unreadable = |e: &dyn std::fmt::Display| {
                    StoreError::Config(format!(
                        "the PostgreSQL sslrootcert {path:?} cannot be read as PEM certificates: {e}"
                    ))
                };
                for cert in CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))? {
                    let cert = cert.map_err(|e| unreadable(&e))?;
                    store.add(cert).map_err(|e| unreadable(&e))?;
                }
            }
            _ => {
                let found = rustls_native_certs::load_native_certs();
                store.add_parsable_certificates(found.certs);
            }
        }
        if store.is_empty() {
            return Err(StoreError::Config(format!(
                "no root certificate to check the PostgreSQL server's against ({}); name a PEM \
                 file with sslrootcert=PATH in the URL",
                root_cert.map_or("the system store has none", |_| "the file holds none"),
            )));
        }
        Ok(Arc::new(store))
    }

    /// `verify-ca`: the chain must reach a trusted root; the name in it is not checked.
    #[derive(Debug)]
    struct AnyName(Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for AnyName {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            match self
                .0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                // webpki checks the name only after the chain, so this error means the chain
                // was good.
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }

    /// `prefer` and `require`: encrypted, but the certificate is not checked (as libpq's), so
    /// the handshake only proves the server holds the key of the certificate it showed.
    #[derive(Debug)]
    struct Unchecked(WebPkiSupportedAlgorithms);

    impl ServerCertVerifier for Unchecked {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.supported_schemes()
        }
    }

    impl<S> MakeTlsConnect<S> for MakeRustls
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = RustlsStream<S>;
        type TlsConnect = Handshake;
        type Error = BoxError;

        fn make_tls_connect(&mut self, domain: &str) -> Result<Handshake, BoxError> {
            let name = ServerName::try_from(domain.to_owned())?;
            Ok(Handshake {
                connector: tokio_rustls::TlsConnector::from(Arc::clone(&self.config)),
                name,
            })
        }
    }

    /// One connection's handshake.
    pub(crate) struct Handshake {
        connector: tokio_rustls::TlsConnector,
        name: ServerName<'static>,
    }

    impl<S> TlsConnect<S> for Handshake
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = RustlsStream<S>;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<RustlsStream<S>, BoxError>> + Send>>;

        fn connect(self, stream: S) -> Self::Future {
            Box::pin(async move {
                let stream = self.connector.connect(self.name, stream).await?;
                Ok(RustlsStream(stream))
            })
        }
    }

    /// A connection over TLS.
    pub(crate) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

    impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for RustlsStream<S> {
        /// None: SCRAM authenticates without channel binding (tokio-postgres's default
        /// `channel_binding=prefer` accepts that); the certificate check is what binds the
        /// connection to the server.
        fn channel_binding(&self) -> ChannelBinding {
            ChannelBinding::none()
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_sslmode_and_sslrootcert_out_of_a_url() {
        let (rest, settings) = take_ssl_settings(
            "postgres://u@h:5/db?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h:5/db?application_name=x");
        assert_eq!(
            settings,
            SslSettings {
                mode: SslMode::VerifyFull,
                root_cert: Some("/tmp/ca.pem".into())
            }
        );
        let (rest, settings) = take_ssl_settings("postgresql://u@h/db").unwrap();
        assert_eq!(rest, "postgresql://u@h/db");
        assert_eq!(settings.mode, SslMode::Prefer);
        let (rest, _) = take_ssl_settings("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
    }

    #[test]
    fn takes_them_out_of_a_key_value_string() {
        let (rest, settings) = take_ssl_settings(
            "host=h user=u password='a b\\'c' sslmode = verify-ca sslrootcert='/x y/ca.pem'",
        )
        .unwrap();
        assert_eq!(rest, "host=h user=u password='a b\\'c'");
        assert_eq!(settings.mode, SslMode::VerifyCa);
        assert_eq!(settings.root_cert.as_deref(), Some("/x y/ca.pem"));
    }

    #[test]
    fn refuses_an_unknown_mode_naming_the_known_ones() {
        let Err(StoreError::Config(why)) = take_ssl_settings("postgres://u@h/db?sslmode=allow")
        else {
            panic!("sslmode=allow was taken");
        };
        assert!(why.contains("verify-full"), "{why}");
    }
}
