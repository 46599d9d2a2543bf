//! Any bytes as one ring-buffer record.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfo_trace::events::fuzz::event_decoder(data));
