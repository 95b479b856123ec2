//! Request heads, chunked bodies, ranges, paths and Accept-Encoding from
//! arbitrary bytes: no panic, and the properties of
//! `tern_http::fuzzing::check` hold.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tern_http::fuzzing::check(data);
});
