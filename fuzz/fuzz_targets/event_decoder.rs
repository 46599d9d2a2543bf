//! Any bytes as one ring-buffer record.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfo_trace::fuzz::event_decoder(data));
