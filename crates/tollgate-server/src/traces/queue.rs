//! The bounded queue between the requests and the exporter: the span processor hands each
//! ended, sampled span to it without waiting (`try_send`), and a task of its own takes them off
//! in batches and exports them. A span that finds the queue full — the receiver slow, down or
//! stalled — is dropped and counted, never waited for: a decision never waits on its trace.
//!
//! The SDK's own batch processor drops the same way but counts its drops only for its log at
//! shutdown, so the queue is this crate's, with Prometheus counters:
//! `tollgate_trace_spans_dropped_total{reason}` (`queue_full`; `export_failed`: the receiver
//! refused or never answered a batch; `stopped`: ended after the server began to stop) and
//! `tollgate_trace_spans_exported_total`.

use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus::{IntCounter, IntCounterVec, Opts};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The most spans waiting to be exported (the OpenTelemetry SDKs' default,
/// `OTEL_BSP_MAX_QUEUE_SIZE`): about 2 MB of spans at most.
pub const MAX_QUEUE: usize = 2048;

/// The most spans in one export (the SDKs' `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
pub const MAX_BATCH: usize = 512;

/// How long the first span of a batch waits for others before the batch is exported (the SDKs
/// wait 5 s; a shorter wait shows traces sooner, for a few more exports under light load).
pub const EXPORT_DELAY: Duration = Duration::from_secs(1);

/// The processor the tracer provider ends spans into.
#[derive(Debug)]
pub(super) struct Queue {
    spans: mpsc::Sender<SpanData>,
    full: IntCounter,
    stopped: IntCounter,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.spans.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.full.inc(),
            Err(TrySendError::Closed(_)) => self.stopped.inc(),
        }
    }

    /// Nothing to do here: the exporting task sends what is queued within [`EXPORT_DELAY`],
    /// and [`Exporting::stop`] sends the rest (without blocking a runtime thread, as this
    /// synchronous call would).
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    /// As [`Queue::force_flush`]: [`Exporting::stop`] is the shutdown.
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The exporting task, to stop.
pub(super) struct Exporting {
    stop: CancellationToken,
    task: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Exporting {
    /// Exports what is queued, waiting at most `grace` for the receiver, then ends the task.
    pub(super) async fn stop(&self, grace: Duration) {
        self.stop.cancel();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(mut task) = task
            && tokio::time::timeout(grace, &mut task).await.is_err()
        {
            task.abort();
            tracing::warn!(
                "the spans still queued were not exported within {grace:?} of stopping: dropped"
            );
        }
    }
}

/// The counters of what became of the sampled spans.
struct Counters {
    exported: IntCounter,
    failed: IntCounter,
}

/// The processor, and the task exporting what it queues through `exporter` (given
/// `resource`), its counters registered in `metrics`.
pub(super) fn start<E: SpanExporter + 'static>(
    mut exporter: E,
    resource: &Resource,
    metrics: &Metrics,
) -> Result<(Queue, Exporting), prometheus::Error> {
    let dropped = IntCounterVec::new(
        Opts::new(
            "tollgate_trace_spans_dropped_total",
            "Sampled spans not exported, by reason (queue_full: the export queue was full; \
             export_failed: the receiver refused or did not answer; stopped: ended while the \
             server stopped).",
        ),
        &["reason"],
    )?;
    let exported = IntCounter::new(
        "tollgate_trace_spans_exported_total",
        "Spans the OTLP receiver accepted.",
    )?;
    metrics.register(Box::new(dropped.clone()))?;
    metrics.register(Box::new(exported.clone()))?;
    let counters = Counters {
        exported,
        failed: dropped.with_label_values(&["export_failed"]),
    };
    exporter.set_resource(resource);
    let (sender, receiver) = mpsc::channel(MAX_QUEUE);
    let stop = CancellationToken::new();
    let task = tokio::spawn(export(receiver, exporter, counters, stop.clone()));
    let queue = Queue {
        spans: sender,
        full: dropped.with_label_values(&["queue_full"]),
        stopped: dropped.with_label_values(&["stopped"]),
    };
    Ok((
        queue,
        Exporting {
            stop,
            task: std::sync::Mutex::new(Some(task)),
        },
    ))
}

/// Takes spans off the queue in batches (a full one, or what came within [`EXPORT_DELAY`] of
/// the first) and exports each, until `stop`; then exports what is left.
async fn export<E: SpanExporter>(
    mut spans: mpsc::Receiver<SpanData>,
    exporter: E,
    counters: Counters,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            got = spans.recv_many(&mut batch, MAX_BATCH) => if got == 0 { break },
        }
        let deadline = tokio::time::Instant::now() + EXPORT_DELAY;
        while batch.len() < MAX_BATCH {
            let room = MAX_BATCH - batch.len();
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(deadline) => break,
                got = spans.recv_many(&mut batch, room) => if got == 0 { break },
            }
        }
        send(&exporter, &mut batch, &counters, &mut failing).await;
    }
    spans.close();
    while spans.recv_many(&mut batch, MAX_BATCH).await > 0 {
        send(&exporter, &mut batch, &counters, &mut failing).await;
    }
    if !batch.is_empty() {
        send(&exporter, &mut batch, &counters, &mut failing).await;
    }
    let _ = exporter.shutdown();
}

/// Exports `batch` (emptying it), counting the spans exported or lost; the first failure after
/// a success (and the recovery) is logged, not every failed batch.
async fn send<E: SpanExporter>(
    exporter: &E,
    batch: &mut Vec<SpanData>,
    counters: &Counters,
    failing: &mut bool,
) {
    let n = batch.len() as u64;
    match exporter.export(std::mem::take(batch)).await {
        Ok(()) => {
            counters.exported.inc_by(n);
            if std::mem::take(failing) {
                tracing::info!("the OTLP receiver takes spans again");
            }
        }
        Err(e) => {
            counters.failed.inc_by(n);
            if !std::mem::replace(failing, true) {
                tracing::warn!(error = %e, "the OTLP receiver did not take {n} spans: dropped \
                     (counted in tollgate_trace_spans_dropped_total)");
            }
        }
    }
    batch.reserve(MAX_BATCH);
}
