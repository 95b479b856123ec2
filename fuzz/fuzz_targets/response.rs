//! Upstream response heads and their chunked bodies from arbitrary bytes: no
//! panic, and the properties of `tern_http::fuzzing::check_response` hold.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tern_http::fuzzing::check_response(data);
});
