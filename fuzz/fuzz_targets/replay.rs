//! Any bytes as a recording, through what `report --from` and `top --from` compute.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfo_trace::fuzz::replay(data));
