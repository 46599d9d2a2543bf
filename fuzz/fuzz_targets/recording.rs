//! Any bytes as a recording file (`report --from`, `top --from`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfo_trace::fuzz::recording(data));
