//! Writing response heads into a reusable buffer.

/// The reason phrase for a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// `HTTP/1.1 200 OK\r\n`. tern answers every request as HTTP/1.1, the
/// highest version it implements (RFC 9110 §6.2).
pub fn status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `name: value\r\n`.
pub fn header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    field(out, name.as_bytes(), value);
}

/// `name: value\r\n`, the name as bytes (one relayed as it came).
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `name: n\r\n` for a number.
pub fn header_u64(out: &mut Vec<u8>, name: &str, n: u64) {
    header(out, name, itoa::Buffer::new().format(n).as_bytes());
}

/// `Content-Range: bytes start-end/len\r\n`.
pub fn content_range(out: &mut Vec<u8>, start: u64, end: u64, len: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"Content-Range: bytes ");
    out.extend_from_slice(b.format(start).as_bytes());
    out.push(b'-');
    out.extend_from_slice(b.format(end).as_bytes());
    out.push(b'/');
    out.extend_from_slice(b.format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

const PAGE: [&str; 3] =
    ["<!DOCTYPE html>\n<html><head><title>", "</title></head>\n<body><h1>", "</h1></body></html>\n"];

/// The small HTML page sent with an error status.
pub fn error_page(out: &mut Vec<u8>, status: u16) {
    let mut code = itoa::Buffer::new();
    let code = code.format(status);
    for (i, part) in PAGE[..3].iter().enumerate() {
        out.extend_from_slice(part.as_bytes());
        if i < 2 {
            out.extend_from_slice(code.as_bytes());
            out.push(b' ');
            out.extend_from_slice(reason(status).as_bytes());
        }
    }
}

/// The length of [`error_page`]`(status)`, known before it is written.
pub fn error_page_len(status: u16) -> usize {
    let title = 3 + 1 + reason(status).len();
    PAGE.iter().map(|p| p.len()).sum::<usize>() + 2 * title
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_heads() {
        let mut out = Vec::new();
        status_line(&mut out, 206);
        header_u64(&mut out, "Content-Length", 42);
        content_range(&mut out, 0, 41, 100);
        assert_eq!(out, b"HTTP/1.1 206 Partial Content\r\nContent-Length: 42\r\nContent-Range: bytes 0-41/100\r\n");
        out.clear();
        error_page(&mut out, 404);
        assert_eq!(out.len(), error_page_len(404));
        assert_eq!(
            out,
            b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body><h1>404 Not Found</h1></body></html>\n"
        );
    }
}
