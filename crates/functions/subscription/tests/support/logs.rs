//! Test support shared by the unit tests of subscription and register (both mount this
//! file with `#[path]`): everything logged while a future runs.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Captures everything logged while `f` runs (JSON lines, every level).
pub fn capture_logs<F: std::future::Future>(f: F) -> (F::Output, String) {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let output = tracing::subscriber::with_default(subscriber, || runtime.block_on(f));
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    (output, text)
}
