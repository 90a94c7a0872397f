//! Throwaway certificate authorities ([`TestCa`]) and the certificates they sign, for servers
//! and clients of tests that use TLS, made with the `openssl` command.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{TestkitError, process};

const INSTALL_HINT: &str = "apt-get install -y openssl";

/// The files of a test CA and of a server certificate it signed.
#[derive(Debug, Clone)]
pub(crate) struct TlsFiles {
    /// The CA certificate: what a client must trust.
    pub(crate) ca: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Writes a CA and a server certificate (P-256, valid two days) into `dir`.
pub(crate) fn make_certificates(dir: &Path) -> Result<TlsFiles, TestkitError> {
    let ca = make_ca(dir, "ca")?;
    let (cert, key) = ca.sign(dir, "server", "localhost", "DNS:localhost,IP:127.0.0.1")?;
    Ok(TlsFiles {
        ca: ca.cert,
        cert,
        key,
    })
}

/// A throwaway certificate authority, made with the `openssl` command, that signs leaf
/// certificates for servers and clients of tests (P-256, valid two days).
#[derive(Debug, Clone)]
pub struct TestCa {
    /// Its certificate, PEM: what a peer must trust.
    pub cert: PathBuf,
    key: PathBuf,
    openssl: PathBuf,
}

impl TestCa {
    /// A new CA whose files are `dir/NAME.pem` and `dir/NAME.key`.
    pub fn new(dir: &Path, name: &str) -> Result<TestCa, TestkitError> {
        make_ca(dir, name)
    }

    /// A certificate for `cn` with the subject alternative names `san` (as openssl writes
    /// them: `DNS:a,IP:127.0.0.1`), signed by this CA: `dir/NAME.pem` and `dir/NAME.key`.
    pub fn sign(
        &self,
        dir: &Path,
        name: &str,
        cn: &str,
        san: &str,
    ) -> Result<(PathBuf, PathBuf), TestkitError> {
        let (cert, key) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        let (csr, ext) = (
            dir.join(format!("{name}.csr")),
            dir.join(format!("{name}.cnf")),
        );
        std::fs::write(&ext, format!("subjectAltName={san}\n"))
            .map_err(|e| TestkitError::io("writing the certificate's extensions", e))?;
        let p = |path: &Path| path.to_string_lossy().into_owned();
        let subject = format!("/CN={cn}");
        run(
            &self.openssl,
            dir,
            &[
                &["req"][..],
                &KEY,
                &["-keyout", &p(&key), "-out", &p(&csr)],
                &["-subj", &subject],
            ]
            .concat(),
        )?;
        run(
            &self.openssl,
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &p(&csr),
                "-CA",
                &p(&self.cert),
                "-CAkey",
                &p(&self.key),
                "-CAcreateserial",
                "-out",
                &p(&cert),
                "-days",
                "2",
                "-extfile",
                &p(&ext),
            ],
        )?;
        Ok((cert, key))
    }
}

const KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
];

fn make_ca(dir: &Path, name: &str) -> Result<TestCa, TestkitError> {
    let openssl = find_openssl()?;
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    let p = |path: &Path| path.to_string_lossy().into_owned();
    let subject = format!("/CN=tollgate test CA {name}");
    run(
        &openssl,
        dir,
        &[
            &["req", "-x509"][..],
            &KEY,
            &["-keyout", &p(&key), "-out", &p(&cert)],
            &["-days", "2", "-subj", &subject],
        ]
        .concat(),
    )?;
    Ok(TestCa { cert, key, openssl })
}

fn find_openssl() -> Result<PathBuf, TestkitError> {
    process::find_binary("openssl", &["/usr/bin", "/usr/local/bin"]).ok_or_else(|| {
        TestkitError::MissingBinary {
            binary: "openssl",
            searched: "PATH, /usr/bin and /usr/local/bin".into(),
            install_hint: INSTALL_HINT,
        }
    })
}

fn run(openssl: &Path, dir: &Path, args: &[&str]) -> Result<(), TestkitError> {
    let output = Command::new(openssl)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| TestkitError::io("running openssl", e))?;
    if output.status.success() {
        return Ok(());
    }
    Err(TestkitError::CommandFailed {
        command: format!("openssl {}", args.join(" ")),
        status: output.status.to_string(),
        log: dir.to_owned(),
        log_tail: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}
