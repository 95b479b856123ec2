//! Sans-I/O HTTP/1.1 for tern: bytes in, decisions out.
//!
//! Nothing here touches a socket, a file or a clock it is not handed. The
//! server feeds received bytes to [`request::parse_head`] and
//! [`chunked::ChunkedDecoder`], asks [`range`], [`conditional`] and
//! [`accept_encoding`] for decisions, and writes heads with [`response`].
//! The reverse proxy reads its upstreams' answers with
//! [`response_head::parse_response`], as strict as the request parser.
//! Everything is therefore testable, and fuzzable, on byte strings.

pub mod accept_encoding;
pub mod chunked;
pub mod conditional;
pub mod date;
mod fields;
#[doc(hidden)]
pub mod fuzzing;
pub mod host;
pub mod method;
pub mod path;
pub mod qlist;
pub mod range;
pub mod request;
pub mod response;
pub mod response_head;

pub use method::Method;
pub use request::{parse_head, Error, Head, Limits, Request, Version};
pub use response_head::{parse_response, Framing, Parsed, RequestKind, ResponseError, ResponseHead};
