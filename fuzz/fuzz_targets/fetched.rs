//! Fuzz target `fetched`: its body and properties are `hookgate::fuzzing::fetched`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookgate::fuzzing::fetched(data));
