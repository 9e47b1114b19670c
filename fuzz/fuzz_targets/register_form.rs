//! Fuzz target `register_form`: the check is [`awsmp_fuzz::checks::register_form::check`] (its module docs
//! give the input layout and the properties), shared with the corpus replay test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| awsmp_fuzz::checks::register_form::check(data));
