//! awsmp-fuzz: the fuzz targets' checks (`fuzz/checks/`, also mounted by the corpus
//! replay test in `crates/dev/fuzz-replay`), for the libFuzzer binaries in `fuzz_targets/`.

#[path = "../checks/mod.rs"]
pub mod checks;
