//! Where a caller's trace context is read from: gRPC metadata (Envoy puts `traceparent` and
//! `tracestate` there when its tracing is on) and HTTP headers. Values that are not text are
//! skipped, as absent.

use opentelemetry::propagation::Extractor;

/// A gRPC call's metadata.
pub(super) struct Metadata<'a>(pub(super) &'a tonic::metadata::MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// An HTTP request's headers.
pub(super) struct Headers<'a>(pub(super) &'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
