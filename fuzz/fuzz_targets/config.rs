//! Fuzz target `config`: its body and properties are `hookgate::fuzzing::config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookgate::fuzzing::config(data));
