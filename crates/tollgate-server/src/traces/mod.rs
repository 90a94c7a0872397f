//! OpenTelemetry spans over OTLP (`[tracing]`, off by default), as envoyproxy/ratelimit sends
//! them: one span per decision — a `ShouldRateLimit`, a `POST /v1/check`, a rate-limiting RESP
//! command — parented by the W3C `traceparent` (and `tracestate`) the caller sent, with the
//! store call as its child; sampled by upstream's sampler (the parent's decision, or else the
//! trace id's ratio: `ParentBased(TraceIdRatioBased(sampling_rate))`); exported over OTLP/HTTP
//! (protobuf) or OTLP/gRPC by the official exporter.
//!
//! Exporting never slows or fails a decision: an ended span is handed to a bounded queue
//! ([`MAX_QUEUE`] spans) and exported by a task of its own; a span that finds the queue full
//! is dropped and counted (`tollgate_trace_spans_dropped_total`). With tracing off nothing here
//! is built and the front ends take their untraced path (a `None` checked once per request).

mod carrier;
mod export;
mod queue;
mod settings;

use std::future::Future;
use std::time::Duration;

use opentelemetry::context::FutureExt as _;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

use crate::metrics::Metrics;

pub use queue::{EXPORT_DELAY, MAX_BATCH, MAX_QUEUE};
pub use settings::{DEFAULT_SERVICE_NAME, TracingProtocol, TracingSettings, receiver};

/// The instrumentation scope the spans are reported under.
const SCOPE: &str = "tollgate";

/// How long stopping waits for the spans still queued to be exported.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    /// The OTLP exporter could not be built from `[tracing]`.
    #[error("[tracing]: the OTLP exporter cannot be built: {0}")]
    Exporter(String),
    /// The queue's counters could not be registered.
    #[error("the tracing metrics could not be registered: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The system's random source failed (for a random `service.instance.id`).
    #[error("[tracing]: no random service_instance_id: the system's random source failed")]
    Random,
}

/// The tracer every front end starts its spans with, and the queue and task that export them.
pub struct Traces {
    tracer: SdkTracer,
    /// Kept so that the tracer keeps its processor; never shut down by the SDK (the queue's
    /// own [`Traces::shutdown`] flushes, without blocking a runtime thread).
    _provider: SdkTracerProvider,
    propagator: TraceContextPropagator,
    exporting: queue::Exporting,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").finish_non_exhaustive()
    }
}

impl Traces {
    /// Builds the exporter `settings` ask for and starts the task that exports, its counters
    /// registered in `metrics`. Must run inside the Tokio runtime the task is to run on.
    pub fn start(settings: &TracingSettings, metrics: &Metrics) -> Result<Traces, TracesError> {
        let resource = settings::resource(settings)?;
        let exporter = export::exporter(settings).map_err(TracesError::Exporter)?;
        let (processor, exporting) = queue::start(exporter, &resource, metrics)?;
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sampling_rate)));
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler)
            .with_resource(resource)
            .with_span_processor(processor)
            .build();
        Ok(Traces {
            tracer: provider.tracer(SCOPE),
            _provider: provider,
            propagator: TraceContextPropagator::new(),
            exporting,
        })
    }

    /// The span of a gRPC call to `method` (`package.Service/Method`), parented by the trace
    /// context in its `metadata`.
    pub fn grpc_call(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        service: &'static str,
        method: &'static str,
    ) -> Traced {
        let parent = self.propagator.extract(&carrier::Metadata(metadata));
        self.server_span(
            parent,
            format!("{service}/{method}"),
            vec![
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", service),
                KeyValue::new("rpc.method", method),
            ],
        )
    }

    /// The span of an HTTP request to `route`, parented by the trace context in its `headers`.
    pub fn http_request(
        &self,
        headers: &http::HeaderMap,
        method: &'static str,
        route: &'static str,
    ) -> Traced {
        let parent = self.propagator.extract(&carrier::Headers(headers));
        self.server_span(
            parent,
            format!("{method} {route}"),
            vec![
                KeyValue::new("http.request.method", method),
                KeyValue::new("http.route", route),
            ],
        )
    }

    /// The span of a RESP command (`CL.THROTTLE`, ...): a root, the protocol carrying no
    /// trace context.
    pub fn resp_command(&self, command: &'static str) -> Traced {
        self.server_span(
            Context::new(),
            command,
            vec![
                KeyValue::new("db.system.name", "redis"),
                KeyValue::new("db.operation.name", command),
            ],
        )
    }

    fn server_span(
        &self,
        parent: Context,
        name: impl Into<std::borrow::Cow<'static, str>>,
        attributes: Vec<KeyValue>,
    ) -> Traced {
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        Traced {
            cx: parent.with_span(span),
        }
    }

    /// The span of a store call made inside a [`Traced::run`], as that span's child: `None`
    /// outside one.
    pub fn store_call(&self, store: &'static str, checks: usize) -> Option<StoreSpan> {
        let cx = Context::current();
        if !cx.has_active_span() {
            return None;
        }
        let span = self
            .tracer
            .span_builder("store")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("store", store),
                KeyValue::new("checks", i64::try_from(checks).unwrap_or(i64::MAX)),
            ])
            .start_with_context(&self.tracer, &cx);
        Some(StoreSpan(span))
    }

    /// Exports the spans still queued (waiting at most a few seconds for the receiver), then
    /// stops the exporting task. Spans ended afterwards are dropped and counted.
    pub async fn shutdown(&self) {
        self.exporting.stop(SHUTDOWN_GRACE).await;
    }
}

/// A request's span, ended when [`Traced::end`] is called (or when it is dropped).
#[derive(Debug)]
pub struct Traced {
    cx: Context,
}

impl Traced {
    /// Runs `work` inside this span: the store calls it makes are its children.
    pub async fn run<F: Future>(&self, work: F) -> F::Output {
        work.with_context(self.cx.clone()).await
    }

    /// Adds an attribute.
    pub fn set(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    /// Marks the span failed, with `message`.
    pub fn fail(&self, message: impl Into<String>) {
        self.cx.span().set_status(Status::error(message.into()));
    }

    /// Ends the span.
    pub fn end(self) {
        self.cx.span().end();
    }
}

/// `work`, inside `span` if there is one: the front ends' one line for both paths.
pub async fn within<F: Future>(span: Option<&Traced>, work: F) -> F::Output {
    match span {
        Some(span) => span.run(work).await,
        None => work.await,
    }
}

/// A store call's span, ended when dropped.
pub struct StoreSpan(opentelemetry_sdk::trace::Span);

impl StoreSpan {
    /// Marks the call failed, with `message`.
    pub fn fail(&mut self, message: String) {
        use opentelemetry::trace::Span as _;
        self.0.set_status(Status::error(message));
    }
}

/// The attribute of a count (`descriptors`, ...).
pub fn count(name: &'static str, n: usize) -> KeyValue {
    KeyValue::new(name, i64::try_from(n).unwrap_or(i64::MAX))
}

/// An attribute of text.
pub fn text(name: &'static str, value: impl Into<String>) -> KeyValue {
    KeyValue::new(name, value.into())
}

/// An attribute of a flag.
pub fn flag(name: &'static str, value: bool) -> KeyValue {
    KeyValue::new(name, value)
}
