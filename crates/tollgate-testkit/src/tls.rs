//! A throwaway certificate authority and a server certificate for `localhost` / `127.0.0.1`,
//! made with the `openssl` command, for servers started with TLS.

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
    let openssl =
        process::find_binary("openssl", &["/usr/bin", "/usr/local/bin"]).ok_or_else(|| {
            TestkitError::MissingBinary {
                binary: "openssl",
                searched: "PATH, /usr/bin and /usr/local/bin".into(),
                install_hint: INSTALL_HINT,
            }
        })?;
    let files = TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    let (ca_key, csr, ext) = (
        dir.join("ca.key"),
        dir.join("server.csr"),
        dir.join("san.cnf"),
    );
    std::fs::write(&ext, "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        .map_err(|e| TestkitError::io("writing the certificate's extensions", e))?;
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let run = |args: &[&str]| -> Result<(), TestkitError> {
        let output = Command::new(&openssl)
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
    };
    let p = |path: &Path| path.to_string_lossy().into_owned();
    run(&[
        &["req", "-x509"][..],
        &key,
        &["-keyout", &p(&ca_key), "-out", &p(&files.ca)],
        &["-days", "2", "-subj", "/CN=tollgate test CA"],
    ]
    .concat())?;
    run(&[
        &["req"][..],
        &key,
        &["-keyout", &p(&files.key), "-out", &p(&csr)],
        &["-subj", "/CN=localhost"],
    ]
    .concat())?;
    run(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(&files.ca),
        "-CAkey",
        &p(&ca_key),
        "-CAcreateserial",
        "-out",
        &p(&files.cert),
        "-days",
        "2",
        "-extfile",
        &p(&ext),
    ])?;
    Ok(files)
}
