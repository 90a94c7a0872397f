//! An OTLP/HTTP receiver that takes every export and discards it: the traced servers' exporter
//! sends to it, so that exporting does its whole work (encoding, HTTP) without a collector's
//! own cost in the figures.

use axum::http::{StatusCode, header};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::BenchError;

/// Starts the receiver on a free port of `127.0.0.1` until `shutdown`: its base URL.
pub(super) async fn start(shutdown: &CancellationToken) -> Result<String, BenchError> {
    // The body is read whole (as a collector reads it) and dropped; an empty
    // `ExportTraceServiceResponse` is an empty protobuf message.
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(|_: axum::body::Bytes| async {
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/x-protobuf")],
                "",
            )
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
    });
    Ok(format!("http://{addr}"))
}
