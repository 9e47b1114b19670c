//! awsmp-fuzz-replay: no library code. Its test `tests/corpus_replay.rs` mounts the fuzz
//! targets' checks (`fuzz/checks/`, shared with the cargo-fuzz crate in `fuzz/`) and
//! runs every committed corpus input through them, so `make test` replays the corpus
//! on the stable toolchain without a fuzzer.
