//! Request methods.
//!
//! A method outside the IANA registry is answered `501 Not Implemented`
//! (RFC 9110 §9.1); methods are case-sensitive, so `get` is unknown too.

/// A registered request method. Methods tern has no use for beyond a
/// `405`/`501` decision are grouped as [`Method::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Trace,
    Connect,
    Patch,
    /// Registered (WebDAV, PRI, QUERY, …) but not served by any handler.
    Other,
}

/// The IANA "HTTP Method Registry" minus the methods named above.
const REGISTERED_OTHERS: &[&[u8]] = &[
    b"ACL",
    b"BASELINE-CONTROL",
    b"BIND",
    b"CHECKIN",
    b"CHECKOUT",
    b"COPY",
    b"LABEL",
    b"LINK",
    b"LOCK",
    b"MERGE",
    b"MKACTIVITY",
    b"MKCALENDAR",
    b"MKCOL",
    b"MKREDIRECTREF",
    b"MKWORKSPACE",
    b"MOVE",
    b"ORDERPATCH",
    b"PRI",
    b"PROPFIND",
    b"PROPPATCH",
    b"QUERY",
    b"REBIND",
    b"REPORT",
    b"SEARCH",
    b"UNBIND",
    b"UNCHECKIN",
    b"UNCHECKOUT",
    b"UNLINK",
    b"UNLOCK",
    b"UPDATE",
    b"UPDATEREDIRECTREF",
    b"VERSION-CONTROL",
];

impl Method {
    /// Looks a method token up; `None` means "not registered" (→ 501).
    pub fn from_token(token: &[u8]) -> Option<Method> {
        Some(match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"CONNECT" => Method::Connect,
            b"PATCH" => Method::Patch,
            other if REGISTERED_OTHERS.contains(&other) => Method::Other,
            _ => return None,
        })
    }

    /// GET and HEAD: the methods conditional requests and ranges apply to.
    pub fn is_get_or_head(self) -> bool {
        matches!(self, Method::Get | Method::Head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_and_unknown() {
        assert_eq!(Method::from_token(b"GET"), Some(Method::Get));
        assert_eq!(Method::from_token(b"PROPFIND"), Some(Method::Other));
        assert_eq!(Method::from_token(b"get"), None);
        assert_eq!(Method::from_token(b"MKCOLA"), None);
        assert_eq!(Method::from_token(b"ANNOUNCE"), None);
    }
}
