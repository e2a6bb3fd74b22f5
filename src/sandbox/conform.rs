//! MCP conformance checks the rmcp server does not make itself, shared by both transports
//! of the sandbox (issue 10, item 5):
//!
//! - a message that is not JSON gets a JSON-RPC parse error (-32700), not silence (stdio)
//!   or 415 (HTTP: 400 with the same error body);
//! - JSON that is not a JSON-RPC message gets -32600 (invalid request);
//! - `tools/call` whose `arguments` is present and not an object gets -32602 (invalid
//!   params), not -32601 (method not found);
//! - Streamable HTTP: a request carrying an `Origin` header that is not a loopback origin
//!   is refused with 403 (the spec's MUST against DNS rebinding; the sandbox serves
//!   loopback only), and a session `DELETE` answers 200 (rmcp answers 202, which clients
//!   take for a failure).

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const INVALID_PARAMS: i64 = -32602;

/// Largest POST body read by the HTTP check (the client's limit is 16 MiB by default).
const MAX_BODY: usize = 64 * 1024 * 1024;

fn error(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The error response for a message that must not reach the MCP service, or `None`.
pub fn precheck(text: &[u8]) -> Option<Value> {
    let v: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        Err(e) => return Some(error(Value::Null, PARSE_ERROR, format!("parse error: {e}"))),
    };
    let items: Vec<&Value> = match &v {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    };
    for m in items {
        let Some(obj) = m.as_object() else {
            return Some(error(Value::Null, INVALID_REQUEST, "invalid request: not a JSON-RPC object".into()));
        };
        let id = obj.get("id").cloned().unwrap_or(Value::Null);
        if obj.get("method").and_then(Value::as_str) == Some("tools/call")
            && let Some(args) = obj.get("params").and_then(|p| p.get("arguments"))
            && !args.is_object()
            && !args.is_null()
        {
            let kind = crate::error::json_type_name(args);
            return Some(error(
                id,
                INVALID_PARAMS,
                format!("invalid params: `arguments` must be an object, not {kind}"),
            ));
        }
    }
    None
}

/// A JSON-RPC error for a JSON line that rmcp could not read as a message.
pub fn invalid_request(text: &[u8], why: &str) -> Value {
    let id = serde_json::from_slice::<Value>(text).ok().and_then(|v| v.get("id").cloned()).unwrap_or(Value::Null);
    error(id, INVALID_REQUEST, format!("invalid request: {why}"))
}

/// `http://localhost[:port]`, `http://127.0.0.1[:port]`, `http://[::1][:port]` (or https).
pub fn loopback_origin(origin: &HeaderValue) -> bool {
    let Ok(o) = origin.to_str() else { return false };
    let Some(rest) = o.strip_prefix("http://").or_else(|| o.strip_prefix("https://")) else { return false };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, tail)) if tail.is_empty() || tail.starts_with(':') => h,
            _ => return false,
        }
    } else {
        rest.split(':').next().unwrap_or("")
    };
    if rest.contains('/') {
        return false;
    }
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Axum middleware in front of rmcp's Streamable HTTP service.
pub async fn http_guard(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if let Some(origin) = req.headers().get(header::ORIGIN)
        && !loopback_origin(origin)
    {
        return (StatusCode::FORBIDDEN, "Forbidden: the Origin is not a loopback origin\n").into_response();
    }
    if req.method() == Method::POST {
        let (parts, body) = req.into_parts();
        let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
            Ok(b) => b,
            Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large\n").into_response(),
        };
        if let Some(err) = precheck(&bytes) {
            // Not JSON or not JSON-RPC: 400; a well-formed request with bad params gets its
            // JSON-RPC error as an ordinary (200) JSON answer.
            let status = if err["error"]["code"] == INVALID_PARAMS { StatusCode::OK } else { StatusCode::BAD_REQUEST };
            return (status, [(header::CONTENT_TYPE, "application/json")], err.to_string()).into_response();
        }
        return next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await;
    }
    let delete = req.method() == Method::DELETE;
    let mut resp = next.run(req).await;
    if delete && resp.status() == StatusCode::ACCEPTED {
        *resp.status_mut() = StatusCode::OK;
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        for ok in
            ["http://localhost", "http://localhost:3000", "http://127.0.0.1:9", "http://[::1]:80", "https://LOCALHOST"]
        {
            assert!(loopback_origin(&HeaderValue::from_static(ok)), "{ok}");
        }
        for bad in
            ["http://evil.example", "null", "http://127.0.0.1.evil.example", "http://localhost.evil:80", "file://"]
        {
            assert!(!loopback_origin(&HeaderValue::from_static(bad)), "{bad}");
        }
    }

    #[test]
    fn prechecks() {
        assert_eq!(precheck(b"not json").unwrap()["error"]["code"], PARSE_ERROR);
        let e = precheck(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#)
            .unwrap();
        assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!(7), json!(INVALID_PARAMS)));
        assert!(
            precheck(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{}}}"#)
                .is_none()
        );
        assert!(precheck(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#).is_none());
        assert_eq!(precheck(b"5").unwrap()["error"]["code"], INVALID_REQUEST);
    }
}
