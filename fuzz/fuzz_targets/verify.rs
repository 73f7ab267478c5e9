//! Fuzz target `verify`: its body and properties are `hookgate::fuzzing::verify`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookgate::fuzzing::verify(data));
