//! Fuzz target `work_message`: the check is [`awsmp_fuzz::checks::work_message::check`] (its module docs
//! give the input layout and the properties), shared with the corpus replay test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| awsmp_fuzz::checks::work_message::check(data));
