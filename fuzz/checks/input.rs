//! A cursor over the fuzzer's bytes that structured targets draw their choices from.
//! Reading past the end yields zeros and empty strings, so every byte string decodes
//! and the all-zero input decodes to each target's first (valid) choices.

/// Reads choices, lengths and text from the input, front to back.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data }
    }

    /// The next byte (0 once the input is used up).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((first, rest)) => {
                self.data = rest;
                *first
            }
            None => 0,
        }
    }

    /// A choice among `n` options (`n` at least 1).
    pub fn choose(&mut self, n: u8) -> u8 {
        self.byte() % n.max(1)
    }

    /// Up to `len` bytes.
    pub fn bytes(&mut self, len: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(len.min(self.data.len()));
        self.data = rest;
        taken
    }

    /// A length-prefixed string (one length byte, then that many bytes, lossy UTF-8).
    pub fn text(&mut self) -> String {
        let len = usize::from(self.byte());
        String::from_utf8_lossy(self.bytes(len)).into_owned()
    }

    /// Bytes up to (not including) the next `\n`, which is consumed, as lossy UTF-8.
    pub fn line(&mut self) -> String {
        let end = self
            .data
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(self.data.len());
        let line = String::from_utf8_lossy(&self.data[..end]).into_owned();
        self.data = self.data.get(end + 1..).unwrap_or_default();
        line
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}
