//! Any bytes as a packet from port 53, and as a DNS message (`--names`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfo_trace::fuzz::dns_answer(data));
