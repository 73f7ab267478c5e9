//! Fuzz target `stored`: its body and properties are `hookgate::fuzzing::stored`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookgate::fuzzing::stored(data));
