//! Fuzz target `lifecycle_event`: the check is [`awsmp_fuzz::checks::lifecycle_event::check`] (its module docs
//! give the input layout and the properties), shared with the corpus replay test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| awsmp_fuzz::checks::lifecycle_event::check(data));
