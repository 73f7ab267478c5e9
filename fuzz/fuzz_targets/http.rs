//! Fuzz target `http`: its body and properties are `hookgate::fuzzing::http`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookgate::fuzzing::http(data));
