//! Fuzz target `routing`: its body and properties are `hookgate::fuzzing::routing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hookgate::fuzzing::routing(data));
