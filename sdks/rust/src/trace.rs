//! The span each handler runs in, made with the OpenTelemetry API (the `opentelemetry` crate) only:
//! `process <queue>`, kind consumer, a child of the lease item's W3C `traceparent` (and
//! `tracestate`) when it has one, otherwise a root span (docs/tracing.md). The application chooses
//! the SDK and exporter by installing a global tracer provider; without one, every call here is
//! the API's no-op.

use std::str::FromStr;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{global, Context, InstrumentationScope, KeyValue};

use crate::types::Job;

/// The instrumentation scope of the spans this SDK makes.
pub const TRACER_NAME: &str = "unofficial-queueflow-client";

/// A handler's span, current (in the [`Context`] it holds) while the handler runs.
pub(crate) struct HandlerSpan {
    cx: Context,
}

impl HandlerSpan {
    /// Starts the span of `job`'s handler on `queue`, with the lease item's trace context.
    pub(crate) fn start(queue: &str, job: &Job, traceparent: Option<&str>, tracestate: Option<&str>) -> Self {
        let scope = InstrumentationScope::builder(TRACER_NAME).with_version(env!("CARGO_PKG_VERSION")).build();
        let tracer = global::tracer_with_scope(scope);
        let parent = parent_context(traceparent, tracestate);
        let span = tracer
            .span_builder(format!("process {queue}"))
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                KeyValue::new("messaging.system", "queueflow"),
                KeyValue::new("messaging.operation", "process"),
                KeyValue::new("messaging.destination.name", queue.to_string()),
                KeyValue::new("messaging.message.id", job.id.clone()),
                KeyValue::new("queueflow.task.name", job.task_name.clone()),
                KeyValue::new("queueflow.job.attempt", job.delivery_count),
            ])
            .start_with_context(&tracer, &parent);
        HandlerSpan { cx: parent.with_span(span) }
    }

    /// The context whose active span this is: the handler runs inside it.
    pub(crate) fn context(&self) -> &Context {
        &self.cx
    }

    /// Ends the span: status error with `failure` when the handler failed, unset otherwise.
    pub(crate) fn end(self, failure: Option<&str>) {
        let span = self.cx.span();
        if let Some(message) = failure {
            span.set_status(Status::error(message.to_string()));
        }
        span.end();
    }
}

/// An empty context, or one whose remote parent is the valid `traceparent` (version `00`, lowercase
/// hex, ids not all zero; anything else is ignored, as W3C Trace Context says).
pub(crate) fn parent_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Context {
    match traceparent.and_then(|header| parse_traceparent(header, tracestate)) {
        Some(remote) => Context::new().with_remote_span_context(remote),
        None => Context::new(),
    }
}

fn parse_traceparent(header: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let lower_hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let mut parts = header.trim().split('-');
    let (version, trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if !lower_hex(version, 2) || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    if !lower_hex(trace_id, 32) || !lower_hex(span_id, 16) || !lower_hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok().filter(|id| *id != TraceId::INVALID)?;
    let span_id = SpanId::from_hex(span_id).ok().filter(|id| *id != SpanId::INVALID)?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let state = tracestate.and_then(|s| TraceState::from_str(s).ok()).unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_the_remote_parent_with_its_tracestate() {
        let cx = parent_context(
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
        );
        let parent = cx.span().span_context().clone();
        assert!(parent.is_valid() && parent.is_remote() && parent.is_sampled());
        assert_eq!(parent.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(parent.trace_state().get("congo"), Some("t61rcWkgMzE"));
    }

    #[test]
    fn a_malformed_traceparent_is_ignored() {
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(!parent_context(Some(bad), None).has_active_span(), "{bad:?}");
        }
        assert!(!parent_context(None, Some("congo=t61rcWkgMzE")).has_active_span());
    }
}
